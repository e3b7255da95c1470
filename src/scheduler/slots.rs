//! The context's sequences as a table: the tokens each one holds in the KV cache, whether a
//! request runs in it, and when it was last used. Pure bookkeeping: every method updates the
//! table and returns the [`KvOp`]s that make the context's memory match it; the scheduler thread
//! applies them with `llama_memory_*` (src/scheduler/mod.rs). Placement, prefix reuse and
//! sharing, eviction and parking are therefore unit-tested here, without a model.
//!
//! A sequence is *busy* while a request holds it and *idle* otherwise; an idle sequence keeps
//! its tokens so that the next turn of the same conversation, or any prompt with the same
//! beginning, finds them cached.

use crate::tokens::{common_prefix, Token};

/// A prefix another request is still evaluating is worth waiting for from this many tokens on.
pub(super) const MIN_SHARED_PREFIX: usize = 16;

/// One operation on the context's KV cache (sequence ids are table indices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KvOp {
    /// Sequence `seq`, which holds `tokens`, is about to lose at least the table's `keep_from`
    /// of them (the next operation drops them): offer it to the prompt cache first. Only with a
    /// prompt cache ([`SlotTable::keeping`]); always followed by the operation that drops them.
    Leave { seq: usize, tokens: Vec<Token> },
    /// Remove every cell of sequence `seq`.
    Clear { seq: usize },
    /// Keep positions `[0, len)` of `seq` and remove the rest. llama.cpp may refuse (a memory
    /// that cannot cut a sequence in the middle): report that with
    /// [`SlotTable::truncate_refused`], which returns what to do instead (clear `seq` and, with a
    /// `source`, copy the `len` positions from that sequence, which holds the same tokens).
    /// Always the last operation of a list.
    Truncate { seq: usize, len: usize, source: Option<usize> },
    /// Make sequence `dst` share the cells of positions `[0, n)` of sequence `src`.
    Copy { src: usize, dst: usize, n: usize },
}

/// Where a new request goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Placement {
    /// The request's sequence (now busy).
    pub seq: usize,
    pub prefix: Prefix,
    /// To apply now, in order.
    pub ops: Vec<KvOp>,
}

/// How a placed request gets the beginning of its prompt from the cache.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Prefix {
    /// The placement's operations give it: afterwards its sequence holds
    /// [`SlotTable::held`] tokens of the prompt (the cached count).
    Ready,
    /// Another request is evaluating the prompt's first `upto` tokens into sequence `src` right
    /// now: wait for them, then [`SlotTable::fill`] the request's sequence from `src`.
    Awaited { src: usize, upto: usize },
}

/// What to do about a KV cache too full for the batch (llama.cpp left it as before the call).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// The idle sequence used least recently was evicted (`ops` clear it): retry.
    Evicted(Vec<KvOp>),
    /// Park request `job` (the youngest in the batch): `ops` clear its sequence, rebuilt from
    /// its tokens once another request leaves.
    Park { job: u64, ops: Vec<KvOp> },
    /// Request `job` runs alone and does not fit: it fails with `context_overflow`.
    Overflow { job: u64 },
}

#[derive(Debug, Default)]
struct Slot {
    /// The tokens this sequence holds in the KV cache, in order.
    tokens: Vec<Token>,
    /// A request holds it.
    busy: bool,
    /// The table's clock when a request last took or released it.
    last_used: u64,
    /// Its first cells computed in steps of a tile or more, one after another from position 0:
    /// as a cold read of them computes them (see [`SlotTable::reusing_as_cold`]).
    tiled: usize,
}

/// The sequences of one context.
#[derive(Debug)]
pub(super) struct SlotTable {
    slots: Vec<Slot>,
    clock: u64,
    /// A sequence about to lose at least this many tokens is offered to the prompt cache first,
    /// by a [`KvOp::Leave`] (usize::MAX: never; see [`SlotTable::keeping`]).
    keep_from: usize,
    /// Reuse only cells a cold read computes the same way, with steps of this many rows
    /// computed the tiled way ([`SlotTable::reusing_as_cold`]).
    as_cold: Option<usize>,
}

