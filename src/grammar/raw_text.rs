//! Raw text inside any grammar: text up to a delimiter admits only what the parser reads back
//! whole (issue 35).
//!
//! The XML-parameter call formats (Qwen3-Coder, Qwen3.5, Nemotron-3-Nano, Seed-OSS, GLM-4.6,
//! MiniMax-M2, DeepSeek-V3.2's DSML) write a string argument as raw text up to a closing tag,
//! which llama.cpp's parser reads with its PEG `until`: up to the first occurrence of the tag.
//! llama.cpp writes that text in GBNF as `([^<] | "<" [^/] | "</" [^p] | ...)*`
//! (common/peg-parser.cpp `gbnf_excluding_pattern`), which also admits the tag right after a
//! partial match: `"<" [^/]` takes `<<`, so `<</parameter>\n` followed by more text is one
//! value to the grammar, and the parser ends the value at that tag and fails on the rest (the
//! whole call lost: a random walk over Qwen3-Coder's strict grammar met
//! `STDERR<</parameter>\n</arg_value>…` within 30 walks).
//!
//! [`exact`] replaces each such pattern of one delimiter by [`super::gbnf::until`], which admits
//! exactly the texts the parser reads back whole. Like [`super::json::parsable`] it runs once,
//! in [`super::Grammar::build`], so every grammar llb runs (strict calls, the lazy `auto`
//! grammar, on both engines) gets it. Patterns of several delimiters are left as they are.

use super::gbnf::{group_end, parse, skip_quoted, until, Item, Term};

