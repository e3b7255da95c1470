//! What the scheduler's handles (src/scheduler/mod.rs) and its thread (worker.rs, caching.rs)
//! share: the config, the jobs and the slot table under one lock, each request's mailbox, and the
//! messages a request receives. It imports neither side, so neither imports the other.

use super::job::JobState;
use super::slots::SlotTable;
use crate::cost::Costs;
use crate::error::Error;
use crate::prompt_cache::{self, PromptCache};
use crate::sys;
use crate::tokens::Token;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How the scheduler is sized (derived from the engine or pool config).
#[derive(Debug, Clone)]
pub struct SchedConfig {
    /// KV cells of the whole context (shared by all sequences).
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// Sequences of the context: running requests plus idle conversations kept for reuse.
    pub n_slots: usize,
    /// Requests decoding at once; more wait in the queue.
    pub n_parallel: usize,
    /// Requests waiting for a turn; one more is `queue_full`.
    pub max_queue: usize,
    /// Compute threads a decode asks the process budget for.
    pub n_threads: usize,
    /// Adapt the decode threads to the cores the machine gives (src/threads.rs).
    pub adaptive_threads: bool,
    /// A device does every step's work (backend::device_does_the_work): the only case where a
    /// step's shape may cost (captured graphs), which the cost model then measures.
    pub on_device: bool,
    /// Polling level of the context's idle compute threads, 0-100.
    pub thread_poll: u32,
    /// Flash attention, KV cache types, KV offload.
    pub backend: crate::backend::ContextParams,
    /// Where conversations that leave the context are kept (src/prompt_cache/).
    pub prompt_cache: prompt_cache::Settings,
    /// Replay mode for every request: the context computes every step with reference kernels.
    pub deterministic: bool,
    /// Every step computes on CPU backends (no GPU or RPC device in the process), where
    /// reference kernels make a cell's bits independent of the batch it was computed in: a
    /// cached prefix then equals a cold read (docs/design.md, "Determinism").
    pub exact_reuse: bool,
    /// The default mode of a context of one sequence on CPU backends: a prompt reuses only the
    /// cells a cold read computes the same way, so a kept or restored prefix gives the cold
    /// reply ([`super::slots::SlotTable::reusing_as_cold`]).
    pub reuse_as_cold: bool,
}

/// How a request got its sequence.
#[derive(Debug, Default)]
pub struct Admission {
    /// Prompt tokens the sequence already held (those restored included).
    pub cached: usize,
    /// Of those, the ones restored from the prompt cache, and how long that took.
    pub restored: usize,
    pub restore_time: Duration,
    /// Prompt-cache files found bad on the way (ignored and deleted).
    pub warnings: Vec<String>,
}

/// What a request's caller receives.
pub enum Msg {
    /// The request got a sequence.
    Admitted(Admission),
    /// Prompt evaluation progressed.
    Progress {
        done: usize,
        total: usize,
    },
    /// The logits rows of the request's last tokens (a copy: n_vocab floats each; one row, or
    /// one per drafted token and one more: [`super::Ticket::submit_draft`]), and how long the
    /// `llama_decode` that made them took.
    Logits(Vec<f32>, Duration),
    Failed(Error),
}

#[derive(Default)]
pub(super) struct Mailbox {
    pub(super) queue: Mutex<VecDeque<Msg>>,
    pub(super) ready: Condvar,
}

impl Mailbox {
    pub(super) fn post(&self, m: Msg) {
        lock(&self.queue).push_back(m);
        self.ready.notify_one();
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request as the scheduler sees it.
pub(super) struct Job {
    /// Grows with every request: a larger id is a younger request.
    pub(super) id: u64,
    /// Every token this request wants in its sequence: the prompt, then each submitted token.
    pub(super) tokens: Vec<Token>,
    pub(super) prompt_len: usize,
    pub(super) state: JobState,
    pub(super) mailbox: Arc<Mailbox>,
    /// The logits row the request gave back with its last step, filled again for the next one
    /// (no allocation per token: a row is n_vocab floats).
    pub(super) spare: Vec<f32>,
    /// Logits rows wanted at the end of `tokens` once they are decoded: 1, or a draft's length
    /// and 1 (speculative decoding verifies every drafted token).
    pub(super) rows: usize,
    /// Its sequence keeps at most this many tokens: drafted tokens taken back leave it before
    /// the next decode (usize::MAX: nothing taken back).
    pub(super) keep: usize,
    /// Its sequence was restored from the prompt cache and has not been decoded into since: a
    /// decode that fails or gives non-finite logits then reads the prompt cold instead, once.
    pub(super) probation: Option<Origin>,
    /// Replay mode: its steps run on reference kernels and it reuses no cells computed otherwise.
    pub(super) exact: bool,
}

/// Where a restored state came from (src/scheduler/caching.rs), to delete it if it proves bad.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    pub(super) tokens: Vec<Token>,
    pub(super) file: Option<String>,
}

impl Job {
    /// Tokens it wants in sequence `seq` that are not decoded yet.
    pub(super) fn pending(&self, slots: &SlotTable, seq: usize) -> usize {
        self.tokens.len().saturating_sub(slots.held(seq).len())
    }
}

pub(super) struct State {
    pub(super) jobs: Vec<Job>,
    pub(super) slots: SlotTable,
    pub(super) next_id: u64,
    pub(super) shutdown: bool,
    /// Why the context is unusable (a lost RPC server), for stats.
    pub(super) lost: Option<String>,
    /// Places taken by [`super::Scheduler::reserve`] whose request is still making its prompt.
    pub(super) reserved: usize,
}

impl State {
    /// Requests admitted (running) and waiting (queued, or reserved and making their prompt).
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.running(), self.queued() + self.reserved)
    }

    /// Requests admitted: holding a sequence, not left.
    pub(super) fn running(&self) -> usize {
        self.jobs.iter().filter(|j| j.state.is_admitted()).count()
    }

    /// Requests waiting in the queue for a lane or for cells.
    pub(super) fn queued(&self) -> usize {
        self.jobs.iter().filter(|j| j.state.is_queued()).count()
    }

    /// What the requests in the scheduler hold on the host: their token lists (prompt and
    /// reply). Logits rows in flight (n_vocab floats each) are bounded by `n_parallel`.
    pub(super) fn request_bytes(&self) -> usize {
        self.jobs.iter().filter(|j| !j.state.has_left()).map(|j| j.tokens.capacity() * size_of::<Token>()).sum()
    }
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) wake: Condvar,
    pub(super) config: SchedConfig,
    /// Tokens submitted so far (any request): the scheduler watches it while it briefly spins
    /// for a request that is sampling ([`SUBMIT_SPIN`]).
    pub(super) submits: std::sync::atomic::AtomicU64,
    pub(super) cache: PromptCache,
    /// What this context's device charges for the work llb can trade (src/cost.rs).
    pub(super) costs: Arc<Costs>,
}

/// How long the scheduler spins, before it sleeps, for the token of a request that got its
/// logits: sampling takes tens of µs, and waking a sleeping thread costs as much again on every
/// token (issue 31: every host-side µs per token shows on a GPU).
pub(super) const SUBMIT_SPIN: Duration = Duration::from_micros(60);

/// The query rows of ggml's CPU flash-attention tile (`GGML_FA_TILE_Q` in the pinned
/// ggml-cpu/common.h): a batch of at least this many rows takes the tiled kernel.
pub(super) const TILE_ROWS: usize = 64;

pub(super) struct Context(pub(super) *mut sys::llama_context);
// SAFETY: the context is used by the scheduler thread only.
unsafe impl Send for Context {}
