//! One thread budget per process, shared by every engine and pool.
//!
//! ggml's compute threads spin-wait at barriers, so when the threads of concurrent decodes
//! outnumber the cores, time goes to spinning (measured: 8 engines × 2 threads on 2 cores made a
//! workload 18× slower than with 1 thread each). Every `llama_decode` therefore takes threads
//! from this budget first: it waits until at least one is free and takes as many as it wants of
//! those that are, so concurrent decodes never use more threads than the budget.
//!
//! The budget is the machine's available parallelism, or `LLB_THREAD_BUDGET` when set.

use crate::sys;
use std::sync::{Condvar, Mutex, OnceLock};

struct Budget {
    total: usize,
    state: Mutex<State>,
    freed: Condvar,
}

struct State {
    free: usize,
    /// Decodes waiting for a thread.
    waiting: usize,
    /// Decodes holding threads.
    holders: usize,
}

fn budget() -> &'static Budget {
    static B: OnceLock<Budget> = OnceLock::new();
    B.get_or_init(|| {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(4);
        let total = std::env::var("LLB_THREAD_BUDGET")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(cores);
        Budget { total, state: Mutex::new(State { free: total, waiting: 0, holders: 0 }), freed: Condvar::new() }
    })
}

/// The process-wide number of compute threads.
pub fn total() -> usize {
    budget().total
}

/// Threads taken from the budget; given back on drop.
pub struct Permit {
    pub n: usize,
}

/// Waits until at least one thread is free, then takes up to `want` (at least 1) — but no more
/// than a fair share when other decodes wait or run: for a small model one decode on 2 threads
/// gains less than two decodes on 1 thread each, so under contention everybody gets
/// `total / contenders` (8 default engines on 2 cores then run 2 at a time on 1 thread each).
pub fn acquire(want: usize) -> Permit {
    let b = budget();
    let want = want.clamp(1, b.total);
    let mut st = b.state.lock().unwrap_or_else(|p| p.into_inner());
    st.waiting += 1;
    while st.free == 0 {
        st = b.freed.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    st.waiting -= 1;
    let contenders = 1 + st.waiting + st.holders;
    let share = (b.total / contenders).max(1);
    let n = want.min(st.free).min(share);
    st.free -= n;
    st.holders += 1;
    Permit { n }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let b = budget();
        let mut st = b.state.lock().unwrap_or_else(|p| p.into_inner());
        st.free += self.n;
        st.holders -= 1;
        b.freed.notify_all();
    }
}

/// A context's compute threads: one ggml thread pool made with the context and attached to it,
/// instead of the pool ggml otherwise creates and joins for every graph. Its threads wait for
/// the next graph polling at `poll` (0-100, llama.cpp's `--poll`; 0 sleeps at once, leaving
/// the cores to the host), and a decode uses as many of them as its permit says.
pub struct ComputePool(*mut sys::ggml_threadpool);

// SAFETY: the pool is driven only by the thread that decodes on its context (the scheduler's);
// moving the handle to that thread is all that happens.
unsafe impl Send for ComputePool {}

impl ComputePool {
    /// Makes a pool of `n_threads` and attaches it to `ctx`; `None` (and ggml's per-graph pools
    /// stay in use) when ggml cannot make it.
    ///
    /// # Safety
    /// `ctx` is a live context; the pool must outlive every decode on it (drop the context first).
    pub unsafe fn attach(ctx: *mut sys::llama_context, n_threads: usize, poll: u32) -> Option<ComputePool> {
        // SAFETY: plain value from ggml; the pool copies what it needs from `params`.
        let pool = unsafe {
            let mut params = sys::ggml_threadpool_params_default(n_threads.clamp(1, i32::MAX as usize) as i32);
            params.poll = poll.min(100);
            sys::ggml_threadpool_new(&mut params)
        };
        if pool.is_null() {
            return None;
        }
        // SAFETY: live context (caller) and a live pool, used for single tokens and batches alike.
        unsafe { sys::llama_attach_threadpool(ctx, pool, pool) };
        Some(ComputePool(pool))
    }

