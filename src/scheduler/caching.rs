//! Where the prompt cache meets the context: the scheduler's only door to it. A sequence that
//! is about to lose tokens is kept ([`Worker::stash`]) when the cost model says it pays; a new
//! request's sequence takes the longest cached prefix ([`Worker::restore`]) when putting it back
//! costs less than reading it, after the state is checked against the tokens it claims; a
//! restored sequence whose first decode fails, or gives non-finite logits, is emptied and read
//! cold ([`Worker::restart_cold`]), and its state deleted from both tiers.

use super::kv_state;
use super::shared::{lock, Admission, Msg, Origin, State};
use super::worker::{Entry, Worker};
use crate::cost::Transfer;
use crate::prompt_cache::{self, Hit, Tier};
use crate::sys;
use crate::tokens::{common_prefix, Token};
use std::time::Instant;

impl Worker {
    /// Keeps what sequence `seq` holds (`tokens`) in the prompt cache, before it leaves the
    /// context, when that pays: at least [`prompt_cache::MIN_TOKENS`] must leave the context (no
    /// other sequence holds them), and what the stash saves counts only the tokens no kept
    /// state holds either. `wait`: for the disk writer (the process is ending; the
    /// state is kept whatever it costs, for the next process).
    pub(super) fn stash(&self, seq: usize, tokens: Vec<Token>, wait: bool, st_slots: &super::slots::SlotTable) {
        let stays =
            (0..self.shared.config.n_slots).map(|s| common_prefix(st_slots.held(s), &tokens)).max().unwrap_or(0);
        if tokens.len() - stays < prompt_cache::MIN_TOKENS && !wait {
            return; // what leaves is not worth a state: the next request shares the rest
        }
        // What keeping it saves: the tokens neither the context nor a kept state has.
        let unkept = tokens.len() - stays.max(self.shared.cache.holds(&tokens));
        let n_batch = self.shared.config.n_batch as usize;
        if !wait && !self.shared.costs.stash_pays(tokens.len(), unkept, n_batch) {
            return;
        }
        let t = Instant::now();
        // SAFETY: the worker's live context, on its thread.
        let Some((state, moved)) = (unsafe { kv_state::read(self.ctx.0, seq) }) else { return };
        let took = t.elapsed();
        self.shared.costs.record_state(Transfer::Out, state.len(), tokens.len(), took.as_secs_f64() * 1e3);
        self.shared.costs.record_copies(moved.copies, moved.pieces);
        if crate::debug::enabled() {
            eprintln!("[llb] prompt cache: kept {} tokens ({} bytes) in {took:?}", tokens.len(), state.len());
        }
        self.shared.cache.keep(tokens, state, wait);
    }

    /// Shutting down with a disk tier: every idle sequence worth keeping goes to disk, so the
    /// next process finds the conversations this one still held.
    pub(super) fn stash_all(&self) {
        let mut st = lock(&self.shared.state);
        for seq in 0..self.shared.config.n_slots {
            // Reusing as cold, only the cells a cold read computes the same way are kept.
            if let Some(op) = st.slots.settle(seq) {
                self.apply(&mut st.slots, vec![op]);
            }
        }
        for (seq, n) in st.slots.tokens_held().into_iter().enumerate() {
            if n >= prompt_cache::MIN_TOKENS {
                self.stash(seq, st.slots.held(seq).to_vec(), true, &st.slots);
            }
        }
    }

    /// Puts the longest cached state of job `ji`'s prompt into its sequence `seq` when that
    /// beats what the sequence holds by [`prompt_cache::MIN_TOKENS`] and restoring costs less
    /// than reading those tokens: the state is checked, the sequence emptied, the state written
    /// and cut after the shared prefix.
    pub(super) fn restore(&self, st: &mut State, ji: usize, seq: usize) -> Admission {
        let have = st.slots.held(seq).len();
        let prompt = st.jobs[ji].tokens.clone();
        let limit = prompt.len().saturating_sub(st.slots.min_read());
        let mut out = Admission { cached: have, ..Admission::default() };
        if !self.shared.cache.enabled() || limit < have + prompt_cache::MIN_TOKENS {
            return out;
        }
        let n_batch = self.shared.config.n_batch as usize;
        let costs = &self.shared.costs;
        let pays = |n: usize, bytes: u64, tier: Tier| costs.restore_pays(n - have, bytes, tier == Tier::Disk, n_batch);
        let t = Instant::now();
        let found = self.shared.cache.lookup(&prompt, limit, have + prompt_cache::MIN_TOKENS, &pays);
        out.warnings = found.warnings;
        let Some(hit) = found.hit else { return out };
        if let Some(load) = hit.load_time {
            costs.record_state(Transfer::DiskRead, hit.state.len(), 0, load.as_secs_f64() * 1e3);
        }
        if let Err(why) = self.check(&hit) {
            self.shared.cache.reject(&hit.tokens, hit.file.as_deref());
            out.warnings.push(refused(&hit, &why));
            return out;
        }
        let op = st.slots.discard(seq);
        self.apply(&mut st.slots, vec![op]);
        let t_in = Instant::now();
        let moved = match self.write_state(&mut st.slots, seq, &hit) {
            Ok(moved) => moved,
            Err(why) => {
                // SAFETY: live memory; removing a whole sequence never fails.
                unsafe { sys::llama_memory_seq_rm(self.mem, seq as i32, -1, -1) };
                out.cached = 0;
                out.warnings.push(why);
                return out;
            }
        };
        costs.record_state(Transfer::In, hit.state.len(), hit.tokens.len(), t_in.elapsed().as_secs_f64() * 1e3);
        costs.record_copies(moved.copies, moved.pieces);
        costs.came_back();
        st.slots.restored(seq, &hit.tokens[..hit.n]);
        st.jobs[ji].probation = Some(Origin { tokens: hit.tokens.clone(), file: hit.file.clone() });
        self.shared.cache.restored(hit.n);
        if crate::debug::enabled() {
            eprintln!(
                "[llb] prompt cache: restored {} of {} tokens ({:?}) in {:?}",
                hit.n,
                prompt.len(),
                hit.tier,
                t.elapsed()
            );
        }
        Admission { cached: hit.n, restored: hit.n, restore_time: t.elapsed(), warnings: out.warnings }
    }

