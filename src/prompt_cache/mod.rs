//! The prompt cache: conversations whose KV left the context, kept as llama.cpp sequence states
//! (`llama_state_seq_get_data`) in RAM (LRU, `ram_bytes`) and in a directory (`dir`,
//! `disk_bytes`, src/prompt_cache/disk.rs) that outlives the process. The scheduler stashes a
//! sequence's state here when it is about to drop what the sequence holds, and restores the
//! longest cached prefix of a new prompt when it beats what the context holds
//! (src/scheduler/mod.rs). This module only keeps and finds bytes: it never touches a context.
//!
//! A state is only valid for the model and state format it was made with: every file carries a
//! [`Key`] of both (the model file's fingerprint, llb's and llama.cpp's versions, the KV cache's
//! types and layout) and a MAC keyed with the installation's secret (src/prompt_cache/file.rs,
//! secret.rs): a file nobody with the secret wrote is refused. A state that passes is still
//! checked against its tokens before llama.cpp takes it (src/scheduler/kv_state.rs).

mod disk;
mod file;
pub mod secret;

use crate::tokens::{common_prefix, Token};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

pub use file::Key;

/// A sequence holding fewer tokens than this is not worth keeping, and a cached prefix must beat
/// what the context already holds by this many tokens to be restored: reading 64 tokens costs
/// about what restoring them does.
pub const MIN_TOKENS: usize = 64;

/// The cache's tiers, every default resolved (src/request/settings.rs).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// RAM budget in bytes (0: no RAM tier).
    pub ram_bytes: u64,
    /// The directory of the disk tier (None: no disk tier).
    pub dir: Option<PathBuf>,
    pub disk_bytes: u64,
    /// The file of the MAC key (None: [`secret::default_path`]).
    pub secret_file: Option<PathBuf>,
    /// The directory may belong to, or be writable by, other users (a cache shared on purpose).
    pub shared: bool,
    /// Its states hold only cells computed as a cold read computes them (an engine reusing as
    /// cold: src/scheduler/slots.rs): its files say so, and it restores no other file.
    pub as_cold: bool,
}

/// Where a hit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Ram,
    Disk,
}

/// A cached state whose tokens begin with `n` tokens of the prompt.
pub struct Hit {
    pub n: usize,
    /// The tokens the state holds (`n` of them are the prompt's).
    pub tokens: Vec<Token>,
    pub state: Arc<Vec<u8>>,
    pub tier: Tier,
    /// The disk file it came from, and how long reading it took (a disk hit).
    pub file: Option<String>,
    pub load_time: Option<std::time::Duration>,
}

/// What a lookup found, and the files it found bad on the way (each a warning).
#[derive(Default)]
pub struct Lookup {
    pub hit: Option<Hit>,
    pub warnings: Vec<String>,
}

struct RamEntry {
    tokens: Vec<Token>,
    state: Arc<Vec<u8>>,
    last_used: u64,
}

#[derive(Default)]
struct Ram {
    entries: Vec<RamEntry>,
    bytes: u64,
    clock: u64,
}

#[derive(Default)]
struct Counters {
    hits_ram: AtomicU64,
    hits_disk: AtomicU64,
    misses: AtomicU64,
    stored: AtomicU64,
    evictions: AtomicU64,
    restored_tokens: AtomicU64,
    refused: AtomicU64,
    rejected: AtomicU64,
}

impl Ram {
    fn drop_tokens(&mut self, tokens: &[Token]) {
        let gone: u64 = self.entries.iter().filter(|e| e.tokens == tokens).map(entry_bytes).sum();
        self.entries.retain(|e| e.tokens != tokens);
        self.bytes -= gone;
    }
}

