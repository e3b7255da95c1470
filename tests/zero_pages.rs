//! native/zero_pages.c: a big memset of zero over private anonymous memory returns the pages
//! (Linux), so a pool's KV budget is resident only as far as tokens are written into it. The
//! contents must be exactly what memset writes, and file-backed memory must never be returned.
#![cfg(target_os = "linux")]

mod common;

use common::cabi::CPool;
use serde_json::json;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

const MB: usize = 1 << 20;

fn rss_anon_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 =
        s.lines().find(|l| l.starts_with("RssAnon:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    kb / 1024.0
}

/// memset through the wrapped symbol (write_bytes lowers to a memset call for a runtime size).
fn zero(p: *mut u8, n: usize) {
    // SAFETY: callers pass memory they own.
    unsafe { std::ptr::write_bytes(std::hint::black_box(p), 0, std::hint::black_box(n)) }
}

#[test]
fn zeroing_big_anonymous_memory_returns_its_pages_and_reads_zero() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = 64 * MB;
    let mut v = vec![0xA5u8; n];
    let before = rss_anon_mb();
    // Unaligned on both ends: the partial pages are written, the whole ones returned.
    zero(v[3..].as_mut_ptr(), n - 7);
    let after = rss_anon_mb();
    assert!(before - after > 48.0, "RssAnon {before:.0} → {after:.0} MB: the pages were not returned");
    assert_eq!(&v[..3], &[0xA5; 3]);
    assert_eq!(&v[n - 4..], &[0xA5; 4]);
    assert!(v[3..n - 4].iter().all(|&b| b == 0), "every zeroed byte reads 0");
    // The memory is usable as before.
    v[n / 2] = 7;
    assert_eq!(v[n / 2], 7);
}

#[test]
fn small_or_non_zero_memsets_are_plain() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut v = vec![1u8; 4 * MB];
    zero(v.as_mut_ptr(), v.len());
    assert!(v.iter().all(|&b| b == 0));
    let mut w = vec![0u8; 16 * MB];
    // SAFETY: own memory.
    unsafe { std::ptr::write_bytes(std::hint::black_box(w.as_mut_ptr()), 0x3C, std::hint::black_box(w.len())) };
    assert!(w.iter().all(|&b| b == 0x3C));
}

#[test]
fn file_backed_private_memory_is_zeroed_not_reverted_to_the_file() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = common::fixtures_dir().join("zero-pages-file.bin");
    let n = 16 * MB;
    std::fs::write(&path, vec![0xEEu8; n]).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a private copy-on-write mapping of our own file, unmapped below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), n, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE, f.as_raw_fd(), 0)
    };
    assert_ne!(p, libc::MAP_FAILED);
    let s = p as *mut u8;
    zero(s, n);
    // SAFETY: the mapping is n bytes long.
    let bytes = unsafe { std::slice::from_raw_parts(s, n) };
    assert!(bytes.iter().all(|&b| b == 0), "MADV_DONTNEED here would have brought back the file's 0xEE");
    // SAFETY: mapped above.
    unsafe { libc::munmap(p, n) };
}

/// A pool's KV budget costs resident memory only as tokens are written: a pool with 8× the
/// cells costs about the same RssAnon as a small one (llama.cpp's KV clear used to touch all).
#[test]
fn a_pools_kv_budget_is_resident_only_as_used() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(path) = std::env::var("LLB_SMOLLM2_TOOLS").ok() else {
        assert_ne!(std::env::var("LLB_REQUIRE_REAL_WEIGHTS").as_deref(), Ok("1"), "LLB_SMOLLM2_TOOLS is not set");
        eprintln!("skipped: LLB_SMOLLM2_TOOLS is not set (scripts/smollm2.sh)");
        return;
    };
    // SmolLM2-135M: 30 layers × 3 KV heads × 64 × (K + V) × 2 bytes = 23 KB of KV per cell.
    let growth = |cells: u32| {
        let before = rss_anon_mb();
        let pool = CPool::open(&json!({"model_path": path, "n_ctx": cells, "n_threads": 1, "n_parallel": 2})).unwrap();
        let r = pool.infer(
            &json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}),
        );
        assert_eq!(r["object"], "chat.completion", "{r}");
        let g = rss_anon_mb() - before;
        drop(pool);
        g
    };
    let small = growth(2048);
    let big = growth(16384);
    let kv_big = 16384.0 * 30.0 * 3.0 * 64.0 * 2.0 * 2.0 / MB as f64;
    println!("RssAnon growth: 2048 cells {small:.0} MB, 16384 cells {big:.0} MB (KV allocated: {kv_big:.0} MB)");
    assert!(big - small < kv_big / 8.0, "the bigger budget cost {:.0} MB more resident memory", big - small);
}
