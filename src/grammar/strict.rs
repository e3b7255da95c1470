//! Tightening llama.cpp's tool-call grammars for the strict tool choices (`required`, named).
//!
//! At the pin, several formats' grammars do not enforce the argument schema, so a model can
//! write a call its schema forbids (a weak or distracted model does):
//! - raw-text argument values (Qwen3-Coder, GLM, MiniMax, DeepSeek-V3.2 DSML, ...) accept any
//!   text up to the closing tag, so a string `enum` is not enforced; and the parser reads such a
//!   value as a string whatever its schema's other alternatives, so a mixed `enum` or a union
//!   with a bounded string came back as strings no alternative admits ([`raw_strings`]);
//! - Gemma 4's arguments are a generic dict, whatever the schema;
//! - character-class repetitions (`[0-9]+` call indexes, `[A-Za-z0-9_-]+` constraint names) have
//!   no bound;
//! - `space` admits up to two newlines and 20 blanks at positions where some formats' parsers
//!   accept less or nothing (GLM-4.6 takes no whitespace after the function name's newline), so a
//!   grammar-conforming call can fail to parse. In the strict grammars `space` is empty: calls
//!   come out compact, and the whitespace a format requires is in its literals.
//!
//! - numbers: llama.cpp's `number` admits 16-digit exponents (`-1E1657`), which no double holds
//!   and the templates' parsers refuse, and 16-digit integers, past what a JSON consumer holds
//!   exactly (2^53); it ignores `minimum`/`maximum` on numbers, and integer bounds with one side
//!   open leave the other side unbounded. In the strict grammars a number has at most 15 integer
//!   digits, 15 fraction digits and a 2-digit exponent; an integer at most 15 digits; and every
//!   bounded number or integer is llb's own range grammar ([`number_expr`]), in every format.
//!
//! - optional arguments repeat: the raw-text XML formats list a tool's optional arguments as
//!   `(space (tool-f-arg-a | tool-f-arg-b))*`, so `page` could be written twice, or until
//!   `max_tokens` (issue 24). [`optional_args_once`] makes each optional argument appear at most
//!   once, in schema order after the required ones. This rule also applies to the lazy grammar of
//!   `tool_choice: "auto"` ([`at_most_once`]), the only rewrite that does.
//!
//! These rewrites act on the grammar text of the tool-call section only, by rule names that
//! llama.cpp's builders generate (`tool-<fn>-arg-<prop>`, `tool-<fn>`, `gemma4-dict`), and on
//! the schemas inside the parser arena the section grammar is built from ([`strict_section`]).
//!
//! Why one file of ~1,340 lines: every rewrite above reads and writes the same rule table of one
//! section grammar, by the same generated rule names, and they run as one ordered pass
//! ([`strict_section`], [`constrain_section`], [`strict_grammar`]); split, each part would have to
//! know the others' rule names. A quarter of it is its tests.

use crate::error::{bail, Result};
use crate::grammar::gbnf::{exclusion_group as find_exclusion_group, group_end, literal as gbnf_literal, skip_quoted};
use crate::request::wire::Tool;
use serde_json::Value;
use std::collections::HashMap;

/// The largest integer magnitude a strict grammar admits: 15 digits, exact in a double.
const MAX_DIGITS: u32 = 15;
const MAX_INT: u64 = 999_999_999_999_999;
/// Fraction digits and exponent of an unbounded number: at most 1e114, never an overflow.
const FRACTION: &str = r#"("." [0-9]{1,15})?"#;
const EXPONENT: &str = r#"([eE] [-+]? [0-9]{1,2})?"#;

/// GBNF alternatives for the decimal integers in `[lo, hi]` (no sign, no leading zeros).
fn uint_range(lo: u64, hi: u64) -> Vec<String> {
    let mut alts = Vec::new();
    if lo > hi {
        return alts;
    }
    // Split by digit count; each part is a range of equal-length digit strings.
    let mut start = lo;
    while start <= hi {
        let digits = start.to_string().len() as u32;
        let top = if digits >= 20 { u64::MAX } else { 10u64.pow(digits) - 1 };
        let end = top.min(hi);
        same_length(&start.to_string(), &end.to_string(), &mut String::new(), &mut alts);
        if end == u64::MAX {
            break;
        }
        start = end + 1;
    }
    alts
}

/// Alternatives for the digit strings between `lo` and `hi` (same length), after `prefix`.
fn same_length(lo: &str, hi: &str, prefix: &mut String, alts: &mut Vec<String>) {
    let push = |alts: &mut Vec<String>, prefix: &str, tail: String| {
        let p = if prefix.is_empty() { String::new() } else { format!("{} ", gbnf_literal(prefix)) };
        alts.push(format!("{p}{tail}").trim_end().to_string());
    };
    if lo.is_empty() {
        push(alts, prefix, String::new());
        return;
    }
    let (a, b) = (lo.as_bytes()[0], hi.as_bytes()[0]);
    let (lo_rest, hi_rest) = (&lo[1..], &hi[1..]);
    let n = lo_rest.len();
    let any = |n: usize| if n == 0 { String::new() } else { format!("[0-9]{{{n}}}") };
    if a == b {
        prefix.push(a as char);
        same_length(lo_rest, hi_rest, prefix, alts);
        prefix.pop();
        return;
    }
    let lo_full = lo_rest.bytes().all(|c| c == b'0');
    let hi_full = hi_rest.bytes().all(|c| c == b'9');
    let first = if lo_full { a } else { a + 1 };
    let last = if hi_full { b } else { b - 1 };
    if !lo_full {
        prefix.push(a as char);
        same_length(lo_rest, &"9".repeat(n), prefix, alts);
        prefix.pop();
    }
    if first <= last {
        let class = if first == last {
            format!("[{}]", first as char)
        } else {
            format!("[{}-{}]", first as char, last as char)
        };
        push(alts, prefix, format!("{class} {}", any(n)));
    }
    if !hi_full {
        prefix.push(b as char);
        same_length(&"0".repeat(n), hi_rest, prefix, alts);
        prefix.pop();
    }
}

/// A bound of a number schema: value and whether it is exclusive.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Bound {
    v: f64,
    excl: bool,
}

/// Reads `minimum`/`exclusiveMinimum` (or the maximum pair): the tighter one wins; draft-4's
/// boolean `exclusiveMinimum` makes `minimum` exclusive.
fn bound(schema: &Value, inclusive: &str, exclusive: &str, lower: bool) -> Option<Bound> {
    let inc = schema.get(inclusive).and_then(Value::as_f64);
    let exc = schema.get(exclusive);
    let draft4 = exc.and_then(Value::as_bool) == Some(true);
    let a = inc.map(|v| Bound { v, excl: draft4 });
    let b = exc.and_then(Value::as_f64).map(|v| Bound { v, excl: true });
    match (a, b) {
        (Some(a), Some(b)) => {
            let tighter = if lower { b.v >= a.v } else { b.v <= a.v };
            Some(if tighter { b } else { a })
        }
        (a, b) => a.or(b),
    }
}