/// `gbnf` with every llama.cpp "text up to one delimiter" pattern made exact. Text without one
/// is returned as it is.
pub fn exact(gbnf: &str) -> String {
    let b = gbnf.as_bytes();
    let mut out = String::with_capacity(gbnf.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'"' => i = skip_quoted(b, i, b'"'),
            b'[' => i = skip_quoted(b, i, b']'),
            b'(' if gbnf[i..].starts_with("([^") => {
                let end = group_end(b, i).filter(|&j| b.get(j + 1) == Some(&b'*')).map(|j| j + 2);
                match end.and_then(|end| Some((end, delimiter(&gbnf[i..end])?))) {
                    Some((end, d)) => {
                        out.push_str(&gbnf[copied..i]);
                        out.push_str(&format!("({})", until(&d)));
                        (i, copied) = (end, end);
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    out.push_str(&gbnf[copied..]);
    out
}

/// The delimiter of llama.cpp's pattern `group` (`([^d0] | "d0" [^d1] | "d0d1" [^d2] ...)*`):
/// alternative k is the first k characters and a class excluding the next one. None for any
/// other group.
fn delimiter(group: &str) -> Option<String> {
    let g = parse(&format!("root ::= {}", group.strip_suffix('*')?)).ok()?;
    let [seq] = g.rules.get("root")?.as_slice() else { return None };
    let [item] = seq.as_slice() else { return None };
    let Term::Group(alts) = &item.term else { return None };
    let mut d: Vec<u32> = Vec::new();
    for (k, alt) in alts.iter().enumerate() {
        let once = |i: &Item| (i.min, i.max) == (1, Some(1));
        let (prefix, class) = match alt.as_slice() {
            [c] if k == 0 && once(c) => (&[][..], &c.term),
            [p, c] if k > 0 && once(p) && once(c) => match &p.term {
                Term::Lit(l) if l.len() == k => (l.as_slice(), &c.term),
                _ => return None,
            },
            _ => return None,
        };
        match class {
            Term::Class { negated: true, ranges } if ranges.len() == 1 && ranges[0].0 == ranges[0].1 && prefix == d => {
                d.push(ranges[0].0)
            }
            _ => return None,
        }
    }
    d.iter().map(|&c| char::from_u32(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::engine::{Constraint, Engine};
    use crate::grammar::gbnf::{literal, llama_until};
    use crate::sys::llama_token;
    use std::sync::Arc;

    fn engine() -> Arc<Engine> {
        crate::grammar::engine::byte_engine(&[])
    }

    /// Whether the grammar admits `text` whole (every byte, then the end).
    fn admits(e: &Arc<Engine>, gbnf: &str, text: &str) -> bool {
        let (m, _) = e.compile(gbnf, &|_| None).unwrap();
        let mut c = Constraint::new(e.clone(), m, None);
        for &b in text.as_bytes() {
            if !c.allows(b as llama_token).unwrap() {
                return false;
            }
            c.accept(b as llama_token, &[b]).unwrap();
        }
        c.allows(e.trie().vocab_size() as llama_token - 1).unwrap()
    }

    /// Every text over `alphabet` of at most `len` characters.
    fn texts(alphabet: &[char], len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..len {
            last = last.iter().flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}"))).collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// The grammar "text, then the delimiter" admits exactly the texts in which the delimiter,
    /// written after them, first occurs at the end: what llama.cpp's `until` reads back whole.
    /// Every text of up to 4,000 or so over the delimiter's own characters and one other (5 to 11
    /// characters long).
    #[test]
    fn until_admits_exactly_what_the_parser_reads_back() {
        let e = engine();
        for d in ["</p>\n", "<a>", "ab", "<｜x｜>", "]"] {
            let exact = format!("root ::= {} {}\n", until(d), literal(d));
            let llama = format!("root ::= {} {}\n", llama_until(&d.chars().collect::<Vec<_>>()), literal(d));
            let mut alphabet: Vec<char> = d.chars().collect();
            alphabet.dedup();
            alphabet.push('x');
            let (mut admitted, mut llama_wrong) = (0, 0);
            let len = (1..12).take_while(|&n| alphabet.len().pow(n as u32) <= 4000).last().unwrap();
            for t in texts(&alphabet, len) {
                let whole = format!("{t}{d}");
                let reads_back = whole.find(d) == Some(t.len());
                assert_eq!(admits(&e, &exact, &whole), reads_back, "{d:?}: {t:?}");
                admitted += reads_back as usize;
                llama_wrong += (admits(&e, &llama, &whole) != reads_back) as usize;
            }
            assert!(admitted > len, "{d:?}: {admitted}");
            // llama.cpp's pattern gets some of them wrong (a delimiter of two or more).
            assert_eq!(llama_wrong > 0, d.chars().count() > 1, "{d:?}: {llama_wrong}");
        }
    }

    #[test]
    fn llama_cpp_patterns_of_one_delimiter_are_made_exact() {
        // As Qwen3-Coder's strict grammar holds it, and DSML's inline one (a class by code).
        let qwen = r#"until-suffix ::= ([^<] | "<" [^/] | "</" [^p] | "</p" [^>] | "</p>" [^\n])*"#;
        let dsml = r#"arg ::= "x" ([^<] | "<" [^/] | "</" [^\uFF5C] | "</｜" [^>])* "</｜>""#;
        assert_eq!(exact(qwen), format!("until-suffix ::= ({})", until("</p>\n")));
        assert_eq!(exact(dsml), format!(r#"arg ::= "x" ({}) "</｜>""#, until("</｜>")));
        // Several delimiters, other exclusion groups and text without any: as they are.
        for kept in [
            r#"r ::= ([^<] | "<" [^/a])*"#,
            r#"r ::= ([^"\\] | "\\" ["\\/bfnrt])* "x""#,
            r#"r ::= ([^<] | "</" [^p])*"#,
            "r ::= \"([^<] | \\\"<\\\" [^/])*\"",
        ] {
            assert_eq!(exact(kept), kept);
        }
        assert_eq!(exact(&format!("{qwen}\n{qwen}\n")).matches(&until("</p>\n")).count(), 2);
        // Past other groups, and inside one.
        let after = format!("a ::= ([^x] | \"y\")\nb ::= (\"z\" {})\n", &qwen["until-suffix ::= ".len()..]);
        assert_eq!(exact(&after), format!("a ::= ([^x] | \"y\")\nb ::= (\"z\" ({}))\n", until("</p>\n")));
    }
}
