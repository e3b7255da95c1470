//! Prompt-cache files as tests damage them: read a file's tokens and state, seal new ones with
//! an installation's secret (or without it, as a forger must), and make a state wrong in the
//! ways bad luck can (tests/prompt_cache_attacks.rs, tests/prompt_cache_corpus.rs).

use std::path::{Path, PathBuf};

/// The Qwen2.5 template over a 32k-token SPM vocabulary (random weights): cheap to run.
pub fn model() -> PathBuf {
    let mut o = llb::fixture::FixtureOptions::new("llama-spm");
    o.template = Some(llb::fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
    super::fixture_with("pool-llama-spm-qwen2.5", &o)
}

/// The `.llbkv` files of `dir`, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.retain(|p| p.extension().is_some_and(|e| e == "llbkv"));
    v.sort();
    v
}

/// The layout of a format-3 file (docs/design.md, "The prompt cache"): header (its flags at
/// 52..56), tokens, state.
pub const HEADER: usize = 88;
pub const SIGNED: usize = 56;

/// A file's tokens and state.
pub fn open_file(path: &Path) -> (Vec<i32>, Vec<u8>) {
    let b = std::fs::read(path).unwrap();
    let n = u32::from_le_bytes(b[40..44].try_into().unwrap()) as usize;
    let tokens = b[HEADER..HEADER + 4 * n].chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    (tokens, b[HEADER + 4 * n..].to_vec())
}

/// Writes `tokens` and `state` to `path` under the header of `like` (its key), sealed with
/// `secret` (None: a MAC made without the installation's secret, as a forger must).
pub fn seal(path: &Path, like: &Path, tokens: &[i32], state: &[u8], secret: Option<&Path>) {
    let old = std::fs::read(like).unwrap();
    let mut head = old[..SIGNED].to_vec();
    head[40..44].copy_from_slice(&(tokens.len() as u32).to_le_bytes());
    head[44..52].copy_from_slice(&(state.len() as u64).to_le_bytes());
    let toks: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    let key: [u8; 32] = match secret {
        Some(p) => std::fs::read(p).unwrap().try_into().unwrap(),
        None => [0x5a; 32],
    };
    let mut h = blake3::Hasher::new_keyed(&key);
    h.update(&head);
    h.update(&toks);
    h.update(state);
    head.extend_from_slice(h.finalize().as_bytes());
    head.extend_from_slice(&toks);
    head.extend_from_slice(state);
    std::fs::write(path, head).unwrap();
}

/// What was wrong with a state that passed its MAC (bad luck, a bug, or someone who holds the
/// secret).
#[derive(Debug, Clone, Copy)]
pub enum Wrong {
    TooFewCells,
    EveryPositionZero,
    PositionMinusOne,
    NanInV,
}

/// `state` of `n` tokens, made wrong. The state's layout is the pinned llama.cpp's (one cell:
/// position, one sequence id; then K rows of every layer, then V rows).
pub fn make_wrong(how: Wrong, tokens: &mut Vec<i32>, state: &mut [u8]) {
    const CELLS: usize = 16;
    let n = tokens.len();
    let pos = |i: usize| CELLS + 12 * i;
    match how {
        Wrong::TooFewCells => tokens.extend([tokens[n - 1]; 5]),
        Wrong::EveryPositionZero => (0..n).for_each(|i| state[pos(i)..pos(i) + 4].copy_from_slice(&0i32.to_le_bytes())),
        Wrong::PositionMinusOne => state[pos(0)..pos(0) + 4].copy_from_slice(&(-1i32).to_le_bytes()),
        Wrong::NanInV => {
            let mut at = pos(n) + 4;
            let n_layer = u32::from_le_bytes(state[at..at + 4].try_into().unwrap()) as usize;
            at += 4;
            for _ in 0..n_layer {
                let row = u64::from_le_bytes(state[at + 4..at + 12].try_into().unwrap()) as usize;
                at += 12 + row * n;
            }
            let v = at + 12; // the first V layer's first value: f16 NaN
            state[v..v + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        }
    }
}