fn is_int(v: f64) -> bool {
    v.fract() == 0.0 && v.abs() <= MAX_INT as f64
}

/// GBNF for integers in the schema's bounds (within ±MAX_INT); None when the range is empty.
fn integer_expr(lo: Option<Bound>, hi: Option<Bound>) -> Option<String> {
    let lo = lo.map(|b| if b.excl { b.v.floor() + 1.0 } else { b.v.ceil() }).unwrap_or(-(MAX_INT as f64));
    let hi = hi.map(|b| if b.excl { b.v.ceil() - 1.0 } else { b.v.floor() }).unwrap_or(MAX_INT as f64);
    let (lo, hi) = (lo.max(-(MAX_INT as f64)) as i64, hi.min(MAX_INT as f64) as i64);
    if lo > hi {
        return None;
    }
    let mut alts = Vec::new();
    if hi >= 0 {
        alts.extend(uint_range(lo.max(0) as u64, hi as u64));
    }
    if lo < 0 {
        let neg = uint_range(hi.min(-1).unsigned_abs(), lo.unsigned_abs());
        if !neg.is_empty() {
            alts.push(format!("\"-\" ({})", neg.join(" | ")));
        }
    }
    Some(format!("({})", alts.join(" | ")))
}

/// GBNF for non-negative magnitudes m with `lo ⊲ m ⊲ hi` (a subset where a bound is not a whole
/// number: no fractions next to it).
fn magnitude_expr(lo: Bound, hi: Option<Bound>, alts: &mut Vec<String>) {
    let hi_v = hi.map(|b| b.v.min(MAX_INT as f64)).unwrap_or(MAX_INT as f64 + 1.0);
    let hi_excl = hi.is_some_and(|b| b.excl) || hi.is_none();
    // Whole parts k whose every k.xxx lies inside: k >= lo (k > lo when exclusive), k + 1 <= hi.
    let k_lo = if is_int(lo.v) { lo.v as i64 + i64::from(lo.excl) } else { lo.v.ceil() as i64 };
    let k_hi = (hi_v.floor() as i64) - 1;
    if k_lo <= k_hi {
        let r = uint_range(k_lo.max(0) as u64, k_hi as u64);
        alts.push(format!("({}) {FRACTION}", r.join(" | ")));
    }
    // The top whole number itself.
    let top = hi_v.floor();
    if (!hi_excl || top < hi_v) && top >= lo.v && !(lo.excl && top == lo.v) && top <= MAX_INT as f64 {
        alts.push(gbnf_literal(&(top as u64).to_string()));
    }
    // Just above an exclusive whole-number lower bound: lo.xxx with a non-zero digit.
    if lo.excl && is_int(lo.v) && lo.v + 1.0 <= hi_v {
        alts.push(format!("{} \".\" [0-9]{{0,14}} [1-9]", gbnf_literal(&(lo.v as u64).to_string())));
    }
}

/// GBNF for a JSON number within the schema's bounds; None when llb finds no value to admit.
fn number_expr(lo: Option<Bound>, hi: Option<Bound>) -> Option<String> {
    if lo.is_none() && hi.is_none() {
        return Some(format!("(\"-\"? (\"0\" | [1-9] [0-9]{{0,{}}}) {FRACTION} {EXPONENT})", MAX_DIGITS - 1));
    }
    let mut alts = Vec::new();
    // v >= 0
    if hi.is_none_or(|h| h.v > 0.0 || (h.v == 0.0 && !h.excl)) {
        let l = lo.filter(|l| l.v >= 0.0).unwrap_or(Bound { v: 0.0, excl: false });
        magnitude_expr(l, hi, &mut alts);
    }
    // v < 0: "-" m with -hi ⊲ m ⊲ -lo.
    if lo.is_none_or(|l| l.v < 0.0) {
        let m_lo =
            hi.filter(|h| h.v < 0.0).map(|h| Bound { v: -h.v, excl: h.excl }).unwrap_or(Bound { v: 0.0, excl: true });
        let m_hi = lo.map(|l| Bound { v: -l.v, excl: l.excl });
        let mut neg = Vec::new();
        magnitude_expr(m_lo, m_hi, &mut neg);
        if !neg.is_empty() {
            alts.push(format!("\"-\" ({})", neg.join(" | ")));
        }
    }
    (!alts.is_empty()).then(|| format!("({})", alts.join(" | ")))
}

/// Grammar of a number/integer schema in every format, or why it cannot be compiled.
fn numeric_expr(schema: &Value, ty: &str) -> std::result::Result<String, String> {
    let lo = bound(schema, "minimum", "exclusiveMinimum", true);
    let hi = bound(schema, "maximum", "exclusiveMaximum", false);
    let e = if ty == "integer" { integer_expr(lo, hi) } else { number_expr(lo, hi) };
    e.ok_or_else(|| format!("minimum/maximum admit no {ty} llb can write ({lo:?}, {hi:?})"))
}

fn has_bounds(schema: &Value) -> bool {
    ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"].iter().any(|k| schema.get(*k).is_some())
}

/// Spells `\d`, `\w` and `\s` of a `pattern` as classes: llama.cpp's converter copies them into
/// GBNF literals (`"\d"`), which its grammar parser then refuses.
fn expand_class_escapes(pat: &str) -> String {
    let mut out = String::with_capacity(pat.len());
    let mut in_class = false;
    let mut chars = pat.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('d' | 'w' | 's')) => {
                    let body = match e {
                        'd' => "0-9",
                        'w' => "a-zA-Z0-9_",
                        _ => " \\t\\n\\r",
                    };
                    if in_class {
                        out.push_str(body);
                    } else {
                        out.push_str(&format!("[{body}]"));
                    }
                }
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// Replaces bounded number/integer schemas (also inside type unions) with a placeholder
/// constant whose literal the grammar text then swaps for llb's range grammar. `table` maps
/// each expression to its placeholder.
fn rewrite_numbers(schema: &mut Value, table: &mut Vec<(String, String)>) -> std::result::Result<(), String> {
    let Some(obj) = schema.as_object_mut() else {
        if let Some(a) = schema.as_array_mut() {
            for v in a {
                rewrite_numbers(v, table)?;
            }
        }
        return Ok(());
    };
    rewrite_subschemas(obj, table)?;
    if let Some(Value::String(pat)) = obj.get_mut("pattern") {
        *pat = expand_class_escapes(pat);
    }
    if obj.contains_key("enum") || obj.contains_key("const") || !has_bounds(schema) {
        return Ok(());
    }
    match schema.get("type").cloned() {
        Some(Value::String(t)) if t == "number" || t == "integer" => {
            *schema = placeholder(table, numeric_expr(schema, &t)?);
        }
        Some(Value::Array(types)) if types.iter().any(|t| t == "number" || t == "integer") => {
            let mut alts = Vec::new();
            for t in &types {
                let t = t.as_str().unwrap_or_default();
                if t == "number" || t == "integer" {
                    alts.push(placeholder(table, numeric_expr(schema, t)?));
                } else {
                    let mut other = schema.clone();
                    other["type"] = Value::String(t.to_string());
                    alts.push(other);
                }
            }
            *schema = serde_json::json!({"anyOf": alts});
        }
        _ => {}
    }
    Ok(())
}

