//! Benchmark for llb_model_info (issue #2), in one process and one run:
//! model_info vs a bare GGUF header read (the floor) vs a vocab_only load vs a full load with a
//! context and one decode, on (a) a ≥1 GB llama-spm fixture and (b) a ≥1.4 GB qwen2 fixture.
//! Prints medians, ratios, RSS growth, and whether each goal holds.
//!
//!   cargo run --release --example bench_model_info [-- --reps N]

use llb::fixture::{self, FixtureOptions, Size};
use llb::sys;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = s.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0.0);
    pages * 4096.0 / 1e6
}

fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn header_read(c: &CString) {
    // SAFETY: plain gguf API; the context is freed.
    unsafe {
        let params = sys::gguf_init_params { no_alloc: true, ctx: std::ptr::null_mut() };
        let g = sys::gguf_init_from_file(c.as_ptr(), params);
        assert!(!g.is_null());
        sys::gguf_free(g);
    }
}

fn load(c: &CString, vocab_only: bool, with_context: bool) {
    // SAFETY: llama.h calls on a valid path; everything is freed.
    unsafe {
        let mut mp = sys::llama_model_default_params();
        mp.vocab_only = vocab_only;
        let model = sys::llama_model_load_from_file(c.as_ptr(), mp);
        assert!(!model.is_null());
        if with_context {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = 512;
            cp.n_batch = 512;
            let ctx = sys::llama_init_from_model(model, cp);
            assert!(!ctx.is_null());
            let vocab = sys::llama_model_get_vocab(model);
            let mut tok = sys::llama_vocab_bos(vocab).max(0);
            let batch = sys::llama_batch_get_one(&mut tok, 1);
            assert_eq!(sys::llama_decode(ctx, batch), 0);
            sys::llama_free(ctx);
        }
        sys::llama_model_free(model);
    }
}

fn ensure_fixture(dir: &Path, vocab: &str, size: &str) -> PathBuf {
    let path = dir.join(format!("bench-{vocab}-{size}.gguf"));
    if !path.exists() {
        let mut o = FixtureOptions::new(vocab);
        o.template = Some(fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
        o.size = size.parse::<Size>().unwrap();
        let t = Instant::now();
        fixture::write_fixture(&o, &path).unwrap();
        eprintln!("wrote {} in {:.1} s", path.display(), t.elapsed().as_secs_f64());
    }
    path
}

fn main() {
    let reps: usize = std::env::args().skip_while(|a| a != "--reps").nth(1).and_then(|v| v.parse().ok()).unwrap_or(7);
    llb::init_backend();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-fixtures");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [("a", "llama-spm", "1g", 0.05), ("b", "qwen2", "1.5g", 0.10)];
    let mut all_ok = true;
    println!("llb_model_info benchmark (median of {reps}, warm page cache)");
    for (label, vocab, size, full_goal) in cases {
        let path = ensure_fixture(&dir, vocab, size);
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let gb = std::fs::metadata(&path).unwrap().len() as f64 / 1e9;
        // Warm the page cache and every lazy init once.
        std::fs::read(&path).map(drop).unwrap();
        load(&c, false, true);
        llb::model_info::model_info(&path).unwrap();

        let rss0 = rss_mb();
        let info = median_ms(reps, || drop(llb::model_info::model_info(&path).unwrap()));
        let rss_growth = rss_mb() - rss0;
        let header = median_ms(reps, || header_read(&c));
        let vocab_only = median_ms(reps.min(5), || load(&c, true, false));
        // Where model_info's time goes: llb's header read, then llama.cpp's template work.
        let llb_header = median_ms(reps, || drop(llb::gguf::read_header(&path).unwrap()));
        let h = llb::gguf::read_header(&path).unwrap();
        let templates = median_ms(reps, || drop(llb::shim::Templates::from_header(&h).unwrap().probe().unwrap()));
        let full = median_ms(reps.min(5), || load(&c, false, true));

        let r_header = info / header;
        let r_full = info / full;
        let ok = r_header <= 1.5 && r_full <= full_goal && rss_growth < 64.0;
        all_ok &= ok;
        println!("({label}) {vocab} fixture, {gb:.2} GB:");
        println!("    header read (floor)       {header:9.2} ms");
        println!("    llb_model_info            {info:9.2} ms   {r_header:.2}x header (goal <= 1.5)");
        println!("      of which llb's header read {llb_header:.2} ms, llama.cpp template init + probe {templates:.2} ms ({:.2}x the floor by itself)", templates / header);
        println!("    vocab_only load           {vocab_only:9.2} ms   model_info = {:.3}x of it", info / vocab_only);
        println!("    full load + ctx + decode  {full:9.2} ms   model_info = {r_full:.3}x of it (goal <= {full_goal})");
        println!("    RSS growth over {reps} model_info calls: {rss_growth:.1} MB (goal < 64)");
        println!("    goals: {}", if ok { "met" } else { "NOT MET" });
    }
    println!("overall: {}", if all_ok { "all goals met" } else { "some goals NOT met" });
}