    /// Frees the pool. Call after the context that used it is freed; a pool whose context is
    /// leaked (see `backend::must_leak`) is leaked with it by not calling this.
    pub fn free(self) {
        // SAFETY: made by ggml_threadpool_new, freed once (self is consumed), no context uses it.
        unsafe { sys::ggml_threadpool_free(self.0) };
    }
}

/// Steps between probes of another thread count: first soon, then ever rarer while the
/// current count stays the fastest (a probe at a worse count costs a few slower steps).
const PROBE_FIRST: u32 = 8;
const PROBE_MAX: u32 = 256;
/// Steps a probe runs at the other count; the probe's time is their median.
const PROBE_STEPS: usize = 3;
/// Recent step times kept at the current count; the bar a probe must beat is their median.
const WINDOW: usize = 5;
/// Steps at the current count owed per step-time a lost probe cost beyond the bar: 20 keeps
/// probes under 5% of the decode time. With every core busy a probe at more threads can take
/// a hundred times a step (each barrier waits a scheduler slice for a descheduled partner), so
/// its next probe waits thousands of steps however the current count's steps move.
const PROBE_DEBT: f64 = 20.0;
/// A probed count must be this much faster than the current one to take its place.
const SWITCH_GAIN: f64 = 0.9;
/// A window median this factor away from the baseline means the machine changed: probe soon.
const SHIFT: f64 = 1.5;
/// A probe step this factor slower than the bar ends its probe: it has as good as lost (a win
/// needs a median under 0.9× the bar). On an idle 2-core machine one thread's steps are about
/// 1.45× two threads', so an idle probe costs one step, not three.
const GIVE_UP: f64 = 1.25;

/// Chooses how many compute threads a context's decodes use, from the step times it measures.
///
/// ggml's threads meet at a spinning barrier after every graph node, so a thread that shares its
/// core with a busy neighbour (the host's GC, another process) makes the others wait a whole
/// scheduler slice at each node: with one of two cores taken, two threads decode at a ninth of
/// their idle speed where one thread keeps more than half (docs/scaling.md, "Sharing the cores").
/// The tuner runs at its current count, now and then probes a few steps at a neighbouring count,
/// and moves when the probe was clearly faster. Both sides are medians (of the probe's steps, of
/// the last steps at the current count): on a loaded machine single steps vary several-fold, and
/// neither a slow outlier (the first step after a pause) nor a lucky fast one decides a move.
/// Steps are compared only with steps of the same shape (batch size, in powers of two). Pure: no
/// clock, no FFI; the scheduler feeds it.
#[derive(Debug)]
pub struct Tuner {
    max: usize,
    /// The count chosen last, by any shape: where a shape not seen yet starts.
    last: usize,
    shapes: Vec<Shape>,
}

#[derive(Debug, Clone)]
struct Shape {
    current: usize,
    /// The last [`WINDOW`] step times at `current`, seconds, oldest first (probes excluded).
    window: Vec<f64>,
    /// The window's median when the machine last changed (or when the window first filled).
    baseline: Option<f64>,
    steps: u32,
    next_probe: u32,
    interval: u32,
    /// No probe before this step: what the last lost probe cost, paid back (see [`PROBE_DEBT`]).
    earliest: u32,
    /// The next probe goes below the current count (else above).
    probe_down: bool,
    /// The probe under way: its count and the step times measured at it so far.
    probe: Option<(usize, Vec<f64>)>,
}

impl Shape {
    fn new(current: usize) -> Shape {
        Shape {
            current,
            window: Vec::with_capacity(WINDOW),
            baseline: None,
            steps: 0,
            next_probe: PROBE_FIRST,
            interval: PROBE_FIRST,
            earliest: 0,
            probe_down: true,
            probe: None,
        }
    }