pub struct PromptCache {
    ram_budget: u64,
    ram: Mutex<Ram>,
    disk: Option<disk::Disk>,
    counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key of states made by `model_path`'s model in a context whose state format `format`
/// describes: sha256 of the file's fingerprint (its size, its first 8 MiB — the GGUF header, with
/// every hyperparameter and the vocabulary — and 16 samples of 4 KiB spread over its weights)
/// and of `format`. A file changed in place gets another key.
pub fn key(model_path: &Path, format: &str) -> std::io::Result<Key> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(model_path)?;
    let len = f.metadata()?.len();
    let mut h = sha2::Sha256::new();
    h.update(len.to_le_bytes());
    let mut buf = vec![0u8; (8 << 20).min(len as usize)];
    f.read_exact(&mut buf)?;
    h.update(&buf);
    let mut sample = [0u8; 4096];
    for i in 0..16u64 {
        let at = len.saturating_sub(4096) * i / 15;
        f.seek(SeekFrom::Start(at))?;
        let n = f.read(&mut sample)?;
        h.update(&sample[..n]);
    }
    h.update(format.as_bytes());
    h.update(file::MAGIC);
    Ok(Key(h.finalize().into()))
}

impl PromptCache {
    /// A cache with `settings`' tiers for states of `key` (computed only for a disk tier: a
    /// RAM tier lives and dies with its context).
    pub fn open(settings: &Settings, key: impl FnOnce() -> std::io::Result<Key>) -> std::io::Result<PromptCache> {
        let disk = match &settings.dir {
            Some(dir) => {
                let path = match &settings.secret_file {
                    Some(p) => p.clone(),
                    None => secret::default_path()?,
                };
                if path.starts_with(dir) {
                    return Err(std::io::Error::other(format!(
                        "its secret ({}) must live outside the directory: whoever writes there could read it",
                        path.display()
                    )));
                }
                let secret = secret::load_or_create(&path, settings.shared)
                    .map_err(|e| std::io::Error::other(format!("the secret {}: {e}", path.display())))?;
                let flags = if settings.as_cold { file::AS_COLD } else { 0 };
                Some(disk::Disk::open(dir, settings.disk_bytes, key()?, secret, settings.shared, flags)?)
            }
            None => None,
        };
        Ok(PromptCache { ram_budget: settings.ram_bytes, ram: Mutex::default(), disk, counters: Counters::default() })
    }

    /// Whether the cache keeps anything at all.
    pub fn enabled(&self) -> bool {
        self.ram_budget > 0 || self.disk.is_some()
    }

    /// Whether states are written to disk (and so worth stashing when the process ends).
    pub fn persists(&self) -> bool {
        self.disk.is_some()
    }

    /// The cached state sharing the longest prefix with `prompt` (counted up to `limit`), when
    /// that is at least `at_least` tokens and `pays` (tokens it gives, bytes of its state, its
    /// tier: the cost model) says restoring it beats reading them: RAM first, a disk file only
    /// when it shares more (and only then read).
    pub fn lookup(&self, prompt: &[Token], limit: usize, at_least: usize, pays: &dyn Fn(usize, u64, Tier) -> bool) -> Lookup {
        let mut out = Lookup::default();
        let ram = self.ram_best(prompt, limit, at_least).filter(|h| pays(h.n, h.state.len() as u64, Tier::Ram));
        let floor = ram.as_ref().map_or(at_least, |h| h.n + 1);
        if let Some(d) = &self.disk {
            let (best, warnings) = d.best(prompt, limit, floor);
            out.warnings = warnings;
            if let Some((name, n, _)) = best.filter(|&(_, n, bytes)| pays(n, bytes, Tier::Disk)) {
                let t = std::time::Instant::now();
                match d.load(&name) {
                    Ok((tokens, state)) => {
                        let load_time = Some(t.elapsed());
                        out.hit = Some(Hit { n, tokens, state: Arc::new(state), tier: Tier::Disk, file: Some(name), load_time })
                    }
                    Err(w) => out.warnings.push(w),
                }
            }
        }
        out.hit = out.hit.or(ram);
        match &out.hit {
            Some(h) if h.tier == Tier::Ram => self.counters.hits_ram.fetch_add(1, Relaxed),
            Some(_) => self.counters.hits_disk.fetch_add(1, Relaxed),
            None => self.counters.misses.fetch_add(1, Relaxed),
        };
        out
    }

    fn ram_best(&self, prompt: &[Token], limit: usize, at_least: usize) -> Option<Hit> {
        let mut ram = lock(&self.ram);
        ram.clock += 1;
        let clock = ram.clock;
        let e = ram
            .entries
            .iter_mut()
            .map(|e| (common_prefix(&e.tokens, prompt).min(limit), e))
            .filter(|(n, _)| *n >= at_least)
            .max_by_key(|(n, _)| *n)?;
        e.1.last_used = clock;
        Some(Hit { n: e.0, tokens: e.1.tokens.clone(), state: e.1.state.clone(), tier: Tier::Ram, file: None, load_time: None })
    }

