//! Closing a JSON text cut short (a tool call's arguments at `max_tokens`), so a reply llb
//! returns is always valid JSON and accepted back as history (issue 24, docs/tool-calls.md).
//!
//! The closed text is the cut text up to its last *stable* point followed by the closers the
//! open containers need: an object member whose value has not started (a key, a colon) is
//! dropped, a string value is closed where it was cut (never inside an escape), a number keeps
//! its digits (not a trailing `.`, `e` or sign), an unfinished `true`/`false`/`null` is dropped,
//! and so is a trailing comma. The stable prefix only grows as the text grows, so a stream that
//! sends it delta by delta and the closers at the end reassembles exactly the closed text.

/// Where the cut text can be closed: `text[..stable]` followed by `closers` is valid JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closing {
    pub stable: usize,
    pub closers: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Key,
    Colon,
    Value,
    CommaOrEnd,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    Obj(Expect),
    Arr(Expect),
}

fn closers(stack: &[Frame]) -> String {
    stack.iter().rev().map(|f| if matches!(f, Frame::Obj(_)) { '}' } else { ']' }).collect()
}

/// Marks the top frame's value complete.
fn value_done(stack: &mut [Frame]) {
    if let Some(top) = stack.last_mut() {
        *top = match top {
            Frame::Obj(_) => Frame::Obj(Expect::CommaOrEnd),
            Frame::Arr(_) => Frame::Arr(Expect::CommaOrEnd),
        };
    }
}