impl SlotTable {
    /// `n` empty, idle sequences.
    pub fn new(n: usize) -> SlotTable {
        SlotTable {
            slots: (0..n).map(|_| Slot::default()).collect(),
            clock: 0,
            keep_from: usize::MAX,
            as_cold: None,
        }
    }

    /// From now on a prompt reuses only cells that a cold read of it computes bit for bit, so
    /// that a reply after a kept or restored prefix is the cold reply (docs/design.md,
    /// "Determinism"): the cells read in steps of at least `tile` rows (ggml's tiled flash
    /// attention; per row its sums depend only on the row's cells and their places), and at
    /// least `tile` tokens are read again, so that the prompt's end is computed in such a step
    /// too. A request that leaves keeps only those cells: its reply, computed a row at a
    /// time, is read again with the next turn. Only for a context of one sequence, whose cells
    /// sit at their positions whatever came before.
    pub fn reusing_as_cold(mut self, tile: usize) -> SlotTable {
        self.as_cold = Some(tile.max(1));
        self
    }

    /// The fewest prompt tokens a request reads: one (for its logits), or a tile's worth.
    pub fn min_read(&self) -> usize {
        self.as_cold.unwrap_or(1)
    }

    /// How many of `seq`'s first cells a prompt may reuse.
    fn reusable(&self, seq: usize) -> usize {
        let s = &self.slots[seq];
        match self.as_cold {
            Some(_) => s.tiled,
            None => s.tokens.len(),
        }
    }

    /// Cuts `seq` to its first `len` tokens (in the table only).
    fn cut(&mut self, seq: usize, len: usize) {
        let s = &mut self.slots[seq];
        s.tokens.truncate(len);
        s.tiled = s.tiled.min(len);
    }

    /// From now on, every sequence about to lose at least `min` tokens is offered to the prompt
    /// cache first ([`KvOp::Leave`]).
    pub fn keeping(mut self, min: usize) -> SlotTable {
        self.keep_from = min;
        self
    }

    /// `seq` is about to be cut to `len` tokens: the [`KvOp::Leave`] that offers what it holds
    /// to the prompt cache, when that drops enough of them.
    fn leave(&self, seq: usize, len: usize) -> Option<KvOp> {
        let held = &self.slots[seq].tokens;
        (held.len().saturating_sub(len) >= self.keep_from).then(|| KvOp::Leave { seq, tokens: held.clone() })
    }

    /// Sequence `seq` now holds `tokens`, restored from the prompt cache (whose states, in a
    /// table reusing as cold, hold only such cells).
    pub fn restored(&mut self, seq: usize, tokens: &[Token]) {
        let s = &mut self.slots[seq];
        s.tokens = tokens.to_vec();
        s.tiled = if self.as_cold.is_some() { tokens.len() } else { 0 };
    }

    /// The tokens sequence `seq` holds.
    pub fn held(&self, seq: usize) -> &[Token] {
        &self.slots[seq].tokens
    }