/// [`rewrite_numbers`] on every schema nested in `obj` (properties, items, alternatives, ...).
fn rewrite_subschemas(
    obj: &mut serde_json::Map<String, Value>,
    table: &mut Vec<(String, String)>,
) -> std::result::Result<(), String> {
    for (k, v) in obj.iter_mut() {
        match k.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" => {
                if let Some(m) = v.as_object_mut() {
                    for s in m.values_mut() {
                        rewrite_numbers(s, table)?;
                    }
                }
            }
            "items" | "additionalProperties" | "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                rewrite_numbers(v, table)?
            }
            _ => {}
        }
    }
    Ok(())
}

/// The placeholder constant standing for the range expression `expr`: one per distinct
/// expression, recorded in `table`.
fn placeholder(table: &mut Vec<(String, String)>, expr: String) -> Value {
    let id = match table.iter().find(|(e, _)| *e == expr) {
        Some((_, id)) => id.clone(),
        None => {
            let id = format!("llb-num-{}", table.len());
            table.push((expr, id.clone()));
            id
        }
    };
    serde_json::json!({"const": id})
}

/// llama.cpp's number primitives, bounded (see the module notes).
fn bounded_primitive(name: &str) -> Option<String> {
    Some(match name {
        "integral-part" => format!("[0] | [1-9] [0-9]{{0,{}}}", MAX_DIGITS - 1),
        "decimal-part" => format!("[0-9]{{1,{MAX_DIGITS}}}"),
        "number" => format!("(\"-\"? integral-part) (\".\" decimal-part)? {EXPONENT} space"),
        _ => return None,
    })
}

/// The strict tool-call section for these tools: llama.cpp's section grammar built from the
/// request's parser arena (`parser`, JSON) with bounded numbers, then every rewrite of
/// [`constrain_section`]. An empty string when the format has no tool-call section. A schema
/// llb cannot compile is `invalid_argument` naming the tool and the keyword.
pub fn strict_section(parser: &str, tools: &[Tool]) -> Result<String> {
    let mut table = Vec::new();
    let mut arena: Value = match serde_json::from_str(parser) {
        Ok(v) => v,
        Err(_) => return crate::shim::tool_section_grammar(parser, &serde_json::to_value(tools).unwrap_or_default()),
    };
    let mut typed = tools.to_vec();
    for t in &mut typed {
        if let Some(p) = t.function.parameters.as_mut() {
            if let Err(why) = rewrite_numbers(p, &mut table) {
                bail!(InvalidArgument, "tool `{}`: {why}", t.function.name);
            }
        }
    }
    if let Err(why) = rewrite_arena(&mut arena, &mut table) {
        bail!(InvalidArgument, "tool schema: {why}");
    }
    let mut section =
        crate::shim::tool_section_grammar(&arena.to_string(), &serde_json::to_value(&typed).unwrap_or_default())?;
    if section.is_empty() {
        return Ok(section);
    }
    for (expr, id) in &table {
        section = section.replace(&format!("\"\\\"{id}\\\"\""), expr);
    }
    Ok(constrain_section(&section, tools))
}

/// Rewrites the schema of every schema node of a serialized parser arena.
fn rewrite_arena(v: &mut Value, table: &mut Vec<(String, String)>) -> std::result::Result<(), String> {
    match v {
        Value::Object(o) => {
            if o.get("type").and_then(Value::as_str) == Some("schema") && o.contains_key("raw") {
                if let Some(s) = o.get_mut("schema") {
                    return rewrite_numbers(s, table);
                }
            }
            for x in o.values_mut() {
                rewrite_arena(x, table)?;
            }
        }
        Value::Array(a) => {
            for x in a {
                rewrite_arena(x, table)?;
            }
        }
        _ => {}
    }
    Ok(())
}

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

