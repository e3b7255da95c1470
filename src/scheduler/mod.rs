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

use crate::error::{Error, ErrorCode, Result};
use crate::model::Model;
use crate::sys;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub type Token = sys::llama_token;

/// A prefix another request is still evaluating is worth waiting for from this many tokens on.
const MIN_SHARED_PREFIX: usize = 16;

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
}

/// What a request's caller receives.
pub enum Msg {
    /// The request got a sequence; `cached` prompt tokens were already in the KV cache.
    Admitted {
        cached: usize,
    },
    /// Prompt evaluation progressed.
    Progress {
        done: usize,
        total: usize,
    },
    /// The logits row after the request's last token (a copy: n_vocab floats).
    Logits(Vec<f32>),
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Queued,
    /// Waits until sequence `src` holds `upto` tokens of this prompt (another request is
    /// evaluating them), then copies them.
    AwaitPrefix {
        src: usize,
        upto: usize,
    },
    Running,
}

struct Job {
    id: u64,
    /// Every token this request wants in its sequence: the prompt, then each submitted token.
    tokens: Vec<Token>,
    prompt_len: usize,
    slot: Option<usize>,
    phase: Phase,
    /// Logits were delivered and the caller has not answered yet (since when).
    outstanding: Option<Instant>,
    /// Preempted for KV space: waits (with an empty sequence) until another request leaves.
    parked: bool,
    /// Got its first logits: the prompt is done (no more progress messages).
    generating: bool,
    left: bool,
    poisoned: bool,
    mailbox: Arc<Mailbox>,
}

impl Job {
    fn pending(&self, slots: &[Slot]) -> usize {
        self.slot.map_or(0, |s| self.tokens.len().saturating_sub(slots[s].tokens.len()))
    }
}

#[derive(Default)]
struct Slot {
    /// The tokens this sequence holds in the KV cache, in order.
    tokens: Vec<Token>,
    busy: bool,
    last_used: u64,
}

#[derive(Default)]
struct State {
    jobs: Vec<Job>,
    slots: Vec<Slot>,
    next_id: u64,
    clock: u64,
    shutdown: bool,
    /// Why the context is unusable (a lost RPC server), for stats.
    lost: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    config: SchedConfig,
}

pub struct Scheduler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Context(*mut sys::llama_context);
// SAFETY: the context is used by the scheduler thread only.
unsafe impl Send for Context {}