/// The stable prefix of a JSON text that may be cut short, and what closes it. None when the
/// text is not the start of a JSON object or array (garbage, or a bare scalar).
// Over 60 lines: one branch per (byte, expected token) pair of JSON's grammar, read as a table;
// every branch moves the same cursor, stack and best point.
pub fn closing(text: &str) -> Option<Closing> {
    let b = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut best: Option<Closing> = None;
    let mut i = 0;
    let mut started = false;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if started && stack.is_empty() {
            // Text after the complete top-level value: not part of it.
            break;
        }
        let expect = match stack.last() {
            Some(Frame::Obj(e)) | Some(Frame::Arr(e)) => *e,
            None => Expect::Value,
        };
        let in_obj = matches!(stack.last(), Some(Frame::Obj(_)));
        match (c, expect) {
            (b'{', Expect::Value) => {
                stack.push(Frame::Obj(Expect::Key));
                started = true;
                i += 1;
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            (b'[', Expect::Value) => {
                stack.push(Frame::Arr(Expect::Value));
                started = true;
                i += 1;
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            (b'}', Expect::Key | Expect::CommaOrEnd) if in_obj => {
                stack.pop();
                value_done(&mut stack);
                i += 1;
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            (b']', Expect::Value | Expect::CommaOrEnd) if !in_obj && !stack.is_empty() => {
                stack.pop();
                value_done(&mut stack);
                i += 1;
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            (b',', Expect::CommaOrEnd) => {
                let top = stack.last_mut()?;
                *top = if in_obj { Frame::Obj(Expect::Key) } else { Frame::Arr(Expect::Value) };
                i += 1;
            }
            (b':', Expect::Colon) => {
                *stack.last_mut()? = Frame::Obj(Expect::Value);
                i += 1;
            }
            (b'"', Expect::Key) if in_obj => {
                // A key: no stable point until its value starts.
                i = match skip_string(b, i) {
                    Some(j) => j,
                    None => return best,
                };
                *stack.last_mut()? = Frame::Obj(Expect::Colon);
            }
            (b'"', Expect::Value) if !stack.is_empty() => {
                i = match string_value(text, i, &closers(&stack), &mut best) {
                    Some(j) => j,
                    None => return best,
                };
                value_done(&mut stack);
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            (b'-' | b'0'..=b'9', Expect::Value) if !stack.is_empty() => {
                i = number_value(b, i, &mut stack, &mut best);
            }
            (b't' | b'f' | b'n', Expect::Value) if !stack.is_empty() => {
                let word = ["true", "false", "null"].into_iter().find(|w| w.as_bytes()[0] == c)?;
                if !text[i..].starts_with(word) {
                    return if word.starts_with(&text[i..]) { best } else { None };
                }
                i += word.len();
                value_done(&mut stack);
                best = Some(Closing { stable: i, closers: closers(&stack) });
            }
            _ => return None,
        }
    }
    best
}

/// Reads the string value starting at `i` (a `"`), updating `best` after each whole character
/// (closed by a quote, then `close`). Index past the closing quote; None when the text ends first.
fn string_value(text: &str, mut i: usize, close: &str, best: &mut Option<Closing>) -> Option<usize> {
    let b = text.as_bytes();
    i += 1;
    *best = Some(Closing { stable: i, closers: format!("\"{close}") });
    loop {
        match b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => {
                let n = if *b.get(i + 1)? == b'u' { 6 } else { 2 };
                if i + n > b.len() {
                    return None;
                }
                i += n;
            }
            // Whole UTF-8 characters only.
            _ => i += text[i..].chars().next().map_or(1, char::len_utf8),
        }
        *best = Some(Closing { stable: i, closers: format!("\"{close}") });
    }
}

/// Reads the number value starting at `i`, updating `best` after each digit. Index past it.
fn number_value(b: &[u8], mut i: usize, stack: &mut [Frame], best: &mut Option<Closing>) -> usize {
    while i < b.len() && matches!(b[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
        i += 1;
        if b[i - 1].is_ascii_digit() {
            let mut probe = stack.to_vec();
            value_done(&mut probe);
            *best = Some(Closing { stable: i, closers: closers(&probe) });
        }
    }
    value_done(stack);
    i
}

/// Index past the string starting at `i` (a `"`); None when it is not closed.
fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The text closed into valid JSON (itself when it already is an object or array): None when
/// it does not start a JSON object or array.
pub fn close(text: &str) -> Option<String> {
    if serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object() || v.is_array()) {
        return Some(text.to_string());
    }
    let c = closing(text)?;
    let closed = format!("{}{}", &text[..c.stable], c.closers);
    serde_json::from_str::<serde_json::Value>(&closed).is_ok().then_some(closed)
}

/// The part of a (possibly cut) JSON text a stream may send now: its stable prefix, or all of
/// it when it is complete.
pub fn stable_prefix(text: &str) -> &str {
    if serde_json::from_str::<serde_json::Value>(text).is_ok() {
        return text;
    }
    match closing(text) {
        Some(c) => &text[..c.stable],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_arguments_close_into_json_dropping_what_did_not_start() {
        let cases = [
            (r#"{"query":"docs","page":8,"page":"#, r#"{"query":"docs","page":8}"#),
            (r#"{"query":"do"#, r#"{"query":"do"}"#),
            (r#"{"query":"a\"#, r#"{"query":"a"}"#),
            (r#"{"query":"a\u00"#, r#"{"query":"a"}"#),
            (r#"{"q"#, "{}"),
            (r#"{"q":"#, "{}"),
            (r#"{"a":1,"#, r#"{"a":1}"#),
            (r#"{"a":1.5e"#, r#"{"a":1.5}"#),
            (r#"{"a":-"#, "{}"),
            (r#"{"a":tr"#, "{}"),
            (r#"{"a":[1,{"b":[tru"#, r#"{"a":[1,{"b":[]}]}"#),
            (r#"{"a":{"b":"c"},"d":["x","y"#, r#"{"a":{"b":"c"},"d":["x","y"]}"#),
            ("{", "{}"),
            (r#"{"a": "é"#, r#"{"a": "é"}"#),
        ];
        for (cut, want) in cases {
            assert_eq!(close(cut).as_deref(), Some(want), "{cut}");
        }
        assert_eq!(close(r#"{"a":1}"#).as_deref(), Some(r#"{"a":1}"#));
        assert_eq!(close("hello"), None);
        assert_eq!(close(""), None);
    }

    #[test]
    fn the_stable_prefix_only_grows_and_closes_to_the_final_text() {
        let full = r#"{"query":"a\"b\u00e9","page":12,"tags":["x",true,null],"o":{"k":-1.5e3}}"#;
        let mut last = 0;
        for end in 0..=full.len() {
            if !full.is_char_boundary(end) {
                continue;
            }
            let p = stable_prefix(&full[..end]);
            assert!(p.len() >= last, "shrank at {end}: {p}");
            assert!(full.starts_with(p));
            last = p.len();
            if end > 0 {
                let closed = close(&full[..end]).unwrap();
                assert!(closed.starts_with(p), "{closed} / {p}");
            }
        }
        assert_eq!(stable_prefix(full), full);
    }
}
