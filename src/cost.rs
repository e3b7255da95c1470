//! The cost model: what this engine's or pool's device charges for the work llb can trade
//! against other work, learned online from its own decodes, and the decisions that ask it.
//!
//! - **Batches**: the time of a decode of n tokens (device work included: the scheduler times
//!   `llama_decode` through `llama_synchronize`), an average per power-of-two size class,
//!   interpolated between the classes measured. A prompt's cost is its chunks'; a draft's cost is
//!   what its rows add to the step they ride on.
//! - **States**: bytes per ms of a sequence's state out of the context (a stash), back in (a
//!   restore), and off the disk.
//!
//! The decisions (docs/design.md, "The cost model"):
//! - restore a cached prefix only where putting its state back costs less than reading the
//!   tokens it gives ([`Costs::restore_pays`]);
//! - keep a leaving sequence only where the tokens that really leave (not those another sequence
//!   or the cache still holds) would cost more to read again, weighted by how often kept states
//!   came back, than the stash costs now plus the restore later ([`Costs::stash_pays`]);
//! - draft only as many tokens as the lane's acceptance pays for at the measured marginal cost
//!   of their rows in the pool's step ([`Costs::draft_rows`]), an accepted token valued at what
//!   the pool saves by it: a whole step for a lone request; in a pool, the step's cost per
//!   request where every lane has something to copy (the pool ends when they do), what the step
//!   costs per token it yields where a request waits for a lane (the lane that finishes sooner
//!   lets it in), else only the lane's own row in the steps the other lanes run anyway; in a
//!   pool, by a margin over the curve's noise ([`POOL_DOUBT`]), a wider one where the saving
//!   rests on a queue outlasting the lanes' work ([`QUEUE_DOUBT`]);
//! - on a device that runs a step whose shape repeats much faster than one whose shape changed
//!   (CUDA replays a captured graph; a CPU does not care), a lane verifies a fixed number of
//!   rows or none, its proposal padded with filler, so that its steps keep one shape.
//!
//! Nothing measured yet means "try it": the first stash, restore or draft measures what it
//! costs. On a CPU (a verifying batch costs about its length, a state is a memcpy) the decisions
//! come out as the features' defaults; on a GPU (a prompt is read at tens of thousands of tokens
//! a second, rows are free up to a point, a state crosses the bus in many small copies) they turn
//! over. Unit tests feed both profiles.

use serde_json::{json, Value};
use std::sync::Mutex;

/// Size classes of batches: 1, 2-3, 4-7, ... up to 2^16 tokens.
const CLASSES: usize = 17;
/// Weight of a new measurement in its average.
const ALPHA: f64 = 0.2;
/// How the counts of kept states and their returns fade.
const KEPT_FADE: f64 = 0.95;
/// Runs of one shape (three steps or more) measured before the device's verdict on shapes.
const SHAPE_RUNS: u64 = 4;
/// How much dearer the first step of a shape must be than its third, on average, for the device
/// to count as one that pays for repeated shapes.
const SHAPE_PENALTY: f64 = 1.5;
/// What a device's changed shape is taken to cost, in repeated steps, before [`SHAPE_RUNS`] runs
/// were measured: held rows are tried, and they make the runs that measure it.
const SHAPE_ASSUMED: f64 = 2.0;
/// What an accepted token of a lane in a pool is taken to be worth, of what the curve says it
/// saves (a share of the steps the pool no longer runs, or a row in the steps it runs anyway):
/// a saving in steps to come, read off the curve's points, each of which moves by ±10% from run
/// to run on two CPU cores (bench_speculative: a step of 8 rows 26-34 ms), while a draft's rows
/// are spent now for certain. Where a row saved and a row drafted cost about the same (a CPU),
/// a draft must pay by this margin or it gambles rows on noise; where rows are free (a GPU
/// under its knee) the margin changes nothing. A lone lane's token saves a whole step,
/// measured: no margin. Where requests wait, [`QUEUE_DOUBT`] instead.
const POOL_DOUBT: f64 = 0.8;
/// The same where a lane's token is worth its share of the pool's steps because a request waits
/// for a lane: the lane that ends sooner lets it in, which makes the pool's steps fewer only
/// where the queue outlasts the lanes' work. In a burst the pool's last steps are set by the
/// lanes that run the longest requests back to back: in bench (e), 449 accepted drafted tokens
/// saved 9 of 404 steps, 0.02 steps each where the share counts 1/8, and drafting at 0.8 and
/// 0.7 of the share lost 4% (0 of 12 pairs ahead at 0.7). At half, a CPU's rows (a row ~2.8 ms
/// against a share of ~3.7 ms in a step of 8) do not pay; a GPU's rows, nearly free, still do.
const QUEUE_DOUBT: f64 = 0.5;
/// Rounds a lane that starts holding its rows is expected to hold them before its own holds
/// were measured (what starting costs is spread over them): the prior of [`Acceptance::hold_rounds`].
const HOLD_ROUNDS: f64 = 8.0;
/// What a round of filler alone is charged at least, of a changed step: a lane holds filler
/// while its rounds' rows cost less in all than the two changes (stop, start again) the hold
/// spares if a proposal comes back, rent before buying; rows the curve shows as free (its
/// noise hides a few rows' cost) are charged this much, so such a hold ends after 31 rounds.
/// A strict call's copies are parted by a few JSON keys or a changed word (the emulated H200:
/// gaps of 3-19 steps at 0.2-0.25 ms of filler each, against ~4.7 ms for a change).
const FILLER_FLOOR: f64 = 1.0 / 16.0;

