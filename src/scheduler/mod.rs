//! The scheduler: one llama_context per engine or pool, whose sequences every request on it
//! shares. It admits requests (a bounded queue), finds each prompt's longest prefix already in
//! the KV cache of *any* sequence (copied with `llama_memory_seq_cp` instead of evaluated, also
//! waiting for a prefix another request is evaluating right now), batches every request's next
//! step into one `llama_decode` per iteration (generation tokens first, then prompt chunks up to
//! `n_batch`), and keeps the KV cache within its budget by evicting idle sequences (LRU) and, as
//! a last resort, parking the youngest request until another one leaves.
//!
//! All llama.cpp calls on the context happen on the scheduler's own thread. Requests run on their
//! callers' threads ([`Ticket`]): they receive progress, then a copy of their logits row, sample,
//! and submit the next token. Events to hosts are sent by those threads, never by this one.
//!
//! Decisions are pure and tested apart: a request's lifecycle is one [`job::JobState`], the
//! sequences are a [`slots::SlotTable`] that returns the KV operations to apply ([`KvOp`]). This
//! module owns the thread, the context and the batch, and applies them.

mod caching;
mod job;
mod kv_state;
mod slots;

use crate::error::{Error, ErrorCode, Result};
use crate::model::Model;
use crate::cost::Costs;
use crate::prompt_cache::{self, PromptCache};
use crate::sys;
use crate::threads::{ComputePool, Tuner};
use crate::tokens::Token;
use job::JobState;
use slots::{KvOp, Prefix, Room, SlotTable};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// one per drafted token and one more: [`Ticket::submit_draft`]), and how long the
    /// `llama_decode` that made them took.
    Logits(Vec<f32>, Duration),
    Failed(Error),
}

#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<Msg>>,
    ready: Condvar,
}

