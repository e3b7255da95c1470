//! The crate's structure: no module imports one that imports it back (docs/STYLE.md §15), and
//! no function runs over 60 lines without a comment saying why (§17).
//!
//! Reads every module of the library (found from src/lib.rs by its `mod` declarations, so a new
//! module is seen without listing it here), collects the paths each one names (`crate::x::..`,
//! `super::..`, `self::..`, and a child module's name), and fails on every group of modules that
//! reach each other. A parent and its child count too: `pull/mod.rs` using `hub::Hub` while
//! `pull/hub.rs` uses `super::Events` is a cycle, as is `lib.rs` calling into `backend` while
//! `backend` calls `crate::init_backend`. Test code inside a module (`mod tests`) is part of it.
//!
//! A light lexer, not a Rust parser: comments, strings and char literals are skipped, then paths
//! are read from the tokens (`use` trees with their `{..}` groups expanded). Macro bodies are read
//! as code, and a path naming a local item that shares a child module's name would count as a
//! use of that child; neither happens in llb, and the self-tests below pin the cases that do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`[]` is lib.rs, `["pull", "hub"]` is src/pull/hub.rs).
type ModPath = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of `src` with their line numbers, comments, strings and char literals dropped.
// Over 60 lines: one loop over the characters, one branch per kind of token (comments, strings,
// char literals, identifiers, numbers); each branch moves the same cursor and line count.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                } else if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += (c[i] == '\n') as usize;
                    i += 1;
                }
            }
        } else if let Some(skip) = raw_string_start(&c, i) {
            // r"..", r#".."#, br#".."#: ends at a quote followed by as many #s.
            let hashes = skip - 1 - (c[i] == 'b') as usize - 1;
            i += skip;
            while i < c.len() && !(c[i] == '"' && (0..hashes).all(|k| at(i + 1 + k) == '#')) {
                line += (c[i] == '\n') as usize;
                i += 1;
            }
            i += 1 + hashes;
        } else if ch == '"' || (ch == 'b' && at(i + 1) == '"') {
            i += if ch == 'b' { 2 } else { 1 };
            while i < c.len() && c[i] != '"' {
                line += (c[i] == '\n') as usize;
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime or label ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = if ch == 'r' && at(i + 1) == '#' { i + 2 } else { i };
            i = start;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch.is_ascii_digit() {
            // 1_000, 0x1f, 1.5e3; `0..n` stops at the range.
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || (c[i] == '.' && at(i + 1).is_ascii_digit())) {
                i += 1;
            }
        } else if ch == ':' && at(i + 1) == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The length of a raw string literal's opening (`r#"` is 3) when one starts at `i`.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') || (i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')) {
        return None;
    }
    j += 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some(j + 1 - i)
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

/// One path a module names, as written, with the inline modules it is written inside.
#[derive(Debug)]
struct PathUse {
    segments: Vec<String>,
    /// Inline modules (`mod tests { .. }`) around the use, outermost first.
    inline: Vec<String>,
    line: usize,
}

/// What one file says: the paths it uses and the file modules it declares (`mod x;`), each
/// declared one with the inline modules around its declaration.
#[derive(Debug, Default)]
struct FileScan {
    uses: Vec<PathUse>,
    declares: Vec<(Vec<String>, String)>,
}

