//! `llb pull` and the repo-id arguments of `llb chat`/`llb info`: argument parsing and progress
//! display only; the work is [`super::pull`].

use super::{pull_with_env, Env, PullRequest};
use crate::error::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `llb pull REPO[:QUANT] [--file NAME] [--revision REV] [--cache-dir DIR] [--offline] [--json]`
#[derive(clap::Args, Debug, Clone)]
pub struct PullArgs {
    /// A Hugging Face repo id, optionally with a quant tag: `Qwen/Qwen2.5-1.5B-Instruct-GGUF:Q8_0`.
    pub repo: String,
    /// An exact file of the repo (wins over the quant tag; a shard name pulls every shard).
    #[arg(long = "file", value_name = "NAME")]
    pub file: Option<String>,
    /// Branch, tag or commit (default: main).
    #[arg(long, value_name = "REV")]
    pub revision: Option<String>,
    /// Cache folder (default: LLB_MODEL_CACHE, else ~/.chatbot_models).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Use the cache only, as HF_HUB_OFFLINE=1.
    #[arg(long)]
    pub offline: bool,
    /// Print exactly llb_model_pull's result or error JSON on stdout (progress goes to stderr).
    #[arg(long)]
    pub json: bool,
}

impl PullArgs {
    pub fn to_request(&self) -> PullRequest {
        PullRequest {
            repo: self.repo.clone(),
            revision: self.revision.clone(),
            filename: self.file.clone(),
            cache_dir: self.cache_dir.as_ref().map(|p| p.to_string_lossy().into_owned()),
            offline: self.offline.then_some(true),
            ..Default::default()
        }
    }
}

/// Runs `llb pull` on the process's stdout/stderr and environment.
pub fn run(args: &PullArgs) -> ExitCode {
    let tty = std::io::stderr().is_terminal();
    let code = run_with(args, &Env::from_process(), &mut std::io::stdout(), &mut std::io::stderr(), tty);
    ExitCode::from(code)
}

/// `llb pull` with explicit streams: 0 on success, 1 on error.
pub fn run_with(args: &PullArgs, env: &Env, out: &mut dyn Write, err: &mut dyn Write, tty: bool) -> u8 {
    let display = Display::new(err, tty);
    let r = pull_with_env(&args.to_request(), env, &|ev| {
        display.event(ev);
        true
    });
    display.finish();
    let err = display.into_inner();
    match (r, args.json) {
        (Ok(v), true) => {
            let _ = writeln!(out, "{v}");
            0
        }
        (Err(e), true) => {
            let _ = writeln!(out, "{}", e.to_json());
            1
        }
        (Ok(v), false) => {
            let _ = writeln!(out, "{}", summary(&v));
            0
        }
        (Err(e), false) => {
            let _ = writeln!(err, "error [{}]: {}", e.code.as_str(), e.message);
            1
        }
    }
}

/// For `llb chat`/`llb info`: an existing file is used as is; a repo id (`org/name[:QUANT]`) is
/// pulled first (progress on stderr) and its first shard returned; anything else is returned as
/// a path, for the caller to report.
pub fn model_path_or_pull(arg: &str) -> Result<PathBuf> {
    if Path::new(arg).exists() || !super::is_repo_arg(arg) {
        return Ok(PathBuf::from(arg));
    }
    let mut stderr = std::io::stderr();
    let display = Display::new(&mut stderr, std::io::stderr().is_terminal());
    let r = super::pull(&PullRequest::new(arg), &|ev| {
        display.event(ev);
        true
    });
    display.finish();
    let v = r?;
    Ok(PathBuf::from(v["path"].as_str().unwrap_or_default()))
}

