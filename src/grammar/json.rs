//! JSON inside any grammar: a grammar admits only JSON text that parsers accept (issue 35).
//!
//! llama.cpp writes JSON values two ways: its JSON-schema converter
//! (common/json-schema-to-grammar.cpp, `char` and `number`), used by `response_format` and by
//! the tool-call grammars' argument schemas, and its PEG builder (common/peg-parser.cpp, the
//! string content of call envelopes). Both admitted text that the templates' parsers
//! (nlohmann::json, llama.cpp's PEG parser) and standard JSON readers (serde_json, Python's
//! json, Jackson) refuse, so a grammar-conforming reply could come back unparsed:
//! - a `\u` escape of a UTF-16 surrogate on its own (`"\uDBAB"`): a high surrogate (D800–DBFF)
//!   is admitted only when a `\u` low surrogate (DC00–DFFF) follows it, a low one never alone;
//! - `\ ` (backslash, space) in PEG strings, whose escape class is `["\\/ bfnrt]`;
//! - raw control characters (U+0000–U+001F) and DEL in PEG strings (`[^"\\]`);
//! - exponents of up to 16 digits (`1e9999999`), which overflow a double (nlohmann and
//!   serde_json refuse them, Python reads `inf`): at most 2 digits, so `|x| < 1e116`;
//! - exponents of up to 64 digits in the PEG builder's own number (`json_number`, Gemma 4's
//!   untyped values, whose text the parser copies into the arguments as it is): at most 2
//!   digits, so `|x| < 1e165`.
//!
//! [`parsable`] rewrites the grammar text itself, in one place: [`super::Grammar::build`], so
//! every grammar llb runs (strict calls, the lazy `auto` grammar, `response_format`) gets it on
//! both engines. The unit tests prove it token-wise and by walking the rewritten rules with
//! random allowed tokens, every finished walk read back by serde_json.

/// The `\u` escape as both of llama.cpp's string rules write it (after the backslash).
const ANY_U_ESCAPE: &str = r#""u" [0-9a-fA-F]{4}"#;

/// A `\u` escape that is not a surrogate, or a high surrogate followed by a `\u` low one.
const SAFE_U_ESCAPE: &str = concat!(
    r#""u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}"#,
    r#" | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2} )"#
);

/// The PEG string escapes (`\\/ bfnrt` after the delimiter): the space is not an escape.
const PEG_ESCAPES: &str = r#"\\/ bfnrt]"#;
const JSON_ESCAPES: &str = r#"\\/bfnrt]"#;

/// The PEG string's content class, and the one without control characters (what llama.cpp's
/// JSON-schema converter uses for its own strings).
const PEG_CONTENT: &str = r#"[^"\\]"#;
const JSON_CONTENT: &str = r#"[^"\\\x7F\x00-\x1F]"#;

/// The JSON-schema converter's exponent (16 digits), and one no double overflows on.
const LONG_EXPONENT: &str = r#"([eE] [-+]? integral-part)?"#;
const SHORT_EXPONENT: &str = r#"([eE] [-+]? [0-9]{1,2})?"#;

/// The PEG builder's exponent (`json_number`: 64 digits), and one no double overflows on.
const PEG_LONG_EXPONENT: &str = r#"(("e" | "E") [+-]? [0-9]{1,64})?"#;
const PEG_SHORT_EXPONENT: &str = r#"(("e" | "E") [+-]? [0-9]{1,2})?"#;