fn scan(src: &str) -> FileScan {
    let toks = lex(src);
    let mut scan = FileScan::default();
    // Open braces: Some(name) for an inline module's, None for any other.
    let mut braces: Vec<Option<String>> = Vec::new();
    let inline = |b: &[Option<String>]| b.iter().flatten().cloned().collect::<Vec<_>>();
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Ident(k) if k == "mod" => {
                if let Some(name) = ident(toks.get(i + 1)) {
                    match toks.get(i + 2).map(|t| &t.0) {
                        Some(Tok::Punct(';')) => scan.declares.push((inline(&braces), name.to_string())),
                        Some(Tok::Punct('{')) => {
                            braces.push(Some(name.to_string()));
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Tok::Ident(k) if k == "use" => {
                let line = toks[i].1;
                let mut trees = Vec::new();
                i = use_tree(&toks, i + 1, Vec::new(), &mut trees);
                for segments in trees {
                    scan.uses.push(PathUse { segments, inline: inline(&braces), line });
                }
            }
            Tok::Ident(_) if toks.get(i + 1).map(|t| &t.0) == Some(&Tok::PathSep) && !after_path_sep(&toks, i) => {
                let line = toks[i].1;
                let mut segments = Vec::new();
                while let Some(s) = ident(toks.get(i)) {
                    segments.push(s.to_string());
                    if toks.get(i + 1).map(|t| &t.0) != Some(&Tok::PathSep) {
                        i += 1;
                        break;
                    }
                    i += 2;
                }
                scan.uses.push(PathUse { segments, inline: inline(&braces), line });
            }
            Tok::Punct('{') => {
                braces.push(None);
                i += 1;
            }
            Tok::Punct('}') => {
                braces.pop();
                i += 1;
            }
            _ => i += 1,
        }
    }
    scan
}

fn after_path_sep(toks: &[(Tok, usize)], i: usize) -> bool {
    i > 0 && toks[i - 1].0 == Tok::PathSep
}

/// Reads a use tree from `i` with `prefix` before it, pushing every full path (a group's
/// members each, a glob as its prefix) to `out`; returns the index after the tree.
fn use_tree(toks: &[(Tok, usize)], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    if toks.get(i).map(|t| &t.0) == Some(&Tok::PathSep) {
        i += 1; // `use ::std::..`
    }
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                if s != "self" || prefix.is_empty() {
                    prefix.push(s.clone());
                }
                i += 1;
                if toks.get(i).map(|t| &t.0) == Some(&Tok::PathSep) {
                    i += 1;
                    continue;
                }
                if ident(toks.get(i)) == Some("as") {
                    i += 2;
                }
                out.push(prefix);
                break;
            }
            Some(Tok::Punct('*')) => {
                out.push(prefix);
                i += 1;
                break;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while let Some(t) = toks.get(i) {
                    match t.0 {
                        Tok::Punct('}') => {
                            i += 1;
                            break;
                        }
                        Tok::Punct(',') => i += 1,
                        _ => i = use_tree(toks, i, prefix.clone(), out),
                    }
                }
                break;
            }
            _ => break,
        }
    }
    if toks.get(i).map(|t| &t.0) == Some(&Tok::Punct(';')) {
        i += 1;
    }
    i
}

/// Every file module of the crate: its path, its file and what it says.
struct Crate {
    modules: BTreeMap<ModPath, (PathBuf, FileScan)>,
}

/// Where the child `name` of the file module in `file` (declared inside the inline modules
/// `inline`) lives: `dir/name.rs` or `dir/name/mod.rs`.
fn child_file(file: &Path, inline: &[String], name: &str, exists: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    let stem = file.file_stem()?.to_str()?;
    let mut dir = file.parent()?.to_path_buf();
    if !matches!(stem, "lib" | "main" | "mod") {
        dir.push(stem);
    }
    dir.extend(inline);
    [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|p| exists(p))
}

/// Reads the crate from `root` (its lib.rs) through `read`, following `mod x;` declarations.
fn load(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let mut modules = BTreeMap::new();
    let mut todo = vec![(ModPath::new(), root.to_path_buf())];
    while let Some((path, file)) = todo.pop() {
        let text = read(&file).unwrap_or_else(|| panic!("cannot read {}", file.display()));
        let s = scan(&text);
        for (inline, name) in &s.declares {
            let exists = |p: &Path| read(p).is_some();
            let child = child_file(&file, inline, name, &exists)
                .unwrap_or_else(|| panic!("{}: no file for `mod {name};`", file.display()));
            let mut p = path.clone();
            p.extend(inline.iter().cloned());
            p.push(name.clone());
            todo.push((p, child));
        }
        modules.insert(path, (file, s));
    }
    Crate { modules }
}

impl Crate {
    /// The file module a use in `from` refers to, if any: the longest file-module prefix of the
    /// path it names, resolved from where it is written.
    fn target(&self, from: &ModPath, u: &PathUse) -> Option<ModPath> {
        let mut here: ModPath = from.iter().chain(&u.inline).cloned().collect();
        let mut segs = u.segments.iter().map(String::as_str).peekable();
        let mut full = match segs.peek().copied()? {
            "crate" => {
                segs.next();
                ModPath::new()
            }
            "super" => {
                while segs.peek() == Some(&"super") {
                    segs.next();
                    here.pop()?;
                }
                here
            }
            "self" => {
                segs.next();
                here
            }
            first => {
                // A bare name: a child module of this one (else std, a dependency or an item).
                let mut child = here.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                here
            }
        };
        full.extend(segs.map(String::from));
        (0..=full.len()).rev().map(|n| full[..n].to_vec()).find(|p| self.modules.contains_key(p))
    }

    /// The edges between file modules, each with one place (file:line) that makes it.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges = BTreeMap::new();
        for (from, (file, s)) in &self.modules {
            for u in &s.uses {
                if let Some(to) = self.target(from, u) {
                    if &to != from {
                        edges.entry((from.clone(), to)).or_insert_with(|| format!("{}:{}", file.display(), u.line));
                    }
                }
            }
        }
        edges
    }
}

