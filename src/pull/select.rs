//! What to pull: repo ids and `REPO:QUANT` arguments, safe listing names, and the choice of GGUF
//! (explicit file, quant tag, default quant order, single-file repos, split shards).

use crate::error::{bail, Error, ErrorCode, Result};
use serde_json::json;

/// `org/name[:QUANT]` as the CLI and hosts write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoArg {
    pub repo: String,
    pub quant: Option<String>,
}

/// The quants tried, in order, when none is asked for (the order; Q4_K_M is also the
/// hub's own default tag).
pub const DEFAULT_QUANTS: &[&str] = &["Q4_K_M", "Q5_K_M", "Q4_0", "Q8_0", "Q6_K", "Q3_K_M", "Q2_K"];

/// Parses `org/name`, `org/name:Q8_0`, and the same with an `hf.co/`, `huggingface.co/` or
/// `https://huggingface.co/` prefix (the form Ollama and llama.cpp users paste).
pub fn parse_repo_arg(arg: &str) -> Result<RepoArg> {
    let s = arg.trim();
    let s = ["https://huggingface.co/", "http://huggingface.co/", "https://hf.co/", "huggingface.co/", "hf.co/"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .unwrap_or(s);
    let (repo, quant) = match s.rsplit_once(':') {
        Some((r, q)) => (r, Some(q)),
        None => (s, None),
    };
    validate_repo_id(repo)?;
    let quant = match quant {
        Some(q)
            if q.is_empty() || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') =>
        {
            bail!(InvalidArgument, "`{arg}`: the quant tag after `:` must be like Q4_K_M or IQ4_XS")
        }
        Some(q) => Some(q.to_string()),
        None => None,
    };
    Ok(RepoArg { repo: repo.to_string(), quant })
}

/// Whether `arg` reads as a repo id (with an optional quant) rather than a file path: what
/// `llb chat`/`llb info` use when the argument is not an existing file.
pub fn is_repo_arg(arg: &str) -> bool {
    !arg.ends_with(".gguf") && parse_repo_arg(arg).is_ok()
}

/// `org/name`: one slash, hub name characters, no `..`/`--` tricks (the cache folder is
/// `models--org--name`, so a `--` inside a part would make two repos share a folder).
pub fn validate_repo_id(repo: &str) -> Result<()> {
    let ok_part = |p: &str| {
        !p.is_empty()
            && p.len() <= 96
            && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !p.contains("..")
            && !p.contains("--")
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
    };
    match repo.split_once('/') {
        Some((org, name)) if ok_part(org) && ok_part(name) => Ok(()),
        _ => bail!(
            InvalidArgument,
            "field `repo`: `{repo}` is not a Hugging Face repo id like `Qwen/Qwen2.5-1.5B-Instruct-GGUF`"
        ),
    }
}

/// A branch, tag, `refs/pr/N` or commit: it names a file under `refs/`, so it must stay there.
pub fn validate_revision(rev: &str) -> Result<()> {
    let ok = !rev.is_empty()
        && rev.len() <= 255
        && rev.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && rev.split('/').all(|p| !p.is_empty() && p != "." && p != "..");
    if !ok {
        bail!(InvalidArgument, "field `revision`: `{rev}` is not a branch, tag or commit name");
    }
    Ok(())
}

pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && is_hex(s)
}

pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && is_hex(s)
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A listing name is used as a path under the snapshot folder: relative, no `..`, no empty or
/// `.` components, no backslashes or control characters. Anything else means the listing cannot
/// be trusted.
pub fn validate_rfilename(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.len() > 1024
        || name.starts_with('/')
        || name.contains('\\')
        || name.chars().any(|c| c.is_control())
        || name.split('/').any(|p| p.is_empty() || p == "." || p == "..")
        || (name.len() >= 2 && name.as_bytes()[1] == b':');
    if bad {
        return Err(Error::new(
            ErrorCode::InvalidRepoListing,
            format!(
                "the hub listed an unsafe file name {name:?} (absolute, or with `..`); refusing to use this listing"
            ),
        )
        .with_field("file", json!(name)));
    }
    Ok(())
}