    /// The state of `tokens` (from disk file `file`) proved bad (reported by the caller): it is
    /// dropped from RAM and its file deleted, so no request meets it again.
    pub fn reject(&self, tokens: &[Token], file: Option<&str>) {
        self.counters.rejected.fetch_add(1, Relaxed);
        lock(&self.ram).drop_tokens(tokens);
        if let Some(d) = &self.disk {
            d.reject(file.unwrap_or(&d.name_of(tokens)));
        }
    }

    /// The longest prefix of `tokens` a RAM entry already holds (what keeping them would add
    /// nothing for).
    pub fn holds(&self, tokens: &[Token]) -> usize {
        lock(&self.ram).entries.iter().map(|e| if e.tokens.len() <= tokens.len() { common_prefix(&e.tokens, tokens) } else { 0 }).max().unwrap_or(0)
    }

    /// `n` tokens of `hit` are in the context now.
    pub fn restored(&self, n: usize) {
        self.counters.restored_tokens.fetch_add(n as u64, Relaxed);
    }

    /// llama.cpp refused a state (counted; kept: a context too full to take it refuses too).
    pub fn refused(&self) {
        self.counters.refused.fetch_add(1, Relaxed);
    }

    /// Keeps the state of a sequence holding `tokens`: in RAM (evicting the entries used least
    /// recently past the budget, and those whose tokens it extends), and on disk. `wait`: block
    /// until the disk writer takes it (the process is ending).
    pub fn keep(&self, tokens: Vec<Token>, state: Vec<u8>, wait: bool) {
        self.counters.stored.fetch_add(1, Relaxed);
        let state = Arc::new(state);
        if let Some(d) = &self.disk {
            d.put(tokens.clone(), state.clone(), wait);
        }
        let size = state.len() as u64 + tokens.len() as u64 * 4;
        if size > self.ram_budget {
            return;
        }
        let mut ram = lock(&self.ram);
        let dominated = |e: &RamEntry| tokens.starts_with(&e.tokens);
        let freed: u64 = ram.entries.iter().filter(|e| dominated(e)).map(entry_bytes).sum();
        ram.entries.retain(|e| !dominated(e));
        ram.bytes -= freed;
        while ram.bytes + size > self.ram_budget {
            let Some(i) = (0..ram.entries.len()).min_by_key(|&i| ram.entries[i].last_used) else { break };
            let e = ram.entries.swap_remove(i);
            ram.bytes -= entry_bytes(&e);
            self.counters.evictions.fetch_add(1, Relaxed);
        }
        ram.clock += 1;
        let last_used = ram.clock;
        ram.bytes += size;
        ram.entries.push(RamEntry { tokens, state, last_used });
    }

    /// Waits for the disk writer to finish what it was given.
    pub fn flush(&self) {
        if let Some(d) = &self.disk {
            d.flush();
        }
    }

    /// For pool stats: bytes, entries and counters of each tier.
    pub fn stats(&self) -> Value {
        let ram = lock(&self.ram);
        let c = &self.counters;
        let mut v = json!({
            "ram_budget": self.ram_budget,
            "ram_bytes": ram.bytes,
            "ram_entries": ram.entries.len(),
            "hits_ram": c.hits_ram.load(Relaxed),
            "hits_disk": c.hits_disk.load(Relaxed),
            "misses": c.misses.load(Relaxed),
            "stored": c.stored.load(Relaxed),
            "ram_evictions": c.evictions.load(Relaxed),
            "restored_tokens": c.restored_tokens.load(Relaxed),
            "states_refused": c.refused.load(Relaxed),
            "states_rejected": c.rejected.load(Relaxed),
        });
        if let (Some(d), Some(obj)) = (&self.disk, v.as_object_mut()) {
            if let Value::Object(more) = d.stats() {
                obj.extend(more);
            }
        }
        v
    }
}

fn entry_bytes(e: &RamEntry) -> u64 {
    e.state.len() as u64 + e.tokens.len() as u64 * 4
}

#[cfg(test)]
mod tests;