fn lcp(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Scheduler {
    /// Creates the context (unified KV cache, `n_slots` sequences) and starts the thread.
    ///
    /// The scheduler must be dropped before `model` (its context refers to the model): the
    /// engine and pool declare it first.
    pub fn start(model: &Model, config: SchedConfig) -> Result<Scheduler> {
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
        if ctx.is_null() {
            return Err(Error::new(
                ErrorCode::ContextCreateFailed,
                format!(
                    "llama.cpp could not create a context with n_ctx={}, n_batch={}, {} sequences",
                    config.n_ctx, config.n_batch, config.n_slots
                ),
            ));
        }
        let state = State { slots: (0..config.n_slots).map(|_| Slot::default()).collect(), ..Default::default() };
        let shared = Arc::new(Shared { state: Mutex::new(state), wake: Condvar::new(), config });
        let ctx = Context(ctx);
        let worker = Worker::new(shared.clone(), model, ctx);
        let thread = std::thread::Builder::new()
            .name("llb-scheduler".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::new(ErrorCode::Internal, format!("cannot start the scheduler thread: {e}")))?;
        Ok(Scheduler { shared, thread: Some(thread) })
    }

    pub fn config(&self) -> &SchedConfig {
        &self.shared.config
    }

    /// Queues a request whose prompt is `tokens`. Fails at once with `queue_full` when the
    /// queue is full.
    pub fn join(&self, tokens: Vec<Token>) -> Result<Ticket> {
        let mut st = lock(&self.shared.state);
        let queued = st.jobs.iter().filter(|j| j.phase == Phase::Queued && !j.left).count();
        let running = st.jobs.len() - queued;
        let c = &self.shared.config;
        if queued >= c.max_queue && running >= c.n_parallel {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{running} requests are running and {queued} are waiting (n_parallel {}, max_queue {}): retry later",
                    c.n_parallel, c.max_queue
                ),
            ));
        }
        st.next_id += 1;
        let id = st.next_id;
        let mailbox = Arc::new(Mailbox::default());
        let prompt_len = tokens.len();
        st.jobs.push(Job {
            id,
            tokens,
            prompt_len,
            slot: None,
            phase: Phase::Queued,
            outstanding: None,
            parked: false,
            generating: false,
            left: false,
            poisoned: false,
            mailbox: mailbox.clone(),
        });
        drop(st);
        self.shared.wake.notify_all();
        Ok(Ticket { shared: self.shared.clone(), id, mailbox })
    }

    /// A snapshot for hosts and tests: sequences, what they hold, running and queued requests.
    pub fn stats(&self) -> serde_json::Value {
        let st = lock(&self.shared.state);
        let held: Vec<usize> = st.slots.iter().map(|s| s.tokens.len()).collect();
        serde_json::json!({
            "n_slots": st.slots.len(),
            "n_parallel": self.shared.config.n_parallel,
            "n_ctx": self.shared.config.n_ctx,
            "running": st.jobs.iter().filter(|j| j.phase != Phase::Queued && !j.left).count(),
            "queued": st.jobs.iter().filter(|j| j.phase == Phase::Queued && !j.left).count(),
            "tokens_held": held,
            "lost": st.lost,
        })
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        lock(&self.shared.state).shutdown = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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

    /// Submits the token sampled from the last logits, with any text forced after it (one
    /// multi-token entry of the next batch); the logits after the last one come as the next
    /// message.
    pub fn submit(&self, tokens: &[Token]) {
        let mut st = lock(&self.shared.state);
        if let Some(j) = st.jobs.iter_mut().find(|j| j.id == self.id) {
            j.tokens.extend_from_slice(tokens);
            j.outstanding = None;
        }
        drop(st);
        self.shared.wake.notify_all();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        if let Some(j) = st.jobs.iter_mut().find(|j| j.id == self.id) {
            j.left = true;
            j.poisoned = std::thread::panicking();
        }
        drop(st);
        self.shared.wake.notify_all();
    }
}

/// One entry of a batch: `n` tokens of a job's sequence starting at position `pos`.
struct Entry {
    job: u64,
    slot: usize,
    pos: usize,
    tokens: Vec<Token>,
    logits: bool,
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
    /// Some layers live on RPC servers.
    uses_rpc: bool,
    /// Set when a decode lost an RPC server: the context is unusable, every later request fails
    /// with this error (the engine or pool must be recreated).
    lost: Option<Error>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // SAFETY: created in Worker::new / Scheduler::start, freed once, before the model (the
        // scheduler is dropped before its model: see Scheduler::start).
        unsafe {
            sys::llama_batch_free(self.batch);
            if !crate::backend::must_leak(self.uses_rpc) {
                sys::llama_free(self.ctx.0);
            }
        }
    }
}

// SAFETY: the worker and everything it owns live on the scheduler thread only (moved there once).
unsafe impl Send for Worker {}

impl Worker {
    fn new(shared: Arc<Shared>, model: &Model, ctx: Context) -> Worker {
        let n_batch = shared.config.n_batch.max(1) as i32;
        // SAFETY: a live context and vocabulary; the batch is freed in Drop.
        let (mem, batch, n_vocab) = unsafe {
            (
                sys::llama_get_memory(ctx.0),
                sys::llama_batch_init(n_batch, 0, 1),
                sys::llama_vocab_n_tokens(model.vocab()) as usize,
            )
        };
        Worker { shared, ctx, mem, batch, n_vocab, last_decode: Duration::ZERO, uses_rpc: model.uses_rpc, lost: None }
    }

    fn run(mut self) {
        loop {
            let Some(entries) = self.next_batch() else { return };
            self.decode(entries);
        }
    }

