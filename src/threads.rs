//! One thread budget per process, shared by every engine and pool.
//!
//! ggml's compute threads spin-wait at barriers, so when the threads of concurrent decodes
//! outnumber the cores, time goes to spinning (measured: 8 engines × 2 threads on 2 cores made a
//! workload 18× slower than with 1 thread each). Every `llama_decode` therefore takes threads
//! from this budget first: it waits until at least one is free and takes as many as it wants of
//! those that are, so concurrent decodes never use more threads than the budget.
//!
//! The budget is the machine's available parallelism, or `LLB_THREAD_BUDGET` when set.

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget is process-wide: these tests must not overlap.
    static SERIAL: Mutex<()> = Mutex::new(());

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