#[derive(Debug, Clone, Copy, Default)]
struct Point {
    /// Average tokens and ms of the decodes of this size class.
    n: f64,
    ms: f64,
    seen: u64,
}

/// Decode time by batch size.
#[derive(Debug, Clone, Default)]
struct Curve {
    classes: [Point; CLASSES],
}

impl Curve {
    /// A decode of `n` tokens took `ms`. A class's first decode may pay what only a first one
    /// does (llama.cpp grows its output buffer for more logits rows than before, pages are
    /// touched for the first time: a lone lane's first verifying step of 17 rows took 17 ms
    /// where later ones took ~3), so the second replaces it, and later ones average in.
    fn record(&mut self, n: usize, ms: f64) {
        let c = &mut self.classes[class(n)];
        let a = if c.seen <= 1 { 1.0 } else { ALPHA.max(1.0 / (c.seen as f64 + 1.0)) };
        c.n += a * (n as f64 - c.n);
        c.ms += a * (ms - c.ms);
        c.seen += 1;
    }

    fn points(&self) -> impl Iterator<Item = &Point> {
        self.classes.iter().filter(|p| p.seen > 0)
    }

    /// The curve with each class measured only once ([`Curve::record`]) no dearer than the
    /// classes measured more than once around it say: a first decode's one-time cost is not
    /// believed until a second decode of its size confirms it (sizes past the settled ones keep
    /// what they measured).
    fn settled(&self) -> Curve {
        let mut sure = self.clone();
        sure.classes.iter_mut().filter(|p| p.seen == 1).for_each(|p| *p = Point::default());
        let mut c = self.clone();
        for p in c.classes.iter_mut().filter(|p| p.seen == 1) {
            if let Some(ms) = sure.at_measured(p.n.round() as usize) {
                p.ms = p.ms.min(ms);
            }
        }
        c
    }

    /// [`Curve::at`] where a size of `n` or more was measured (None: larger than any seen).
    fn at_measured(&self, n: usize) -> Option<f64> {
        self.points().any(|p| p.n >= n as f64).then(|| self.at(n)).flatten()
    }

    /// Estimated ms of a decode of `n` tokens: linear between the measured classes around it,
    /// the smallest's time below them (a smaller batch costs no more), proportional to the
    /// tokens above the largest. None before any decode.
    fn at(&self, n: usize) -> Option<f64> {
        let n = n.max(1) as f64;
        let mut below: Option<&Point> = None;
        for p in self.points() {
            if p.n >= n {
                return Some(match below {
                    None => p.ms,
                    Some(b) if p.n > b.n => b.ms + (p.ms - b.ms) * (n - b.n) / (p.n - b.n),
                    Some(_) => p.ms,
                });
            }
            below = Some(p);
        }
        below.map(|b| b.ms * n / b.n)
    }
}

fn class(n: usize) -> usize {
    (usize::BITS - n.max(1).leading_zeros() - 1).min(CLASSES as u32 - 1) as usize
}

/// Bytes per ms of one kind of state transfer.
#[derive(Debug, Clone, Copy, Default)]
struct Rate {
    bytes_per_ms: f64,
    seen: u64,
}

impl Rate {
    fn record(&mut self, bytes: usize, ms: f64) {
        let r = bytes as f64 / ms.max(1e-3);
        let a = if self.seen == 0 { 1.0 } else { ALPHA };
        self.bytes_per_ms += a * (r - self.bytes_per_ms);
        self.seen += 1;
    }