    /// Waits until there is work, then builds the next batch (None: shut down).
    fn next_batch(&mut self) -> Option<Vec<Entry>> {
        let shared = self.shared.clone();
        let mut st = lock(&shared.state);
        loop {
            if st.shutdown {
                return None;
            }
            self.housekeep(&mut st);
            // The barrier: requests that got logits last step are sampling; wait a little for
            // them so their tokens share one decode instead of splitting into half-full ones.
            let grace = self.last_decode.max(Duration::from_millis(2));
            let latest = st.jobs.iter().filter(|j| !j.left).filter_map(|j| j.outstanding).max();
            if let Some(left) = latest.and_then(|t| grace.checked_sub(t.elapsed())) {
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
            if !st.jobs[i].left {
                i += 1;
                continue;
            }
            let j = st.jobs.remove(i);
            if let Some(s) = j.slot {
                st.clock += 1;
                let now = st.clock;
                let slot = &mut st.slots[s];
                slot.busy = false;
                slot.last_used = now;
                if j.poisoned || j.parked {
                    self.clear(slot, s);
                }
                freed = true;
            }
        }
        if freed {
            st.jobs.iter_mut().for_each(|j| j.parked = false);
        }
        self.admit(st);
        self.resolve_prefixes(st);
    }

    fn clear(&self, slot: &mut Slot, s: usize) {
        // SAFETY: live memory; removing a whole sequence never fails.
        unsafe { sys::llama_memory_seq_rm(self.mem, s as i32, -1, -1) };
        slot.tokens.clear();
    }

    /// Gives queued requests (oldest first) a sequence while fewer than `n_parallel` run.
    fn admit(&mut self, st: &mut State) {
        loop {
            let running = st.jobs.iter().filter(|j| j.phase != Phase::Queued).count();
            if running >= self.shared.config.n_parallel {
                return;
            }
            let Some(ji) = st.jobs.iter().position(|j| j.phase == Phase::Queued) else { return };
            let max = (self.shared.config.n_ctx as usize).min(self.max_seq());
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

    fn max_seq(&self) -> usize {
        self.shared.config.n_ctx as usize
    }

    /// Chooses a sequence for job `ji` and fills it with the longest prefix any sequence holds
    /// (or waits for a longer one another request is evaluating). False when none is free.
    fn place(&mut self, st: &mut State, ji: usize) -> bool {
        let tokens = st.jobs[ji].tokens.clone();
        let limit = tokens.len() - 1; // at least one token is evaluated, for logits
                                      // The best prefix already in the KV cache, and the best one being evaluated now.
        let (src, have) = st
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, lcp(&s.tokens, &tokens).min(limit)))
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
            .unwrap_or((0, 0));
        let coming = st
            .jobs
            .iter()
            .filter(|j| j.phase == Phase::Running && !j.left && !j.parked)
            .filter_map(|j| Some((j.slot?, lcp(&j.tokens[..j.prompt_len], &tokens).min(limit))))
            .filter(|&(s, n)| n >= have + MIN_SHARED_PREFIX && st.slots[s].tokens.len() < n)
            .max_by_key(|&(_, n)| n);
        // Reuse the source itself when the prompt extends everything it holds (the same
        // conversation going on); otherwise take an empty sequence, or evict the idle one used
        // least recently, and copy the prefix there.
        let slot = &st.slots[src];
        let extends = !slot.busy && have > 0 && have == slot.tokens.len().min(limit);
        let dst = if extends && coming.is_none() { Some(src) } else { self.free_slot(st, src) };
        let Some(dst) = dst else { return false };
        st.clock += 1;
        st.slots[dst].busy = true;
        st.slots[dst].last_used = st.clock;
        st.jobs[ji].slot = Some(dst);
        match coming {
            Some((s, upto)) => st.jobs[ji].phase = Phase::AwaitPrefix { src: s, upto },
            None => {
                let cached = self.fill_prefix(st, ji, src, dst, have);
                st.jobs[ji].phase = Phase::Running;
                st.jobs[ji].mailbox.post(Msg::Admitted { cached });
            }
        }
        true
    }

    /// An idle sequence for a new request: an empty one, else the least recently used idle one
    /// other than `keep` (evicted), else `keep` itself when idle.
    fn free_slot(&self, st: &mut State, keep: usize) -> Option<usize> {
        let idle: Vec<usize> = (0..st.slots.len()).filter(|&i| !st.slots[i].busy && i != keep).collect();
        if let Some(&i) = idle.iter().find(|&&i| st.slots[i].tokens.is_empty()) {
            return Some(i);
        }
        if let Some(&i) = idle.iter().min_by_key(|&&i| st.slots[i].last_used) {
            self.clear(&mut st.slots[i], i);
            return Some(i);
        }
        (!st.slots[keep].busy).then_some(keep)
    }

    /// Makes sequence `dst` hold the first `n` tokens of job `ji`'s prompt, copied from `src`
    /// (or kept, when `dst == src`). Returns `n`.
    fn fill_prefix(&self, st: &mut State, ji: usize, src: usize, dst: usize, n: usize) -> usize {
        let tokens = st.jobs[ji].tokens[..n].to_vec();
        if dst == src {
            // SAFETY: live memory; trims this sequence after the shared prefix.
            if !unsafe { sys::llama_memory_seq_rm(self.mem, dst as i32, n as i32, -1) } {
                self.clear(&mut st.slots[dst], dst);
                return 0;
            }
            st.slots[dst].tokens.truncate(n);
            return n;
        }
        let keep = lcp(&st.slots[dst].tokens, &tokens);
        if keep >= n {
            // SAFETY: as above.
            if unsafe { sys::llama_memory_seq_rm(self.mem, dst as i32, n as i32, -1) } {
                st.slots[dst].tokens.truncate(n);
                return n;
            }
        }
        self.clear(&mut st.slots[dst], dst);
        if n > 0 {
            // SAFETY: live memory; both sequences exist; shares the cells of [0, n).
            unsafe { sys::llama_memory_seq_cp(self.mem, src as i32, dst as i32, 0, n as i32) };
            st.slots[dst].tokens.extend_from_slice(&tokens);
        }
        n
    }

    /// Requests waiting for a prefix another one evaluates: copy it once it is there, or as much
    /// of it as there is once that request stopped evaluating it.
    fn resolve_prefixes(&mut self, st: &mut State) {
        for ji in 0..st.jobs.len() {
            let Phase::AwaitPrefix { src, upto } = st.jobs[ji].phase else { continue };
            let tokens = &st.jobs[ji].tokens;
            let have = lcp(&st.slots[src].tokens, tokens).min(upto);
            let id = st.jobs[ji].id;
            let still_coming = st.jobs.iter().any(|j| {
                j.slot == Some(src)
                    && j.id != id
                    && !j.left
                    && !j.parked
                    && j.phase == Phase::Running
                    && lcp(&j.tokens, tokens) >= upto
            });
            if have < upto && still_coming {
                continue;
            }
            let dst = st.jobs[ji].slot.expect("an awaiting job has a sequence");
            let cached = self.fill_prefix(st, ji, src, dst, have);
            let job = &mut st.jobs[ji];
            job.phase = Phase::Running;
            job.mailbox.post(Msg::Admitted { cached });
        }
    }

    /// The next batch: the next step of every generating request (one token, or a token and
    /// the text forced after it), then prompt chunks (oldest request first) up to `n_batch`
    /// tokens.
    fn build(&mut self, st: &mut State) -> Vec<Entry> {
        let mut budget = self.shared.config.n_batch as usize;
        let mut entries = Vec::new();
        let runnable = |j: &Job| j.phase == Phase::Running && !j.left && !j.parked && j.outstanding.is_none();
        for generating in [true, false] {
            for j in st.jobs.iter().filter(|j| runnable(j)) {
                let s = j.slot.expect("a running job has a sequence");
                let pending = j.pending(&st.slots);
                if pending == 0 || budget == 0 || (j.generating || pending == 1) != generating {
                    continue;
                }
                let pos = st.slots[s].tokens.len();
                let n = pending.min(budget);
                budget -= n;
                entries.push(Entry {
                    job: j.id,
                    slot: s,
                    pos,
                    tokens: j.tokens[pos..pos + n].to_vec(),
                    logits: n == pending,
                });
            }
        }
        entries
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
        self.fill_batch(&entries);
        let permit = crate::threads::acquire(self.shared.config.n_threads);
        let t = Instant::now();
        // SAFETY: live context.
        unsafe { sys::llama_set_n_threads(self.ctx.0, permit.n as i32, permit.n as i32) };
        // SAFETY: live context; the batch was filled within its capacity.
        let rc = unsafe { crate::backend::decode(self.ctx.0, self.batch) };
        drop(permit);
        let shared = self.shared.clone();
        let mut st = lock(&shared.state);
        match rc {
            Ok(0) => {
                self.last_decode = t.elapsed();
                self.deliver(&mut st, &entries);
            }
            Ok(1) => self.make_room(&mut st, &entries),
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

    fn fill_batch(&mut self, entries: &[Entry]) {
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
                    *b.logits.add(k) = (e.logits && i + 1 == e.tokens.len()) as i8;
                }
                k += 1;
            }
        }
        b.n_tokens = k as i32;
    }

