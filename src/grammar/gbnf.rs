//! GBNF, llama.cpp's grammar text: writing it (literals, "any text up to", trigger regexes) and
//! reading it back into a tree that [`super::lark`] turns into the constraint engine's grammar.
//!
//! The reader follows llama.cpp's own parser at the pin (src/llama-grammar.cpp `parse_*`): the
//! same names (`[a-zA-Z0-9-]`), escapes (`\x..`, `\u....`, `\U........`, `\t\r\n\\\"\[\]`),
//! comments, repetition forms and the rule that a rule's body ends at a newline outside
//! parentheses (a newline may follow `|`). A grammar it reads is one llama.cpp reads the same way.

use std::collections::HashMap;

/// A grammar constraint: GBNF text, and for lazy grammars what wakes it up (the patterns and
/// tokens of llama.cpp's lazy grammars).
#[derive(Debug, Clone, Default)]
pub struct GrammarSpec {
    pub gbnf: String,
    pub lazy: bool,
    pub trigger_patterns: Vec<String>,
    pub trigger_tokens: Vec<crate::sys::llama_token>,
}

/// A GBNF string literal.
pub fn literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// GBNF text for "any text up to (not including) `lit`" that a parser reading up to the first
/// `lit` (llama.cpp's PEG `until`) reads back whole: text that, with `lit` written after it,
/// holds `lit` only at its end. llama.cpp's pattern ([`llama_until`]) also admits text holding
/// `lit` after a partial match of it: in `([^<] | "<" [^/] | ...)*`, `"<" [^/]` takes `<<`, so
/// `<</a>` passes as text, and the parser ends the text at that `</a>`.
///
/// With `lit` = d0 d1 … dn-1 and d0 nowhere else in it (every delimiter at the pin; else
/// llama.cpp's pattern is kept), a text is a run of steps from "nothing of `lit` matched": a
/// character other than d0, or d0 then any number of (d1…dk-1 d0) and then d1…dk-1 and a
/// character that is neither d0 nor dk; and it may end inside a partial match (d0 (d1…dk-1 d0)*
/// d1…dk-1), since `lit` written after it cannot then occur early.
pub fn until(lit: &str) -> String {
    let d: Vec<char> = lit.chars().collect();
    let Some(&d0) = d.first() else { return String::new() };
    if d[1..].contains(&d0) {
        return llama_until(&d);
    }
    let c0 = class_char(d0);
    if d.len() == 1 {
        return format!("[^{c0}]*");
    }
    // d1 … dk-1, for k in 1..n.
    let mid = |k: usize| d[1..k].iter().collect::<String>();
    let back: Vec<String> = (1..d.len()).map(|k| literal(&format!("{}{d0}", mid(k)))).collect();
    let out: Vec<String> = (1..d.len())
        .map(|k| match mid(k) {
            m if m.is_empty() => format!("[^{c0}{}]", class_char(d[k])),
            m => format!("{} [^{c0}{}]", literal(&m), class_char(d[k])),
        })
        .collect();
    let tail: Vec<String> = (1..d.len()).map(|k| literal(&mid(k))).collect();
    let (l0, back) = (literal(&d0.to_string()), back.join(" | "));
    format!("([^{c0}] | {l0} ({back})* ({}))* ({l0} ({back})* ({}))?", out.join(" | "), tail.join(" | "))
}

/// llama.cpp's "any text up to `lit`" (common/peg-parser.cpp `gbnf_excluding_pattern` for one
/// delimiter): `([^<] | "<" [^/] | "</" [^a] | "</a" [^>])*`.
pub fn llama_until(lit: &[char]) -> String {
    let mut alts = Vec::new();
    for (i, &c) in lit.iter().enumerate() {
        let prefix: String = lit[..i].iter().collect();
        if i == 0 {
            alts.push(format!("[^{}]", class_char(c)));
        } else {
            alts.push(format!("{} [^{}]", literal(&prefix), class_char(c)));
        }
    }
    format!("({})*", alts.join(" | "))
}

