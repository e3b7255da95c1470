//! Benchmark for `llb pull`, in one process and one run: a ≥1 GB GGUF pulled from the loopback
//! mock hub (tests/pull_support/mock_hub.rs: API, `resolve` 302 → CDN port, sendfile) by llb
//! — listing, download with sha256, HF cache layout, tool gate — against `curl -L` of the same
//! `resolve` URL to a file. Runs alternate (curl, pull, pull, curl, ...), each after a `sync` so
//! that no run pays for the previous one's writeback; prints median throughputs, their ratio and
//! the CPU time each side used. Goal: pull ≥ 0.9× curl.
//!
//!   cargo run --release --example bench_pull [-- --reps N]

#[path = "../tests/pull_support/mock_hub.rs"]
mod mock_hub;

use llb::fixture::{self, FixtureOptions, Size};
use llb::pull::{Env, PullRequest};
use mock_hub::{MockFile, MockHub, MockRepo};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn ensure_fixture(dir: &Path) -> PathBuf {
    let path = dir.join("bench-pull-qwen2-1g.gguf");
    if !path.exists() {
        eprintln!("writing {} ...", path.display());
        let mut o = FixtureOptions::new("qwen2");
        o.template = Some(fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap());
        o.size = Size::AtLeast(1_000_000_000);
        fixture::write_fixture(&o, &path).unwrap();
    }
    path
}

/// Every run starts with no dirty pages left by the previous one.
fn settle() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(200));
}