/// `name-00001-of-00003.gguf` → ("name", 1, 3): llama.cpp's split naming (`%s-%05d-of-%05d.gguf`).
pub fn split_parts(name: &str) -> Option<(&str, u32, u32)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(no) || !digits(count) {
        return None;
    }
    let (no, count): (u32, u32) = (no.parse().ok()?, count.parse().ok()?);
    (no >= 1 && no <= count).then_some((prefix, no, count))
}

fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Projector and importance-matrix files are not chat models.
pub fn is_auxiliary(name: &str) -> bool {
    let b = basename(name).to_ascii_lowercase();
    b.contains("mmproj") || b.contains("imatrix")
}

pub fn is_gguf(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".gguf")
}

/// One model: a single file, or every shard of a split in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub files: Vec<String>,
}

impl Group {
    pub fn first(&self) -> &str {
        &self.files[0]
    }
}

/// The GGUF models among `names` (auxiliary files left out), sorted by name. A split with a
/// shard missing from the listing is an unusable listing.
pub fn groups(names: &[String], include_auxiliary: bool) -> Result<Vec<Group>> {
    let mut singles = Vec::new();
    let mut splits: std::collections::BTreeMap<(String, u32), Vec<(u32, String)>> = Default::default();
    for n in names.iter().filter(|n| is_gguf(n) && (include_auxiliary || !is_auxiliary(n))) {
        match split_parts(n) {
            Some((prefix, no, count)) => splits.entry((prefix.to_string(), count)).or_default().push((no, n.clone())),
            None => singles.push(Group { files: vec![n.clone()] }),
        }
    }
    let mut out = singles;
    for ((prefix, count), mut shards) in splits {
        shards.sort();
        shards.dedup_by_key(|s| s.0);
        if shards.len() != count as usize {
            let have: Vec<u32> = shards.iter().map(|s| s.0).collect();
            let missing: Vec<u32> = (1..=count).filter(|i| !have.contains(i)).collect();
            return Err(Error::new(
                ErrorCode::InvalidRepoListing,
                format!("split model {prefix} has {count} shards but shard(s) {missing:?} are not in the listing"),
            ));
        }
        out.push(Group { files: shards.into_iter().map(|s| s.1).collect() });
    }
    out.sort_by(|a, b| a.first().cmp(b.first()));
    Ok(out)
}

/// Whether `name` carries the quant tag `quant` (case-insensitive, as a whole tag: `Q4_K` does
/// not match `Q4_K_M`, `Q4_XS` does not match `IQ4_XS`). Folder names count (`Q4_K_M/x-00001-of-00002.gguf`).
pub fn matches_quant(name: &str, quant: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let q = quant.to_ascii_lowercase();
    if q.is_empty() {
        return false;
    }
    let nb = n.as_bytes();
    let mut from = 0;
    while let Some(i) = n[from..].find(&q) {
        let at = from + i;
        let end = at + q.len();
        let before_ok = at == 0 || !nb[at - 1].is_ascii_alphanumeric();
        let after_ok = end == nb.len() || !(nb[end].is_ascii_alphanumeric() || nb[end] == b'_');
        if before_ok && after_ok {
            return true;
        }
        from = at + 1;
    }
    false
}

