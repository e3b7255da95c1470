//! GBNF → llguidance's Lark dialect, keeping the language and giving the engine large lexemes.
//!
//! llguidance is fast when most of the work is in its lexer (a lazily built DFA walked along the
//! token trie) and its Earley parser runs only at lexeme boundaries. GBNF has no lexer: a literal
//! is a sequence of characters. So every rule that is *regular* (reaches no recursion and no
//! token reference) becomes a terminal, and in the other rules every run of consecutive regular
//! items becomes one terminal. A grammar without recursion (the usual tool-call grammar with
//! typed arguments) is then one regular expression.
//!
//! llguidance's lexemes are greedy: a lexeme ends only where the next byte cannot continue it.
//! Inside one terminal that is exact regular-expression matching; between two lexemes it is not
//! (`"}" space` then `"\n</x>"`: the space takes the newline and `</x>` can never come). So
//! recursion is unrolled to [`MAX_DEPTH`] levels first ([`unroll`]: JSON values nested deeper than
//! that are refused, as OpenAI's strict mode bounds nesting too), and every grammar without token
//! references becomes one regular expression, matched exactly. Token references (`<[id]>`) stay
//! rule-level lexemes; no text lexeme can run into one, since a token reference is never text.

use super::gbnf::{Alts, Grammar, Item, Seq, Term, TokenRef};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// Converts a parsed GBNF grammar into Lark text for llguidance. `token_id` resolves a `<text>`
/// token reference to its id (None: not one token of this vocabulary, an error).
pub fn convert(g: &Grammar, token_id: &dyn Fn(&str) -> Option<u32>) -> Result<String, String> {
    let unrolled = unroll(g);
    let g = unrolled.as_ref().unwrap_or(g);
    let mut c = Converter { g, token_id, regular: HashMap::new(), names: HashMap::new(), out: String::new(), aux: 0 };
    for (i, n) in g.order.iter().enumerate() {
        c.names.insert(n.as_str(), i);
    }
    let reachable = c.reachable();
    for n in &reachable {
        c.is_regular(n, &mut Vec::new());
    }
    let mut body = String::new();
    for n in &reachable {
        let alts = &g.rules[*n];
        if c.regular[*n] {
            let rx = c.regex_alts(alts);
            writeln!(body, "{}: {}", c.terminal(n), rx).unwrap();
        } else {
            let rule = c.rule_alts(alts, &mut body)?;
            writeln!(body, "{}: {}", c.rule(n), rule).unwrap();
        }
    }
    let root = if c.regular["root"] { c.terminal("root") } else { c.rule("root") };
    Ok(format!("%llguidance {{}}\nstart: {root}\n{}{body}", c.out))
}

/// How deep recursive rules are unrolled: JSON nested deeper than this (objects and arrays inside
/// an argument) is refused by the grammar.
pub const MAX_DEPTH: usize = 10;

/// The recursive rules of `g` (those on a cycle of references), by Tarjan's algorithm.
fn recursive_rules(g: &Grammar) -> HashSet<String> {
    struct T<'a> {
        g: &'a Grammar,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: HashSet<&'a str>,
        out: HashSet<String>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        let g: &'a Grammar = t.g;
        let refs = super::gbnf::refs(&g.rules[v]);
        let self_loop = refs.contains(&v);
        for w in refs {
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w);
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 || self_loop {
                t.out.extend(scc.iter().map(|s| s.to_string()));
            }
        }
    }
    let mut t = T { g, index: HashMap::new(), low: HashMap::new(), stack: Vec::new(), on: HashSet::new(), out: HashSet::new() };
    for n in &g.order {
        if !t.index.contains_key(n.as_str()) {
            visit(&mut t, n);
        }
    }
    t.out
}

/// `g` with its recursive rules copied [`MAX_DEPTH`]+1 times (`r@0` .. `r@D`), each copy
/// referring to the next level; past the last level a reference matches nothing. None when `g`
/// has no recursion.
fn unroll(g: &Grammar) -> Option<Grammar> {
    let rec = recursive_rules(g);
    if rec.is_empty() {
        return None;
    }
    let level = |r: &str, k: usize| format!("{r}@{k}");
    let mut out = Grammar::default();
    let add = |out: &mut Grammar, name: String, alts: Alts| {
        out.order.push(name.clone());
        out.rules.insert(name, alts);
    };
    for n in &g.order {
        if rec.contains(n) {
            for k in 0..=MAX_DEPTH {
                let alts = rename(&g.rules[n], &|r| match rec.contains(r) {
                    true if k < MAX_DEPTH => Some(level(r, k + 1)),
                    true => None,
                    false => Some(r.to_string()),
                });
                add(&mut out, level(n, k), alts);
            }
        } else {
            let alts = rename(&g.rules[n], &|r| Some(if rec.contains(r) { level(r, 0) } else { r.to_string() }));
            add(&mut out, n.clone(), alts);
        }
    }
    if rec.contains("root") {
        add(&mut out, "root".into(), vec![vec![Item { term: Term::Rule(level("root", 0)), min: 1, max: Some(1) }]]);
    }
    Some(out)
}