/// A character inside a GBNF class: the class's own metacharacters by their code (llama.cpp
/// reads `\x..` in classes, not `\-` or `\^`).
fn class_char(c: char) -> String {
    match c {
        '\\' | ']' | '[' | '^' | '-' => format!("\\x{:02X}", c as u32),
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c => c.to_string(),
    }
}

/// The span of the first `( ... )*` group in `body` whose text starts with `([^` (an exclusion
/// pattern such as llama.cpp's "text up to"), from its `(` to past its `*`.
pub fn exclusion_group(body: &str) -> Option<(usize, usize)> {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => i = skip_quoted(b, i, b'"'),
            b'[' => i = skip_quoted(b, i, b']'),
            b'(' if body[i..].starts_with("([^") => {
                let j = group_end(b, i)?;
                return (b.get(j + 1) == Some(&b'*')).then_some((i, j + 2));
            }
            _ => i += 1,
        }
    }
    None
}

/// The index of the `)` closing the group opened at `open`, skipping literals and classes.
pub fn group_end(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut j = open;
    while j < b.len() {
        match b[j] {
            b'"' => {
                j = skip_quoted(b, j, b'"');
                continue;
            }
            b'[' => {
                j = skip_quoted(b, j, b']');
                continue;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
}

/// Index just past a quoted run starting at `i` (a `"` literal or a `[` class), honouring `\`.
pub fn skip_quoted(b: &[u8], i: usize, close: u8) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        if b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == close {
            return j + 1;
        }
        j += 1;
    }
    b.len()
}

/// Escapes a literal for a trigger regex (as llama.cpp's regex_escape).
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if ".^$|()*+?[]{}\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A token reference: `<[id]>` or `<text>` (text that tokenizes to one token).
#[derive(Debug, Clone, PartialEq)]
pub enum TokenRef {
    Id(u32),
    Text(String),
}

/// One element of a sequence, before its repetition.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// Exact text, as code points (GBNF escapes can name any 32-bit value).
    Lit(Vec<u32>),
    /// `[...]` / `[^...]`: inclusive code-point ranges.
    Class { negated: bool, ranges: Vec<(u32, u32)> },
    /// `.`: any one character.
    Any,
    Rule(String),
    /// `<...>` / `!<...>`.
    Token { token: TokenRef, negated: bool },
    Group(Alts),
}

/// A term repeated `min..=max` times (`max` None: unbounded); `x` is `{1,1}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub term: Term,
    pub min: u32,
    pub max: Option<u32>,
}

pub type Seq = Vec<Item>;
pub type Alts = Vec<Seq>;

/// A parsed grammar: rules by name (a later definition replaces an earlier one, as in
/// llama.cpp), in the order first defined.
#[derive(Debug, Default)]
pub struct Grammar {
    pub order: Vec<String>,
    pub rules: HashMap<String, Alts>,
}

/// llama.cpp refuses repetitions above this (MAX_REPETITION_THRESHOLD).
const MAX_REPEAT: u64 = 2000;

type Parsed<'a, T> = std::result::Result<(T, &'a [u8]), String>;

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

fn space(mut s: &[u8], newline_ok: bool) -> &[u8] {
    while let Some(&c) = s.first() {
        match c {
            b' ' | b'\t' => s = &s[1..],
            b'\r' | b'\n' if newline_ok => s = &s[1..],
            b'#' => {
                let end = s.iter().position(|&c| c == b'\r' || c == b'\n').unwrap_or(s.len());
                s = &s[end..];
            }
            _ => break,
        }
    }
    s
}

fn at(s: &[u8]) -> String {
    String::from_utf8_lossy(&s[..s.len().min(40)]).into_owned()
}

fn name(s: &[u8]) -> Parsed<'_, String> {
    let n = s.iter().take_while(|&&c| is_word(c)).count();
    if n == 0 {
        return Err(format!("expecting name at {}", at(s)));
    }
    Ok((String::from_utf8_lossy(&s[..n]).into_owned(), &s[n..]))
}

fn int(s: &[u8]) -> Parsed<'_, u64> {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let v = std::str::from_utf8(&s[..n]).ok().and_then(|t| t.parse().ok());
    match v {
        Some(v) if n > 0 => Ok((v, &s[n..])),
        _ => Err(format!("expecting integer at {}", at(s))),
    }
}