/// `gbnf` with every JSON string and number rule admitting only what JSON parsers accept.
/// Text that holds none of llama.cpp's JSON rules is returned as it is.
pub fn parsable(gbnf: &str) -> String {
    gbnf.replace(ANY_U_ESCAPE, SAFE_U_ESCAPE)
        .replace(PEG_ESCAPES, JSON_ESCAPES)
        .replace(PEG_CONTENT, JSON_CONTENT)
        .replace(LONG_EXPONENT, SHORT_EXPONENT)
        .replace(PEG_LONG_EXPONENT, PEG_SHORT_EXPONENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::engine::{Constraint, Engine};
    use crate::sys::llama_token;
    use std::sync::Arc;

    /// llama.cpp's JSON-schema primitives at the pin (json-schema-to-grammar.cpp
    /// PRIMITIVE_RULES), as its converter writes them for an untyped value.
    const SCHEMA_VALUE: &str = r#"root ::= value
value ::= object | array | string | number | boolean | null
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
string ::= "\"" char* "\"" space
char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part ::= [0-9]{1,16}
boolean ::= ("true" | "false") space
null ::= "null" space
space ::= | " " | "\n"{1,2} [ \t]{0,20}
"#;

    /// llama.cpp's PEG string (peg-parser.cpp, `common_peg_string_parser` to GBNF) in a call
    /// envelope's shape.
    const PEG_STRING: &str = r#"root ::= "{\"q\": \"" ( [^"\\] | "\\" ( ["\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\"}"
"#;

    /// llama.cpp's PEG number (peg-parser.cpp `json_number` to GBNF, as Gemma 4's grammar holds
    /// it).
    const PEG_NUMBER: &str = r#"root ::= json-number
json-number ::= "-"? ("0" | [1-9] [0-9]{0,64}) ("." [0-9]{1,64})? (("e" | "E") [+-]? [0-9]{1,64})? space
space ::= | " " | "\n"{1,2} [ \t]{0,20}
"#;

    /// Tokens that steer a walk into the corners: surrogate escapes, other escapes, long
    /// exponents, closers; plus every single byte, and an end-of-generation token (the last).
    const WORDS: [&str; 22] = [
        "\\uDBAB", "\\uD83D", "\\uDE00", "\\uDC00", "\\u00e9", "\\u0000", "\\ ", "\\/", "\\n", "\\u", "\\uD",
        "\\uDBAB\"", "e99", "E+16", "e1657", "1e", "-0", "0.5", "\"}", "\"]", "\":", "true",
    ];

    fn engine() -> Arc<Engine> {
        crate::grammar::engine::byte_engine(&WORDS)
    }

    fn constraint(e: &Arc<Engine>, gbnf: &str) -> Constraint {
        let (m, _) = e.compile(&parsable(gbnf), &|_| None).unwrap();
        Constraint::new(e.clone(), m, None)
    }

    fn feed(c: &mut Constraint, e: &Engine, text: &str) {
        for &b in text.as_bytes() {
            assert!(c.allows(b as llama_token).unwrap(), "{text:?}: byte {:?} refused", b as char);
            c.accept(b as llama_token, &[b]).unwrap();
        }
        let _ = e;
    }

    /// The single bytes the grammar admits next, as text.
    fn next_bytes(c: &mut Constraint) -> String {
        let mask = c.mask().unwrap().unwrap();
        (0..=255u8).filter(|&b| mask.is_allowed(b as u32)).map(|b| b as char).collect()
    }

    fn word(e: &Engine, w: &str) -> llama_token {
        (0..e.trie().vocab_size() as u32).find(|&t| e.trie().token(t) == w.as_bytes()).unwrap() as llama_token
    }

    #[test]
    fn a_lone_surrogate_escape_is_refused_token_by_token() {
        let e = engine();
        for (g, open) in [(SCHEMA_VALUE, "\""), (PEG_STRING, "{\"q\": \"")] {
            let mut c = constraint(&e, g);
            feed(&mut c, &e, open);
            // A high surrogate: only its low half may follow, nothing else.
            feed(&mut c, &e, "\\uDBAB");
            assert_eq!(next_bytes(&mut c), "\\", "{g}");
            assert!(!c.allows(word(&e, "\\uDBAB")).unwrap() && !c.allows(word(&e, "\"}")).unwrap());
            feed(&mut c, &e, "\\u");
            assert_eq!(next_bytes(&mut c), "Dd");
            feed(&mut c, &e, "D");
            assert_eq!(next_bytes(&mut c), "CDEFcdef");
            feed(&mut c, &e, "C00");
            // A low surrogate never opens an escape; the token that writes one is refused.
            let mut c = constraint(&e, g);
            feed(&mut c, &e, open);
            feed(&mut c, &e, "\\uD");
            assert_eq!(next_bytes(&mut c), "0123456789ABab");
            let mut c = constraint(&e, g);
            feed(&mut c, &e, open);
            for w in ["\\uDC00", "\\uDE00", "\\uDBAB\""] {
                assert!(!c.allows(word(&e, w)).unwrap(), "{w} admitted");
            }
            // (llama.cpp's JSON-schema strings never write `\/`: a subset of JSON.)
            for w in ["\\uD83D", "\\u00e9", "\\n"] {
                assert!(c.allows(word(&e, w)).unwrap(), "{w} refused");
            }
            assert!(!c.allows(word(&e, "\\ ")).unwrap(), "backslash-space admitted");
            assert!(!c.allows(0).unwrap() && !c.allows(0x1f).unwrap(), "a raw control character admitted");
        }
    }

    /// A reproducible stream of pseudo-random numbers.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n.max(1)
        }
    }

    /// Walks `gbnf` with random allowed tokens: mostly the steering words (one in three steps
    /// a random allowed byte), ending when the grammar can end and a coin says so. The text,
    /// or None when 400 steps did not finish it.
    fn walk(e: &Arc<Engine>, gbnf: &str, rng: &mut Lcg) -> Option<String> {
        let mut c = constraint(e, gbnf);
        let eos = e.trie().vocab_size() as llama_token - 1;
        let mut out = Vec::new();
        for step in 0..400 {
            if c.allows(eos).unwrap() && rng.below(3) == 0 {
                return Some(String::from_utf8(out).unwrap());
            }
            let mask = c.mask().unwrap().unwrap();
            let allowed: Vec<u32> = (0..eos as u32).filter(|&t| mask.is_allowed(t)).collect();
            if allowed.is_empty() {
                return Some(String::from_utf8(out).unwrap());
            }
            let words: Vec<u32> = allowed.iter().copied().filter(|&t| t > 255).collect();
            // Later steps prefer closers, so most walks end.
            let closers: Vec<u32> = allowed.iter().copied().filter(|&t| b"\"}]0".contains(&(t as u8)) && t < 256).collect();
            let pick = match rng.below(3) {
                0 if step > 40 && !closers.is_empty() => closers[rng.below(closers.len())],
                1 if !words.is_empty() => words[rng.below(words.len())],
                _ => allowed[rng.below(allowed.len())],
            };
            let piece = e.trie().token(pick).to_vec();
            c.accept(pick as llama_token, &piece).unwrap();
            out.extend(piece);
        }
        None
    }

    #[test]
    fn random_walks_of_every_json_rule_parse_as_json() {
        let e = engine();
        let mut rng = Lcg(35);
        let mut finished = 0;
        let mut escapes = 0;
        for (g, n) in [(SCHEMA_VALUE, 150), (PEG_STRING, 150), (PEG_NUMBER, 60)] {
            for _ in 0..n {
                let Some(text) = walk(&e, g, &mut rng) else { continue };
                finished += 1;
                escapes += text.matches("\\u").count();
                let v: Result<serde_json::Value, _> = serde_json::from_str(&text);
                assert!(v.is_ok(), "{text:?}: {}", v.unwrap_err());
            }
        }
        // The walks reached the corners they exist for.
        assert!(finished >= 250 && escapes >= 100, "{finished} walks finished, {escapes} \\u escapes");
    }

    #[test]
    fn text_without_llama_cpp_json_rules_is_kept() {
        let g = "root ::= \"<tool_call>\" [^<]* \"u\" [0-9]{4}\n";
        assert_eq!(parsable(g), g);
        assert!(parsable(SCHEMA_VALUE).contains(SHORT_EXPONENT) && !parsable(SCHEMA_VALUE).contains(ANY_U_ESCAPE));
        assert!(parsable(PEG_NUMBER).contains(PEG_SHORT_EXPONENT) && !parsable(PEG_NUMBER).contains(PEG_LONG_EXPONENT));
    }
}