/// The groups of modules that reach each other (strongly connected, more than one module).
fn cycles(nodes: &BTreeSet<ModPath>, edges: &BTreeMap<(ModPath, ModPath), String>) -> Vec<Vec<ModPath>> {
    let reach = |start: &ModPath| {
        let mut seen = BTreeSet::from([start.clone()]);
        let mut todo = vec![start.clone()];
        while let Some(n) = todo.pop() {
            for (a, b) in edges.keys() {
                if *a == n && seen.insert(b.clone()) {
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&ModPath, BTreeSet<ModPath>> = nodes.iter().map(|n| (n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut groups = Vec::new();
    for n in nodes {
        if done.contains(n) {
            continue;
        }
        let group: Vec<ModPath> = reaches[n].iter().filter(|m| reaches[*m].contains(n)).cloned().collect();
        done.extend(group.iter().cloned());
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

fn name(p: &ModPath) -> String {
    if p.is_empty() {
        "crate (lib.rs)".into()
    } else {
        p.join("::")
    }
}

/// The report of every cycle of `krate`: each group, and the uses that tie it together.
fn cycle_report(krate: &Crate) -> Vec<String> {
    let nodes: BTreeSet<ModPath> = krate.modules.keys().cloned().collect();
    let edges = krate.edges();
    cycles(&nodes, &edges)
        .into_iter()
        .map(|g| {
            let within: Vec<String> = edges
                .iter()
                .filter(|((a, b), _)| g.contains(a) && g.contains(b))
                .map(|((a, b), at)| format!("  {} -> {} ({at})", name(a), name(b)))
                .collect();
            format!("{}:\n{}", g.iter().map(name).collect::<Vec<_>>().join(", "), within.join("\n"))
        })
        .collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    // Paths relative to the manifest, so the report names src/x.rs.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = PathBuf::from("src");
    let krate = load(&src.join("lib.rs"), &|p| std::fs::read_to_string(manifest.join(p)).ok());
    // Every .rs file under src/ is a module, but for the binary and what include! pulls in.
    let files = rs_files(&src);
    let seen: BTreeSet<&PathBuf> = krate.modules.values().map(|(f, _)| f).collect();
    let not_modules = [src.join("main.rs"), src.join("sys/bindings.rs")];
    let unseen: Vec<_> = files.iter().filter(|f| !seen.contains(f) && !not_modules.contains(f)).collect();
    assert!(unseen.is_empty(), "files under src/ that no `mod` declaration reaches: {unseen:?}");
    let report = cycle_report(&krate);
    assert!(
        report.is_empty(),
        "modules that import each other (docs/STYLE.md §15; move what both need into one of them or a \
         module below both):\n{}",
        report.join("\n")
    );
}

/// The .rs files under `dir` (relative to the manifest, so reports name src/x.rs).
fn rs_files(dir: &Path) -> Vec<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(manifest.join(&d)).unwrap().map(Result::unwrap) {
            let p = d.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// A function longer than this many lines needs a `// Over 60 lines: <why>` comment above it.
const LONG_FN: usize = 60;

/// Every function of `src` longer than [`LONG_FN`] lines whose comments above it do not say why:
/// its name, first line and length in lines.
fn long_functions(src: &str) -> Vec<(String, usize, usize)> {
    let toks = lex(src);
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, (t, line)) in toks.iter().enumerate() {
        let (Tok::Ident(k), Some(name)) = (t, ident(toks.get(i + 1))) else { continue };
        if k != "fn" {
            continue;
        }
        let Some(end) = body_end(&toks, i + 2) else { continue };
        let len = end - line + 1;
        if len > LONG_FN && !says_why(&lines, *line) {
            out.push((name.to_string(), *line, len));
        }
    }
    out
}

/// The line of the `}` that closes the body of the function whose signature goes on from token
/// `i`; None for a declaration without a body (`fn f(&self);`).
fn body_end(toks: &[(Tok, usize)], mut i: usize) -> Option<usize> {
    // Parentheses and brackets of the signature: a `;` inside them (`[u8; 4]`) ends nothing.
    let mut nest = 0;
    loop {
        match toks.get(i)?.0 {
            Tok::Punct('(' | '[') => nest += 1,
            Tok::Punct(')' | ']') => nest -= 1,
            Tok::Punct(';') if nest == 0 => return None,
            Tok::Punct('{') if nest == 0 => break,
            _ => {}
        }
        i += 1;
    }
    let mut depth = 0;
    for (t, line) in &toks[i..] {
        match t {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') if depth == 1 => return Some(*line),
            Tok::Punct('}') => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Whether the comment and attribute lines right above line `line` (1-based) give the reason.
fn says_why(lines: &[&str], line: usize) -> bool {
    lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.starts_with("// Over 60 lines:"))
}

#[test]
fn long_functions_say_why() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let generated = Path::new("src/sys/bindings.rs");
    let mut report = Vec::new();
    for dir in ["src", "tests", "examples", "fuzz/src", "fuzz/fuzz_targets"] {
        if !manifest.join(dir).is_dir() {
            continue;
        }
        for file in rs_files(Path::new(dir)).into_iter().filter(|f| f != generated) {
            let text = std::fs::read_to_string(manifest.join(&file)).unwrap();
            for (name, line, len) in long_functions(&text) {
                report.push(format!("  {}:{line} fn {name}: {len} lines", file.display()));
            }
        }
    }
    assert!(
        report.is_empty(),
        "functions over {LONG_FN} lines without a `// Over 60 lines: <why>` comment above them (docs/STYLE.md \
         §17; split them, or say why they stay whole):\n{}",
        report.join("\n")
    );
}

#[test]
fn the_long_function_check_counts_lines_and_reads_the_comment() {
    // A function of `n` lines whose body holds braces in char literals and strings.
    let f = |n: usize| {
        let body: String = (0..n - 2).map(|i| format!("    let _x{i} = ('}}', \"{{\");\n")).collect();
        format!("fn f() {{\n{body}}}\n")
    };
    assert!(long_functions(&f(60)).is_empty());
    assert_eq!(long_functions(&f(61)), vec![("f".to_string(), 1, 61)]);
    let said = format!("/// Doc.\n// Over 60 lines: one table.\n#[inline]\n{}", f(61));
    assert!(long_functions(&said).is_empty());
    let elsewhere = format!("// Over 60 lines: said of another.\nfn g() {{}}\n\n{}", f(61));
    assert_eq!(long_functions(&elsewhere), vec![("f".to_string(), 4, 61)]);
    let decl = format!("trait T {{ fn t(&self, x: [u8; 4]); }}\nfn g(h: fn(u8) -> u8) {{}}\n{}", f(30));
    assert!(long_functions(&decl).is_empty());
}

/// Prints which module uses which (`cargo test --release --test structure -- --ignored
/// --nocapture`), for docs/STYLE.md §13's map.
#[test]
#[ignore]
fn print_module_graph() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let krate = load(Path::new("src/lib.rs"), &|p| std::fs::read_to_string(manifest.join(p)).ok());
    let mut uses: BTreeMap<ModPath, Vec<String>> = BTreeMap::new();
    for (a, b) in krate.edges().into_keys() {
        uses.entry(a).or_default().push(name(&b));
    }
    for (m, to) in uses {
        println!("{}: {}", name(&m), to.join(", "));
    }
}

/// A crate made of `files` (path → text) for the self-tests.
fn fake(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> = files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
    load(Path::new("src/lib.rs"), &|p| files.get(p).cloned())
}

#[test]
fn the_check_sees_a_cycle_through_use_and_through_an_inline_path() {
    let k = fake(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;"),
        ("src/a.rs", "use crate::{b::{self, Thing as T}, c};\nfn f() {}"),
        ("src/b.rs", "// crate::a::f() in a comment is no use\nfn g() { let s = \"crate::a::f()\"; }"),
        ("src/c.rs", "fn h() -> char { let _x: &'static str = \"\"; crate::a::f(); '}' }"),
    ]);
    let report = cycle_report(&k);
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(report[0].starts_with("a, c:"), "{report:?}");
    assert!(report[0].contains("c -> a (src/c.rs:1)"), "{report:?}");
}

#[test]
fn the_check_sees_parent_child_cycles_and_super_in_test_modules_is_the_file_itself() {
    let k = fake(&[
        ("src/lib.rs", "pub mod p;\npub fn init() {}"),
        ("src/p/mod.rs", "mod q;\nuse q::Q;\npub struct E;\n#[cfg(test)]\nmod tests { use super::*; }"),
        ("src/p/q.rs", "pub struct Q;\nfn f() { crate::init(); }\nuse super::E;"),
    ]);
    let report = cycle_report(&k);
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(report[0].starts_with("p, p::q:"), "{report:?}");
    let k = fake(&[
        ("src/lib.rs", "mod b;\nmod a;\nfn init() { b::go() }"),
        ("src/a.rs", "fn f() { crate::init() }"),
        ("src/b.rs", "pub fn go() { crate::a::f() }"),
    ]);
    assert_eq!(cycle_report(&k).len(), 1, "lib.rs -> b -> a -> lib.rs");
    let k = fake(&[("src/lib.rs", "mod a;\nmod b;"), ("src/a.rs", "use crate::b;"), ("src/b.rs", "r#\"crate::a\"#;")]);
    assert!(cycle_report(&k).is_empty());
}