fn hex(s: &[u8], size: usize) -> Parsed<'_, u32> {
    let digits = s.iter().take(size).take_while(|c| c.is_ascii_hexdigit()).count();
    if digits != size {
        return Err(format!("expecting {size} hex chars at {}", at(s)));
    }
    let v = u32::from_str_radix(std::str::from_utf8(&s[..size]).unwrap_or("0"), 16).map_err(|e| e.to_string())?;
    Ok((v, &s[size..]))
}

/// One character of a literal or class: an escape, or one UTF-8 character (decoded leniently,
/// as llama.cpp's decode_utf8 does).
fn chr(s: &[u8]) -> Parsed<'_, u32> {
    match s {
        [b'\\', b'x', rest @ ..] => hex(rest, 2),
        [b'\\', b'u', rest @ ..] => hex(rest, 4),
        [b'\\', b'U', rest @ ..] => hex(rest, 8),
        [b'\\', b't', rest @ ..] => Ok(('\t' as u32, rest)),
        [b'\\', b'r', rest @ ..] => Ok(('\r' as u32, rest)),
        [b'\\', b'n', rest @ ..] => Ok(('\n' as u32, rest)),
        [b'\\', c @ (b'\\' | b'"' | b'[' | b']'), rest @ ..] => Ok((*c as u32, rest)),
        [b'\\', ..] => Err(format!("unknown escape at {}", at(s))),
        [] => Err("unexpected end of input".into()),
        _ => Ok(utf8_char(s)),
    }
}

fn utf8_char(s: &[u8]) -> (u32, &[u8]) {
    let lead = s[0];
    let (len, mask) = match lead >> 4 {
        0..=7 => (1, 0x7f),
        8..=11 => (1, 0xff),
        12 | 13 => (2, 0x1f),
        14 => (3, 0x0f),
        _ => (4, 0x07),
    };
    let mut v = (lead & mask) as u32;
    let mut i = 1;
    while i < len && i < s.len() && s[i] != 0 {
        v = (v << 6) | (s[i] & 0x3f) as u32;
        i += 1;
    }
    (v, &s[i..])
}

fn literal_term(mut s: &[u8]) -> Parsed<'_, Term> {
    let mut chars = Vec::new();
    while s.first() != Some(&b'"') {
        let (c, rest) = chr(s)?;
        chars.push(c);
        s = rest;
    }
    Ok((Term::Lit(chars), &s[1..]))
}

fn class_term(mut s: &[u8]) -> Parsed<'_, Term> {
    let negated = s.first() == Some(&b'^');
    if negated {
        s = &s[1..];
    }
    let mut ranges = Vec::new();
    while s.first() != Some(&b']') {
        let (lo, rest) = chr(s)?;
        s = rest;
        let mut hi = lo;
        if s.first() == Some(&b'-') && s.get(1).is_some_and(|&c| c != b']') {
            let (h, rest) = chr(&s[1..])?;
            hi = h;
            s = rest;
        }
        ranges.push((lo, hi));
    }
    Ok((Term::Class { negated, ranges }, &s[1..]))
}

fn token_term(s: &[u8], negated: bool) -> Parsed<'_, Term> {
    let Some(rest) = s.strip_prefix(b"<") else { return Err(format!("expecting '<' at {}", at(s))) };
    if let Some(rest) = rest.strip_prefix(b"[") {
        let (id, rest) = int(rest)?;
        let rest = rest.strip_prefix(b"]>").ok_or_else(|| format!("expecting ']>' at {}", at(rest)))?;
        let id = u32::try_from(id).map_err(|_| format!("token id {id} out of range"))?;
        return Ok((Term::Token { token: TokenRef::Id(id), negated }, rest));
    }
    let end = rest.iter().position(|&c| c == b'>').ok_or_else(|| format!("expecting '>' at {}", at(rest)))?;
    let text = format!("<{}>", String::from_utf8_lossy(&rest[..end]));
    Ok((Term::Token { token: TokenRef::Text(text), negated }, &rest[end + 1..]))
}

