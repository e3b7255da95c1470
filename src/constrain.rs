//! Tightening llama.cpp's tool-call grammars for the strict tool choices (`required`, named).
//!
//! At the pin, several formats' grammars do not enforce the argument schema, so a model can
//! write a call its schema forbids (a weak or distracted model does):
//! - raw-text argument values (Qwen3-Coder, GLM, MiniMax, DeepSeek-V3.2 DSML, ...) accept any
//!   text up to the closing tag, so a string `enum` is not enforced;
//! - Gemma 4's arguments are a generic dict, whatever the schema;
//! - character-class repetitions (`[0-9]+` call indexes, `[A-Za-z0-9_-]+` constraint names) have
//!   no bound;
//! - `space` admits up to two newlines and 20 blanks at positions where some formats' parsers
//!   accept less or nothing (GLM-4.6 takes no whitespace after the function name's newline), so a
//!   grammar-conforming call can fail to parse. In the strict grammars `space` is empty: calls
//!   come out compact, and the whitespace a format requires is in its literals.
//!
//! These rewrites act on the grammar text of the tool-call section only, by rule names that
//! llama.cpp's builders generate (`tool-<fn>-arg-<prop>`, `tool-<fn>`, `gemma4-dict`).

use crate::request::Tool;
use crate::sampler::gbnf_literal;
use serde_json::Value;
use std::collections::HashMap;

/// llama.cpp's rule-name sanitizer: runs of characters other than [A-Za-z0-9-] become '-'.
fn rule_name(s: &str) -> String {
    let mut out = String::new();
    let mut dash = false;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            dash = false;
        } else if !dash {
            out.push('-');
            dash = true;
        }
    }
    out
}

/// Splits `name ::= body` lines.
fn parse_rules(g: &str) -> Vec<(String, String)> {
    g.lines().filter_map(|l| l.split_once(" ::= ").map(|(n, b)| (n.trim().to_string(), b.to_string()))).collect()
}

/// Byte ranges of top-level tokens of a rule body: literals, classes, groups and names.
/// Returns the span of the first `( ... )*` group whose text starts with `([^`.
fn find_exclusion_group(body: &str) -> Option<(usize, usize)> {
    let b = body.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => i = skip_quoted(b, i, b'"'),
            b'[' => i = skip_quoted(b, i, b']'),
            b'(' if body[i..].starts_with("([^") => {
                let mut depth = 0;
                let mut j = i;
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
                                return (b.get(j + 1) == Some(&b'*')).then_some((i, j + 2));
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                return None;
            }
            _ => i += 1,
        }
    }
    None
}