    fn deliver(&mut self, st: &mut State, entries: &[Entry]) {
        let mut row = 0i32;
        for e in entries {
            st.slots[e.slot].tokens.extend_from_slice(&e.tokens);
            row += e.tokens.len() as i32;
            let Some(j) = st.jobs.iter_mut().find(|j| j.id == e.job && !j.left) else { continue };
            if !j.generating {
                let held = st.slots[e.slot].tokens.len();
                j.mailbox.post(Msg::Progress { done: held.min(j.prompt_len), total: j.prompt_len });
            }
            if e.logits {
                // SAFETY: the row of this entry's last token was requested and decoded.
                let p = unsafe { sys::llama_get_logits_ith(self.ctx.0, row - 1) };
                let msg = if p.is_null() {
                    Msg::Failed(Error::new(ErrorCode::Internal, "llama.cpp returned no logits"))
                } else {
                    // SAFETY: a logits row holds n_vocab floats.
                    Msg::Logits(unsafe { std::slice::from_raw_parts(p, self.n_vocab) }.to_vec())
                };
                j.outstanding = Some(Instant::now());
                j.generating = true;
                j.mailbox.post(msg);
            }
        }
    }

    /// The KV cache is full (llama.cpp restored it as before the call): evict the least recently
    /// used idle sequence; with none, park the youngest request in the batch (its sequence is
    /// cleared and rebuilt from its tokens once another request leaves); a request alone that
    /// does not fit fails with `context_overflow`.
    fn make_room(&mut self, st: &mut State, entries: &[Entry]) {
        let victim = st
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy && !s.tokens.is_empty())
            .min_by_key(|(_, s)| s.last_used)
            .map(|(i, _)| i);
        if let Some(i) = victim {
            self.clear(&mut st.slots[i], i);
            return;
        }
        let active: Vec<u64> = st.jobs.iter().filter(|j| j.phase != Phase::Queued && !j.parked).map(|j| j.id).collect();
        let youngest = entries.iter().map(|e| e.job).max().unwrap_or(0);
        let Some(j) = st.jobs.iter_mut().find(|j| j.id == youngest) else { return };
        if active.len() <= 1 {
            let n = j.tokens.len();
            j.mailbox.post(Msg::Failed(Error::new(
                ErrorCode::ContextOverflow,
                format!("the request needs {n} tokens of KV cache and the context holds {} (n_ctx)", self.max_seq()),
            )));
            j.left = true;
            j.poisoned = true;
            return;
        }
        j.parked = true;
        let s = j.slot.expect("a batched job has a sequence");
        self.clear(&mut st.slots[s], s);
    }

    fn fail(&mut self, st: &mut State, entries: &[Entry], err: Error) {
        for e in entries {
            self.clear(&mut st.slots[e.slot], e.slot);
            if let Some(j) = st.jobs.iter_mut().find(|j| j.id == e.job) {
                j.mailbox.post(Msg::Failed(err.clone()));
                j.left = true;
                j.poisoned = true;
            }
        }
    }
}