    fn ms(&self, bytes: u64) -> Option<f64> {
        (self.seen > 0).then(|| bytes as f64 / self.bytes_per_ms.max(1e-9))
    }
}

#[derive(Debug, Default)]
struct Model {
    batch: Curve,
    /// The same decodes by where they fall in a run of one shape (tokens, logits rows):
    /// `changed` the first step of a run, `stable` its third and later (the second is where a
    /// device captures the shape's graph: in `batch` only).
    stable: Curve,
    changed: Curve,
    shapes: Shapes,
    state_out: Rate,
    state_in: Rate,
    disk_read: Rate,
    /// Average bytes of a sequence's state per token it holds.
    state_bytes_per_token: f64,
    /// States kept, and restores of kept states (how often a kept state comes back), counts
    /// that fade by [`KEPT_FADE`] with every state kept: recent ones weigh most, and the chance
    /// never falls so low that a device where states pay stops keeping them for good.
    kept: f64,
    came_back: f64,
    /// Draft rows in the last decode (every lane's).
    last_draft_rows: usize,
    /// Requests waiting for a lane at the last decode, and requests running.
    waiting: usize,
    running: usize,
    /// Lanes whose latest draft had something to copy (a proposal, verified or followed in the
    /// shadow): each lane says when it starts and when it stops, whatever step it is at.
    copying: usize,
    /// Drafted rows verified and, of them, accepted, every lane's (halved together as they
    /// grow: recent rounds weigh most): what the other lanes' draft rows in a step yield.
    verified: f64,
    accepted: f64,
    restores_skipped: u64,
    stashes_skipped: u64,
    /// Tensor copies the state transfers took, and the pieces (cell ranges and cells) they
    /// moved: grouped on a device, a copy or two per tensor for many pieces.
    state_copies: u64,
    state_pieces: u64,
    draft_tokens_cut: u64,
    /// Filler rows verified to keep a lane's steps one shape.
    rows_padded: u64,
}

impl Model {
    /// The share of the lanes' verified drafted rows that were accepted, with Laplace's prior.
    fn drafted_rows_accepted(&self) -> f64 {
        (self.accepted + 1.0) / (self.verified + 2.0)
    }

    fn keep(&mut self) {
        self.kept = self.kept * KEPT_FADE + 1.0;
        self.came_back *= KEPT_FADE;
    }
}

/// Runs of one step shape: the shape and length of the current run, the ms of its first step,
/// and how much dearer a run's first step was than its third, on average over runs. A device
/// that replays a captured graph for a repeated shape (CUDA) shows a first step several times
/// its third; a CPU shows about one.
#[derive(Debug, Default)]
struct Shapes {
    shape: (usize, usize),
    run: usize,
    first_ms: f64,
    ratio: f64,
    runs: u64,
}

impl Shapes {
    /// A step of `shape` took `ms`: its place in its run (1: the shape changed).
    fn record(&mut self, shape: (usize, usize), ms: f64) -> usize {
        if shape == self.shape && self.run > 0 {
            self.run += 1;
        } else {
            (self.shape, self.run, self.first_ms) = (shape, 1, ms);
        }
        if self.run == 3 {
            let r = self.first_ms / ms.max(1e-3);
            let a = if self.runs == 0 { 1.0 } else { ALPHA };
            self.ratio += a * (r - self.ratio);
            self.runs += 1;
        }
        self.run
    }

    /// How many times a repeated step's cost a changed shape costs: as measured where that is
    /// clearly more than one, [`SHAPE_ASSUMED`] before it was measured (try it), None where the
    /// device does not care.
    fn penalty(&self) -> Option<f64> {
        match self.runs >= SHAPE_RUNS {
            false => Some(SHAPE_ASSUMED),
            true => (self.ratio > SHAPE_PENALTY).then_some(self.ratio),
        }
    }
}

/// What a lane's past says of its drafts: the tokens a draft of `k` is expected to have
/// accepted ([`Acceptance::expected`]), and the rounds a hold of its rows is expected to last
/// ([`Acceptance::hold_rounds`]; [`HOLD_ROUNDS`] for a bare function of `k`).
pub trait LaneRecord {
    fn expected(&self, k: usize) -> f64;
    fn hold_rounds(&self) -> f64 {
        HOLD_ROUNDS
    }
    /// Rounds of filler alone the lane sent since it last verified a drafted token.
    fn filler_rounds(&self) -> usize {
        0
    }
}