/// `{m}`, `{m,}`, `{m,n}` after the opening brace.
fn braces(s: &[u8], nested: bool) -> Parsed<'_, (u64, Option<u64>)> {
    let s = space(s, nested);
    let (min, s) = int(s)?;
    let s = space(s, nested);
    match s.first() {
        Some(b'}') => Ok(((min, Some(min)), space(&s[1..], nested))),
        Some(b',') => {
            let mut s = space(&s[1..], nested);
            let mut max = None;
            if s.first().is_some_and(u8::is_ascii_digit) {
                let (m, rest) = int(s)?;
                max = Some(m);
                s = space(rest, nested);
            }
            match s.strip_prefix(b"}") {
                Some(rest) => Ok(((min, max), space(rest, nested))),
                None => Err(format!("expecting '}}' at {}", at(s))),
            }
        }
        _ => Err(format!("expecting ',' at {}", at(s))),
    }
}

fn repeat(seq: &mut Seq, min: u64, max: Option<u64>, at_s: &[u8]) -> Result<(), String> {
    if min > MAX_REPEAT || max.is_some_and(|m| m > MAX_REPEAT) {
        return Err("number of repetitions exceeds sane defaults".into());
    }
    let Some(last) = seq.pop() else { return Err(format!("expecting preceding item to */+/?/{{ at {}", at(at_s))) };
    // A repeated item that is already repeated is a group of one (as llama.cpp rewrites it).
    let term = if last.min == 1 && last.max == Some(1) { last.term } else { Term::Group(vec![vec![last]]) };
    seq.push(Item { term, min: min as u32, max: max.map(|m| m as u32) });
    Ok(())
}

fn sequence(mut s: &[u8], nested: bool) -> Parsed<'_, Seq> {
    let mut seq: Seq = Vec::new();
    loop {
        let one = |term| Item { term, min: 1, max: Some(1) };
        let (item, rest): (Option<Item>, &[u8]) = match s.first() {
            Some(b'"') => literal_term(&s[1..]).map(|(t, r)| (Some(one(t)), r))?,
            Some(b'[') => class_term(&s[1..]).map(|(t, r)| (Some(one(t)), r))?,
            Some(b'<') => token_term(s, false).map(|(t, r)| (Some(one(t)), r))?,
            Some(b'!') => token_term(&s[1..], true).map(|(t, r)| (Some(one(t)), r))?,
            Some(&c) if is_word(c) => name(s).map(|(n, r)| (Some(one(Term::Rule(n))), r))?,
            Some(b'(') => {
                let (alts, rest) = alternates(space(&s[1..], true), true)?;
                let rest = rest.strip_prefix(b")").ok_or_else(|| format!("expecting ')' at {}", at(rest)))?;
                (Some(one(Term::Group(alts))), rest)
            }
            Some(b'.') => (Some(one(Term::Any)), &s[1..]),
            Some(b'*') => {
                repeat(&mut seq, 0, None, s)?;
                (None, &s[1..])
            }
            Some(b'+') => {
                repeat(&mut seq, 1, None, s)?;
                (None, &s[1..])
            }
            Some(b'?') => {
                repeat(&mut seq, 0, Some(1), s)?;
                (None, &s[1..])
            }
            Some(b'{') => {
                let ((min, max), rest) = braces(&s[1..], nested)?;
                repeat(&mut seq, min, max, s)?;
                (None, rest)
            }
            _ => return Ok((seq, s)),
        };
        seq.extend(item);
        s = space(rest, nested);
    }
}

fn alternates(s: &[u8], nested: bool) -> Parsed<'_, Alts> {
    let (first, mut s) = sequence(s, nested)?;
    let mut alts = vec![first];
    while let Some(rest) = s.strip_prefix(b"|") {
        let (seq, rest) = sequence(space(rest, true), nested)?;
        alts.push(seq);
        s = rest;
    }
    Ok((alts, s))
}