    /// Ends the probe under way with its median step time `t`: the probed count `n` takes over
    /// when clearly faster than the current one, else probes grow rarer and the next one waits
    /// until this one's cost is paid back.
    fn conclude(&mut self, n: usize, times: Vec<f64>) {
        let t = median(&times);
        let bar = self.bar();
        if bar.is_some_and(|b| t < b * SWITCH_GAIN) {
            self.current = n;
            self.window = times;
            self.baseline = Some(t);
            self.interval = PROBE_FIRST;
            self.earliest = 0;
        } else {
            self.interval = (self.interval * 2).min(PROBE_MAX);
            let debt = bar.map_or(0.0, |b| PROBE_DEBT * (t / b - 1.0)).clamp(0.0, u32::MAX as f64);
            self.earliest = self.steps.saturating_add(debt as u32);
        }
        self.next_probe = self.steps.saturating_add(self.interval).max(self.earliest);
    }

    /// Records a step at the current count. When the window's median has moved [`SHIFT`]-fold
    /// from the baseline, the machine changed under this count: probe again soon.
    fn settle(&mut self, secs: f64) {
        if self.window.len() == WINDOW {
            self.window.remove(0);
        }
        self.window.push(secs);
        if self.window.len() < WINDOW {
            return;
        }
        let now = median(&self.window);
        let base = *self.baseline.get_or_insert(now);
        if now > base * SHIFT || now * SHIFT < base {
            self.baseline = Some(now);
            self.interval = PROBE_FIRST;
            self.next_probe = self.next_probe.min(self.steps.saturating_add(1)).max(self.earliest);
        }
    }

    /// The bar a probe must beat: the median of the recent steps at the current count.
    fn bar(&self) -> Option<f64> {
        (self.window.len() >= 2).then(|| median(&self.window))
    }
}