/// `alts` with every rule reference renamed by `to` (None: a reference past the last level,
/// which matches nothing: the empty character class).
fn rename(alts: &Alts, to: &dyn Fn(&str) -> Option<String>) -> Alts {
    alts.iter()
        .map(|seq| {
            seq.iter()
                .map(|item| {
                    let term = match &item.term {
                        Term::Rule(r) => match to(r) {
                            Some(n) => Term::Rule(n),
                            None => Term::Class { negated: false, ranges: Vec::new() },
                        },
                        Term::Group(g) => Term::Group(rename(g, to)),
                        t => t.clone(),
                    };
                    Item { term, min: item.min, max: item.max }
                })
                .collect()
        })
        .collect()
}

struct Converter<'a> {
    g: &'a Grammar,
    token_id: &'a dyn Fn(&str) -> Option<u32>,
    /// Rule name → whether it is regular (computed on demand).
    regular: HashMap<&'a str, bool>,
    names: HashMap<&'a str, usize>,
    /// Auxiliary terminals (fused runs).
    out: String,
    aux: usize,
}

impl<'a> Converter<'a> {
    /// The rules `root` reaches, root first.
    fn reachable(&self) -> Vec<&'a str> {
        let g: &'a Grammar = self.g;
        let mut seen = vec!["root"];
        let mut i = 0;
        while i < seen.len() {
            for r in super::gbnf::refs(&g.rules[seen[i]]) {
                if !seen.contains(&r) {
                    seen.push(r);
                }
            }
            i += 1;
        }
        seen
    }

    fn terminal(&self, n: &str) -> String {
        format!("T{}_{}", self.names[n], n.to_ascii_uppercase().replace(|c: char| !c.is_ascii_alphanumeric(), "_"))
    }

    fn rule(&self, n: &str) -> String {
        format!("r{}_{}", self.names[n], n.to_ascii_lowercase().replace(|c: char| !c.is_ascii_alphanumeric(), "_"))
    }

    /// Whether rule `n` reaches neither recursion nor a token reference. `path`: the rules being
    /// decided above this one (meeting one again is recursion).
    fn is_regular(&mut self, n: &'a str, path: &mut Vec<&'a str>) -> bool {
        if let Some(&r) = self.regular.get(n) {
            return r;
        }
        if path.contains(&n) {
            return false;
        }
        path.push(n);
        let g: &'a Grammar = self.g;
        let alts = &g.rules[n];
        let mut ok = !has_token(alts);
        for r in super::gbnf::refs(alts) {
            // Decide every reference (each result is memoised), even after a failure.
            ok &= self.is_regular(r, path);
        }
        path.pop();
        // A rule found irregular only through a cycle back to an ancestor is part of that cycle:
        // irregular for good. One that is regular is regular whatever the path.
        self.regular.insert(n, ok);
        ok
    }

    fn item_regular(&self, item: &Item) -> bool {
        term_regular(&item.term, &self.regular)
    }

    // --- terminals: regular expressions over terminal names --------------------------------

    /// A rule body or group content: `a | b` (the caller adds parentheses where needed).
    fn regex_alts(&self, alts: &Alts) -> String {
        alts.iter().map(|s| self.regex_seq(s)).collect::<Vec<_>>().join(" | ")
    }

    fn regex_seq(&self, seq: &[Item]) -> String {
        if seq.is_empty() {
            return "\"\"".into();
        }
        seq.iter().map(|i| self.regex_item(i)).collect::<Vec<_>>().join(" ")
    }

    fn regex_item(&self, item: &Item) -> String {
        let atom = match &item.term {
            Term::Lit(chars) if chars.is_empty() => "\"\"".into(),
            Term::Lit(chars) => format!("/{}/", chars.iter().map(|&c| escape(c)).collect::<String>()),
            Term::Class { negated, ranges } => class(*negated, ranges),
            Term::Any => "/(?s:.)/".into(),
            Term::Rule(r) => self.terminal(r),
            Term::Group(alts) => format!("({})", self.regex_alts(alts)),
            Term::Token { .. } => unreachable!("token references are never regular"),
        };
        with_repeat(atom, item)
    }

    // --- rules: sequences whose regular runs become terminals -------------------------------

    fn rule_alts(&mut self, alts: &Alts, body: &mut String) -> Result<String, String> {
        let mut parts = Vec::with_capacity(alts.len());
        for seq in alts {
            parts.push(self.rule_seq(seq, body)?);
        }
        Ok(parts.join(" | "))
    }

    fn rule_seq(&mut self, seq: &Seq, body: &mut String) -> Result<String, String> {
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < seq.len() {
            if self.item_regular(&seq[i]) {
                let start = i;
                while i < seq.len() && self.item_regular(&seq[i]) {
                    i += 1;
                }
                out.push(self.fused(&seq[start..i]));
                continue;
            }
            out.push(self.rule_item(&seq[i], body)?);
            i += 1;
        }
        Ok(if out.is_empty() { "\"\"".into() } else { out.join(" ") })
    }

    /// One terminal for a run of regular items (a single terminal reference stays itself).
    fn fused(&mut self, run: &[Item]) -> String {
        if let [Item { term: Term::Rule(r), min: 1, max: Some(1) }] = run {
            return self.terminal(r);
        }
        self.aux += 1;
        let name = format!("TX{}", self.aux);
        writeln!(self.out, "{name}: {}", self.regex_seq(run)).unwrap();
        name
    }

    fn rule_item(&mut self, item: &Item, body: &mut String) -> Result<String, String> {
        let atom = match &item.term {
            Term::Rule(r) => self.rule(r),
            Term::Group(alts) => format!("({})", self.rule_alts(alts, body)?),
            Term::Token { token, negated } => {
                let id = match token {
                    TokenRef::Id(id) => *id,
                    TokenRef::Text(t) => (self.token_id)(t).ok_or_else(|| format!("invalid token '{t}'"))?,
                };
                format!("<[{}{id}]>", if *negated { "^" } else { "" })
            }
            _ => unreachable!("literals, classes and `.` are regular"),
        };
        Ok(with_repeat(atom, item))
    }
}