/// CPU seconds (user + system) used so far by this process, and by its waited-for children.
fn cpu() -> (f64, f64) {
    let get = |who| {
        // SAFETY: getrusage fills the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid rusage to fill.
        unsafe { libc::getrusage(who, &mut u) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    };
    (get(libc::RUSAGE_SELF), get(libc::RUSAGE_CHILDREN))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One timed run: wall seconds, CPU seconds of the client, CPU seconds of this process.
struct Run {
    wall: f64,
    client_cpu: f64,
    self_cpu: f64,
}

// Over 60 lines: the benchmark's runs in order, each printing its row of the table.
fn main() {
    let reps: usize = std::env::args().skip_while(|a| a != "--reps").nth(1).and_then(|v| v.parse().ok()).unwrap_or(5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let fixture = ensure_fixture(&root.join("bench-fixtures"));
    let scratch = root.join("tmp/bench-pull");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();

    let file = "Bench-Q4_K_M.gguf";
    let id = "bench/pull-1g-GGUF";
    let mf = MockFile::lfs_path(file, &fixture); // hashes the file once: the page cache is warm after
    let (size, sha) = (mf.size, mf.sha256.clone());
    let mut repo = MockRepo::new(id, vec![mf]);
    repo.gguf_template = Some(Some(fixture::read_template("Qwen-Qwen2.5-7B-Instruct").unwrap()));
    let hub = MockHub::start();
    hub.add_repo(repo);
    let url = format!("{}/{id}/resolve/main/{file}", hub.endpoint);

    let curl_out = scratch.join("curl.gguf");
    let curl = || -> Run {
        let _ = std::fs::remove_file(&curl_out);
        settle();
        let c0 = cpu();
        let t = Instant::now();
        let st = Command::new("curl")
            .args(["-sS", "-f", "-L", "-o"])
            .arg(&curl_out)
            .arg(&url)
            .status()
            .expect("curl is installed");
        let wall = t.elapsed().as_secs_f64();
        let c1 = cpu();
        assert!(st.success(), "curl failed: {st}");
        assert_eq!(std::fs::metadata(&curl_out).unwrap().len(), size);
        Run { wall, client_cpu: c1.1 - c0.1, self_cpu: c1.0 - c0.0 }
    };
    let cache = scratch.join("cache");
    let pull = || -> Run {
        let _ = std::fs::remove_dir_all(&cache);
        let req = PullRequest {
            repo: id.into(),
            endpoint: Some(hub.endpoint.clone()),
            cache_dir: Some(cache.to_string_lossy().into_owned()),
            token: Some(String::new()),
            ..Default::default()
        };
        settle();
        let c0 = cpu();
        let t = Instant::now();
        let v =
            llb::pull::pull_with_env(&req, &Env::default(), &|_| true).unwrap_or_else(|e| panic!("pull failed: {e}"));
        let wall = t.elapsed().as_secs_f64();
        let c1 = cpu();
        assert_eq!(v["sha256"][0], sha.as_str());
        assert_eq!(v["bytes_downloaded"], size);
        assert_eq!(v["model_info"]["supports_tools"], true);
        // The mock server runs in this process: its share is subtracted below.
        Run { wall, client_cpu: 0.0, self_cpu: c1.0 - c0.0 }
    };

    // sha256 alone on this CPU, for context (the floor of any verified download).
    let buf = vec![7u8; 256 << 20];
    let t = Instant::now();
    std::hint::black_box(sha2::Sha256::digest(&buf));
    let sha_mbs = buf.len() as f64 / t.elapsed().as_secs_f64() / 1e6;
    drop(buf);

    // Warm-up: one of each (lazy inits, the llama.cpp backend).
    curl();
    pull();
    // A cache hit: listing, pre-filter and tool gate without the download (the fixed costs).
    let hit = || {
        let req = PullRequest {
            repo: id.into(),
            endpoint: Some(hub.endpoint.clone()),
            cache_dir: Some(cache.to_string_lossy().into_owned()),
            token: Some(String::new()),
            ..Default::default()
        };
        let t = Instant::now();
        let v = llb::pull::pull_with_env(&req, &Env::default(), &|_| true).unwrap();
        assert_eq!(v["from_cache"], true);
        t.elapsed().as_secs_f64()
    };
    let fixed = median((0..5).map(|_| hit()).collect());
    let (mut c, mut p) = (Vec::new(), Vec::new());
    for i in 0..reps {
        if i % 2 == 0 {
            c.push(curl());
            p.push(pull());
        } else {
            p.push(pull());
            c.push(curl());
        }
    }
    let (cm, pm) = (median(c.iter().map(|r| r.wall).collect()), median(p.iter().map(|r| r.wall).collect()));
    let server_cpu = median(c.iter().map(|r| r.self_cpu).collect());
    let curl_cpu = median(c.iter().map(|r| r.client_cpu).collect());
    let pull_cpu = median(p.iter().map(|r| r.self_cpu).collect()) - server_cpu;
    let mbs = |s: f64| size as f64 / s / 1e6;
    let ratio = mbs(pm) / mbs(cm);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "llb pull benchmark: {:.2} GB fixture from the loopback mock hub, median of {reps} runs each, {cpus} CPUs",
        size as f64 / 1e9
    );
    println!("  curl -L -o FILE (no hashing)        : {:>6.0} MB/s  ({cm:.3} s, {curl_cpu:.2} CPU-s)", mbs(cm));
    println!("  llb pull (sha256, cache, tool gate) : {:>6.0} MB/s  ({pm:.3} s, {pull_cpu:.2} CPU-s)", mbs(pm));
    println!(
        "  ratio pull/curl                     : {ratio:.2}x  (goal >= 0.90x: {})",
        if ratio >= 0.9 { "met" } else { "NOT met" }
    );
    let best = |v: &[Run]| v.iter().map(|r| r.wall).fold(f64::INFINITY, f64::min);
    let (cb, pb) = (best(&c), best(&p));
    println!(
        "  best of {reps} (noise only adds time)  : curl {:.0} MB/s, pull {:.0} MB/s, ratio {:.2}x",
        mbs(cb),
        mbs(pb),
        mbs(pb) / mbs(cb)
    );
    println!("  pull fixed costs (a cache hit)      : {:>6.0} ms (listing, pre-filter, tool gate)", fixed * 1e3);
    println!("  mock server per download            : {server_cpu:.2} CPU-s");
    println!("  sha256 alone, one core              : {sha_mbs:>6.0} MB/s");
    let walls = |v: &[Run]| v.iter().map(|r| format!("{:.2}", r.wall)).collect::<Vec<_>>().join(" ");
    println!("  runs (s): curl [{}]  pull [{}]", walls(&c), walls(&p));
    let _ = std::fs::remove_dir_all(&scratch);
}