    /// The state's cells against its tokens, before llama.cpp takes it (a model whose memory
    /// is not a plain KV cache is checked after, by its positions only).
    fn check(&self, hit: &Hit) -> Result<(), String> {
        if !self.plain_kv {
            return Ok(());
        }
        kv_state::check(&hit.state, hit.tokens.len())
    }

    /// Writes `hit`'s state into the empty sequence `seq`, checks its positions and cuts it after
    /// the prompt's prefix; with no room for it in the KV cache, evicts idle sequences (least
    /// recently used first) and tries again. Ok: what the write moved; Err: the warning to
    /// report (the state was deleted where it is bad, not where the context is too full for it).
    fn write_state(&self, slots: &mut super::SlotTable, seq: usize, hit: &Hit) -> Result<kv_state::Moved, String> {
        let n_ctx = self.shared.config.n_ctx as usize;
        let moved = loop {
            // SAFETY: the worker's live context, on its thread; `seq` is empty.
            if let Some(moved) = unsafe { kv_state::write(self.ctx.0, seq, &hit.state) } {
                break moved;
            }
            // With no idle sequence left to evict, a state too long for the context, or for
            // what the running requests leave of it, is good and stays cached.
            let running: usize = slots.tokens_held().iter().sum();
            match slots.make_room(&[], 0) {
                Some(super::slots::Room::Evicted(ops)) => self.apply(slots, ops),
                _ if hit.tokens.len() >= n_ctx || running + hit.tokens.len() > n_ctx => {
                    self.shared.cache.refused();
                    let room = if hit.tokens.len() >= n_ctx {
                        format!("this context (n_ctx {n_ctx})")
                    } else {
                        "beside the running requests now".to_string()
                    };
                    return Err(format!(
                        "prompt cache: a cached state of {} tokens does not fit {room}: the prompt is read",
                        hit.tokens.len()
                    ));
                }
                _ => {
                    self.shared.cache.reject(&hit.tokens, hit.file.as_deref());
                    return Err(refused(hit, "llama.cpp refused it"));
                }
            }
        };
        // SAFETY: live memory and sequence.
        let (lo, hi) = unsafe {
            (sys::llama_memory_seq_pos_min(self.mem, seq as i32), sys::llama_memory_seq_pos_max(self.mem, seq as i32))
        };
        if lo != 0 || hi != hit.tokens.len() as i32 - 1 {
            self.shared.cache.reject(&hit.tokens, hit.file.as_deref());
            return Err(refused(hit, &format!("its positions run {lo}..{hi} for {} tokens", hit.tokens.len())));
        }
        // SAFETY: live memory; a refused cut leaves the sequence as it was.
        if !unsafe { sys::llama_memory_seq_rm(self.mem, seq as i32, hit.n as i32, -1) } {
            return Err(format!(
                "prompt cache: a restored state could not be cut at {} tokens: the prompt is read",
                hit.n
            ));
        }
        Ok(moved)
    }

    /// A decode failed (`why`): requests in it whose sequence was just restored read their
    /// prompt cold instead, their states deleted; the batch's other requests are rebuilt from
    /// what their sequences hold. False when no request in it was restored (the failure is
    /// not the cache's).
    pub(super) fn retry_cold(&self, st: &mut State, entries: &[Entry], why: &str) -> bool {
        let suspects: Vec<u64> = entries
            .iter()
            .map(|e| e.job)
            .filter(|id| st.jobs.iter().any(|j| j.id == *id && j.probation.is_some()))
            .collect();
        if suspects.is_empty() {
            return false;
        }
        for e in entries {
            if suspects.contains(&e.job) {
                self.restart_cold(st, e.job, why);
            } else {
                // Whatever a failed decode left of this entry goes: the table says what is held.
                let op = st.slots.rollback(e.slot, st.slots.held(e.slot).len());
                self.apply(&mut st.slots, vec![op]);
            }
        }
        true
    }

    /// Job `id`'s restored sequence proved bad (`why`): its state leaves both tiers, the
    /// sequence is emptied and the request reads its prompt from the start, once.
    pub(super) fn restart_cold(&self, st: &mut State, id: u64, why: &str) {
        let Some(j) = st.jobs.iter_mut().find(|j| j.id == id) else { return };
        let (Some(origin), Some(seq)) = (j.probation.take(), j.state.running_seq()) else { return };
        self.shared.cache.reject(&origin.tokens, origin.file.as_deref());
        let warning = format!(
            "prompt cache: a restored state of {} tokens failed ({why}): it is deleted and the prompt is read again",
            origin.tokens.len()
        );
        j.mailbox.post(Msg::Admitted(Admission { warnings: vec![warning], ..Admission::default() }));
        let op = st.slots.discard(seq);
        self.apply(&mut st.slots, vec![op]);
    }
}

fn refused(hit: &Hit, why: &str) -> String {
    let from = match &hit.file {
        Some(f) => format!(" (file {f})"),
        None => String::new(),
    };
    format!(
        "prompt cache: a cached state of {} tokens{from} was refused: {why}; it is deleted and the prompt is read",
        hit.tokens.len()
    )
}