fn is_quant_token(t: &str) -> bool {
    if matches!(t, "bf16" | "f16" | "f32" | "fp16" | "fp32" | "f64") {
        return true;
    }
    let Some(rest) = ["iq", "tq", "mxfp", "q"].iter().find_map(|p| t.strip_prefix(p)) else { return false };
    let mut parts = rest.split('_');
    let head = parts.next().unwrap_or("");
    !head.is_empty()
        && head.bytes().all(|b| b.is_ascii_digit())
        && parts.all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The quant tag a file name carries (`Qwen2.5-1.5B-Instruct-Q4_K_M.gguf` → `Q4_K_M`), for messages.
pub fn quant_label(name: &str) -> Option<String> {
    let base = basename(name).to_ascii_lowercase();
    let stem = base.strip_suffix(".gguf").unwrap_or(&base);
    let stem = split_parts(&base).map(|(p, _, _)| p).unwrap_or(stem);
    for tok in stem.split(['-', '.']).rev() {
        let starts = std::iter::once(0).chain(tok.match_indices('_').map(|(i, _)| i + 1));
        for s in starts {
            if is_quant_token(&tok[s..]) {
                return Some(tok[s..].to_ascii_uppercase());
            }
        }
    }
    None
}

/// What [`choose`] picked, and anything the user should hear about it.
#[derive(Debug, Clone)]
pub struct Choice {
    pub group: Group,
    /// `(code, message)` warnings.
    pub warnings: Vec<(&'static str, String)>,
}

fn available(groups: &[Group]) -> (Vec<String>, Vec<String>) {
    let mut quants: Vec<String> = groups.iter().filter_map(|g| quant_label(g.first())).collect();
    quants.sort();
    quants.dedup();
    (quants, groups.iter().map(|g| g.first().to_string()).collect())
}

/// Picks the model to pull from the listing `names` (every file of the revision):
/// an explicit `filename` wins; else `quant`; else the default order; a repo with one GGUF takes it.
pub fn choose(names: &[String], quant: Option<&str>, filename: Option<&str>, what: &str) -> Result<Choice> {
    if let Some(f) = filename {
        return choose_file(names, f, quant, what);
    }
    let mut warnings = Vec::new();
    let all = groups(names, false)?;
    if all.is_empty() {
        let aux = names.iter().filter(|n| is_gguf(n)).count();
        let extra = if aux > 0 { " (only projector/imatrix GGUFs)" } else { "" };
        bail!(NoGguf, "{what} holds no GGUF model file{extra}; llb needs a repo of GGUFs such as `Qwen/Qwen2.5-1.5B-Instruct-GGUF`");
    }
    if let Some(q) = quant {
        return match pick(&all, q, &mut warnings) {
            Some(group) => Ok(Choice { group, warnings }),
            None => {
                let (quants, files) = available(&all);
                Err(Error::new(
                    ErrorCode::QuantNotFound,
                    format!("no {q} GGUF in {what}; available: {}", list(&quants_or_files(&quants, &files))),
                )
                .with_field("available", json!(quants))
                .with_field("available_files", json!(files)))
            }
        };
    }
    if all.len() == 1 {
        return Ok(Choice { group: all[0].clone(), warnings });
    }
    for q in DEFAULT_QUANTS {
        if let Some(group) = pick(&all, q, &mut warnings) {
            return Ok(Choice { group, warnings });
        }
    }
    let (quants, files) = available(&all);
    Err(Error::new(
        ErrorCode::QuantNotFound,
        format!(
            "{what} has several GGUFs and none of the default quants ({}); choose one with REPO:QUANT or `filename`: {}",
            DEFAULT_QUANTS.join(", "),
            list(&quants_or_files(&quants, &files))
        ),
    )
    .with_field("available", json!(quants))
    .with_field("available_files", json!(files)))
}

/// An explicit `filename` (a quant given too is ignored, with a warning): that file, or all the
/// shards of its split model.
fn choose_file(names: &[String], f: &str, quant: Option<&str>, what: &str) -> Result<Choice> {
    if !is_gguf(f) {
        bail!(InvalidArgument, "field `filename`: `{f}` is not a .gguf file");
    }
    if !names.iter().any(|n| n == f) {
        let (_, files) = available(&groups(names, false).unwrap_or_default());
        return Err(Error::new(ErrorCode::FileNotFound, format!("{f} is not in {what}; its GGUFs: {}", list(&files)))
            .with_field("available_files", json!(files)));
    }
    let mut warnings = Vec::new();
    if let Some(q) = quant {
        warnings.push(("quant_ignored", format!("`filename` {f} was given, so the quant {q} is ignored")));
    }
    let group = match split_parts(f) {
        Some(_) => groups(names, true)?
            .into_iter()
            .find(|g| g.files.iter().any(|x| x == f))
            .expect("a listed shard is in a group"),
        None => Group { files: vec![f.to_string()] },
    };
    Ok(Choice { group, warnings })
}

/// The first model of `all` matching quant `q`; several matches add an `ambiguous_quant` warning.
fn pick(all: &[Group], q: &str, warnings: &mut Vec<(&'static str, String)>) -> Option<Group> {
    let hits: Vec<&Group> = all.iter().filter(|g| matches_quant(g.first(), q)).collect();
    if hits.len() > 1 {
        let others: Vec<&str> = hits[1..].iter().map(|g| g.first()).collect();
        warnings.push((
            "ambiguous_quant",
            format!(
                "{} files match {q}; took {} (others: {}); pass `filename` to choose",
                hits.len(),
                hits[0].first(),
                others.join(", ")
            ),
        ));
    }
    hits.first().map(|g| (*g).clone())
}

fn quants_or_files(quants: &[String], files: &[String]) -> Vec<String> {
    if quants.is_empty() {
        files.to_vec()
    } else {
        quants.to_vec()
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn quant_tags_match_whole_tags_only() {
        assert!(matches_quant("Qwen2.5-1.5B-Instruct-Q4_K_M.gguf", "q4_k_m"));
        assert!(!matches_quant("Qwen2.5-1.5B-Instruct-Q4_K_M.gguf", "Q4_K"));
        assert!(!matches_quant("model-IQ4_XS.gguf", "Q4_XS"));
        assert!(matches_quant("model_q8_0.gguf", "Q8_0"));
        assert!(matches_quant("Q4_K_M/model-00001-of-00002.gguf", "Q4_K_M"));
        assert!(!matches_quant("model-BF16.gguf", "F16"));
    }

    #[test]
    fn labels() {
        assert_eq!(quant_label("Qwen2.5-1.5B-Instruct-Q4_K_M.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(quant_label("x/DeepSeek-UD-Q2_K_XL-00001-of-00005.gguf").as_deref(), Some("Q2_K_XL"));
        assert_eq!(quant_label("model.IQ4_XS.gguf").as_deref(), Some("IQ4_XS"));
        assert_eq!(quant_label("model-bf16.gguf").as_deref(), Some("BF16"));
        assert_eq!(quant_label("model.gguf"), None);
    }

    #[test]
    fn splits_group_and_must_be_complete() {
        let g = groups(&names(&["m-00002-of-00002.gguf", "m-00001-of-00002.gguf", "README.md"]), false).unwrap();
        assert_eq!(g, vec![Group { files: names(&["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]) }]);
        let e = groups(&names(&["m-00001-of-00003.gguf", "m-00003-of-00003.gguf"]), false).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRepoListing);
    }

    #[test]
    fn repo_args() {
        assert_eq!(
            parse_repo_arg("Qwen/Qwen2.5-1.5B-Instruct-GGUF:Q8_0").unwrap(),
            RepoArg { repo: "Qwen/Qwen2.5-1.5B-Instruct-GGUF".into(), quant: Some("Q8_0".into()) }
        );
        assert_eq!(parse_repo_arg("hf.co/a/b").unwrap(), RepoArg { repo: "a/b".into(), quant: None });
        for bad in ["a", "a/b/c", "../b", "a/..", "a/b:", "/a/b", "a--x/b", "a/b:Q4 K"] {
            assert!(parse_repo_arg(bad).is_err(), "{bad}");
        }
        assert!(!is_repo_arg("models/x.gguf"));
    }

    #[test]
    fn unsafe_names() {
        for bad in ["/etc/passwd", "../x.gguf", "a/../../x.gguf", "a//b.gguf", "a\\..\\b.gguf", "./x.gguf", "C:x.gguf"]
        {
            assert_eq!(validate_rfilename(bad).unwrap_err().code, ErrorCode::InvalidRepoListing, "{bad}");
        }
        validate_rfilename("Q4_K_M/model-00001-of-00002.gguf").unwrap();
    }
}
