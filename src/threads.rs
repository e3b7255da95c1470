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
    free: Mutex<usize>,
    freed: Condvar,
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
        Budget { total, free: Mutex::new(total), freed: Condvar::new() }
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

/// Waits until at least one thread is free, then takes up to `want` (at least 1).
pub fn acquire(want: usize) -> Permit {
    let b = budget();
    let want = want.clamp(1, b.total);
    let mut free = b.free.lock().unwrap_or_else(|p| p.into_inner());
    while *free == 0 {
        free = b.freed.wait(free).unwrap_or_else(|p| p.into_inner());
    }
    let n = want.min(*free);
    *free -= n;
    Permit { n }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let b = budget();
        let mut free = b.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += self.n;
        b.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_never_exceed_the_budget() {
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
}