fn is_exclusion_rule(body: &str) -> bool {
    find_exclusion_group(body) == Some((0, body.trim_end().len()))
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

/// Each optional argument at most once, in every rule of a grammar: llama.cpp's
/// `(space (tool-f-arg-a | tool-f-arg-b))*` (any number of optional arguments, in any order,
/// repeats included) becomes `(space tool-f-arg-a)? (space tool-f-arg-b)?` (each at most once,
/// in the order llama.cpp listed them: the schema's). Other groups are left as they are.
pub fn optional_args_once(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find("(space (") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match optional_group(tail) {
            Some((names, len)) => {
                let once: Vec<String> = names.iter().map(|n| format!("(space {n})?")).collect();
                out.push_str(&once.join(" "));
                rest = &tail[len..];
            }
            None => {
                out.push_str("(space (");
                rest = &tail["(space (".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `(space (A | B | ...))` followed by `*`, `{0,}` or `{0,N}` at the start of `s`, where every
/// alternative is an argument rule (`tool-<fn>-arg-<prop>`): the names and the group's length.
fn optional_group(s: &str) -> Option<(Vec<&str>, usize)> {
    let inner_start = "(space (".len();
    let close = s[inner_start..].find("))")? + inner_start;
    let names: Vec<&str> = s[inner_start..close].split(" | ").map(str::trim).collect();
    let is_arg = |n: &&str| {
        n.starts_with("tool-") && n.contains("-arg-") && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if names.is_empty() || !names.iter().all(is_arg) {
        return None;
    }
    let after = &s[close + 2..];
    let rep = if after.starts_with('*') {
        1
    } else if let Some(r) = after.strip_prefix("{0,") {
        let end = r.find('}')?;
        if !r[..end].chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        "{0,".len() + end + 1
    } else {
        return None;
    };
    Some((names, close + 2 + rep))
}

/// The rewrites that apply to every tool grammar, the lazy one of `tool_choice: "auto"`
/// included: each optional argument at most once ([`optional_args_once`]) and, for Gemma 4,
/// the tool's schema-shaped dict instead of the generic one (each key at most once).
pub fn at_most_once(grammar: &str, tools: &[Tool]) -> String {
    // Line by line, so any text that is not a `name ::= body` line is kept as it is.
    let mut rules = parse_rules(grammar);
    schema_shaped_args(&mut rules, tools);
    let rewritten: HashMap<&str, &str> = rules.iter().map(|(n, b)| (n.as_str(), b.as_str())).collect();
    let mut seen = std::collections::HashSet::new();
    let mut out = String::with_capacity(grammar.len());
    for line in grammar.lines() {
        match line.split_once(" ::= ").and_then(|(n, _)| rewritten.get_key_value(n.trim())) {
            Some((n, b)) => {
                seen.insert(*n);
                out.push_str(&format!("{n} ::= {b}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for (n, b) in &rules {
        if !seen.contains(n.as_str()) {
            out.push_str(&format!("{n} ::= {b}\n"));
        }
    }
    out
}

/// A model-written call id inside a JSON envelope (`"id": ...`, Mistral's format;
/// `"tool_call_id": ...`, Command-R7B's) is 9 ASCII alphanumerics: llama.cpp's grammar admits
/// any JSON string or number there, Mistral's templates refuse any other id when the reply
/// comes back as history, and a sampling model wrote free text (`"id":" accompanied Char
/// дека…"`) or a number of 200 digits until `max_tokens` (`"tool_call_id":-5555…`). llb issues its own ids in the response
/// either way (docs/design.md, "Tool-call ids"). The id is made mandatory where it was optional.
pub fn mistral_call_ids(body: &str) -> String {
    let keys = [r#""\"id\"" space ":" space ("#, r#""\"tool_call_id\"" space ":" space ("#];
    let Some((at, key)) = keys.iter().find_map(|k| body.find(k).map(|at| (at, *k))) else { return body.to_string() };
    let open = at + key.len() - 1;
    let Some(j) = group_end(body.as_bytes(), open) else { return body.to_string() };
    // The id is written always: llama.cpp's envelope has the comma before it outside the
    // optional group, so a call without one ended `,}`.
    let rest = &body[j + 1..];
    let rest = rest.strip_prefix(")?").map(|r| format!("){r}")).unwrap_or_else(|| rest.to_string());
    format!(r#"{}"\"" [a-zA-Z0-9]{{9}} "\""{rest}"#, &body[..open])
}

/// Gemma 4 dicts shaped by the schema, and optional raw-text arguments at most once.
fn schema_shaped_args(rules: &mut Vec<(String, String)>, tools: &[Tool]) {
    let index: HashMap<String, usize> = rules.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();
    let mut extra: Vec<(String, String)> = Vec::new();
    for tool in tools {
        let f = &tool.function;
        let fname = rule_name(&f.name);
        let params = f.parameters.clone().unwrap_or(Value::Null);
        // Gemma 4: a schema-shaped dict instead of the generic one.
        if let Some(&i) = index.get(&format!("tool-{fname}")) {
            if rules[i].1.ends_with(" gemma4-dict") {
                let mut g = Gemma4 {
                    rules: Vec::new(),
                    prefix: format!("llb-g4-{fname}"),
                    root: params.clone(),
                    refs: HashMap::new(),
                };
                let expr = g.value(&params, "args");
                rules[i].1 = format!("{} {expr}", rules[i].1.trim_end_matches("gemma4-dict").trim_end());
                extra.extend(g.rules);
            }
        }
    }
    for (_, b) in rules.iter_mut() {
        if b.contains("(space (") {
            *b = optional_args_once(b);
        }
        if b.contains(r#"id\"""#) {
            *b = mistral_call_ids(b);
        }
    }
    rules.extend(extra);
}

/// Applies every rewrite to a tool-section grammar for these tools.
pub fn constrain_section(grammar: &str, tools: &[Tool]) -> String {
    let mut rules = parse_rules(grammar);
    let exclusion: std::collections::HashSet<String> =
        rules.iter().filter(|(_, b)| is_exclusion_rule(b)).map(|(n, _)| n.clone()).collect();
    let index: HashMap<String, usize> = rules.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();

    for tool in tools {
        let f = &tool.function;
        let fname = rule_name(&f.name);
        let params = f.parameters.clone().unwrap_or(Value::Null);
        if let Some(props) = params.get("properties").and_then(Value::as_object) {
            constrain_raw_text_args(&mut rules, &index, &exclusion, &fname, props);
        }
    }
    schema_shaped_args(&mut rules, tools);
    // A call's envelope (`tool-<fn>`) holds no argument text: its free strings (an optional
    // model-written call id, say) are bounded too. llb issues its own call ids.
    let envelopes: std::collections::HashSet<String> =
        tools.iter().map(|t| format!("tool-{}", rule_name(&t.function.name))).collect();
    for (n, b) in rules.iter_mut() {
        if n == "space" {
            *b = r#""""#.to_string();
        }
        if let Some(p) = bounded_primitive(n) {
            *b = p;
        }
        *b = bound_repetitions(b, envelopes.contains(n));
    }
    rules.iter().map(|(n, b)| format!("{n} ::= {b}\n")).collect()
}

/// Raw-text arguments (XML-style call formats): the free text of each argument of `fname`
/// becomes what its schema allows, where that is known (`raw_text_alternatives`).
fn constrain_raw_text_args(
    rules: &mut [(String, String)],
    index: &HashMap<String, usize>,
    exclusion: &std::collections::HashSet<String>,
    fname: &str,
    props: &serde_json::Map<String, Value>,
) {
    for (prop, schema) in props {
        let Some(&i) = index.get(&format!("tool-{fname}-arg-{}", rule_name(prop))) else { continue };
        let body = rules[i].1.clone();
        // The free text of the value: an inline exclusion group or a rule holding one.
        let (group, inline) = match find_exclusion_group(&body) {
            Some((a, b)) => (body[a..b].to_string(), Some((a, b))),
            None => match body.split(' ').find(|tok| exclusion.contains(*tok)) {
                Some(tok) => (rules[index[tok]].1.clone(), None),
                None => continue,
            },
        };
        let Some(alts) = raw_text_alternatives(schema, &group) else { continue };
        let replaced = match inline {
            Some((a, b)) => Some(format!("{}{}{}", &body[..a], alts, &body[b..])),
            None => body.split(' ').position(|tok| exclusion.contains(tok)).map(|pos| {
                let mut toks: Vec<&str> = body.split(' ').collect();
                toks[pos] = &alts;
                toks.join(" ")
            }),
        };
        if let Some(r) = replaced {
            rules[i].1 = r;
        }
    }
}

/// What a raw-text value with this schema may be, replacing the free-text `group`: the texts of
/// the strings the schema admits, where llb can bound them ([`raw_strings`]) over the group's
/// first character class (none of whose characters can start the closing tag). None leaves the
/// free text.
fn raw_text_alternatives(schema: &Value, group: &str) -> Option<String> {
    let class = group.get(1..).and_then(|g| g.split(' ').next()).filter(|c| c.starts_with("[^"))?;
    match raw_strings(schema, class) {
        RawStrings::These(alts) if !alts.is_empty() => Some(format!("({})", alts.join(" | "))),
        _ => None,
    }
}

/// The strings a raw-text value may be. llama.cpp's parser reads every raw-text value (an
/// argument whose schema admits a string anywhere, `resolves_to_string`) as a JSON string, so
/// only the string alternatives of its schema can ever be met: a mixed `enum` (`["a", 1,
/// null]`) or an `anyOf` of an integer and a string enum, left free, came back as strings no
/// alternative admits (`"1"`, `"x y"`).
enum RawStrings {
    /// Any text (an unbounded string alternative, or a schema llb does not read here).
    Free,
    /// These GBNF alternatives (none: no string matches the schema).
    These(Vec<String>),
}

/// The raw text the parser reads back as the string `s`: it drops one blank (C's `isspace`) at
/// each end of a raw value, so a string with a blank end is written with one more there.
fn raw_literal(s: &str) -> String {
    let blank = |c: Option<char>| c.is_some_and(|c| matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r'));
    let pad = |b: bool| if b { " " } else { "" };
    gbnf_literal(&format!("{}{s}{}", pad(blank(s.chars().next())), pad(blank(s.chars().last()))))
}

fn raw_strings(schema: &Value, class: &str) -> RawStrings {
    let types: Option<Vec<&str>> = match schema.get("type") {
        None => None,
        Some(Value::String(t)) => Some(vec![t.as_str()]),
        Some(Value::Array(a)) => Some(a.iter().filter_map(Value::as_str).collect()),
        Some(_) => return RawStrings::Free,
    };
    let strings_typed = types.as_ref().is_none_or(|t| t.contains(&"string"));
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let strings = values.iter().filter_map(Value::as_str).filter(|_| strings_typed);
        return RawStrings::These(strings.map(raw_literal).collect());
    }
    if let Some(c) = schema.get("const") {
        return RawStrings::These(c.as_str().filter(|_| strings_typed).map(raw_literal).into_iter().collect());
    }
    let alternatives = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array);
    match (alternatives, types) {
        (Some(alts), None) => {
            let mut out = Vec::new();
            for alt in alts {
                match raw_strings(alt, class) {
                    RawStrings::Free => return RawStrings::Free,
                    RawStrings::These(a) => out.extend(a),
                }
            }
            RawStrings::These(out)
        }
        (Some(_), Some(_)) => RawStrings::Free,
        (None, Some(_)) if !strings_typed => RawStrings::These(Vec::new()),
        (None, _) if schema.get("$ref").is_some() => RawStrings::Free,
        (None, _) => match bounded_string_content(schema, class) {
            Some(content) => RawStrings::These(vec![format!("({content})")]),
            None => RawStrings::Free,
        },
    }
}

/// Content of a string with these keywords, when any applies: a `format` llama.cpp knows, or
/// `minLength`/`maxLength` over characters of `class` (a GBNF class admitting no delimiter; the
/// first and last characters are not blanks, which raw-text parsers trim).
fn bounded_string_content(schema: &Value, class: &str) -> Option<String> {
    if let Some(f) = schema.get("format").and_then(Value::as_str).and_then(format_rule) {
        return Some(f);
    }
    let min = schema.get("minLength").and_then(Value::as_u64);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    if min.is_none() && max.is_none() {
        return None;
    }
    let (min, max) = (min.unwrap_or(0), max.unwrap_or(u64::from(u32::MAX)).max(min.unwrap_or(0)));
    let edge = format!("{}\\x00-\\x20]", class.trim_end_matches(']'));
    let max_s = if max >= u64::from(u32::MAX) { String::new() } else { (max - 2.min(max)).to_string() };
    let inner = format!("{class}{{{},{max_s}}}", min.saturating_sub(2));
    Some(match (min, max) {
        (_, 0) => r#""""#.to_string(),
        (0 | 1, 1) => format!("{edge}{}", if min == 0 { "?" } else { "" }),
        (0, _) => format!("({edge} ({inner} {edge})?)?"),
        (1, _) => format!("{edge} ({inner} {edge})?"),
        _ => format!("{edge} {inner} {edge}"),
    })
}

/// llama.cpp's `format` grammars (json-schema-to-grammar's STRING_FORMAT_RULES and uuid).
fn format_rule(f: &str) -> Option<String> {
    const DATE: &str = r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#;
    const TIME: &str = r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#;
    Some(match f {
        "date" => format!("({DATE})"),
        "time" => format!("({TIME})"),
        "date-time" => format!("({DATE} \"T\" {TIME})"),
        "uuid" => {
            r#"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"#.into()
        }
        _ => return None,
    })
}

/// Gemma 4's value syntax: strings between `<|"|>` marks, bare keys, bare numbers.
struct Gemma4 {
    rules: Vec<(String, String)>,
    prefix: String,
    /// The tool's parameters: `$ref`s resolve against it.
    root: Value,
    /// `$ref` → rule name, so recursive schemas become recursive rules.
    refs: HashMap<String, String>,
}

impl Gemma4 {
    fn string_lit(s: &str) -> String {
        gbnf_literal(&format!("<|\"|>{s}<|\"|>"))
    }

    fn literal(v: &Value) -> String {
        match v {
            Value::String(s) => Self::string_lit(s),
            other => gbnf_literal(&other.to_string()),
        }
    }

    fn resolve(&self, r: &str) -> Option<Value> {
        let ptr = r.strip_prefix('#')?;
        self.root.pointer(ptr).cloned()
    }

    fn value(&mut self, schema: &Value, path: &str) -> String {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            if let Some(name) = self.refs.get(r) {
                return name.clone();
            }
            let Some(target) = self.resolve(r) else { return "gemma4-value".into() };
            let name = format!("{}-ref{}", self.prefix, self.refs.len());
            self.refs.insert(r.to_string(), name.clone());
            let body = self.value(&target, &format!("{path}-ref"));
            self.rules.push((name.clone(), body));
            return name;
        }
        if let Some(c) = schema.get("const") {
            return Self::literal(c);
        }
        if let Some(e) = schema.get("enum").and_then(Value::as_array).filter(|e| !e.is_empty()) {
            return format!("({})", e.iter().map(Self::literal).collect::<Vec<_>>().join(" | "));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = schema.get(key).and_then(Value::as_array).filter(|a| !a.is_empty()) {
                let exprs: Vec<String> =
                    alts.iter().enumerate().map(|(i, a)| self.value(a, &format!("{path}-{i}"))).collect();
                return format!("({})", exprs.join(" | "));
            }
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            // Merge the parts' properties and requirements (the common use: a base and an extension).
            let mut merged = schema.clone();
            merged.as_object_mut().unwrap().remove("allOf");
            for part in all {
                let part = match part.get("$ref").and_then(Value::as_str) {
                    Some(r) => self.resolve(r).unwrap_or_default(),
                    None => part.clone(),
                };
                merge_schema(&mut merged, &part);
            }
            return self.value(&merged, path);
        }
        match schema.get("type") {
            Some(Value::Array(types)) => {
                let exprs: Vec<String> = types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| {
                        let mut one = schema.clone();
                        one["type"] = t.clone();
                        self.value(&one, &format!("{path}-t{i}"))
                    })
                    .collect();
                return format!("({})", exprs.join(" | "));
            }
            Some(Value::String(t)) => return self.typed(schema, t, path),
            _ => {}
        }
        if schema.get("properties").is_some() {
            return self.object(schema, path);
        }
        "gemma4-value".into()
    }

    fn typed(&mut self, schema: &Value, t: &str, path: &str) -> String {
        match t {
            "string" => match bounded_string_content(schema, "[^<]") {
                Some(content) => format!("(\"<|\\\"|>\" {content} \"<|\\\"|>\")"),
                None => "gemma4-string".into(),
            },
            "integer" | "number" => numeric_expr(schema, t).unwrap_or_else(|_| "gemma4-number".into()),
            "boolean" => "gemma4-bool".into(),
            "null" => "gemma4-null".into(),
            "array" => {
                let item = self.value(schema.get("items").unwrap_or(&Value::Null), &format!("{path}-item"));
                let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
                let max = schema.get("maxItems").and_then(Value::as_u64);
                let more = |n: u64| {
                    format!("(\",\" space {item}){{{},{}}}", n, max.map(|m| (m - 1).to_string()).unwrap_or_default())
                };
                let body = match (min, max) {
                    (_, Some(0)) => String::new(),
                    (0, _) => format!("({item} {})?", more(0)),
                    (n, _) => format!("{item} {}", more(n - 1)),
                };
                format!("(\"[\" space {body} \"]\")")
            }
            "object" if schema.get("properties").is_some() => self.object(schema, path),
            // Any dict, but a dict: `gemma4-value` let `{"type": "object"}` be `[true]`.
            "object" if schema.get("additionalProperties") == Some(&Value::Bool(false)) => r#"("{" "}")"#.into(),
            "object" => "gemma4-dict".into(),
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

/// Merges an `allOf` part into a schema: properties and required lists add up; other keywords
/// of the part win where the schema has none.
fn merge_schema(into: &mut Value, part: &Value) {
    let (Some(into), Some(part)) = (into.as_object_mut(), part.as_object()) else { return };
    for (k, v) in part {
        match (k.as_str(), into.get_mut(k)) {
            ("properties", Some(Value::Object(p))) => {
                if let Some(o) = v.as_object() {
                    p.extend(o.clone());
                }
            }
            ("required", Some(Value::Array(r))) => {
                if let Some(a) = v.as_array() {
                    r.extend(a.iter().cloned());
                }
            }
            (_, None) => {
                into.insert(k.clone(), v.clone());
            }
            _ => {}
        }
    }
}

/// The strict grammar's section when one call is allowed and the template's section is a bare
/// repetition of calls.
const ONE_CALL_RULE: &str = "llb-tool-section ::= tool-call";

/// What a strict reply may write before its call section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead<'a> {
    /// Nothing: the call section from the first token.
    None,
    /// The prompt opened a reasoning block but thinking is off: its end tag, at once.
    Close { end: &'a str },
    /// The prompt opened a reasoning block: reasoning up to its end tag.
    Finish { end: &'a str },
    /// An optional reasoning block (start tag, reasoning, end tag).
    Optional { start: &'a str, end: &'a str },
}

/// llb's strict grammar for a reply that must call one of `tools`, decided once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrictGrammar {
    pub gbnf: String,
    /// It admits one call only (with `single_call`, where the section is a bare repetition of
    /// calls): no need to parse the output while generating to catch a second call.
    pub one_call: bool,
}

/// The strict grammar of a `required` or named choice, in one call: the template's call section
/// for `tools` read from its `parser` ([`strict_section`]), preceded only by `lead`, at most one
/// call with `single_call` ([`strict_grammar`]). None when the section is not known: the
/// template's own grammar is used.
pub fn strict_reply(parser: &str, tools: &[Tool], lead: Lead, single_call: bool) -> Result<Option<StrictGrammar>> {
    let section = strict_section(parser, tools)?;
    if section.is_empty() {
        return Ok(None);
    }
    let gbnf = strict_grammar(&section, lead, single_call);
    let one_call = admits_one_call(&gbnf);
    Ok(Some(StrictGrammar { gbnf, one_call }))
}

/// The strict grammar for `required` and named choices: the tool-call `section` (see
/// [`strict_section`]) from the first output token, preceded only by `lead`. With
/// `single_call`, a section that is a bare repetition of calls admits one call.
pub fn strict_grammar(section: &str, lead: Lead, single_call: bool) -> String {
    // With one call allowed: when llama.cpp's `tool-calls` rule is a bare repetition of
    // `tool-call` (not a section with its own markers), only `tool-call` may start the reply.
    let bare_repetition = section.lines().any(|l| {
        l.strip_prefix("tool-calls ::= ").is_some_and(|body| {
            body.split(|c: char| c.is_whitespace() || "()+*?".contains(c))
                .filter(|t| !t.is_empty())
                .all(|t| t == "tool-call" || t == "space")
        })
    });
    let mut rules: Vec<String> = section
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.strip_prefix("root ::= ") {
            Some(body) if single_call && bare_repetition && body.split(" | ").any(|n| n == "tool-call") => {
                ONE_CALL_RULE.to_string()
            }
            Some(body) => format!("llb-tool-section ::= {body}"),
            None => l.to_string(),
        })
        .collect();
    // Nothing between the end of the reasoning block and the call: some parsers take no
    // whitespace there (Command-R7B's refused `<|END_THINKING|> \n\n<|START_ACTION|>`, issue 24),
    // and every parser takes none.
    let ws = "llb-ws ::= \"\"";
    let root = match lead {
        Lead::Close { end } => format!("root ::= {} llb-ws llb-tool-section", gbnf_literal(end)),
        Lead::Finish { end } => {
            format!("root ::= {} {} llb-ws llb-tool-section", crate::grammar::gbnf::until(end), gbnf_literal(end))
        }
        Lead::Optional { start, end } => format!(
            "root ::= ({} {} {} llb-ws)? llb-tool-section",
            gbnf_literal(start),
            crate::grammar::gbnf::until(end),
            gbnf_literal(end)
        ),
        Lead::None => "root ::= llb-tool-section".to_string(),
    };
    rules.push(ws.to_string());
    rules.insert(0, root);
    rules.join("\n") + "\n"
}

/// Whether a strict grammar (see [`strict_grammar`]) admits one call only: no need to parse the
/// output while generating to catch a second call.
fn admits_one_call(gbnf: &str) -> bool {
    gbnf.lines().any(|l| l == ONE_CALL_RULE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_grammar_starts_with_its_lead_and_one_call_where_one_is_allowed() {
        let section = "root ::= tool-calls\ntool-calls ::= tool-call+\ntool-call ::= \"x\"\n";
        let one = strict_grammar(section, Lead::None, true);
        assert_eq!(one.lines().next(), Some("root ::= llb-tool-section"));
        assert!(!admits_one_call(&one), "the root names tool-calls, not tool-call: {one}");
        let bare = "root ::= tool-call | tool-calls\ntool-calls ::= tool-call+\ntool-call ::= \"x\"\n";
        let one = strict_grammar(bare, Lead::None, true);
        assert!(admits_one_call(&one), "{one}");
        assert!(!admits_one_call(&strict_grammar(bare, Lead::None, false)));
        assert!(one.ends_with("llb-ws ::= \"\"\n"), "{one}");
        let close = strict_grammar(section, Lead::Close { end: "</think>" }, false);
        assert!(close.starts_with("root ::= \"</think>\" llb-ws llb-tool-section\n"), "{close}");
        let optional = strict_grammar(section, Lead::Optional { start: "<think>", end: "</think>" }, false);
        assert!(optional.starts_with("root ::= (\"<think>\" "), "{optional}");
        assert!(optional.lines().next().unwrap().ends_with("\"</think>\" llb-ws)? llb-tool-section"), "{optional}");
        assert!(optional.contains("llb-tool-section ::= tool-calls\n"), "{optional}");
    }

    #[test]
    fn exclusion_group_is_found_past_literals_and_classes() {
        let body = r#"("<p name=\"" "city" "\">") ([^<] | "<" [^/] | "</" [^p])* "</p>""#;
        let (a, b) = find_exclusion_group(body).unwrap();
        assert_eq!(&body[a..b], r#"([^<] | "<" [^/] | "</" [^p])*"#);
        assert!(is_exclusion_rule(r#"([^<] | "<" [^/])*"#));
        assert!(!is_exclusion_rule(r#""a" ([^<])*"#));
    }

    #[test]
    fn optional_arguments_appear_at_most_once_in_schema_order() {
        // Qwen3-Coder at the pin: one required argument, one optional one that could repeat.
        let body = r#""<function=search_docs>\n" tool-search-docs-arg-query (space (tool-search-docs-arg-page))* "</function>""#;
        assert_eq!(
            optional_args_once(body),
            r#""<function=search_docs>\n" tool-search-docs-arg-query (space tool-search-docs-arg-page)? "</function>""#
        );
        // Several optional arguments, bounded repetition: each once, in the listed order.
        let body = "tool-f-arg-a (space (tool-f-arg-b | tool-f-arg-c | tool-f-arg-d)){0,64} \"x\"";
        assert_eq!(
            optional_args_once(body),
            "tool-f-arg-a (space tool-f-arg-b)? (space tool-f-arg-c)? (space tool-f-arg-d)? \"x\""
        );
        // Groups of anything else are left alone.
        for other in ["(space (tool-call))*", "(space (tool-f-arg-a | \"x\"))*", "(space (tool-f-arg-a))+"] {
            assert_eq!(optional_args_once(other), other);
        }
    }

    #[test]
    fn model_written_call_ids_are_nine_alphanumerics() {
        // Mistral-Nemo's envelope at the pin (strict grammar, repetitions bounded).
        let body = r#""{" space "\"name\"" space ":" space ("\"" "f" "\"") space "," space ("\"id\"" space ":" space ("\"" ( [^"\\] | "\\" ( ["\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) ){0,64} "\"" | json-number))? space "}""#;
        assert_eq!(
            mistral_call_ids(body),
            r#""{" space "\"name\"" space ":" space ("\"" "f" "\"") space "," space ("\"id\"" space ":" space "\"" [a-zA-Z0-9]{9} "\"") space "}""#
        );
        assert_eq!(mistral_call_ids(r#""\"name\"" space"#), r#""\"name\"" space"#);
        let cohere =
            r#""{" space ("\"tool_call_id\"" space ":" space ("\"" x "\"" | json-number))? space "," space "}""#;
        assert_eq!(
            mistral_call_ids(cohere),
            r#""{" space ("\"tool_call_id\"" space ":" space "\"" [a-zA-Z0-9]{9} "\"") space "," space "}""#
        );
    }

    #[test]
    fn class_repetitions_are_bounded_outside_literals() {
        assert_eq!(bound_repetitions(r#""[x]+" [0-9]+ [a-z]*"#, false), r#""[x]+" [0-9]{1,64} [a-z]{0,64}"#);
        assert_eq!(bound_repetitions(r#"("a" | [^"])* "x)*""#, true), r#"("a" | [^"]){0,64} "x)*""#);
        assert_eq!(bound_repetitions(r#"("a")*"#, false), r#"("a")*"#);
    }

    /// llb's grammar fragments (literals, classes, groups, repetitions) as an anchored regex.
    fn to_regex(gbnf: &str) -> regex::Regex {
        let b = gbnf.as_bytes();
        let mut re = String::from("^(?:");
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'"' => {
                    let j = skip_quoted(b, i, b'"');
                    let lit = gbnf[i + 1..j - 1].replace("\\\"", "\"").replace("\\\\", "\\");
                    re.push_str(&format!("(?:{})", regex::escape(&lit)));
                    i = j;
                }
                b'[' => {
                    let j = skip_quoted(b, i, b']');
                    re.push_str(&gbnf[i..j]);
                    i = j;
                }
                b'(' => {
                    re.push_str("(?:");
                    i += 1;
                }
                b' ' => i += 1,
                c => {
                    re.push(c as char);
                    i += 1;
                }
            }
        }
        re.push_str(")$");
        regex::Regex::new(&re).unwrap_or_else(|e| panic!("{gbnf} -> {re}: {e}"))
    }

    #[test]
    fn integer_ranges_admit_exactly_their_members() {
        for (lo, hi) in
            [(0, 0), (1, 7), (0, 9), (5, 123), (10, 99), (17, 1234), (999, 1000), (0, 100_000), (123, 45_678)]
        {
            let re = to_regex(&format!("({})", uint_range(lo, hi).join(" | ")));
            for n in 0..=(hi + 20).min(200_000) {
                assert_eq!(re.is_match(&n.to_string()), (lo..=hi).contains(&n), "[{lo},{hi}] on {n}");
            }
            assert!(!re.is_match(&format!("0{lo}")), "leading zero admitted for [{lo},{hi}]");
        }
        let re = to_regex(
            &integer_expr(Some(Bound { v: -12.0, excl: false }), Some(Bound { v: 30.0, excl: true })).unwrap(),
        );
        for n in -200i64..200 {
            assert_eq!(re.is_match(&n.to_string()), (-12..30).contains(&n), "{n}");
        }
        assert!(!re.is_match("-0"));
    }

    #[test]
    fn unbounded_numbers_fit_a_double_and_integers_fit_a_consumer() {
        let num = to_regex(&number_expr(None, None).unwrap());
        for ok in ["0", "-0.5", "123456789012345", "1.5e99", "-3E-7", "42.000000000000001"] {
            assert!(num.is_match(ok), "{ok}");
        }
        // The issue's outputs: a 4-digit exponent, 16 integer digits.
        for bad in ["-1E1657", "9734513801175893.7011163834967636E7782516520208231", "1e100", "01", "1.", ".5"] {
            assert!(!num.is_match(bad), "{bad}");
        }
        let int = to_regex(&integer_expr(None, None).unwrap());
        assert!(int.is_match("999999999999999") && int.is_match("-999999999999999") && int.is_match("0"));
        assert!(!int.is_match("1000000000000000") && !int.is_match("9007199254740993") && !int.is_match("1.0"));
    }

    #[test]
    fn bounded_numbers_stay_inside_their_bounds() {
        let b = |v: f64, excl: bool| Some(Bound { v, excl });
        let cases = [
            (b(0.0, false), b(1.0, false)),
            (b(0.0, true), b(1.0, true)),
            (b(0.0, false), b(2.5, false)),
            (b(-5.0, false), b(5.0, false)),
            (b(-1.0, true), None),
            (None, b(-2.0, false)),
            (b(1.0, false), None),
            (b(0.5, false), b(100.0, false)),
        ];
        let samples: Vec<String> = (-700..=700)
            .flat_map(|i| {
                let x = i as f64 / 100.0;
                [format!("{x}"), format!("{}", x * 1000.0), format!("{}", i / 100)]
            })
            .chain(["1e3", "-1e3", "0.999", "1.0001"].map(String::from))
            .collect();
        for (lo, hi) in cases {
            let expr = number_expr(lo, hi).unwrap();
            let re = to_regex(&expr);
            let mut admitted = 0;
            for s in &samples {
                if re.is_match(s) {
                    admitted += 1;
                    let v: f64 = s.parse().unwrap();
                    let above = lo.is_none_or(|l| if l.excl { v > l.v } else { v >= l.v });
                    let below = hi.is_none_or(|h| if h.excl { v < h.v } else { v <= h.v });
                    assert!(above && below, "{s} admitted by {lo:?}..{hi:?}: {expr}");
                }
            }
            assert!(admitted > 3, "{lo:?}..{hi:?} admits almost nothing: {expr}");
        }
        // Fractions, not only whole numbers, where the range has room for them.
        assert!(to_regex(&number_expr(b(0.0, false), b(2.0, false)).unwrap()).is_match("1.25"));
        assert!(to_regex(&number_expr(b(0.0, true), b(1.0, true)).unwrap()).is_match("0.5"));
    }

    #[test]
    fn bounded_schemas_become_placeholders_in_every_position() {
        let mut schema = serde_json::json!({"type": "object", "properties": {
            "r": {"type": "number", "minimum": 0},
            "n": {"type": ["integer", "null"], "maximum": 9},
            "list": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 3}},
            "free": {"type": "number"}},
            "$defs": {"d": {"type": "integer", "exclusiveMinimum": 0}}});
        let mut table = Vec::new();
        rewrite_numbers(&mut schema, &mut table).unwrap();
        assert_eq!(table.len(), 4, "{table:?}");
        assert_eq!(schema["properties"]["r"]["const"], "llb-num-0");
        assert_eq!(schema["properties"]["n"]["anyOf"][1]["type"], "null");
        assert_eq!(schema["properties"]["list"]["items"]["const"], "llb-num-2");
        assert_eq!(schema["properties"]["free"], serde_json::json!({"type": "number"}));
        let mut empty = serde_json::json!({"type": "integer", "minimum": 3, "maximum": 2});
        let err = rewrite_numbers(&mut empty, &mut table).unwrap_err();
        assert!(err.contains("minimum/maximum"), "{err}");
    }

    #[test]
    fn bounded_raw_strings_have_no_blank_edges_and_respect_lengths() {
        let re = to_regex(
            &bounded_string_content(&serde_json::json!({"type": "string", "minLength": 2, "maxLength": 5}), "[^<]")
                .unwrap(),
        );
        for (s, ok) in [("ab", true), ("a b c", true), ("a", false), ("abcdef", false), (" ab", false), ("a<b", false)]
        {
            assert_eq!(re.is_match(s), ok, "{s:?}");
        }
        let date = to_regex(
            &bounded_string_content(&serde_json::json!({"type": "string", "format": "date"}), "[^<]").unwrap(),
        );
        assert!(date.is_match("2024-02-29") && !date.is_match("2024-13-01"));
    }

    /// llama.cpp's parser reads a raw-text value as a string whenever its schema admits one
    /// anywhere: the value is then one of the strings the schema admits, or free text when an
    /// alternative admits any string.
    #[test]
    fn raw_text_values_are_the_strings_their_schema_admits() {
        let free = r#"([^<] | "<" [^/])*"#;
        let j = |v: serde_json::Value| raw_text_alternatives(&v, free).map(|g| to_regex(&g));
        let cases: [(serde_json::Value, &[&str], &[&str]); 7] = [
            // A mixed enum: "1" and "null" are strings the parser would return, not 1 and null.
            (serde_json::json!({"enum": ["a", 1, null]}), &["a"], &["1", "null", "b"]),
            (serde_json::json!({"type": ["string", "null"], "enum": ["a", null]}), &["a"], &["null"]),
            (
                serde_json::json!({"anyOf": [{"type": "integer"}, {"type": "string", "enum": ["x", "y"]}]}),
                &["x", "y"],
                &["5"],
            ),
            (
                serde_json::json!({"oneOf": [{"const": "on"}, {"type": "string", "format": "date"}]}),
                &["on", "2024-02-29"],
                &["off"],
            ),
            (serde_json::json!({"type": ["string", "integer"], "maxLength": 3}), &["abc", "12"], &["abcd"]),
            (serde_json::json!({"type": "string", "enum": ["en", "fr"]}), &["en", "fr"], &["de"]),
            // The parser drops one blank at each end: a member with a blank end gets one more.
            (serde_json::json!({"enum": [" de", "x ", " "]}), &["  de", "x  ", "   "], &[" de", "x ", " "]),
        ];
        for (schema, ok, bad) in cases {
            let re = j(schema.clone()).unwrap_or_else(|| panic!("{schema}: left free"));
            for s in ok {
                assert!(re.is_match(s), "{schema}: {s:?} refused");
            }
            for s in bad {
                assert!(!re.is_match(s), "{schema}: {s:?} admitted");
            }
        }
        // Any string is valid: free text stays.
        for schema in [
            serde_json::json!({"type": ["integer", "string"]}),
            serde_json::json!({"anyOf": [{"type": "integer"}, {"type": "string"}]}),
            serde_json::json!({"type": "string"}),
            serde_json::json!({"$ref": "#/$defs/s"}),
        ] {
            assert!(j(schema.clone()).is_none(), "{schema}");
        }
    }

    /// Gemma 4: an object schema without properties is any dict, never any value (a walk wrote
    /// `free:[true]` for `{"type": "object"}`); untyped values stay any value.
    #[test]
    fn gemma4_objects_without_properties_are_dicts() {
        let mut g =
            Gemma4 { rules: Vec::new(), prefix: "p".into(), root: serde_json::Value::Null, refs: HashMap::new() };
        assert_eq!(g.value(&serde_json::json!({"type": "object"}), "a"), "gemma4-dict");
        assert_eq!(g.value(&serde_json::json!({"type": "object", "additionalProperties": true}), "a"), "gemma4-dict");
        assert_eq!(g.value(&serde_json::json!({"type": "object", "additionalProperties": false}), "a"), r#"("{" "}")"#);
        assert_eq!(g.value(&serde_json::json!({"description": "anything"}), "a"), "gemma4-value");
    }

    #[test]
    fn pattern_class_escapes_become_classes() {
        assert_eq!(expand_class_escapes(r"^I?\d+[:|-]\d+(?:;\d+)*$"), r"^I?[0-9]+[:|-][0-9]+(?:;[0-9]+)*$");
        assert_eq!(expand_class_escapes(r"[\w.]+\s\."), r"[a-zA-Z0-9_.]+[ \t\n\r]\.");
    }
}