impl Mailbox {
    fn post(&self, m: Msg) {
        lock(&self.queue).push_back(m);
        self.ready.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request as the scheduler sees it.
struct Job {
    /// Grows with every request: a larger id is a younger request.
    id: u64,
    /// Every token this request wants in its sequence: the prompt, then each submitted token.
    tokens: Vec<Token>,
    prompt_len: usize,
    state: JobState,
    mailbox: Arc<Mailbox>,
    /// The logits row the request gave back with its last step, filled again for the next one
    /// (no allocation per token: a row is n_vocab floats).
    spare: Vec<f32>,
    /// Logits rows wanted at the end of `tokens` once they are decoded: 1, or a draft's length
    /// and 1 (speculative decoding verifies every drafted token).
    rows: usize,
    /// Its sequence keeps at most this many tokens: drafted tokens taken back leave it before
    /// the next decode (usize::MAX: nothing taken back).
    keep: usize,
    /// Its sequence was restored from the prompt cache and has not been decoded into since: a
    /// decode that fails or gives non-finite logits then reads the prompt cold instead, once.
    probation: Option<Origin>,
    /// Replay mode: its steps run on reference kernels and it reuses no cells computed otherwise.
    exact: bool,
}

/// Where a restored state came from (src/scheduler/caching.rs), to delete it if it proves bad.
#[derive(Debug, Clone)]
struct Origin {
    tokens: Vec<Token>,
    file: Option<String>,
}

impl Job {
    /// Tokens it wants in sequence `seq` that are not decoded yet.
    fn pending(&self, slots: &SlotTable, seq: usize) -> usize {
        self.tokens.len().saturating_sub(slots.held(seq).len())
    }
}

struct State {
    jobs: Vec<Job>,
    slots: SlotTable,
    next_id: u64,
    shutdown: bool,
    /// Why the context is unusable (a lost RPC server), for stats.
    lost: Option<String>,
    /// Places taken by [`Scheduler::reserve`] whose request is still making its prompt.
    reserved: usize,
}

impl State {
    /// Requests admitted (running) and waiting (queued, or reserved and making their prompt).
    fn counts(&self) -> (usize, usize) {
        let running = self.jobs.iter().filter(|j| j.state.is_admitted()).count();
        let queued = self.jobs.iter().filter(|j| j.state.is_queued()).count();
        (running, queued + self.reserved)
    }

    /// What the requests in the scheduler hold on the host: their token lists (prompt and
    /// reply). Logits rows in flight (n_vocab floats each) are bounded by `n_parallel`.
    fn request_bytes(&self) -> usize {
        self.jobs.iter().filter(|j| !j.state.has_left()).map(|j| j.tokens.capacity() * size_of::<Token>()).sum()
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    config: SchedConfig,
    /// Tokens submitted so far (any request): the scheduler watches it while it briefly spins
    /// for a request that is sampling ([`SUBMIT_SPIN`]).
    submits: std::sync::atomic::AtomicU64,
    cache: PromptCache,
    /// What this context's device charges for the work llb can trade (src/cost.rs).
    costs: Arc<Costs>,
}

/// How long the scheduler spins, before it sleeps, for the token of a request that got its
/// logits: sampling takes tens of µs, and waking a sleeping thread costs as much again on every
/// token (issue 31: every host-side µs per token shows on a GPU).
const SUBMIT_SPIN: Duration = Duration::from_micros(60);

/// The query rows of ggml's CPU flash-attention tile (`GGML_FA_TILE_Q` in the pinned
/// ggml-cpu/common.h): a batch of at least this many rows takes the tiled kernel.
const TILE_ROWS: usize = 64;

pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The context, for llama.cpp's draft-model check ([`Scheduler::context_for_drafter`]).
    ctx: ContextRef,
}

/// The scheduler's context as others may see it: its address, for calls that read what it was
/// made from (its model), never for decoding.
struct ContextRef(*const sys::llama_context);
// SAFETY: only handed to llama.cpp calls that read the context's model (see context_for_drafter).
unsafe impl Send for ContextRef {}
// SAFETY: as above.
unsafe impl Sync for ContextRef {}

struct Context(*mut sys::llama_context);
// SAFETY: the context is used by the scheduler thread only.
unsafe impl Send for Context {}

impl Scheduler {
    /// Creates the context (unified KV cache, `n_slots` sequences) and starts the thread.
    ///
    /// The scheduler must be dropped before `model` (its context refers to the model): the
    /// engine and pool declare it first.
    pub fn start(model: &Model, mut config: SchedConfig) -> Result<Scheduler> {
        if config.deterministic && !config.exact_reuse {
            // Replay mode reads every prompt cold where a cached prefix is not bit-exact: keeping
            // states would only cost their copies.
            config.prompt_cache.ram_bytes = 0;
            config.prompt_cache.dir = None;
        }
        // SAFETY: default params adjusted; a NULL context is handled.
        let ctx = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = config.n_ctx;
            cp.n_batch = config.n_batch;
            cp.n_ubatch = config.n_ubatch;
            cp.n_seq_max = config.n_slots as u32;
            cp.kv_unified = true;
            cp.n_threads = config.n_threads as i32;
            cp.n_threads_batch = config.n_threads as i32;
            cp.no_perf = true;
            config.backend.apply(&mut cp);
            crate::backend::init_context(model.raw(), cp)?
        };
        let cache = open_cache(model, &config);
        if ctx.is_null() {
            return Err(Error::new(
                ErrorCode::ContextCreateFailed,
                format!(
                    "llama.cpp could not create a context with n_ctx={}, n_batch={}, {} sequences",
                    config.n_ctx, config.n_batch, config.n_slots
                ),
            ));
        }
        let cache = match cache {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: created above, used by nothing else.
                unsafe { sys::llama_free(ctx) };
                return Err(e);
            }
        };
        let state = State {
            jobs: Vec::new(),
            slots: SlotTable::new(config.n_slots).keeping(if cache.enabled() { prompt_cache::MIN_TOKENS } else { usize::MAX }),
            next_id: 0,
            shutdown: false,
            lost: None,
            reserved: 0,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            wake: Condvar::new(),
            config,
            submits: std::sync::atomic::AtomicU64::new(0),
            cache,
            costs: Arc::default(),
        });
        // SAFETY: live context; the worker frees the pool after the context.
        let pool = unsafe { ComputePool::attach(ctx, shared.config.n_threads, shared.config.thread_poll) };
        // SAFETY: live context of `model`, used by this thread only until the worker starts.
        unsafe { warm_up(ctx, model, shared.config.n_threads) };
        let worker = Worker::new(shared.clone(), model, Context(ctx), pool);
        let thread = std::thread::Builder::new()
            .name("llb-scheduler".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::new(ErrorCode::Internal, format!("cannot start the scheduler thread: {e}")))?;
        Ok(Scheduler { shared, thread: Some(thread), ctx: ContextRef(ctx) })
    }

    /// The context, for llama.cpp's draft-simple drafter, which reads the target's model from it
    /// once, when it is made (its vocabulary check). Nothing may decode on it but the scheduler.
    pub fn context_for_drafter(&self) -> *const sys::llama_context {
        self.ctx.0
    }

    /// Takes one of the `n_parallel + max_queue` places of this scheduler, before the request's
    /// prompt is made: the check and the taking are one step under the state's lock, so however
    /// many threads arrive at once, `running + queued` never exceeds the bound. Fails at once
    /// with `queue_full` (no prompt rendered, no token made) when every place is taken.
    pub fn reserve(&self) -> Result<Reservation> {
        let mut st = lock(&self.shared.state);
        let c = &self.shared.config;
        let (running, queued) = st.counts();
        if running + queued >= c.n_parallel + c.max_queue {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{running} requests are running and {queued} are waiting (n_parallel {}, max_queue {}): retry later",
                    c.n_parallel, c.max_queue
                ),
            ));
        }
        st.reserved += 1;
        Ok(Reservation { shared: self.shared.clone(), held: true })
    }

    /// A snapshot for hosts and tests: sequences, what they hold, running and queued requests.
    pub fn stats(&self) -> serde_json::Value {
        // The prompt cache's own stats are taken outside the state's lock (they may list a
        // directory): a host polling stats never holds up the scheduler.
        let prompt_cache = self.shared.cache.stats();
        let st = lock(&self.shared.state);
        let held = st.slots.tokens_held();
        let (running, queued) = st.counts();
        serde_json::json!({
            "n_slots": held.len(),
            "n_parallel": self.shared.config.n_parallel,
            "n_ctx": self.shared.config.n_ctx,
            "running": running,
            "queued": queued,
            "preparing": st.reserved,
            "max_queue": self.shared.config.max_queue,
            "request_bytes": st.request_bytes(),
            "tokens_held": held,
            "lost": st.lost,
            "prompt_cache": prompt_cache,
            "cost_model": self.shared.costs.stats(),
        })
    }

    /// The costs this scheduler measures, for the decisions its requests make (drafts).
    pub fn costs(&self) -> Arc<Costs> {
        self.shared.costs.clone()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // What the worker stashed as it ended is on disk before the handle is gone.
        self.shared.cache.flush();
    }
}