/// The median of a non-empty list (the upper one of an even count).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Tuner {
    /// A tuner for decodes of at most `max` threads (the config's `n_threads`).
    pub fn new(max: usize) -> Tuner {
        let max = max.max(1);
        Tuner { max, last: max, shapes: Vec::new() }
    }

    fn shape(&mut self, n_tokens: usize) -> &mut Shape {
        let i = n_tokens.max(1).next_power_of_two().trailing_zeros() as usize;
        if self.shapes.len() <= i {
            self.shapes.resize(i + 1, Shape::new(self.last));
        }
        &mut self.shapes[i]
    }

    /// The thread count for the next decode of `n_tokens` tokens.
    pub fn choose(&mut self, n_tokens: usize) -> usize {
        let max = self.max;
        let s = self.shape(n_tokens);
        if let Some((n, _)) = &s.probe {
            return *n;
        }
        if max > 1 && s.steps >= s.next_probe {
            let down = s.current > 1 && (s.probe_down || s.current == max);
            let n = if down { s.current - 1 } else { s.current + 1 };
            s.probe_down = !s.probe_down;
            s.probe = Some((n, Vec::with_capacity(PROBE_STEPS)));
            return n;
        }
        s.current
    }

    /// Records that a decode of `n_tokens` tokens on `n` threads took `secs` seconds (`n` may
    /// be less than chosen when the process budget gave fewer). Returns the shape's new count
    /// when this step moved it.
    pub fn record(&mut self, n_tokens: usize, n: usize, secs: f64) -> Option<usize> {
        let s = self.shape(n_tokens);
        s.steps = s.steps.saturating_add(1);
        let before = s.current;
        match s.probe.take() {
            Some((p, mut times)) if n == p => {
                times.push(secs);
                // A step far slower than the bar ends the probe at once: losing needs no median
                // (a lost probe only waits longer for the next), winning does.
                let lost = s.bar().is_some_and(|b| secs > b * GIVE_UP);
                if times.len() < PROBE_STEPS && !lost {
                    s.probe = Some((p, times));
                } else {
                    s.conclude(p, times);
                }
            }
            // The budget gave fewer threads than the probe asked: no measure of it this time.
            Some(_) => s.next_probe = s.steps.saturating_add(s.interval),
            None if n == s.current => s.settle(secs),
            None => {}
        }
        let now = s.current;
        self.last = now;
        (now != before).then_some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget is process-wide: these tests must not overlap.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// Feeds `steps` decodes of one token to a tuner whose step time on `n` threads is `cost(n)`.
    fn run(t: &mut Tuner, steps: usize, mut cost: impl FnMut(usize) -> f64) -> Vec<usize> {
        (0..steps)
            .map(|_| {
                let n = t.choose(1);
                t.record(1, n, cost(n));
                n
            })
            .collect()
    }

    fn share(counts: &[usize], n: usize) -> f64 {
        counts.iter().filter(|c| **c == n).count() as f64 / counts.len() as f64
    }

    #[test]
    fn an_idle_machine_keeps_every_thread_and_probes_ever_rarer() {
        let mut t = Tuner::new(2);
        let idle = |n: usize| if n == 2 { 0.0073 } else { 0.012 };
        let counts = run(&mut t, 2000, idle);
        assert!(share(&counts, 2) > 0.99, "probes cost under 1% of the steps");
        assert!(counts[1000..].iter().filter(|c| **c == 1).count() <= 5, "one probe in 256 steps once settled");
    }

    #[test]
    fn an_idle_probe_at_a_clearly_slower_count_costs_one_step() {
        // SmolLM2-135M on an idle 2-core machine: one thread's steps take 1.45× two threads'.
        let mut t = Tuner::new(2);
        let counts = run(&mut t, 600, |n| if n == 2 { 0.0103 } else { 0.0149 });
        let probes = counts.windows(2).filter(|w| w[0] == 2 && w[1] == 1).count();
        assert!(probes >= 4, "it keeps looking ({probes} probes)");
        assert_eq!(counts.iter().filter(|c| **c == 1).count(), probes, "one step per probe");
    }

    #[test]
    fn a_taken_core_moves_to_fewer_threads_and_a_freed_one_moves_back() {
        let mut t = Tuner::new(2);
        let idle = |n: usize| if n == 2 { 0.0073 } else { 0.012 };
        let busy = |n: usize| if n == 2 { 0.068 } else { 0.013 };
        run(&mut t, 500, idle);
        let counts = run(&mut t, 200, busy);
        assert!(counts[..20].contains(&1), "the change is seen within a few steps");
        assert!(share(&counts[20..], 1) > 0.97, "then one thread, with rare probes at two");
        let counts = run(&mut t, 600, idle);
        assert_eq!(counts[counts.len() - 1], 2, "a freed core is taken back");
        assert!(share(&counts[300..], 2) > 0.97);
    }

    #[test]
    fn a_probe_must_be_clearly_faster_to_win_and_counts_stay_within_the_ceiling() {
        let mut t = Tuner::new(4);
        // 3 threads 5% faster than 4: not worth a move. 1 thread never.
        let cost = |n: usize| match n {
            4 => 0.010,
            3 => 0.0096,
            2 => 0.014,
            _ => 0.025,
        };
        let mut moves = 0;
        for _ in 0..1000 {
            let n = t.choose(1);
            assert!((1..=4).contains(&n));
            moves += usize::from(t.record(1, n, cost(n)).is_some());
        }
        assert_eq!(moves, 0, "a 5% gain moves nothing");
        assert_eq!(Tuner::new(1).choose(1), 1);
        let mut one = Tuner::new(1);
        assert!(run(&mut one, 100, |_| 0.01).iter().all(|c| *c == 1), "a ceiling of 1 never probes");
    }

    #[test]
    fn shapes_are_compared_only_with_themselves() {
        let mut t = Tuner::new(2);
        // Prompt chunks (512 tokens) are slow per step but scale with threads: never mixed with
        // single-token steps, whose own best count is 1 here.
        for _ in 0..400 {
            let n = t.choose(512);
            t.record(512, n, if n == 2 { 0.20 } else { 0.38 });
            let n = t.choose(1);
            t.record(1, n, if n == 2 { 0.02 } else { 0.01 });
        }
        assert_eq!(t.choose(512), 2);
        assert_eq!(t.choose(1), 1);
    }

    #[test]
    fn a_slow_first_step_after_a_pause_does_not_move_an_idle_machine() {
        // Five requests of 96 steps on one engine; the first step after each pause between
        // requests is slow at any count (cold caches, a sleeping pool thread to wake).
        let mut t = Tuner::new(2);
        let mut counts = Vec::new();
        for _ in 0..5 {
            for step in 0..96 {
                let n = t.choose(1);
                let base = if n == 2 { 0.0124 } else { 0.0203 };
                t.record(1, n, if step == 0 { base * 6.0 } else { base });
                counts.push(n);
            }
        }
        assert!(share(&counts, 2) > 0.95, "one-thread share {:.2}", share(&counts, 1));
    }

    /// A deterministic stream of numbers in [0, 1) (an LCG): noise for the step times.
    fn noise(seed: u64) -> impl FnMut() -> f64 {
        let mut x = seed;
        move || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn every_core_busy_costs_little_beyond_one_thread_however_its_steps_vary() {
        // As measured (SmolLM2-135M, two busy loops on two cores): one thread's steps take 14 or
        // 26 ms by turns (alone on a core, or sharing one); two threads' steps mostly take 3 s
        // (each barrier waits a slice for a descheduled partner), now and then 20-160 ms.
        let (mut r, mut t) = (noise(7), Tuner::new(2));
        run(&mut t, 600, |n| if n == 2 { 0.0073 } else { 0.012 });
        let (mut spent, mut ideal, mut counts) = (0.0, 0.0, Vec::new());
        for step in 0..6000 {
            let one = if (step / 15) % 2 == 0 { 0.014 } else { 0.026 } * (0.9 + 0.2 * r());
            let x = r();
            let two = if x < 0.9 { 3.0 } else { 0.02 + 1.4 * (x - 0.9) };
            let n = t.choose(1);
            let secs = if n == 2 { two } else { one };
            t.record(1, n, secs);
            counts.push(n);
            if step >= 100 {
                spent += secs;
                ideal += one;
            }
        }
        assert!(counts[..20].contains(&1), "the load is seen within a few steps");
        assert!(spent < ideal * 1.10, "decode time {:.2}x one thread's", spent / ideal);
    }

    #[test]
    fn an_idle_machine_with_noisy_steps_keeps_every_thread() {
        let (mut r, mut t) = (noise(11), Tuner::new(2));
        let counts = run(&mut t, 2000, |n| (if n == 2 { 0.0073 } else { 0.012 }) * (0.75 + 0.5 * r()));
        assert!(share(&counts, 2) > 0.98, "two-thread share {:.3}", share(&counts, 2));
    }

    #[test]
    fn permits_never_exceed_the_budget() {
        let _serial = SERIAL.lock().unwrap();
        let total = total();
        let a = acquire(usize::MAX);
        assert_eq!(a.n, total);
        let t = std::thread::spawn(|| acquire(1).n);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "a decode waits while the budget is spent");
        drop(a);
        assert_eq!(t.join().unwrap(), 1);
        assert_eq!(acquire(0).n, 1, "at least one thread");
    }

    #[test]
    fn a_decode_takes_a_fair_share_while_others_run() {
        if total() < 2 {
            return;
        }
        let _serial = SERIAL.lock().unwrap();
        let a = acquire(1);
        let b = acquire(usize::MAX);
        assert_eq!(b.n, (total() / 2).max(1).min(total() - 1), "one other decode runs: half the budget");
        drop((a, b));
        assert_eq!(acquire(usize::MAX).n, total(), "alone: everything it wants");
    }
}