fn has_token(alts: &Alts) -> bool {
    alts.iter().flatten().any(|i| match &i.term {
        Term::Token { .. } => true,
        Term::Group(g) => has_token(g),
        _ => false,
    })
}

fn term_regular(term: &Term, regular: &HashMap<&str, bool>) -> bool {
    match term {
        Term::Lit(_) | Term::Class { .. } | Term::Any => true,
        Term::Token { .. } => false,
        Term::Rule(r) => regular.get(r.as_str()).copied().unwrap_or(false),
        Term::Group(alts) => alts.iter().flatten().all(|i| term_regular(&i.term, regular)),
    }
}

fn with_repeat(atom: String, item: &Item) -> String {
    match (item.min, item.max) {
        (1, Some(1)) => atom,
        (0, Some(1)) => format!("{atom}?"),
        (0, None) => format!("{atom}*"),
        (1, None) => format!("{atom}+"),
        (m, None) => format!("{atom}{{{m},}}"),
        (m, Some(n)) if m == n => format!("{atom}{{{m}}}"),
        (m, Some(n)) => format!("{atom}{{{m},{n}}}"),
    }
}

/// A code point inside a Lark regex (`/.../`): alphanumerics as they are, anything else as
/// `\x{..}` (no `/`, no newline, no class or group syntax can leak).
fn escape(c: u32) -> String {
    match char::from_u32(c) {
        Some(ch) if ch.is_ascii_alphanumeric() => ch.to_string(),
        _ => format!("\\x{{{c:X}}}"),
    }
}

fn class(negated: bool, ranges: &[(u32, u32)]) -> String {
    if ranges.is_empty() {
        // `[]` matches nothing; `[^]` any character.
        return if negated { "/(?s:.)/".into() } else { "/[^\\x{0}-\\x{10FFFF}]/".into() };
    }
    let mut s = String::from(if negated { "/[^" } else { "/[" });
    for &(lo, hi) in ranges {
        s.push_str(&escape(lo));
        if hi != lo {
            s.push('-');
            s.push_str(&escape(hi));
        }
    }
    s.push_str("]/");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::gbnf::parse;

    fn lark(gbnf: &str) -> String {
        convert(&parse(gbnf).unwrap(), &|t| (t == "<|x|>").then_some(5)).unwrap()
    }

    #[test]
    fn a_grammar_without_recursion_is_one_terminal() {
        let l = lark("root ::= \"a\" x? \nx ::= [0-9]{1,3} | \"-\"\n");
        assert!(l.contains("start: T0_ROOT\n"), "{l}");
        assert!(l.contains("T0_ROOT: /a/ T1_X?\n"), "{l}");
        assert!(l.contains("T1_X: /[0-9]/{1,3} | /\\x{2D}/\n"), "{l}");
    }

    #[test]
    fn recursion_is_unrolled_into_one_terminal() {
        let l = lark("root ::= \"[\" space value \"]\" \nvalue ::= \"1\" | \"[\" value \"]\"\nspace ::= \" \"?\n");
        assert!(l.contains("start: T0_ROOT\n"), "{l}");
        assert!(l.contains("_VALUE_0: /1/ | /\\x{5B}/ T"), "{l}");
        // The last level cannot nest further.
        assert!(l.contains(&format!("_VALUE_{MAX_DEPTH}: /1/ | /\\x{{5B}}/ /[^\\x{{0}}-\\x{{10FFFF}}]/ /\\x{{5D}}/")), "{l}");
        let rec = recursive_rules(&parse("root ::= a\na ::= \"x\" b?\nb ::= a | c\nc ::= c \"y\" | \"z\"\n").unwrap());
        let mut rec: Vec<_> = rec.into_iter().collect();
        rec.sort();
        assert_eq!(rec, ["a", "b", "c"]);
    }

    #[test]
    fn tokens_are_rule_level() {
        let l = lark("root ::= <|x|> \"a\" !<[3]>\n");
        assert!(l.contains("r0_root: <[5]> TX1 <[^3]>"), "{l}");
        assert!(convert(&parse("root ::= <nope>").unwrap(), &|_| None).is_err());
    }
}