/// The prompt cache of `config`, its disk files keyed by the model's file and this context's
/// state format.
fn open_cache(model: &Model, config: &SchedConfig) -> Result<PromptCache> {
    let b = &config.backend;
    let format = format!(
        "llb {}; llama.cpp {}; type_k {}; type_v {}; flash_attn {}{}",
        env!("CARGO_PKG_VERSION"),
        crate::version::pin::COMMIT,
        b.type_k,
        b.type_v,
        b.flash_attn,
        // Replay mode's states are computed with other kernels: never restored by the other mode.
        if config.deterministic { "; kernels reference" } else { "" }
    );
    PromptCache::open(&config.prompt_cache, || prompt_cache::key(&model.path, &format)).map_err(|e| {
        let dir = config.prompt_cache.dir.as_deref().unwrap_or(std::path::Path::new(""));
        Error::new(
            ErrorCode::InvalidArgument,
            format!("field `prompt_cache.dir`: cannot use {} for the prompt cache: {e}", dir.display()),
        )
    })
}

/// A place taken in the scheduler for a request that is still making its prompt. Joining turns
/// it into a queued job; dropping it (the prompt failed, or was too long) gives the place back.
pub struct Reservation {
    shared: Arc<Shared>,
    /// False once joined: the job holds the place from then on.
    held: bool,
}

impl Reservation {
    /// Queues the request whose prompt is `tokens` in the place this reservation holds;
    /// `exact`: it runs in replay mode (docs/design.md, "Determinism").
    pub fn join(mut self, tokens: Vec<Token>, exact: bool) -> Ticket {
        let shared = self.shared.clone();
        let mut st = lock(&shared.state);
        st.next_id += 1;
        let id = st.next_id;
        let mailbox = Arc::new(Mailbox::default());
        let prompt_len = tokens.len();
        let job = Job { id, tokens, prompt_len, state: JobState::Queued, mailbox: mailbox.clone(), spare: Vec::new(), rows: 1, keep: usize::MAX, probation: None, exact };
        st.jobs.push(job);
        // The job now holds the place: the reservation's Drop must not give it back.
        st.reserved -= 1;
        self.held = false;
        drop(st);
        shared.wake.notify_all();
        Ticket { shared, id, mailbox }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            lock(&self.shared.state).reserved -= 1;
        }
    }
}

/// A request's handle on its caller's thread. Dropping it leaves the scheduler (a request that
/// ends, is cancelled, or panicked); the tokens its sequence holds stay for reuse unless it
/// panicked.
pub struct Ticket {
    shared: Arc<Shared>,
    id: u64,
    mailbox: Arc<Mailbox>,
}