/// Reads GBNF text (llama.cpp's syntax at the pin). Fails with llama.cpp's kind of message.
pub fn parse(text: &str) -> Result<Grammar, String> {
    let mut g = Grammar::default();
    let mut s = space(text.as_bytes(), true);
    while !s.is_empty() {
        let (n, rest) = name(s)?;
        let rest = space(rest, false);
        let rest = rest.strip_prefix(b"::=").ok_or_else(|| format!("expecting ::= at {}", at(rest)))?;
        let (alts, rest) = alternates(space(rest, true), false)?;
        let rest = match rest {
            [b'\r', b'\n', r @ ..] | [b'\r', r @ ..] | [b'\n', r @ ..] => r,
            [] => rest,
            _ => return Err(format!("expecting newline or end at {}", at(rest))),
        };
        if g.rules.insert(n.clone(), alts).is_none() {
            g.order.push(n);
        }
        s = space(rest, true);
    }
    let undefined = g.rules.values().flat_map(|a| refs(a)).find(|r| !g.rules.contains_key(*r));
    if let Some(r) = undefined {
        return Err(format!("undefined rule identifier '{r}'"));
    }
    if !g.rules.contains_key("root") {
        return Err("grammar does not contain a 'root' symbol".into());
    }
    Ok(g)
}

/// The rule names `alts` refers to (at any depth of grouping).
pub fn refs(alts: &Alts) -> Vec<&str> {
    let mut out = Vec::new();
    fn walk<'a>(alts: &'a Alts, out: &mut Vec<&'a str>) {
        for item in alts.iter().flatten() {
            match &item.term {
                Term::Rule(r) => out.push(r),
                Term::Group(g) => walk(g, out),
                _ => {}
            }
        }
    }
    walk(alts, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Item {
        Item { term: Term::Lit(s.chars().map(|c| c as u32).collect()), min: 1, max: Some(1) }
    }

    #[test]
    fn reads_what_llama_cpp_reads() {
        let g = parse("root ::= \"a\\n\" x{2,5} | # comment\n  [^\"\\\\a-c] .?\nx ::= (\"b\" |\n \"c\")+ <[7]> !<[9]>\n")
            .unwrap();
        assert_eq!(g.order, ["root", "x"]);
        let root = &g.rules["root"];
        assert_eq!(root[0][0], lit("a\n"));
        assert_eq!((root[0][1].min, root[0][1].max), (2, Some(5)));
        assert_eq!(
            root[1][0].term,
            Term::Class { negated: true, ranges: vec![('"' as u32, '"' as u32), ('\\' as u32, '\\' as u32), ('a' as u32, 'c' as u32)] }
        );
        assert_eq!((root[1][1].term.clone(), root[1][1].min, root[1][1].max), (Term::Any, 0, Some(1)));
        let x = &g.rules["x"];
        assert_eq!((x[0][0].min, x[0][0].max), (1, None));
        assert_eq!(x[0][1].term, Term::Token { token: TokenRef::Id(7), negated: false });
        assert_eq!(x[0][2].term, Term::Token { token: TokenRef::Id(9), negated: true });
    }

    #[test]
    fn refuses_what_llama_cpp_refuses() {
        for (bad, why) in [
            ("root ::= x", "undefined rule"),
            ("a ::= \"x\"", "'root'"),
            ("root ::= \"\\q\"", "unknown escape"),
            ("root ::= \"x\"{3000}", "sane defaults"),
            ("root ::= (\"x\"", "expecting ')'"),
            ("root ::= *", "preceding item"),
            ("root ::= \"x\" )", "newline or end"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn writes_literals_and_until() {
        assert_eq!(literal("a\"\\\n"), r#""a\"\\\n""#);
        assert_eq!(llama_until(&['<', '/', 'a', '>']), r#"([^<] | "<" [^/] | "</" [^a] | "</a" [^>])*"#);
        assert_eq!(
            until("</a>"),
            r#"([^<] | "<" ("<" | "/<" | "/a<")* ([^</] | "/" [^<a] | "/a" [^<>]))* ("<" ("<" | "/<" | "/a<")* ("" | "/" | "/a"))?"#
        );
        assert_eq!(until("]"), "[^\\x5D]*");
        assert_eq!(regex_escape("<f(x)>"), r"<f\(x\)>");
        // What it writes, it reads: the text's steps, its partial match at the end, the literal.
        let g = parse(&format!("root ::= {} {}", until("</t>"), literal("</t>"))).unwrap();
        assert_eq!(g.rules["root"][0].len(), 3);
    }
}