impl<F: Fn(usize) -> f64> LaneRecord for F {
    fn expected(&self, k: usize) -> f64 {
        self(k)
    }
}

/// The rows a lane verifies after its step: `verify` drafted tokens, then `pad` filler tokens
/// (rows that keep the step's shape; a filler is accepted only where the model chooses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DraftRows {
    pub verify: usize,
    pub pad: usize,
}

/// One engine's or pool's costs (shared by its scheduler thread and its requests).
#[derive(Debug, Default)]
pub struct Costs {
    m: Mutex<Model>,
    /// A device does every step's work: only then can a step's shape cost (captured graphs), and
    /// only then is it measured (a CPU's first step of a new shape can be slower for reasons of
    /// its own: thread counts tried, caches; they must not make it pad drafts).
    on_device: bool,
}

/// Which state transfer was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Out of the context (a stash).
    Out,
    /// Into the context (a restore).
    In,
    /// Off the disk tier.
    DiskRead,
}

impl Costs {
    /// The costs of a scheduler whose steps run on a device (`on_device`) or on the host.
    pub fn new(on_device: bool) -> Costs {
        Costs { on_device, ..Costs::default() }
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A decode of `tokens` tokens with `outputs` logits rows, `draft_rows` of them drafted,
    /// took `ms`.
    pub fn record_batch(&self, tokens: usize, outputs: usize, draft_rows: usize, ms: f64) {
        let mut m = self.model();
        m.batch.record(tokens, ms);
        match m.shapes.record((tokens, outputs), ms) {
            1 => m.changed.record(tokens, ms),
            2 => {}
            _ => m.stable.record(tokens, ms),
        }
        m.last_draft_rows = draft_rows;
    }

    /// A step was decoded with `requests` requests running and `waiting` more waiting for a
    /// lane (the queue of a pool's scheduler).
    pub fn record_step(&self, requests: usize, waiting: usize) {
        let mut m = self.model();
        (m.running, m.waiting) = (requests, waiting);
    }

    /// A lane starts (`true`) or stops (`false`) having something to copy. A gauge, not a count
    /// per step: a lane whose thread is late for a step still counts as it last said.
    pub fn copying(&self, starts: bool) {
        let mut m = self.model();
        m.copying = if starts { m.copying + 1 } else { m.copying.saturating_sub(1) };
    }

    /// `n` verified drafted tokens of a lane were accepted.
    pub fn accepted(&self, n: usize) {
        self.model().accepted += n as f64;
    }

    /// A state of `bytes` (of a sequence of `tokens` tokens) moved in `ms`.
    pub fn record_state(&self, t: Transfer, bytes: usize, tokens: usize, ms: f64) {
        let mut m = self.model();
        match t {
            Transfer::Out => m.state_out.record(bytes, ms),
            Transfer::In => m.state_in.record(bytes, ms),
            Transfer::DiskRead => m.disk_read.record(bytes, ms),
        }
        if tokens > 0 {
            let per = bytes as f64 / tokens as f64;
            let a = if m.state_bytes_per_token == 0.0 { 1.0 } else { ALPHA };
            m.state_bytes_per_token += a * (per - m.state_bytes_per_token);
        }
    }

    /// A state transfer took `copies` tensor copies for `pieces` pieces.
    pub fn record_copies(&self, copies: usize, pieces: usize) {
        let mut m = self.model();
        m.state_copies += copies as u64;
        m.state_pieces += pieces as u64;
    }

    /// Estimated ms to read `tokens` prompt tokens in chunks of `n_batch` (None: nothing
    /// measured yet).
    #[cfg(test)]
    pub fn prompt_ms(&self, tokens: usize, n_batch: usize) -> Option<f64> {
        prompt_ms(&self.model().batch, tokens, n_batch)
    }

    /// Whether restoring a state of `bytes` (from the disk: `from_disk`) beats reading the
    /// `tokens` it gives beyond what the sequence holds.
    pub fn restore_pays(&self, tokens: usize, bytes: u64, from_disk: bool, n_batch: usize) -> bool {
        let mut m = self.model();
        let read = prompt_ms(&m.batch, tokens, n_batch);
        let put = m.state_in.ms(bytes).map(|ms| ms + if from_disk { m.disk_read.ms(bytes).unwrap_or(0.0) } else { 0.0 });
        let pays = match (read, put) {
            (Some(read), Some(put)) => put < read,
            _ => true, // not measured yet: this restore measures it
        };
        if !pays {
            m.restores_skipped += 1;
        }
        pays
    }

    /// A restore of a kept state happened (it came back).
    pub fn came_back(&self) {
        let mut m = self.model();
        m.came_back = (m.came_back + 1.0).min(m.kept);
    }

    /// Whether keeping a leaving sequence of `held` tokens, of which `leaving` would be lost
    /// to the context and the cache, pays: the chance it comes back times what reading them
    /// again would cost beyond restoring them, against the stash's cost now.
    pub fn stash_pays(&self, held: usize, leaving: usize, n_batch: usize) -> bool {
        let mut m = self.model();
        let bytes = (m.state_bytes_per_token * held as f64) as u64;
        let (Some(out), Some(read)) = (m.state_out.ms(bytes), prompt_ms(&m.batch, leaving, n_batch)) else {
            m.keep();
            return true; // not measured yet: this stash measures it
        };
        let back = m.state_in.ms(bytes).unwrap_or(out);
        // Laplace's rule on how often kept states came back.
        let p = (m.came_back + 1.0) / (m.kept + 2.0);
        let pays = p * (read - back) > out;
        if pays {
            m.keep();
        } else {
            m.stashes_skipped += 1;
        }
        pays
    }

    /// Whether lanes hold the step's shape ([`held_rows`]): a device does every step's work and
    /// a changed shape costs it (or was not measured yet).
    pub fn holds_shapes(&self) -> bool {
        self.on_device && self.model().shapes.penalty().is_some()
    }

    /// How many of the `proposed` drafted tokens are worth verifying for a lane whose drafted
    /// tokens are each accepted with probability `p` (after the one before was), with `lanes`
    /// requests in the step: the length whose expected accepted tokens save most step time for
    /// the extra rows, 0 when none pays.
    #[cfg(test)]
    pub fn draft_len(&self, proposed: usize, p: f64, lanes: usize) -> usize {
        self.draft_rows(proposed, proposed, lanes, 0, &|k| geometric(p, k)).verify
    }

    /// The rows a lane verifies after its step: `proposal` drafted tokens at hand (0: none), in
    /// a draft of at most `k_max`, with `lanes` requests in the step, `own_last` rows in this
    /// lane's last draft, and the lane's record (`lane`: its [`Acceptance`]). Where shapes cost
    /// nothing, the length whose expected accepted tokens save most step time for the rows it
    /// adds; where a changed shape costs, `k_max` rows or none ([`held_rows`]).
    pub fn draft_rows(
        &self,
        proposal: usize,
        k_max: usize,
        lanes: usize,
        own_last: usize,
        lane: &dyn LaneRecord,
    ) -> DraftRows {
        let mut m = self.model();
        let lanes = lanes.max(1);
        let others = lanes + m.last_draft_rows.saturating_sub(own_last);
        // The pool's steps get fewer as this lane's do where every request running has something
        // to copy, or (less surely) where a request waits for a lane.
        let saving = match (m.running > 0 && m.copying >= m.running, m.waiting > 0) {
            (true, _) => Saving::Lockstep,
            (false, true) => Saving::Queue { yield_rows: m.drafted_rows_accepted() },
            (false, false) => Saving::OwnRow,
        };
        let step = PoolStep { n: others, lanes, saving };
        let rows = match m.shapes.penalty().filter(|_| self.on_device) {
            Some(ratio) => {
                let curve = if m.stable.at(others).is_some() { &m.stable } else { &m.batch };
                let saved = token_ms(curve, step);
                let at = LaneStep { proposal, k_max, others, lanes, own_last };
                held_rows([&m.stable, &m.batch], curve.at(others).zip(saved), ratio, at, lane)
            }
            None => {
                // Sizes measured once are tried again before they are believed.
                let curve = m.batch.settled();
                let saved = token_ms(&curve, step);
                let verify = best_len(&curve, proposal, others, saved, &|k| lane.expected(k));
                DraftRows { verify, pad: 0 }
            }
        };
        m.draft_tokens_cut += proposal.saturating_sub(rows.verify) as u64;
        m.verified += rows.verify as f64;
        if m.verified > 512.0 {
            (m.verified, m.accepted) = (m.verified / 2.0, m.accepted / 2.0);
        }
        m.rows_padded += rows.pad as u64;
        rows
    }

    /// For pool stats: what was measured and decided.
    pub fn stats(&self) -> Value {
        let m = self.model();
        let rate = |r: &Rate| (r.seen > 0).then(|| (r.bytes_per_ms * 1000.0 / 1e6 * 10.0).round() / 10.0);
        json!({
            "batch_ms": points(&m.batch),
            "decodes": m.batch.points().map(|p| p.seen).sum::<u64>(),
            "state_out_mb_per_s": rate(&m.state_out),
            "state_in_mb_per_s": rate(&m.state_in),
            "disk_read_mb_per_s": rate(&m.disk_read),
            "state_copies": m.state_copies,
            "state_pieces": m.state_pieces,
            "came_back_share": ((m.came_back + 1.0) / (m.kept + 2.0) * 100.0).round() / 100.0,
            "restores_skipped": m.restores_skipped,
            "stashes_skipped": m.stashes_skipped,
            "draft_tokens_cut": m.draft_tokens_cut,
            "rows_padded": m.rows_padded,
            "lanes_copying": m.copying,
            "drafted_rows_accepted": (m.drafted_rows_accepted() * 100.0).round() / 100.0,
            "shape_first_over_third": (m.shapes.runs > 0).then(|| (m.shapes.ratio * 100.0).round() / 100.0),
            "shape_runs": m.shapes.runs,
            "batch_ms_shape_repeated": points(&m.stable),
            "batch_ms_shape_changed": points(&m.changed),
        })
    }
}

/// Expected accepted tokens of a draft of `k` when each is accepted with probability `p` once
/// the one before was: p + p² + … + pᵏ.
fn geometric(p: f64, k: usize) -> f64 {
    (1..=k).map(|i| p.powi(i as i32)).sum()
}

/// A lane's step as [`token_ms`] sees it: `n` tokens without the lane's draft, `lanes` requests,
/// and what the pool gets back for the lane's accepted token.
#[derive(Clone, Copy)]
struct PoolStep {
    n: usize,
    lanes: usize,
    saving: Saving,
}

/// What a pool gets back for a lane's accepted token.
#[derive(Clone, Copy)]
enum Saving {
    /// Every request running copies: the pool ends when they do, its lanes in step, so each of
    /// its steps, drafts and all, is spared once every lane is a token further.
    Lockstep,
    /// A request waits for a lane: the lane that ends sooner lets it in, and the pool's tokens
    /// per ms are what a draft changes; `yield_rows`: the share of the pool's verified drafted
    /// rows that were accepted.
    Queue { yield_rows: f64 },
    /// Neither: the other lanes run their steps anyway, and the lane spares its own row in one.
    OwnRow,
}

/// What a lane's accepted drafted token saves, in ms of its step (None before any decode).
/// Alone, the lane's next step. In a pool, by [`Saving`]: in lockstep, the step's cost per
/// lane; on a queue, what the step costs per token it yields (its `lanes` tokens and the other
/// lanes' accepted drafted rows), so that a draft pays where it raises the pool's tokens per ms
/// (the step's cost per lane there made each lane's draft pay because the others drafted); else
/// the curve's slope at `n`. Each less its margin ([`POOL_DOUBT`], [`QUEUE_DOUBT`]). A row that
/// costs nothing is still worth a little (the lane's reply comes sooner), so rows a step gets
/// for nothing are drafted.
fn token_ms(batch: &Curve, at: PoolStep) -> Option<f64> {
    const SOONER: f64 = 1e-6;
    let step = batch.at(at.n)?;
    if at.lanes <= 1 {
        return Some(step);
    }
    let lanes = at.lanes as f64;
    let saved = match at.saving {
        Saving::Lockstep => step / lanes * POOL_DOUBT,
        Saving::Queue { yield_rows } => {
            step / (lanes + yield_rows * at.n.saturating_sub(at.lanes) as f64) * QUEUE_DOUBT
        }
        Saving::OwnRow => (step - batch.at(at.n - 1).unwrap_or(step)) * POOL_DOUBT,
    };
    Some(saved.max(SOONER))
}

/// The draft length whose expected accepted tokens, each worth `saved` ms ([`token_ms`]), save
/// more than the rows they add to a step of `base_n` tokens (0: none pays; `proposed` before any
/// decode was measured).
fn best_len(
    batch: &Curve,
    proposed: usize,
    base_n: usize,
    saved: Option<f64>,
    expected: &dyn Fn(usize) -> f64,
) -> usize {
    let (Some(base), Some(saved)) = (batch.at(base_n), saved) else { return proposed };
    let (mut best, mut best_gain) = (0, 0.0);
    for k in 1..=proposed {
        // The rows cost every request of the step.
        let extra = batch.at(base_n + k).unwrap_or(base) - base;
        let gain = expected(k) * saved - extra;
        if gain > best_gain {
            (best, best_gain) = (k, gain);
        }
    }
    best
}

/// A lane's step as [`Costs::draft_rows`] sees it.
#[derive(Clone, Copy)]
struct LaneStep {
    proposal: usize,
    k_max: usize,
    /// Tokens of the step without this lane's draft, and the requests in it.
    others: usize,
    lanes: usize,
    own_last: usize,
}

/// On a device where a changed shape costs `ratio` times a repeated one (`base`: the ms of a
/// repeated step of the other lanes' rows and what an accepted token saves ([`token_ms`]), None
/// before any): a lane verifies a fixed number of rows or none, its proposal padded with filler,
/// so that its steps keep one shape. The number is `k_max` in a pool, and for a lone lane the
/// one of [`hold_len`]. Drafting pays where the lane's expected accepted tokens save more step
/// time than the rows add to a repeated step (`curves`: of repeated steps, of all steps; sizes
/// not measured yet: try them; in a pool, a size no repeated step measured costs what its steps
/// did, for the other lanes' drafts change a pool's shape and a tried size may never repeat) plus, for a lane
/// that did not hold that many rows last step, the two changed steps that starting and stopping
/// cost, spread over the rounds its holds last ([`LaneRecord::hold_rounds`]). A lane that held
/// its rows last step and has nothing to propose sends filler alone while drafting still pays
/// and its rounds of filler cost less in all than the two changed steps they spare
/// ([`FILLER_FLOOR`]).
fn held_rows(curves: [&Curve; 2], base: Option<(f64, f64)>, ratio: f64, r: LaneStep, lane: &dyn LaneRecord) -> DraftRows {
    let [stable, all] = curves;
    let Some((base, saved)) = base else {
        let verify = r.proposal.min(r.k_max);
        return if verify > 0 { DraftRows { verify, pad: r.k_max - verify } } else { DraftRows::default() };
    };
    let change = (ratio - 1.0) * base;
    let start = 2.0 * change / lane.hold_rounds().max(1.0);
    let hold = match r.lanes {
        1 => hold_len(stable, base, start, r, lane),
        _ => r.k_max,
    };
    let verify = r.proposal.min(hold);
    let n = r.others + hold;
    let measured = stable.at_measured(n).or_else(|| all.at_measured(n).filter(|_| r.lanes > 1));
    let extra = measured.map_or(0.0, |ms| (ms - base).max(0.0));
    let held = r.own_last == hold && hold > 0;
    let pays = lane.expected(hold) * saved > extra + if held { 0.0 } else { start };
    if pays && verify > 0 {
        return DraftRows { verify, pad: hold - verify };
    }
    let filler = (lane.filler_rounds() + 1) as f64 * extra.max(FILLER_FLOOR * change);
    if pays && held && extra < change && filler < 2.0 * change {
        return DraftRows { verify: 0, pad: hold };
    }
    DraftRows::default()
}

/// The rows a lone lane holds: of `k_max` and the shorter holds 3, 7 and 15 (steps of 4, 8
/// and 16 rows, where a device's kernels change: ggml-cuda's vector kernel for quantized
/// weights takes up to 8), the one that gives the lane the most tokens per ms, `(1 + E(h)) /
/// T(B + h)`, `start` added to `T` for a hold other than the one of its last step. A size
/// whose class the repeated steps have not measured is taken at `base` (try it), so a lane
/// tries a shorter hold only where it would beat what the longer one measured. Most saved ms
/// per step, the pool's rule, grows with `h` while it pays: an H200's lone strict call held 16
/// rows at ~4 ms a step (17 tokens at most) where 8 rows cost about one row's ~1.4 ms.
fn hold_len(stable: &Curve, base: f64, start: f64, r: LaneStep, lane: &dyn LaneRecord) -> usize {
    let rate = |h: usize| {
        let n = r.others + h;
        let ms = if stable.classes[class(n)].seen > 0 { stable.at(n).unwrap_or(base) } else { base };
        (1.0 + lane.expected(h)) / (ms + if r.own_last == h { 0.0 } else { start })
    };
    let mut best = (r.k_max, rate(r.k_max));
    for h in [15, 7, 3].into_iter().filter(|&h| h < r.k_max) {
        let at = rate(h);
        if at > best.1 {
            best = (h, at);
        }
    }
    best.0
}

fn points(curve: &Curve) -> Vec<Value> {
    curve.points().map(|p| json!([p.n.round(), (p.ms * 1000.0).round() / 1000.0])).collect()
}

fn prompt_ms(batch: &Curve, tokens: usize, n_batch: usize) -> Option<f64> {
    let n_batch = n_batch.max(1);
    let full = (tokens / n_batch) as f64;
    let rest = tokens % n_batch;
    let chunk = if full > 0.0 { batch.at(n_batch)? * full } else { 0.0 };
    Some(chunk + if rest > 0 { batch.at(rest)? } else { 0.0 })
}

/// A lane's acceptance: how many tokens of its recent drafts were accepted (the last
/// [`RUNS`] rounds, verified or in the shadow), and the chance that a drafted token is accepted
/// once the one before it was, from counts that fade, with Laplace's prior of one half. A copy
/// is accepted all or nothing, which the recent runs say and a per-token chance does not.
#[derive(Debug, Clone, Default)]
pub struct Acceptance {
    accepted: f64,
    refused: f64,
    runs: std::collections::VecDeque<usize>,
    /// Where a device holds a lane's rows: the holds that ended and their rounds (counts that
    /// fade by [`HOLD_FADE`]), and the rounds of the one going on.
    holds: f64,
    hold_sum: f64,
    holding: usize,
    /// The rows of the hold going on.
    hold_rows: usize,
    /// Rounds of filler alone since the lane last verified a drafted token.
    filler: usize,
}

/// How the counts of a lane's holds fade with every hold that ends.
const HOLD_FADE: f64 = 0.6;

/// Rounds a lane's expectation is drawn from.
const RUNS: usize = 8;

impl Acceptance {
    /// A round of `drafted` tokens had its first `accepted` accepted.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        const FADE: f64 = 0.6;
        self.accepted = self.accepted * FADE + accepted as f64;
        self.refused = self.refused * FADE + f64::from(u8::from(accepted < drafted));
        if self.runs.len() == RUNS {
            self.runs.pop_front();
        }
        self.runs.push_back(accepted);
    }