impl Ticket {
    /// Waits for the next message.
    pub fn recv(&self) -> Msg {
        let mut q = lock(&self.mailbox.queue);
        loop {
            if let Some(m) = q.pop_front() {
                return m;
            }
            q = self.mailbox.ready.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The next message, if one comes within `wait`.
    pub fn recv_within(&self, wait: Duration) -> Option<Msg> {
        let q = lock(&self.mailbox.queue);
        let (mut q, _) =
            self.mailbox.ready.wait_timeout_while(q, wait, |q| q.is_empty()).unwrap_or_else(|p| p.into_inner());
        q.pop_front()
    }

    /// Submits the token sampled from the last logits, with any text forced after it (one
    /// multi-token entry of the next batch); the logits after the last one come as the next
    /// message, in `row`, the last row given back for reuse.
    pub fn submit(&self, tokens: &[Token], row: Vec<f32>) {
        self.submit_draft(0, tokens, &[], row);
    }

    /// Speculative decoding's step: takes back the request's last `retract` tokens (drafted
    /// tokens the model did not accept: they leave the sequence), then submits `tokens` and a
    /// `draft` after them. The next message holds `draft.len() + 1` logits rows: after the last
    /// of `tokens`, then after each drafted token.
    pub fn submit_draft(&self, retract: usize, tokens: &[Token], draft: &[Token], row: Vec<f32>) {
        let mut st = lock(&self.shared.state);
        if let Some(j) = st.jobs.iter_mut().find(|j| j.id == self.id) {
            let keep = j.tokens.len().saturating_sub(retract).max(j.prompt_len);
            j.tokens.truncate(keep);
            j.keep = j.keep.min(keep);
            j.tokens.extend_from_slice(tokens);
            j.tokens.extend_from_slice(draft);
            j.rows = draft.len() + 1;
            j.state.submitted();
            j.spare = row;
        }
        drop(st);
        self.shared.submits.fetch_add(1, std::sync::atomic::Ordering::Release);
        self.shared.wake.notify_all();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        if let Some(j) = st.jobs.iter_mut().find(|j| j.id == self.id) {
            j.state.leave(std::thread::panicking());
        }
        drop(st);
        self.shared.wake.notify_all();
    }
}

/// llama-server's warm-up (common_init_from_params): one decode of BOS and EOS with every
/// weight in the graph, then the cache cleared. The first request then pays no first touch of
/// the weights and no first allocation of the graph: a fresh engine's first request was ~45 ms
/// slower than its second on the 151k fixture without it, on a GPU the first kernel launches.
/// A failure is not one of the context's: the first request meets it again and reports it.
///
/// Like every decode, it runs on threads taken from the process's budget (`n_threads` wanted):
/// engines opened at once never run more compute threads than cores.
///
/// # Safety
/// `ctx` is a live context of `model`, used by no other thread during the call.
unsafe fn warm_up(ctx: *mut sys::llama_context, model: &Model, n_threads: usize) {
    let mut tmp = model.warm_up_tokens();
    let permit = crate::threads::acquire(n_threads);
    // SAFETY: the caller's live context and model; the batch views `tmp`, alive for the call.
    unsafe {
        sys::llama_set_n_threads(ctx, permit.n as i32, permit.n as i32);
        sys::llama_set_warmup(ctx, true);
        let rc = crate::backend::decode(ctx, sys::llama_batch_get_one(tmp.as_mut_ptr(), tmp.len() as i32));
        sys::llama_memory_clear(sys::llama_get_memory(ctx), true);
        sys::llama_synchronize(ctx);
        sys::llama_set_warmup(ctx, false);
        if crate::debug::enabled() {
            eprintln!("[llb] warm-up decode: {rc:?}");
        }
    }
}

/// Spins (without the state's lock) until a token is submitted after `seen`, or `limit` passed.
fn spin_for_submit(shared: &Shared, seen: u64, limit: Duration) {
    let start = Instant::now();
    while shared.submits.load(std::sync::atomic::Ordering::Acquire) == seen && start.elapsed() < limit {
        std::hint::spin_loop();
    }
}

/// One entry of a batch: `n` tokens of a job's sequence starting at position `pos`, the logits
/// of the last `rows` of them wanted.
struct Entry {
    job: u64,
    slot: usize,
    pos: usize,
    tokens: Vec<Token>,
    rows: usize,
    /// Its job runs in replay mode.
    exact: bool,
}

/// The scheduler thread's side: owns the context and the batch.
struct Worker {
    shared: Arc<Shared>,
    ctx: Context,
    mem: sys::llama_memory_t,
    batch: sys::llama_batch,
    n_vocab: usize,
    /// How long the last decode took: the barrier waits for stragglers up to it.
    last_decode: Duration,
    /// The context's compute threads (None: ggml's per-graph pools).
    pool: Option<ComputePool>,
    /// How many of them a decode asks for (adaptive_threads).
    tuner: Option<Tuner>,
    /// Some layers live on RPC servers.
    uses_rpc: bool,
    /// Set when a decode lost an RPC server: the context is unusable, every later request fails
    /// with this error (the engine or pool must be recreated).
    lost: Option<Error>,
    /// The model's memory is a plain KV cache (not recurrent or hybrid): states are checked
    /// cell by cell before a restore (src/scheduler/kv_state.rs).
    plain_kv: bool,
    /// Whether the context's CPU backend computes with reference kernels now (None: not set yet).
    reference: Option<bool>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: created in Worker::new / Scheduler::start, freed once, before the model (the
        // scheduler is dropped before its model: see Scheduler::start).
        unsafe {
            sys::llama_batch_free(self.batch);
            if !crate::backend::must_leak(self.uses_rpc) {
                sys::llama_free(self.ctx.0);
                if let Some(pool) = self.pool.take() {
                    pool.free();
                }
            }
        }
    }
}

// SAFETY: the worker and everything it owns live on the scheduler thread only (moved there once).
unsafe impl Send for Worker {}

impl Worker {
    fn new(shared: Arc<Shared>, model: &Model, ctx: Context, pool: Option<ComputePool>) -> Worker {
        let n_batch = shared.config.n_batch.max(1) as i32;
        // SAFETY: a live context; the batch is freed in Drop.
        let (mem, batch) = unsafe { (sys::llama_get_memory(ctx.0), sys::llama_batch_init(n_batch, 0, 1)) };
        let n_vocab = model.n_vocab();
        let tuner = shared.config.adaptive_threads.then(|| Tuner::new(shared.config.n_threads));
        Worker {
            shared,
            ctx,
            mem,
            batch,
            n_vocab,
            last_decode: Duration::ZERO,
            pool,
            tuner,
            uses_rpc: model.uses_rpc,
            // SAFETY: a live model.
            plain_kv: unsafe { !sys::llama_model_is_recurrent(model.raw()) && !sys::llama_model_is_hybrid(model.raw()) },
            lost: None,
            reference: None,
        }
    }

    fn run(mut self) {
        while let Some(entries) = self.next_batch() {
            self.decode(entries);
        }
        if self.shared.cache.persists() {
            self.stash_all();
        }
    }

    /// Waits until there is work, then builds the next batch (None: shut down).
    fn next_batch(&mut self) -> Option<Vec<Entry>> {
        let shared = self.shared.clone();
        let mut st = lock(&shared.state);
        let mut spun = false;
        loop {
            if st.shutdown {
                return None;
            }
            self.housekeep(&mut st);
            // The barrier: requests that got logits last step are sampling; wait a little for
            // them so their tokens share one decode instead of splitting into half-full ones.
            let grace = self.last_decode.max(Duration::from_millis(2));
            let latest = st.jobs.iter().filter_map(|j| j.state.sampling_since()).max();
            if let Some(left) = latest.and_then(|t| grace.checked_sub(t.elapsed())) {
                let seen = shared.submits.load(std::sync::atomic::Ordering::Acquire);
                if !spun {
                    spun = true;
                    drop(st);
                    spin_for_submit(&shared, seen, left.min(SUBMIT_SPIN));
                    st = lock(&shared.state);
                    continue;
                }
                st = shared.wake.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0;
                continue;
            }
            let entries = self.build(&mut st);
            if !entries.is_empty() {
                return Some(entries);
            }
            st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Processes departures, admits queued requests and resolves awaited prefixes.
    fn housekeep(&mut self, st: &mut State) {
        let mut freed = false;
        let mut i = 0;
        while i < st.jobs.len() {
            let JobState::Left(departure) = st.jobs[i].state else {
                i += 1;
                continue;
            };
            st.jobs.remove(i);
            if let Some((seq, clear)) = departure.release() {
                let ops = st.slots.release(seq, clear);
                self.apply(&mut st.slots, ops);
                freed = true;
            }
        }
        if freed {
            st.jobs.iter_mut().for_each(|j| j.state.unpark());
        }
        self.admit(st);
        self.resolve_prefixes(st);
    }

    /// Applies the slot table's KV operations to the context's memory, in order; a cut
    /// llama.cpp refuses is replaced by what the table says instead.
    fn apply(&self, slots: &mut SlotTable, ops: Vec<KvOp>) {
        for (seq, tokens) in slots.take_leaving() {
            self.stash(seq, tokens, false, slots);
        }
        for op in ops {
            match op {
                KvOp::Clear { seq } => {
                    // SAFETY: live memory; removing a whole sequence never fails.
                    unsafe { sys::llama_memory_seq_rm(self.mem, seq as i32, -1, -1) };
                }
                KvOp::Truncate { seq, len, source } => {
                    // SAFETY: live memory; removes the positions of `seq` from `len` on, or
                    // nothing (false) when the memory cannot cut the sequence there.
                    if !unsafe { sys::llama_memory_seq_rm(self.mem, seq as i32, len as i32, -1) } {
                        let instead = slots.truncate_refused(seq, len, source);
                        self.apply(slots, instead);
                    }
                }
                KvOp::Copy { src, dst, n } => {
                    // SAFETY: live memory; both sequences exist (n_slots of them); `dst` shares
                    // the cells of positions [0, n) of `src`.
                    unsafe { sys::llama_memory_seq_cp(self.mem, src as i32, dst as i32, 0, n as i32) };
                }
            }
        }
    }

    /// Gives queued requests (oldest first) a sequence while fewer than `n_parallel` run.
    fn admit(&mut self, st: &mut State) {
        loop {
            let running = st.jobs.iter().filter(|j| j.state.is_admitted()).count();
            if running >= self.shared.config.n_parallel {
                return;
            }
            let Some(ji) = st.jobs.iter().position(|j| j.state.is_queued()) else { return };
            let max = self.kv_cells();
            if st.jobs[ji].tokens.len() >= max {
                let j = st.jobs.remove(ji);
                j.mailbox.post(Msg::Failed(Error::new(
                    ErrorCode::ContextOverflow,
                    format!(
                        "the prompt has {} tokens and the context holds {max} (n_ctx): shorten the conversation or raise n_ctx",
                        j.tokens.len()
                    ),
                )));
                continue;
            }
            if !self.place(st, ji) {
                return; // every sequence is busy
            }
        }
    }

    /// KV cells of the whole context (`n_ctx`), shared by all sequences: the most tokens one
    /// request can hold. (A request's own limit, `Chat.max_seq`, is checked before it joins.)
    fn kv_cells(&self) -> usize {
        self.shared.config.n_ctx as usize
    }

    /// Gives job `ji` a sequence holding the longest cached prefix of its prompt, or one that
    /// waits for a longer prefix another request is evaluating ([`SlotTable::place`]). False
    /// when every sequence is busy.
    fn place(&mut self, st: &mut State, ji: usize) -> bool {
        let job = &st.jobs[ji];
        let reuse = self.may_reuse(job);
        let running: Vec<(usize, &[Token])> = st
            .jobs
            .iter()
            .filter(|_| reuse)
            .filter_map(|j| Some((j.state.running_seq()?, &j.tokens[..j.prompt_len])))
            .collect();
        let Some(placed) = st.slots.place(if reuse { &job.tokens } else { &[] }, &running) else { return false };
        self.apply(&mut st.slots, placed.ops);
        let seq = placed.seq;
        match placed.prefix {
            Prefix::Awaited { src, upto } => st.jobs[ji].state = JobState::AwaitingPrefix { seq, src, upto },
            Prefix::Ready => {
                let admission = if reuse { self.restore(st, ji, seq) } else { Admission::default() };
                let job = &mut st.jobs[ji];
                job.state = JobState::Prefilling { seq };
                job.mailbox.post(Msg::Admitted(admission));
            }
        }
        true
    }

    /// Whether `job` may start from cells already computed (a kept sequence, another request's
    /// prompt, the prompt cache): always, but in replay mode only where those cells are what a
    /// cold read computes (reference kernels on every step, on CPU backends only).
    fn may_reuse(&self, job: &Job) -> bool {
        let c = &self.shared.config;
        !job.exact || (c.deterministic && c.exact_reuse)
    }

    /// Requests waiting for a prefix another one evaluates: copy it once it is there, or as much
    /// of it as there is once that request stopped evaluating it.
    fn resolve_prefixes(&mut self, st: &mut State) {
        for ji in 0..st.jobs.len() {
            let JobState::AwaitingPrefix { seq, src, upto } = st.jobs[ji].state else { continue };
            let tokens = &st.jobs[ji].tokens;
            let have = crate::tokens::common_prefix(st.slots.held(src), tokens).min(upto);
            let still_coming = st
                .jobs
                .iter()
                .any(|j| j.state.running_seq() == Some(src) && crate::tokens::common_prefix(&j.tokens, tokens) >= upto);
            if have < upto && still_coming {
                continue;
            }
            let ops = st.slots.fill(seq, src, &tokens[..have]);
            self.apply(&mut st.slots, ops);
            let job = &mut st.jobs[ji];
            job.state.prefix_ready();
            let cached = st.slots.held(seq).len();
            job.mailbox.post(Msg::Admitted(Admission { cached, ..Admission::default() }));
        }
    }

    /// The next batch: the next step of every generating request (one token, or a token and
    /// the text forced after it), then prompt chunks (oldest request first) up to `n_batch`
    /// tokens.
    fn build(&mut self, st: &mut State) -> Vec<Entry> {
        self.retract_drafts(st);
        let mut budget = self.shared.config.n_batch as usize;
        let mut entries = Vec::new();
        for generating in [true, false] {
            for j in &st.jobs {
                let Some((s, is_generating)) = j.state.runnable() else { continue };
                let pending = j.pending(&st.slots, s);
                if pending == 0 || budget == 0 || (is_generating || pending == 1) != generating {
                    continue;
                }
                let pos = st.slots.held(s).len();
                // Rows of logits come from one decode: a chunk ends before them or holds them all.
                let n = match pending.min(budget) {
                    n if n < pending && pending - n < j.rows => pending.saturating_sub(j.rows),
                    n => n,
                };
                if n == 0 {
                    continue;
                }
                budget -= n;
                entries.push(Entry {
                    job: j.id,
                    slot: s,
                    pos,
                    tokens: j.tokens[pos..pos + n].to_vec(),
                    rows: if n == pending { j.rows.min(n) } else { 0 },
                    exact: j.exact,
                });
            }
        }
        entries
    }

    /// Drafted tokens a request took back ([`Ticket::submit_draft`]) leave its sequence.
    fn retract_drafts(&mut self, st: &mut State) {
        for j in st.jobs.iter_mut().filter(|j| j.keep != usize::MAX) {
            let Some(seq) = j.state.running_seq() else { continue };
            if st.slots.held(seq).len() > j.keep {
                let op = st.slots.rollback(seq, j.keep);
                self.apply(&mut st.slots, vec![op]);
            }
            j.keep = usize::MAX;
        }
    }

    /// Decodes a batch; on success hands out progress and logits, on a full KV cache frees
    /// space (idle sequences first, then parks the youngest request) and leaves the rest for the
    /// next iteration.
    fn decode(&mut self, entries: Vec<Entry>) {
        if let Some(e) = self.lost.clone() {
            let shared = self.shared.clone();
            self.fail(&mut lock(&shared.state), &entries, e);
            return;
        }
        let n_tokens = self.fill_batch(&entries);
        self.choose_kernels(&entries, n_tokens);
        let want = match &mut self.tuner {
            Some(t) => t.choose(n_tokens),
            None => self.shared.config.n_threads,
        };
        let permit = crate::threads::acquire(want);
        let t = Instant::now();
        // SAFETY: live context.
        unsafe { sys::llama_set_n_threads(self.ctx.0, permit.n as i32, permit.n as i32) };
        // SAFETY: live context; the batch was filled within its capacity.
        let rc = unsafe { crate::backend::decode(self.ctx.0, self.batch) };
        if matches!(rc, Ok(0)) {
            // An asynchronous backend (CUDA) returns once the graph is queued: the step's time
            // includes the device's work only once it is done (docs/design.md, "Timings").
            // SAFETY: live context, on its thread.
            unsafe { sys::llama_synchronize(self.ctx.0) };
        }
        let took = t.elapsed();
        let used = permit.n;
        drop(permit);
        let shared = self.shared.clone();
        let mut st = lock(&shared.state);
        match rc {
            Ok(0) => {
                self.last_decode = took;
                if let Some(t) = &mut self.tuner {
                    let moved = t.record(n_tokens, used, took.as_secs_f64());
                    if let Some(n) = moved.filter(|_| crate::debug::enabled()) {
                        eprintln!("[llb] adaptive threads: decodes of {n_tokens} tokens now on {n} threads");
                    }
                }
                self.deliver(&mut st, &entries, took);
                // The step's cost: the device's work and copying its logits rows out (a
                // verifying batch's rows are host work a GPU's decode time does not show).
                let drafted = entries.iter().map(|e| e.rows.saturating_sub(1)).sum();
                self.shared.costs.record_batch(n_tokens, drafted, t.elapsed().as_secs_f64() * 1e3);
            }
            Ok(1) => self.make_room(&mut st, &entries),
            Ok(rc) if self.retry_cold(&mut st, &entries, &format!("llama_decode failed (code {rc})")) => {}
            Ok(rc) => self.fail(
                &mut st,
                &entries,
                Error::new(ErrorCode::Internal, format!("llama_decode failed (code {rc})")),
            ),
            Err(e) => {
                st.lost = Some(e.message.clone());
                self.lost = Some(e.clone());
                self.fail(&mut st, &entries, e);
            }
        }
    }

    /// Reference kernels for this step (docs/design.md, "Determinism") where a batch of fewer
    /// rows than ggml's flash-attention tile would otherwise take a path that depends on the
    /// thread count (one row past 512 cells: split-KV chunks, `ceil(n_kv / threads)` cells
    /// each), and for every step in replay mode. Batches of a tile or more keep the tiled
    /// kernels: per row they do not depend on the threads, and they read prompts faster.
    fn choose_kernels(&mut self, entries: &[Entry], n_tokens: usize) {
        let on = self.shared.config.deterministic || n_tokens < TILE_ROWS || entries.iter().any(|e| e.exact);
        if self.reference != Some(on) {
            // SAFETY: live context, between decodes, on its thread.
            unsafe { sys::llb_shim_context_reference_kernels(self.ctx.0, on as i32) };
            self.reference = Some(on);
        }
    }

    /// Fills the batch with the entries' tokens; returns how many.
    fn fill_batch(&mut self, entries: &[Entry]) -> usize {
        let b = &mut self.batch;
        let mut k = 0usize;
        for e in entries {
            for (i, &tok) in e.tokens.iter().enumerate() {
                // SAFETY: k < n_batch (build() keeps the sum of entries within it); every array
                // of the batch holds n_batch elements and one sequence id per token.
                unsafe {
                    *b.token.add(k) = tok;
                    *b.pos.add(k) = (e.pos + i) as i32;
                    *b.n_seq_id.add(k) = 1;
                    **b.seq_id.add(k) = e.slot as i32;
                    *b.logits.add(k) = (i + e.rows >= e.tokens.len()) as i8;
                }
                k += 1;
            }
        }
        b.n_tokens = k as i32;
        k
    }

    fn deliver(&mut self, st: &mut State, entries: &[Entry], took: Duration) {
        let mut row = 0i32;
        let mut bad_restores = Vec::new();
        for e in entries {
            st.slots.decoded(e.slot, &e.tokens);
            row += e.tokens.len() as i32;
            let Some(j) = st.jobs.iter_mut().find(|j| j.id == e.job && !j.state.has_left()) else { continue };
            if let JobState::Prefilling { .. } = j.state {
                let held = st.slots.held(e.slot).len();
                j.mailbox.post(Msg::Progress { done: held.min(j.prompt_len), total: j.prompt_len });
            }
            if e.rows > 0 {
                let rows = self.rows(row - e.rows as i32, e.rows, std::mem::take(&mut j.spare));
                if j.probation.is_some() {
                    if !rows.as_ref().is_some_and(|r| r.iter().all(|x| x.is_finite())) {
                        bad_restores.push(j.id);
                        continue;
                    }
                    j.probation = None;
                }
                let msg = match rows {
                    Some(rows) => Msg::Logits(rows, took),
                    None => Msg::Failed(Error::new(ErrorCode::Internal, "llama.cpp returned no logits")),
                };
                j.state.logits_delivered(Instant::now());
                j.mailbox.post(msg);
            }
        }
        for id in bad_restores {
            self.restart_cold(st, id, "its first logits are not finite");
        }
    }

    /// Copies `n` logits rows of the last decode, from batch index `first` on, into `out`
    /// (reused: no allocation per token). None when llama.cpp has no row there.
    fn rows(&self, first: i32, n: usize, mut out: Vec<f32>) -> Option<Vec<f32>> {
        out.clear();
        for i in first..first + n as i32 {
            // SAFETY: the rows of this entry's last `n` tokens were requested and decoded.
            let p = unsafe { sys::llama_get_logits_ith(self.ctx.0, i) };
            if p.is_null() {
                return None;
            }
            // SAFETY: a logits row holds n_vocab floats.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, self.n_vocab) });
        }
        Some(out)
    }

    /// The KV cache is full (llama.cpp restored it as before the call): evict the least recently
    /// used idle sequence; with none, park the youngest request in the batch (its sequence is
    /// cleared and rebuilt from its tokens once another request leaves); a request alone that
    /// does not fit fails with `context_overflow` ([`SlotTable::make_room`]).
    fn make_room(&mut self, st: &mut State, entries: &[Entry]) {
        let active = st.jobs.iter().filter(|j| j.state.is_active()).count();
        let batch: Vec<(u64, usize)> = entries.iter().map(|e| (e.job, e.slot)).collect();
        let Some(room) = st.slots.make_room(&batch, active) else { return };
        let (job, op) = match room {
            Room::Evicted(op) => (None, Some(op)),
            Room::Park { job, op } => (Some(job), Some(op)),
            Room::Overflow { job } => (Some(job), None),
        };
        if let Some(op) = op {
            self.apply(&mut st.slots, vec![op]);
        }
        let Some(j) = job.and_then(|id| st.jobs.iter_mut().find(|j| j.id == id)) else { return };
        if op.is_some() {
            j.state.park();
            return;
        }
        let n = j.tokens.len();
        j.mailbox.post(Msg::Failed(Error::new(
            ErrorCode::ContextOverflow,
            format!("the request needs {n} tokens of KV cache and the context holds {} (n_ctx)", self.kv_cells()),
        )));
        j.state.fail();
    }

    fn fail(&mut self, st: &mut State, entries: &[Entry], err: Error) {
        for e in entries {
            let op = st.slots.discard(e.slot);
            self.apply(&mut st.slots, vec![op]);
            if let Some(j) = st.jobs.iter_mut().find(|j| j.id == e.job) {
                j.mailbox.post(Msg::Failed(err.clone()));
                j.state.fail();
            }
        }
    }
}
