//! A GPU's step costs emulated on the CPU's clock, for benchmarks and tests only (like
//! src/fault.rs, nothing a host does through the C ABI turns it on).
//!
//! While a [`Profile`] is set, every engine or pool opened after it counts as one whose device
//! does every step's work (the cost model weighs step shapes, the thread tuner is off), and
//! every step its scheduler decodes is charged to the cost model at what the profile says that
//! step would cost on the GPU, not what the CPU took. A process-wide clock keeps the difference:
//! a benchmark that reads its wall time plus [`offset_ms`] reads the time its run would have
//! taken with the profile's steps (the host's work, sampling, grammar, hand-overs, as measured).
//! The decisions then run end to end on a real model's drafts at a GPU's prices, where the
//! unit tests of src/cost/tests.rs feed them made-up rounds (docs/gpu.md, "Emulated").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What a step costs on the emulated device, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// A step of one token whose shape repeats (a replayed CUDA graph).
    pub one_row: f64,
    /// Each further token up to `knee` tokens (the vector kernels' batch).
    pub row_to_knee: f64,
    pub knee: usize,
    /// A repeated step of `knee + 1` tokens (the matrix kernels take over).
    pub past_knee: f64,
    /// Each further token past that.
    pub row_past_knee: f64,
    /// Each sequence of the step past the first (attention over its own cells).
    pub sequence: f64,
    /// What the first step of a new shape adds (no graph to replay), and per token.
    pub changed: f64,
    pub changed_row: f64,
    /// What the second step of a shape adds (the graph's capture).
    pub capture: f64,
}

impl Profile {
    /// SmolLM2-135M Q4_1 on the H200 of issue 41's run C (docs/gpu.md): a lone repeated step
    /// ~1.3 ms and about as much up to 8 rows; a pool of 8's steps 2.3 ms at 8 rows and 7.7 ms
    /// at 72; a changed shape ~3.7 ms more alone, 1.73x a 72-row step. The step past the knee
    /// (4.2 ms at 9 rows, 4.5 at 17) is fitted: run C's tree (51d6ad4) emulated with it gives
    /// the copying pool 0.89x and "repeat this passage" 3.47x, where the H200 gave 0.87x and
    /// 3.37x (its strict call: 3.08x emulated, 2.03x there).
    pub const H200_SMOLLM2: Profile = Profile {
        one_row: 1.3,
        row_to_knee: 0.0125,
        knee: 8,
        past_knee: 4.2,
        row_past_knee: 0.04,
        sequence: 0.13,
        changed: 3.7,
        changed_row: 0.03,
        capture: 1.0,
    };

    /// The profile a benchmark names (`LLB_BENCH_EMULATE`): "h200" ([`Profile::H200_SMOLLM2`]).
    pub fn named(name: &str) -> Option<Profile> {
        (name == "h200").then_some(Profile::H200_SMOLLM2)
    }

    /// The profile `LLB_BENCH_EMULATE` names for a benchmark (None: unset or empty); panics on
    /// a name it does not know, so that a benchmark never measures the CPU unawares.
    pub fn from_bench_env() -> Option<Profile> {
        let v = std::env::var("LLB_BENCH_EMULATE").ok().filter(|v| !v.is_empty())?;
        Some(Profile::named(&v).unwrap_or_else(|| panic!("LLB_BENCH_EMULATE: h200 or nothing, not {v}")))
    }

    /// A repeated step of `tokens` tokens over `sequences` sequences.
    pub fn repeated(&self, tokens: usize, sequences: usize) -> f64 {
        let n = tokens.max(1);
        let kernel = if n <= self.knee {
            self.one_row + self.row_to_knee * (n - 1) as f64
        } else {
            self.past_knee + self.row_past_knee * (n - self.knee - 1) as f64
        };
        kernel + self.sequence * sequences.saturating_sub(1) as f64
    }
}

static PROFILE: Mutex<Option<Profile>> = Mutex::new(None);
/// Emulated minus real ms over every charged step, as f64 bits.
static OFFSET: AtomicU64 = AtomicU64::new(0);

/// Sets (or, with None, clears) the profile for engines and pools opened from now on.
#[doc(hidden)]
pub fn emulate(profile: Option<Profile>) {
    *PROFILE.lock().unwrap_or_else(|e| e.into_inner()) = profile;
}

/// The profile set now (None: the device's own costs).
pub(crate) fn profile() -> Option<Profile> {
    *PROFILE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the emulated steps took beyond (or, negative, short of) what the CPU took for them,
/// summed over every step of the process so far: a benchmark's clock where one engine or pool
/// runs at a time (two running at once add their steps into one sum).
#[doc(hidden)]
pub fn offset_ms() -> f64 {
    f64::from_bits(OFFSET.load(Ordering::Relaxed))
}

/// `f`'s result and the seconds it took on the emulated clock: its wall time, each step's CPU
/// time replaced by the profile's (no profile set: its wall time).
#[doc(hidden)]
pub fn clocked<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let (offset, t) = (offset_ms(), std::time::Instant::now());
    let r = f();
    (r, t.elapsed().as_secs_f64() + (offset_ms() - offset) / 1e3)
}

fn add_offset(ms: f64) {
    let _ = OFFSET.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some((f64::from_bits(b) + ms).to_bits()));
}

/// One scheduler's emulated device: the profile and the shape of its last steps.
pub(crate) struct Clock {
    profile: Profile,
    /// The last step's (tokens, logits rows), and how many steps in a row had it.
    last: (usize, usize),
    run: u32,
}

impl Clock {
    /// The scheduler's clock where a profile is set.
    pub(crate) fn new() -> Option<Clock> {
        profile().map(|profile| Clock { profile, last: (0, 0), run: 0 })
    }

    /// The emulated ms of a step of `tokens` tokens and `rows` logits rows over `sequences`
    /// sequences that took the CPU `real_ms`; the process's offset moves by the difference.
    pub(crate) fn charge(&mut self, tokens: usize, rows: usize, sequences: usize, real_ms: f64) -> f64 {
        let shape = (tokens, rows);
        self.run = if shape == self.last { self.run.saturating_add(1) } else { 1 };
        self.last = shape;
        let p = &self.profile;
        let extra = match self.run {
            1 => p.changed + p.changed_row * tokens.saturating_sub(1) as f64,
            2 => p.capture,
            _ => 0.0,
        };
        let ms = p.repeated(tokens, sequences) + extra;
        add_offset(ms - real_ms);
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_costs_its_change_then_its_capture_then_its_replay() {
        let mut c = Clock { profile: Profile::H200_SMOLLM2, last: (0, 0), run: 0 };
        let steps: Vec<f64> = (0..4).map(|_| c.charge(1, 1, 1, 0.0)).collect();
        assert!((steps[0] - 5.0).abs() < 1e-9, "{steps:?}");
        assert!((steps[1] - 2.3).abs() < 1e-9, "{steps:?}");
        assert!((steps[2] - 1.3).abs() < 1e-9 && steps[3] == steps[2], "{steps:?}");
        // Another shape starts over; run C's pool of 8: 8 rows 2.3 ms, 72 rows 7.7 ms.
        assert!(c.charge(72, 72, 8, 0.0) > 1.7 * Profile::H200_SMOLLM2.repeated(72, 8));
        assert!((Profile::H200_SMOLLM2.repeated(8, 8) - 2.3).abs() < 0.05);
        assert!((Profile::H200_SMOLLM2.repeated(72, 8) - 7.7).abs() < 0.1);
        assert!(Profile::H200_SMOLLM2.repeated(17, 1) > 3.0 * Profile::H200_SMOLLM2.repeated(8, 1));
    }
}