    /// How many tokens each sequence holds (for stats).
    pub fn tokens_held(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.tokens.len()).collect()
    }

    /// `tokens` were decoded into `seq`, after what it held, in a step of at least
    /// a tile's rows (`tiled`) or not.
    pub fn decoded(&mut self, seq: usize, tokens: &[Token], tiled: bool) {
        let s = &mut self.slots[seq];
        if tiled && s.tiled == s.tokens.len() {
            s.tiled += tokens.len();
        }
        s.tokens.extend_from_slice(tokens);
    }

    /// Chooses a sequence for a new request whose prompt is `prompt`, and how it gets the
    /// longest prefix any sequence holds. `running` lists the sequence and prompt of every
    /// running request (oldest first): one that is evaluating a prefix longer by
    /// [`MIN_SHARED_PREFIX`] is waited for instead. None when every sequence is busy.
    ///
    /// The sequence is the one holding that prefix when the prompt extends everything it holds
    /// (the same conversation going on); otherwise an empty one, else the idle one used least
    /// recently (evicted), else the prefix's own when idle.
    pub fn place(&mut self, prompt: &[Token], running: &[(usize, &[Token])]) -> Option<Placement> {
        let limit = prompt.len().saturating_sub(self.min_read());
        // The best prefix already in the KV cache, and the best one being evaluated now.
        let (src, have) = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| (i, common_prefix(&s.tokens, prompt).min(limit).min(self.reusable(i))))
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
            .unwrap_or((0, 0));
        let coming = running
            .iter()
            .map(|&(s, p)| (s, common_prefix(p, prompt).min(limit)))
            .filter(|&(s, n)| n >= have + MIN_SHARED_PREFIX && self.slots[s].tokens.len() < n)
            .max_by_key(|&(_, n)| n);
        // Reuse the source itself when the prompt extends everything it holds; otherwise take
        // another sequence and copy the prefix there.
        let extends = !self.slots[src].busy && have > 0 && have == self.reusable(src).min(limit);
        let mut ops = Vec::new();
        let seq = if extends && coming.is_none() { src } else { self.free_seq(src, &mut ops)? };
        self.clock += 1;
        self.slots[seq].busy = true;
        self.slots[seq].last_used = self.clock;
        let prefix = match coming {
            Some((src, upto)) => Prefix::Awaited { src, upto },
            None => {
                ops.extend(self.fill(seq, src, prompt, have));
                Prefix::Ready
            }
        };
        Some(Placement { seq, prefix, ops })
    }

    /// An idle sequence for a new request: an empty one, else the least recently used idle one
    /// other than `keep` (evicted: its clearing goes to `ops`), else `keep` itself when idle.
    fn free_seq(&mut self, keep: usize, ops: &mut Vec<KvOp>) -> Option<usize> {
        let idle: Vec<usize> = (0..self.slots.len()).filter(|&i| !self.slots[i].busy && i != keep).collect();
        if let Some(&i) = idle.iter().find(|&&i| self.slots[i].tokens.is_empty()) {
            return Some(i);
        }
        if let Some(&i) = idle.iter().min_by_key(|&&i| self.slots[i].last_used) {
            ops.extend(self.clear(i));
            return Some(i);
        }
        (!self.slots[keep].busy).then_some(keep)
    }

    /// Makes sequence `dst` hold the first `len` tokens of `prompt`, which sequence `src` holds:
    /// kept (cut after them) when `dst` is `src` or already begins with them, copied from `src`
    /// otherwise. Tokens cut that the prompt reads again are not offered to the cache.
    pub fn fill(&mut self, dst: usize, src: usize, prompt: &[Token], len: usize) -> Vec<KvOp> {
        let prefix = &prompt[..len];
        let shared = common_prefix(&self.slots[dst].tokens, prompt);
        if dst == src || shared >= len {
            let mut ops: Vec<KvOp> = self.leave(dst, shared.max(len)).into_iter().collect();
            self.cut(dst, len);
            ops.push(KvOp::Truncate { seq: dst, len, source: (dst != src).then_some(src) });
            return ops;
        }
        let mut ops = self.clear(dst);
        if len > 0 {
            ops.push(KvOp::Copy { src, dst, n: len });
            self.slots[dst].tokens.extend_from_slice(prefix);
            self.slots[dst].tiled = self.slots[src].tiled.min(len);
        }
        ops
    }

    /// llama.cpp refused a [`KvOp::Truncate`] of `seq` to `len` (with its `source`): clears the
    /// sequence and copies the `len` positions from `source` instead, if there is one.
    pub fn truncate_refused(&mut self, seq: usize, len: usize, source: Option<usize>) -> Vec<KvOp> {
        let mut ops = vec![self.discard(seq)];
        if let Some(src) = source.filter(|_| len > 0) {
            let prefix = self.slots[src].tokens[..len].to_vec();
            self.slots[seq].tokens = prefix;
            self.slots[seq].tiled = self.slots[src].tiled.min(len);
            ops.push(KvOp::Copy { src, dst: seq, n: len });
        }
        ops
    }

    /// The request holding `seq` left: the sequence becomes idle, its tokens kept for reuse
    /// unless `clear` (a request that failed, panicked or was parked); in a table reusing as
    /// cold, only the cells a cold read computes the same way.
    pub fn release(&mut self, seq: usize, clear: bool) -> Vec<KvOp> {
        self.clock += 1;
        self.slots[seq].busy = false;
        self.slots[seq].last_used = self.clock;
        if clear {
            vec![self.discard(seq)]
        } else {
            self.settle(seq).into_iter().collect()
        }
    }

    /// In a table reusing as cold, cuts `seq` after the cells a prompt may reuse (not offered
    /// to the cache: the rest is not worth keeping). None where there is nothing to cut.
    pub fn settle(&mut self, seq: usize) -> Option<KvOp> {
        let len = self.reusable(seq);
        (len < self.slots[seq].tokens.len()).then(|| {
            self.cut(seq, len);
            KvOp::Truncate { seq, len, source: None }
        })
    }

    /// The busy sequence `seq` keeps its first `len` tokens: drafted tokens its request took
    /// back (speculative decoding). Not offered to the cache: they were never the conversation's.
    pub fn rollback(&mut self, seq: usize, len: usize) -> KvOp {
        self.cut(seq, len);
        KvOp::Truncate { seq, len, source: None }
    }

    /// Empties sequence `seq`, offering what it held to the prompt cache first when it held
    /// enough.
    pub fn clear(&mut self, seq: usize) -> Vec<KvOp> {
        let mut ops: Vec<KvOp> = self.leave(seq, 0).into_iter().collect();
        ops.push(self.discard(seq));
        ops
    }

    /// Empties sequence `seq` without offering it to the cache: what it holds is not worth
    /// keeping (a failed decode, a prefix about to be replaced).
    pub fn discard(&mut self, seq: usize) -> KvOp {
        self.cut(seq, 0);
        KvOp::Clear { seq }
    }

    /// The KV cache cannot hold the batch whose entries are `batch` (request id, sequence; ids
    /// grow with age): evicts the least recently used idle sequence that holds tokens; with
    /// none, parks the youngest request of the batch, unless it is alone (`active` requests hold
    /// or are about to free KV cells). None for an empty batch.
    pub fn make_room(&mut self, batch: &[(u64, usize)], active: usize) -> Option<Room> {
        let victim = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.busy && !s.tokens.is_empty())
            .min_by_key(|(_, s)| s.last_used)
            .map(|(i, _)| i);
        if let Some(i) = victim {
            return Some(Room::Evicted(self.clear(i)));
        }
        let &(job, seq) = batch.iter().max_by_key(|&&(job, _)| job)?;
        if active <= 1 {
            return Some(Room::Overflow { job });
        }
        Some(Room::Park { job, ops: self.clear(seq) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table whose sequence `i` holds `held[i]` and is busy when `busy[i]`, used in index
    /// order (sequence 0 least recently).
    fn table(held: &[&[Token]], busy: &[bool]) -> SlotTable {
        let mut t = SlotTable::new(held.len());
        for (i, tokens) in held.iter().enumerate() {
            t.decoded(i, tokens, true);
            t.clock += 1;
            t.slots[i].last_used = t.clock;
            t.slots[i].busy = busy[i];
        }
        t
    }

    fn seq(range: std::ops::Range<Token>) -> Vec<Token> {
        range.collect()
    }

    #[test]
    fn a_new_prompt_goes_to_an_empty_sequence_and_leaves_idle_ones_alone() {
        let mut t = table(&[&[7, 8, 9], &[], &[]], &[false, false, false]);
        let p = t.place(&[1, 2, 3], &[]).unwrap();
        assert_eq!(p.seq, 1);
        assert_eq!(p.prefix, Prefix::Ready);
        // Sequence 1 is already empty: it is cut to zero, nothing is cleared or copied.
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 1, len: 0, source: Some(0) }]);
        assert_eq!(t.held(0), &[7, 8, 9]);
        assert!(t.held(1).is_empty());
        assert!(t.slots[1].busy);
        assert!(!t.slots[0].busy);
    }

    #[test]
    fn the_next_turn_reuses_the_idle_sequence_holding_the_longest_prefix() {
        let mut t = table(&[&[1, 2, 9], &[1, 2, 3, 4], &[]], &[false, false, false]);
        let p = t.place(&[1, 2, 3, 4, 5, 6], &[]).unwrap();
        assert_eq!(p.seq, 1, "the sequence the prompt extends");
        assert_eq!(p.prefix, Prefix::Ready);
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 1, len: 4, source: None }]);
        assert_eq!(t.held(1), &[1, 2, 3, 4], "4 tokens cached");
        assert_eq!(t.held(0), &[1, 2, 9]);
    }

    #[test]
    fn a_prompt_diverging_inside_a_sequence_copies_its_prefix_to_an_empty_one() {
        let mut t = table(&[&[1, 2, 3, 4, 5], &[]], &[false, false]);
        let p = t.place(&[1, 2, 3, 8, 9], &[]).unwrap();
        assert_eq!(p.seq, 1);
        assert_eq!(p.ops, vec![KvOp::Clear { seq: 1 }, KvOp::Copy { src: 0, dst: 1, n: 3 }]);
        assert_eq!(t.held(1), &[1, 2, 3]);
        assert_eq!(t.held(0), &[1, 2, 3, 4, 5], "the source keeps its conversation");
    }

    #[test]
    fn the_whole_prompt_cached_still_leaves_one_token_to_evaluate() {
        let mut t = table(&[&[1, 2, 3, 4]], &[false]);
        let p = t.place(&[1, 2, 3, 4], &[]).unwrap();
        assert_eq!(p.seq, 0);
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 0, len: 3, source: None }]);
        assert_eq!(t.held(0), &[1, 2, 3]);
    }

    #[test]
    fn with_no_empty_sequence_the_least_recently_used_idle_one_is_evicted() {
        // 0 and 2 are idle, 0 used longest ago; 1 holds the prefix but is busy.
        let mut t = table(&[&[5, 5], &[1, 2, 3], &[6, 6]], &[false, true, false]);
        let p = t.place(&[1, 2, 3, 4], &[]).unwrap();
        assert_eq!(p.seq, 0);
        assert_eq!(p.prefix, Prefix::Ready);
        // Evicted, then emptied again to take the copy (the second clear finds nothing).
        assert_eq!(p.ops, vec![KvOp::Clear { seq: 0 }, KvOp::Clear { seq: 0 }, KvOp::Copy { src: 1, dst: 0, n: 3 }]);
        assert_eq!(t.held(0), &[1, 2, 3]);
        assert_eq!(t.held(2), &[6, 6]);
    }

    #[test]
    fn every_sequence_busy_places_nothing() {
        let mut t = table(&[&[1], &[2]], &[true, true]);
        assert_eq!(t.place(&[1, 2, 3], &[]), None);
        assert_eq!(t.held(0), &[1]);
    }

    #[test]
    fn a_long_prefix_another_request_is_evaluating_is_awaited() {
        let shared = seq(100..140);
        let mut mine = shared[..30].to_vec();
        mine.extend([1, 2, 3]);
        // Sequence 0 runs a request with prompt `shared`, 10 tokens evaluated so far.
        let mut t = table(&[&shared[..10], &[]], &[true, false]);
        let p = t.place(&mine, &[(0, &shared)]).unwrap();
        assert_eq!(p.seq, 1);
        assert_eq!(p.prefix, Prefix::Awaited { src: 0, upto: 30 });
        assert_eq!(p.ops, vec![], "nothing copied yet");
        assert!(t.slots[1].busy);

        // Once sequence 0 holds the 30 tokens the waiting request copies them.
        t.decoded(0, &shared[10..35], true);
        assert_eq!(t.fill(1, 0, &mine, 30), vec![KvOp::Clear { seq: 1 }, KvOp::Copy { src: 0, dst: 1, n: 30 }]);
        assert_eq!(t.held(1), &shared[..30]);
    }

    #[test]
    fn a_shared_prefix_shorter_than_the_minimum_is_not_awaited() {
        let shared = seq(100..140);
        let mut mine = shared[..10 + MIN_SHARED_PREFIX - 1].to_vec();
        mine.extend([1, 2, 3]);
        let mut t = table(&[&shared[..10], &[]], &[true, false]);
        let p = t.place(&mine, &[(0, &shared)]).unwrap();
        assert_eq!(p.seq, 1);
        assert_eq!(p.prefix, Prefix::Ready, "copies the 10 tokens there are");
        assert_eq!(p.ops, vec![KvOp::Clear { seq: 1 }, KvOp::Copy { src: 0, dst: 1, n: 10 }]);

        // One token more and it is worth the wait.
        let mut mine = shared[..10 + MIN_SHARED_PREFIX].to_vec();
        mine.push(1);
        let mut t = table(&[&shared[..10], &[]], &[true, false]);
        let p = t.place(&mine, &[(0, &shared)]).unwrap();
        assert_eq!(p.prefix, Prefix::Awaited { src: 0, upto: 10 + MIN_SHARED_PREFIX });
    }

    #[test]
    fn a_prefix_already_evaluated_is_copied_not_awaited() {
        let shared = seq(100..140);
        let mut mine = shared[..30].to_vec();
        mine.push(1);
        let mut t = table(&[&shared[..35], &[]], &[true, false]);
        let p = t.place(&mine, &[(0, &shared)]).unwrap();
        assert_eq!(p.prefix, Prefix::Ready);
        assert_eq!(p.ops, vec![KvOp::Clear { seq: 1 }, KvOp::Copy { src: 0, dst: 1, n: 30 }]);
    }

    #[test]
    fn a_refused_cut_clears_and_copies_from_the_source() {
        let mut t = table(&[&[1, 2, 3, 4], &[1, 2, 3, 9]], &[false, true]);
        // Sequence 0 begins with the prefix sequence 1 holds: it is cut, not refilled.
        let ops = t.fill(0, 1, &[1, 2, 3], 3);
        assert_eq!(ops, vec![KvOp::Truncate { seq: 0, len: 3, source: Some(1) }]);
        assert_eq!(
            t.truncate_refused(0, 3, Some(1)),
            vec![KvOp::Clear { seq: 0 }, KvOp::Copy { src: 1, dst: 0, n: 3 }]
        );
        assert_eq!(t.held(0), &[1, 2, 3]);
        // Cutting a sequence in place: refused means nothing is cached.
        assert_eq!(t.truncate_refused(1, 3, None), vec![KvOp::Clear { seq: 1 }]);
        assert!(t.held(1).is_empty());
    }

    #[test]
    fn a_released_sequence_keeps_its_tokens_unless_cleared() {
        let mut t = table(&[&[1, 2], &[3, 4]], &[true, true]);
        assert_eq!(t.release(0, false), vec![]);
        assert_eq!(t.release(1, true), vec![KvOp::Clear { seq: 1 }]);
        assert_eq!(t.held(0), &[1, 2]);
        assert!(t.held(1).is_empty());
        assert!(!t.slots[0].busy && !t.slots[1].busy);
        assert!(t.slots[1].last_used > t.slots[0].last_used);
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used_idle_sequence_first() {
        // 1 and 3 are idle and hold tokens, 1 released before 3; 2 is idle and empty.
        let mut t = table(&[&[1], &[2], &[], &[4]], &[true, false, false, false]);
        assert_eq!(t.make_room(&[(7, 0)], 1), Some(Room::Evicted(vec![KvOp::Clear { seq: 1 }])));
        assert!(t.held(1).is_empty());
        assert_eq!(t.make_room(&[(7, 0)], 1), Some(Room::Evicted(vec![KvOp::Clear { seq: 3 }])));
        assert_eq!(t.held(0), &[1], "the running request keeps its tokens");
    }

    #[test]
    fn a_full_cache_with_no_idle_tokens_parks_the_youngest_request() {
        let mut t = table(&[&[1, 1], &[2, 2], &[3, 3], &[]], &[true, true, true, false]);
        let batch = [(4, 0), (9, 2), (6, 1)];
        assert_eq!(t.make_room(&batch, 3), Some(Room::Park { job: 9, ops: vec![KvOp::Clear { seq: 2 }] }));
        assert!(t.held(2).is_empty());
        assert_eq!(t.held(0), &[1, 1]);
        assert_eq!(t.held(1), &[2, 2]);
    }

    #[test]
    fn with_a_prompt_cache_what_leaves_a_sequence_is_offered_before_it_goes() {
        let long = seq(0..100);
        let mut t = table(&[&seq(200..300), &long, &seq(300..400)], &[false, false, false]);
        t.keep_from = 64;
        // A different conversation takes the least recently used sequence: evicted, offered
        // first, in the operations that evict it.
        let p = t.place(&seq(500..600), &[]).unwrap();
        assert_eq!(p.seq, 1, "0 holds the (empty) best prefix and is kept; 1 is the oldest of the others");
        assert_eq!(p.ops[..2], [KvOp::Leave { seq: 1, tokens: long.clone() }, KvOp::Clear { seq: 1 }]);
        assert_eq!(leaves(&p.ops), 1, "offered once");
        // Cutting a sequence by fewer than 64 tokens (the same conversation going on) is not.
        let mut t = table(&[&long], &[false]);
        t.keep_from = 64;
        let mut next = long[..90].to_vec();
        next.extend([7, 7]);
        assert_eq!(leaves(&t.place(&next, &[]).unwrap().ops), 0);
        // Cut by 64 or more (an engine switching conversations): offered whole, before the cut.
        let mut t = table(&[&long], &[false]);
        t.keep_from = 64;
        let p = t.place(&[0, 1, 2, 9, 9], &[]).unwrap();
        assert_eq!(
            p.ops,
            [KvOp::Leave { seq: 0, tokens: long.clone() }, KvOp::Truncate { seq: 0, len: 3, source: None }]
        );
        // A failed request's sequence is never offered.
        let mut t = table(&[&long], &[true]);
        t.keep_from = 64;
        assert_eq!(t.release(0, true), [KvOp::Clear { seq: 0 }]);
        // An eviction to make room and a parked request's sequence are.
        let mut t = table(&[&long, &seq(200..300)], &[false, true]);
        t.keep_from = 64;
        let room = t.make_room(&[(7, 1)], 1).unwrap();
        assert_eq!(room, Room::Evicted(vec![KvOp::Leave { seq: 0, tokens: long.clone() }, KvOp::Clear { seq: 0 }]));
        // Without a cache nothing is offered.
        let mut t = table(&[&long], &[false]);
        assert_eq!(t.clear(0), [KvOp::Clear { seq: 0 }]);
    }

    /// How many of `ops` offer a sequence to the prompt cache.
    fn leaves(ops: &[KvOp]) -> usize {
        ops.iter().filter(|op| matches!(op, KvOp::Leave { .. })).count()
    }

    #[test]
    fn a_request_alone_in_a_full_cache_overflows() {
        let mut t = table(&[&[1, 1], &[]], &[true, false]);
        assert_eq!(t.make_room(&[(3, 0)], 1), Some(Room::Overflow { job: 3 }));
        assert_eq!(t.held(0), &[1, 1], "nothing cleared");
        assert_eq!(t.make_room(&[], 2), None);
    }

    #[test]
    fn drafted_tokens_taken_back_are_not_offered_to_the_cache() {
        let long: Vec<Token> = (0..100).collect();
        let mut t = table(&[&long], &[true]);
        t.keep_from = 64;
        assert_eq!(t.rollback(0, 30), KvOp::Truncate { seq: 0, len: 30, source: None });
        assert_eq!(t.held(0), &long[..30], "a draft is not a conversation to keep: no Leave");
    }

    /// A table of one sequence reusing as cold, with a tile of 8 rows: the first turn's prompt
    /// (20 tokens) read in one tiled step, its reply (5 tokens) a row at a time.
    fn as_cold_after_a_turn() -> (SlotTable, Vec<Token>) {
        let mut t = SlotTable::new(1).keeping(4).reusing_as_cold(8);
        let turn = seq(100..125);
        let p = t.place(&turn[..20], &[]).unwrap();
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 0, len: 0, source: None }]);
        t.decoded(0, &turn[..20], true);
        for tok in &turn[20..] {
            t.decoded(0, &[*tok], false);
        }
        (t, turn)
    }

    #[test]
    fn reusing_as_cold_a_sequence_keeps_only_its_tiled_cells_when_its_request_leaves() {
        let (mut t, turn) = as_cold_after_a_turn();
        let ops = t.release(0, false);
        assert_eq!(ops, vec![KvOp::Truncate { seq: 0, len: 20, source: None }], "not offered to the prompt cache");
        assert_eq!(t.held(0), &turn[..20], "the reply's cells go: the next turn reads them again");
        assert_eq!(t.settle(0), None, "nothing more to cut");
    }

    #[test]
    fn reusing_as_cold_a_prompt_reads_at_least_a_tile_again() {
        let (mut t, turn) = as_cold_after_a_turn();
        t.release(0, false);
        // The next turn: the whole first turn and 3 tokens more, 28 in all.
        let mut next = turn.clone();
        next.extend([1, 2, 3]);
        let p = t.place(&next, &[]).unwrap();
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 0, len: 20, source: None }], "28 - 8 = 20 cached");
        assert_eq!(t.min_read(), 8);
        t.release(0, false);
        // A prompt that extends the kept cells by 2 tokens reads the last 8: 14 cached.
        let p = t.place(&turn[..22], &[]).unwrap();
        let cut = vec![KvOp::Truncate { seq: 0, len: 14, source: None }];
        assert_eq!(p.ops, cut, "the 6 tokens cut are read again, not lost: no Leave");
        t.release(0, false);
        // Another conversation: what it held is offered to the cache before the cut.
        let p = t.place(&seq(0..30), &[]).unwrap();
        assert_eq!(p.ops[0], KvOp::Leave { seq: 0, tokens: turn[..14].to_vec() });
    }

    #[test]
    fn reusing_as_cold_cells_after_a_small_step_are_not_reused_though_later_steps_are_tiled() {
        let mut t = SlotTable::new(1).reusing_as_cold(8);
        let tokens = seq(0..40);
        t.decoded(0, &tokens[..10], true);
        t.decoded(0, &tokens[10..12], false);
        t.decoded(0, &tokens[12..30], true);
        assert_eq!(t.release(0, false), vec![KvOp::Truncate { seq: 0, len: 10, source: None }]);
        t.restored(0, &tokens[..30]);
        assert_eq!(t.release(0, false), vec![], "a restored state holds only such cells");
        assert_eq!(t.rollback(0, 25), KvOp::Truncate { seq: 0, len: 25, source: None });
        let p = t.place(&tokens, &[]).unwrap();
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 0, len: 25, source: None }], "40 - 8 = 32, but 25 held");
    }

    #[test]
    fn without_reusing_as_cold_every_held_cell_is_reused() {
        let mut t = SlotTable::new(1);
        let tokens = seq(0..30);
        t.decoded(0, &tokens[..20], false);
        assert_eq!(t.release(0, false), vec![]);
        assert_eq!(t.min_read(), 1);
        let p = t.place(&tokens, &[]).unwrap();
        assert_eq!(p.ops, vec![KvOp::Truncate { seq: 0, len: 20, source: None }]);
    }
}