    /// Expected accepted tokens of a draft of `k`: the average of `min(run, k)` over the
    /// recent rounds (a whole run counts what it had: a lower bound past its length); before
    /// any round, the per-token chance's.
    pub fn expected(&self, k: usize) -> f64 {
        if self.runs.is_empty() {
            return geometric(self.p(), k);
        }
        self.runs.iter().map(|&a| a.min(k) as f64).sum::<f64>() / self.runs.len() as f64
    }

    pub fn p(&self) -> f64 {
        (self.accepted + 1.0) / (self.accepted + self.refused + 2.0)
    }

    /// A round sent `rows` rows: a hold (rounds of one number of rows) goes on, or ends, and
    /// another may start.
    pub fn hold(&mut self, rows: usize) {
        if rows == 0 || rows != self.hold_rows {
            self.end_hold();
        }
        if rows > 0 {
            (self.holding, self.hold_rows) = (self.holding + 1, rows);
        }
    }

    /// A round sent filler alone (`alone`), or drafted tokens or nothing.
    pub fn filler(&mut self, alone: bool) {
        self.filler = if alone { self.filler + 1 } else { 0 };
    }

    /// The lane's request ended: a hold going on ends with it.
    pub fn end_hold(&mut self) {
        self.filler = 0;
        if self.holding > 0 {
            self.holds = self.holds * HOLD_FADE + 1.0;
            self.hold_sum = self.hold_sum * HOLD_FADE + self.holding as f64;
            self.holding = 0;
        }
    }
}

impl LaneRecord for Acceptance {
    fn expected(&self, k: usize) -> f64 {
        Acceptance::expected(self, k)
    }

    /// The rounds this lane's holds lasted, on average over recent ones, with a prior of half a
    /// hold of [`HOLD_ROUNDS`]: a lane whose n-gram matches come and go (free text) holds its
    /// rows a round or two, one copying a passage for many.
    fn hold_rounds(&self) -> f64 {
        (self.hold_sum + HOLD_ROUNDS / 2.0) / (self.holds + 0.5)
    }

    fn filler_rounds(&self) -> usize {
        self.filler
    }
}

#[cfg(test)]
mod tests;
