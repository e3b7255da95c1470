//! The scheduler's thread (src/scheduler/mod.rs has the handles requests hold): it waits for
//! work, builds each batch (every generating request's next step, then prompt chunks), applies
//! the slot table's KV operations, chooses the step's kernels and threads, decodes, and hands
//! out progress and logits rows. The prompt cache's side of it is src/scheduler/caching.rs.

use super::job::JobState;
use super::shared::{lock, Admission, Context, Job, Msg, Shared, State, SUBMIT_SPIN, TILE_ROWS};
use super::slots::{KvOp, Prefix, Room, SlotTable};
use crate::error::{Error, ErrorCode};
use crate::model::Model;
use crate::sys;
use crate::threads::{ComputePool, Tuner};
use crate::tokens::Token;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Spins (without the state's lock) until a token is submitted after `seen`, or `limit` passed.
fn spin_for_submit(shared: &Shared, seen: u64, limit: Duration) {
    let start = Instant::now();
    while shared.submits.load(std::sync::atomic::Ordering::Acquire) == seen && start.elapsed() < limit {
        std::hint::spin_loop();
    }
}

/// One entry of a batch: `n` tokens of a job's sequence starting at position `pos`, the logits
/// of the last `rows` of them wanted.
pub(super) struct Entry {
    pub(super) job: u64,
    pub(super) slot: usize,
    pub(super) pos: usize,
    pub(super) tokens: Vec<Token>,
    pub(super) rows: usize,
    /// Its job runs in replay mode.
    pub(super) exact: bool,
}

/// The scheduler thread's side: owns the context and the batch.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) ctx: Context,
    pub(super) mem: sys::llama_memory_t,
    pub(super) batch: sys::llama_batch,
    pub(super) n_vocab: usize,
    /// How long the last decode took: the barrier waits for stragglers up to it.
    pub(super) last_decode: Duration,
    /// The context's compute threads (None: ggml's per-graph pools).
    pub(super) pool: Option<ComputePool>,
    /// How many of them a decode asks for (adaptive_threads).
    pub(super) tuner: Option<Tuner>,
    /// Some layers live on RPC servers.
    pub(super) uses_rpc: bool,
    /// Set when a decode lost an RPC server: the context is unusable, every later request fails
    /// with this error (the engine or pool must be recreated).
    pub(super) lost: Option<Error>,
    /// The model's memory is a plain KV cache (not recurrent or hybrid): states are checked
    /// cell by cell before a restore (src/scheduler/kv_state.rs).
    pub(super) plain_kv: bool,
    /// Whether the context's CPU backend computes with reference kernels now (None: not set yet).
    pub(super) reference: Option<bool>,
    /// An emulated GPU's clock (benchmarks only: src/emulate.rs).
    pub(super) emulated: Option<crate::emulate::Clock>,
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
    pub(super) fn new(shared: Arc<Shared>, model: &Model, ctx: Context, pool: Option<ComputePool>) -> Worker {
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
            plain_kv: model.can_cut(),
            lost: None,
            reference: None,
            emulated: crate::emulate::Clock::new(),
        }
    }

    pub(super) fn run(mut self) {
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

    /// Applies the slot table's KV operations to the context's memory, in order: a sequence
    /// leaving is offered to the prompt cache (caching.rs, `stash`) before the operation that
    /// drops it; a cut llama.cpp refuses is replaced by what the table says instead.
    pub(super) fn apply(&self, slots: &mut SlotTable, ops: Vec<KvOp>) {
        for op in ops {
            match op {
                KvOp::Leave { seq, tokens } => self.stash(seq, tokens, false, slots),
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
            let ops = st.slots.fill(seq, src, tokens, have);
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
        let c = &self.shared.config;
        // Reusing as cold, a step is one physical batch and a prompt's last chunk holds a tile:
        // every prompt cell is computed the tiled way (docs/design.md, "Determinism").
        let (mut budget, tile) = match c.reuse_as_cold {
            true => (c.n_ubatch as usize, TILE_ROWS),
            false => (c.n_batch as usize, 0),
        };
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
                let tail = j.rows.max(tile);
                let n = match pending.min(budget) {
                    n if n < pending && pending - n < tail => pending.saturating_sub(tail),
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
            Ok(0) => self.decoded(&mut st, &entries, used, took, t),
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

    /// A decode of `entries` on `threads` threads succeeded in `took` (begun at `start`): the
    /// tuner and the cost model learn from it, and the requests get their rows.
    fn decoded(&mut self, st: &mut State, entries: &[Entry], threads: usize, took: Duration, start: Instant) {
        let n_tokens = entries.iter().map(|e| e.tokens.len()).sum();
        self.last_decode = took;
        if let Some(t) = &mut self.tuner {
            let moved = t.record(n_tokens, threads, took.as_secs_f64());
            if let Some(n) = moved.filter(|_| crate::debug::enabled()) {
                eprintln!("[llb] adaptive threads: decodes of {n_tokens} tokens now on {n} threads");
            }
        }
        // Before the requests hear of their rows: they size their next drafts by it.
        // Every request running counts, not only those in this step (a request whose thread
        // was late for it still runs its own steps).
        self.shared.costs.record_step(st.running(), st.queued());
        self.deliver(st, entries, took);
        // The step's cost: the device's work and copying its logits rows out (a verifying
        // batch's rows are host work a GPU's decode time does not show).
        let outputs = entries.iter().map(|e| e.rows).sum();
        let drafted = entries.iter().map(|e| e.rows.saturating_sub(1)).sum();
        let mut ms = start.elapsed().as_secs_f64() * 1e3;
        if let Some(c) = &mut self.emulated {
            let real = took.as_secs_f64() * 1e3;
            ms += c.charge(n_tokens, outputs, entries.len(), real) - real;
        }
        self.shared.costs.record_batch(n_tokens, outputs, drafted, ms);
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
        let tiled = self.reference == Some(false);
        for e in entries {
            st.slots.decoded(e.slot, &e.tokens, tiled);
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
        let (job, ops) = match room {
            Room::Evicted(ops) => (None, Some(ops)),
            Room::Park { job, ops } => (Some(job), Some(ops)),
            Room::Overflow { job } => (Some(job), None),
        };
        let cleared = ops.is_some();
        if let Some(ops) = ops {
            self.apply(&mut st.slots, ops);
        }
        let Some(j) = job.and_then(|id| st.jobs.iter_mut().find(|j| j.id == id)) else { return };
        if cleared {
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