fn summary(v: &Value) -> String {
    let commit = v["commit"].as_str().unwrap_or("");
    let files: Vec<&str> =
        v["files"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let info = &v["model_info"];
    format!(
        "pulled {}@{} (commit {}){}\n  files: {}\n  path:  {}\n  tools: yes (chat format: {})",
        v["repo"].as_str().unwrap_or(""),
        v["revision"].as_str().unwrap_or(""),
        &commit[..commit.len().min(12)],
        if v["from_cache"] == Value::Bool(true) { ", from the cache" } else { "" },
        files.join(", "),
        v["path"].as_str().unwrap_or(""),
        info["chat_format"].as_str().unwrap_or("?"),
    )
}

pub(crate) fn fmt_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

/// Progress on a terminal (an indicatif bar) or as plain lines (logs, pipes).
struct Display<'w> {
    err: RefCell<&'w mut dyn Write>,
    bar: RefCell<Option<ProgressBar>>,
    tty: bool,
    /// Plain mode: the last tenth of the total printed, and the file being fetched.
    last_tenth: RefCell<Option<u64>>,
    file: RefCell<String>,
}

impl<'w> Display<'w> {
    fn new(err: &'w mut dyn Write, tty: bool) -> Self {
        Display {
            err: RefCell::new(err),
            bar: RefCell::new(None),
            tty,
            last_tenth: RefCell::new(None),
            file: RefCell::new(String::new()),
        }
    }

    fn line(&self, s: &str) {
        match &*self.bar.borrow() {
            Some(b) => b.println(s),
            None => {
                let _ = writeln!(self.err.borrow_mut(), "{s}");
            }
        }
    }

    /// Prints one pull event on the terminal.
    // Over 60 lines: one `match` arm per event type, each formatting its own line.
    fn event(&self, ev: &Value) {
        let u = |k: &str| ev[k].as_u64().unwrap_or(0);
        match ev["type"].as_str() {
            Some("pull_resolved") => {
                let commit = ev["commit"].as_str().unwrap_or("");
                let files = ev["files"].as_array().cloned().unwrap_or_default();
                self.line(&format!(
                    "{}@{} → commit {}: {} file(s), {}{}",
                    ev["repo"].as_str().unwrap_or(""),
                    ev["revision"].as_str().unwrap_or(""),
                    &commit[..commit.len().min(12)],
                    files.len(),
                    fmt_bytes(u("total")),
                    if u("to_download") > 0 {
                        format!(", {} to download", fmt_bytes(u("to_download")))
                    } else {
                        ", all cached".into()
                    }
                ));
                for f in &files {
                    let cached = if f["cached"] == Value::Bool(true) { " (cached)" } else { "" };
                    self.line(&format!(
                        "  {} {}{cached}",
                        f["name"].as_str().unwrap_or(""),
                        fmt_bytes(f["size"].as_u64().unwrap_or(0))
                    ));
                }
                if self.tty && u("to_download") > 0 {
                    let bar = ProgressBar::with_draw_target(Some(u("total")), ProgressDrawTarget::stderr());
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{msg:30!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                        )
                        .expect("a valid template")
                        .progress_chars("=> "),
                    );
                    *self.bar.borrow_mut() = Some(bar);
                }
            }
            Some("pull_progress") => {
                let file = ev["file"].as_str().unwrap_or("");
                if let Some(b) = &*self.bar.borrow() {
                    b.set_message(file.rsplit('/').next().unwrap_or(file).to_string());
                    b.set_position(u("bytes"));
                    return;
                }
                let total = u("total").max(1);
                let tenth = u("bytes") * 10 / total;
                let new_file = *self.file.borrow() != file;
                if new_file || *self.last_tenth.borrow() != Some(tenth) {
                    *self.last_tenth.borrow_mut() = Some(tenth);
                    *self.file.borrow_mut() = file.to_string();
                    self.line(&format!(
                        "downloading {file}: {}% of {} ({} of {})",
                        u("file_bytes") * 100 / u("file_total").max(1),
                        fmt_bytes(u("file_total")),
                        fmt_bytes(u("bytes")),
                        fmt_bytes(u("total"))
                    ));
                }
            }
            Some("pull_warning") => self.line(&format!("warning: {}", ev["message"].as_str().unwrap_or(""))),
            _ => {}
        }
    }

    fn finish(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }

    fn into_inner(self) -> &'w mut dyn Write {
        self.err.into_inner()
    }
}
