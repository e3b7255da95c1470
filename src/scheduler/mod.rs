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
mod drafting;
mod job;
mod kv_state;
mod shared;
mod slots;
mod worker;

use crate::cost::Costs;
use crate::error::{Error, ErrorCode, Result};
use crate::model::Model;
use crate::prompt_cache::{self, PromptCache};
use crate::sys;
use crate::threads::ComputePool;
use crate::tokens::Token;
use job::JobState;
use shared::{lock, Context, Job, Mailbox, Shared, State, TILE_ROWS};
pub use drafting::{DraftPlan, Proposer};
pub use shared::{Admission, Msg, SchedConfig};
use slots::SlotTable;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use worker::Worker;

pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The context, for llama.cpp's draft-model check (src/scheduler/drafting.rs).
    ctx: ContextRef,
    /// Speculative decoding's drafter, made by [`Scheduler::open_drafters`].
    drafters: Option<crate::speculate::Drafters>,
}

/// The scheduler's context as its handle sees it: its address, for the llama.cpp call that reads
/// what it was made from (its model: the draft model's vocabulary check), never for decoding.
struct ContextRef(*const sys::llama_context);
// SAFETY: only handed to llama.cpp calls that read the context's model (drafting.rs).
unsafe impl Send for ContextRef {}
// SAFETY: as above.
unsafe impl Sync for ContextRef {}

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
        // Reusing as cold, a prompt's chunks each hold a tile, so a physical batch holds two.
        config.reuse_as_cold &= config.n_ubatch as usize >= 2 * TILE_ROWS;
        config.prompt_cache.as_cold = config.reuse_as_cold;
        let ctx = new_context(model, &config)?;
        let cache = match open_cache(model, &config) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: created above, used by nothing else.
                unsafe { sys::llama_free(ctx) };
                return Err(e);
            }
        };
        let state = State {
            jobs: Vec::new(),
            slots: slot_table(&config, cache.enabled()),
            next_id: 0,
            shutdown: false,
            lost: None,
            reserved: 0,
        };
        let costs = Arc::new(Costs::new(config.on_device));
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            wake: Condvar::new(),
            config,
            submits: std::sync::atomic::AtomicU64::new(0),
            cache,
            costs,
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
        Ok(Scheduler { shared, thread: Some(thread), ctx: ContextRef(ctx), drafters: None })
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
            "speculative": self.drafters.as_ref().map(|d| d.stats()),
        })
    }

    /// Makes this scheduler's drafter (src/scheduler/drafting.rs), which [`Scheduler::drafters`]
    /// hands to its requests. Refused (`invalid_argument`) for a draft model whose vocabulary is
    /// not the target's.
    pub fn open_drafters(&mut self, plan: DraftPlan) -> Result<()> {
        // SAFETY: this scheduler's live context, read for its model during the call.
        let d = unsafe { drafting::open(plan, &self.shared.config, self.ctx.0, self.costs())? };
        self.drafters = Some(d);
        Ok(())
    }

    /// The drafter its requests speculate with (None: none was opened).
    pub fn drafters(&self) -> Option<&crate::speculate::Drafters> {
        self.drafters.as_ref()
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

/// The scheduler's context: a unified KV cache of `n_ctx` cells for `n_slots` sequences, made
/// through the guarded path (an RPC server lost meanwhile is an error, not an abort).
fn new_context(model: &Model, config: &SchedConfig) -> Result<*mut sys::llama_context> {
    // SAFETY: default params adjusted; a live model.
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
    if ctx.is_null() {
        return Err(Error::new(
            ErrorCode::ContextCreateFailed,
            format!(
                "llama.cpp could not create a context with n_ctx={}, n_batch={}, {} sequences",
                config.n_ctx, config.n_batch, config.n_slots
            ),
        ));
    }
    Ok(ctx)
}

/// The context's sequences, empty: kept in the prompt cache when they leave if there is one.
fn slot_table(config: &SchedConfig, caching: bool) -> SlotTable {
    let table = SlotTable::new(config.n_slots).keeping(if caching { prompt_cache::MIN_TOKENS } else { usize::MAX });
    if config.reuse_as_cold {
        table.reusing_as_cold(TILE_ROWS)
    } else {
        table
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
        // Replay mode's states are computed with other kernels: never restored by the other
        // mode. (A context reusing as cold marks its files instead: prompt_cache::Settings.)
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
        let job = Job {
            id,
            tokens,
            prompt_len,
            state: JobState::Queued,
            mailbox: mailbox.clone(),
            spare: Vec::new(),
            rows: 1,
            keep: usize::MAX,
            probation: None,
            exact,
        };
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