/// Index just past a quoted run starting at `i` (a `"` literal or a `[` class), honouring `\`.
fn skip_quoted(b: &[u8], i: usize, close: u8) -> usize {
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

fn is_exclusion_rule(body: &str) -> bool {
    find_exclusion_group(body) == Some((0, body.trim_end().len()))
}

fn string_enum(schema: &Value) -> Option<Vec<String>> {
    let e = schema.get("enum")?.as_array()?;
    let t = schema.get("type").and_then(Value::as_str);
    if e.is_empty() || !(t.is_none() || t == Some("string")) {
        return None;
    }
    e.iter().map(|v| v.as_str().map(str::to_string)).collect()
}

/// Bounds character-class repetitions: `]+` → `]{1,64}`, `]*` → `]{0,64}`; with `groups`,
/// group repetitions too (`)*` → `){0,64}`).
fn bound_repetitions(body: &str, groups: bool) -> String {
    let b = body.as_bytes();
    let mut out = String::with_capacity(body.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let j = skip_quoted(b, i, b'"');
                out.push_str(&body[i..j]);
                i = j;
            }
            b')' if groups && matches!(b.get(i + 1), Some(b'*') | Some(b'+')) => {
                out.push_str(if b[i + 1] == b'*' { "){0,64}" } else { "){1,64}" });
                i += 2;
            }
            b'[' => {
                let j = skip_quoted(b, i, b']');
                out.push_str(&body[i..j]);
                match b.get(j) {
                    Some(b'+') => {
                        out.push_str("{1,64}");
                        i = j + 1;
                    }
                    Some(b'*') => {
                        out.push_str("{0,64}");
                        i = j + 1;
                    }
                    _ => i = j,
                }
            }
            _ => {
                let c = body[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// Applies every rewrite to a tool-section grammar for these tools.
pub fn constrain_section(grammar: &str, tools: &[Tool]) -> String {
    let mut rules = parse_rules(grammar);
    let exclusion: std::collections::HashSet<String> =
        rules.iter().filter(|(_, b)| is_exclusion_rule(b)).map(|(n, _)| n.clone()).collect();
    let mut extra: Vec<(String, String)> = Vec::new();
    let index: HashMap<String, usize> = rules.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();

    for tool in tools {
        let f = &tool.function;
        let fname = rule_name(&f.name);
        let params = f.parameters.clone().unwrap_or(Value::Null);
        // Raw-text arguments with a string enum.
        if let Some(props) = params.get("properties").and_then(Value::as_object) {
            for (prop, schema) in props {
                let Some(values) = string_enum(schema) else { continue };
                let Some(&i) = index.get(&format!("tool-{fname}-arg-{}", rule_name(prop))) else { continue };
                let alts = format!("({})", values.iter().map(|v| gbnf_literal(v)).collect::<Vec<_>>().join(" | "));
                let body = rules[i].1.clone();
                let replaced = if let Some((a, b)) = find_exclusion_group(&body) {
                    Some(format!("{}{}{}", &body[..a], alts, &body[b..]))
                } else {
                    body.split(' ').position(|tok| exclusion.contains(tok)).map(|pos| {
                        let mut toks: Vec<&str> = body.split(' ').collect();
                        toks[pos] = &alts;
                        toks.join(" ")
                    })
                };
                if let Some(r) = replaced {
                    rules[i].1 = r;
                }
            }
        }
        // Gemma 4: a schema-shaped dict instead of the generic one.
        if let Some(&i) = index.get(&format!("tool-{fname}")) {
            if rules[i].1.ends_with(" gemma4-dict") {
                let mut g = Gemma4 { rules: Vec::new(), prefix: format!("llb-g4-{fname}") };
                let expr = g.value(&params, "args");
                rules[i].1 = format!("{} {expr}", rules[i].1.trim_end_matches("gemma4-dict").trim_end());
                extra.extend(g.rules);
            }
        }
    }
    rules.extend(extra);
    // A call's envelope (`tool-<fn>`) holds no argument text: its free strings (an optional
    // model-written call id, say) are bounded too. llb issues its own call ids.
    let envelopes: std::collections::HashSet<String> =
        tools.iter().map(|t| format!("tool-{}", rule_name(&t.function.name))).collect();
    for (n, b) in rules.iter_mut() {
        if n == "space" {
            *b = r#""""#.to_string();
        }
        *b = bound_repetitions(b, envelopes.contains(n));
    }
    rules.iter().map(|(n, b)| format!("{n} ::= {b}\n")).collect()
}

/// Gemma 4's value syntax: strings between `<|"|>` marks, bare keys, bare numbers.
struct Gemma4 {
    rules: Vec<(String, String)>,
    prefix: String,
}

impl Gemma4 {
    fn string_lit(s: &str) -> String {
        gbnf_literal(&format!("<|\"|>{s}<|\"|>"))
    }

    fn value(&mut self, schema: &Value, path: &str) -> String {
        if let Some(e) = schema.get("enum").and_then(Value::as_array).filter(|e| !e.is_empty()) {
            let alts: Vec<String> = e
                .iter()
                .map(|v| match v {
                    Value::String(s) => Self::string_lit(s),
                    other => gbnf_literal(&other.to_string()),
                })
                .collect();
            return format!("({})", alts.join(" | "));
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => "gemma4-string".into(),
            Some("integer") => {
                let lo = schema.get("minimum").and_then(Value::as_i64);
                let hi = schema.get("maximum").and_then(Value::as_i64);
                match (lo, hi) {
                    (Some(lo), Some(hi)) if hi >= lo && hi - lo <= 256 => {
                        format!("({})", (lo..=hi).map(|n| gbnf_literal(&n.to_string())).collect::<Vec<_>>().join(" | "))
                    }
                    _ => "(\"-\"? ([0-9] | [1-9] [0-9]{1,15}))".into(),
                }
            }
            Some("number") => "gemma4-number".into(),
            Some("boolean") => "gemma4-bool".into(),
            Some("null") => "gemma4-null".into(),
            Some("array") => {
                let item = self.value(schema.get("items").unwrap_or(&Value::Null), &format!("{path}-item"));
                format!("\"[\" space ({item} (\",\" space {item})*)? \"]\"")
            }
            Some("object") | None if schema.get("properties").is_some() => self.object(schema, path),
            _ => "gemma4-value".into(),
        }
    }

    fn object(&mut self, schema: &Value, path: &str) -> String {
        let props = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
        let required: Vec<String> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let mut req_items = Vec::new();
        let mut opt_items = Vec::new();
        for (k, v) in &props {
            let item =
                format!("{} {}", gbnf_literal(&format!("{k}:")), self.value(v, &format!("{path}-{}", rule_name(k))));
            if required.contains(k) {
                req_items.push(item);
            } else {
                opt_items.push(item);
            }
        }
        let name = format!("{}-{}", self.prefix, rule_name(path));
        let body = if req_items.is_empty() {
            let tail: String = opt_items.iter().skip(1).map(|o| format!(" (\",\" space {o})?")).collect();
            match opt_items.first() {
                Some(first) => format!("\"{{\" space ({first}{tail})? \"}}\""),
                None => "\"{\" space \"}\"".to_string(),
            }
        } else {
            let mut s = format!("\"{{\" space {}", req_items.join(" \",\" space "));
            for o in &opt_items {
                s.push_str(&format!(" (\",\" space {o})?"));
            }
            s.push_str(" \"}\"");
            s
        };
        self.rules.push((name.clone(), body));
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusion_group_is_found_past_literals_and_classes() {
        let body = r#"("<p name=\"" "city" "\">") ([^<] | "<" [^/] | "</" [^p])* "</p>""#;
        let (a, b) = find_exclusion_group(body).unwrap();
        assert_eq!(&body[a..b], r#"([^<] | "<" [^/] | "</" [^p])*"#);
        assert!(is_exclusion_rule(r#"([^<] | "<" [^/])*"#));
        assert!(!is_exclusion_rule(r#""a" ([^<])*"#));
    }

    #[test]
    fn class_repetitions_are_bounded_outside_literals() {
        assert_eq!(bound_repetitions(r#""[x]+" [0-9]+ [a-z]*"#, false), r#""[x]+" [0-9]{1,64} [a-z]{0,64}"#);
        assert_eq!(bound_repetitions(r#"("a" | [^"])* "x)*""#, true), r#"("a" | [^"]){0,64} "x)*""#);
        assert_eq!(bound_repetitions(r#"("a")*"#, false), r#"("a")*"#);
    }
}
