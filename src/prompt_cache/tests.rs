//! The tiers without a model: what is kept, found, evicted, written, refused.

use super::*;

/// A directory under the system's temp dir, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new() -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Relaxed);
        let p = std::env::temp_dir().join(format!("llb-pc-unit-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TestDir(p)
    }

    fn files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().path()).collect();
        v.sort();
        v
    }

    fn bytes(&self) -> u64 {
        self.files().iter().map(|p| p.metadata().unwrap().len()).sum()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(self.secret());
    }
}

impl TestDir {
    /// The secret's file, beside the directory (never inside it).
    fn secret(&self) -> PathBuf {
        self.0.with_extension("key")
    }

    fn settings(&self, ram_bytes: u64, disk_bytes: u64) -> Settings {
        Settings {
            ram_bytes,
            dir: Some(self.0.clone()),
            disk_bytes,
            secret_file: Some(self.secret()),
            shared: false,
            as_cold: false,
        }
    }
}

fn ram(bytes: u64) -> PromptCache {
    let s = Settings { ram_bytes: bytes, dir: None, disk_bytes: 0, secret_file: None, shared: false, as_cold: false };
    PromptCache::open(&s, || unreachable!()).unwrap()
}

fn disk(dir: &TestDir, ram_bytes: u64, disk_bytes: u64) -> PromptCache {
    PromptCache::open(&dir.settings(ram_bytes, disk_bytes), || Ok(Key([3; 32]))).unwrap()
}

/// A cost model that finds every restore worth it.
fn yes(_: usize, _: u64, _: Tier) -> bool {
    true
}

fn toks(from: i32, n: usize) -> Vec<Token> {
    (from..from + n as i32).collect()
}

/// `prefix` then `n` tokens from `from`.
fn after(prefix: &[Token], from: i32, n: usize) -> Vec<Token> {
    let mut v = prefix.to_vec();
    v.extend(toks(from, n));
    v
}

#[test]
fn the_longest_cached_prefix_is_found_and_short_ones_are_not() {
    let c = ram(1 << 20);
    let a = toks(0, 200);
    let b = toks(1000, 300);
    c.keep(a.clone(), vec![1; 100], false);
    c.keep(b.clone(), vec![2; 100], false);
    let prompt = after(&a[..150], 5000, 10);
    let hit = c.lookup(&prompt, prompt.len() - 1, MIN_TOKENS, &yes).hit.unwrap();
    assert_eq!((hit.n, hit.tier, hit.state[0]), (150, Tier::Ram, 1));
    assert_eq!(hit.tokens, a);
    // 150 shared tokens are not enough when the context already holds 100 of them.
    assert!(c.lookup(&prompt, prompt.len() - 1, 100 + MIN_TOKENS + 1, &yes).hit.is_none());
    // At most `limit` count (one token is always evaluated).
    assert_eq!(c.lookup(&b, b.len() - 1, MIN_TOKENS, &yes).hit.unwrap().n, 299);
    let s = c.stats();
    assert_eq!((s["hits_ram"].as_u64(), s["misses"].as_u64()), (Some(2), Some(1)));
}

#[test]
fn ram_evicts_the_least_recently_used_and_what_a_longer_state_extends() {
    let c = ram(3 * (1000 + 400));
    let (a, b, d) = (toks(0, 100), toks(1000, 100), toks(2000, 100));
    c.keep(a.clone(), vec![0; 1000], false);
    c.keep(b.clone(), vec![0; 1000], false);
    c.keep(d.clone(), vec![0; 1000], false);
    assert!(c.lookup(&a, 99, MIN_TOKENS, &yes).hit.is_some(), "a used: b is now the oldest");
    c.keep(toks(3000, 100), vec![0; 1000], false);
    assert!(c.lookup(&b, 99, MIN_TOKENS, &yes).hit.is_none(), "b evicted");
    assert!(c.lookup(&a, 99, MIN_TOKENS, &yes).hit.is_some());
    assert_eq!(c.stats()["ram_evictions"], 1);
    // A longer state of the same conversation replaces the shorter one.
    c.keep(after(&a, 9000, 50), vec![0; 800], false);
    let s = c.stats();
    assert_eq!(s["ram_entries"], 3);
    assert!(s["ram_bytes"].as_u64().unwrap() <= 3 * 1400);
    // Too big for the budget: not kept.
    c.keep(toks(4000, 100), vec![0; 5000], false);
    assert_eq!(c.stats()["ram_entries"], 3);
}

#[test]
fn a_new_cache_on_the_same_dir_finds_what_the_last_one_wrote() {
    let dir = TestDir::new();
    let a = toks(0, 300);
    {
        let c = disk(&dir, 0, 1 << 20);
        c.keep(a.clone(), vec![5; 4000], false);
        c.flush();
    }
    let c = disk(&dir, 0, 1 << 20);
    let prompt = after(&a, 7000, 5);
    let l = c.lookup(&prompt, prompt.len() - 1, MIN_TOKENS, &yes);
    let hit = l.hit.unwrap();
    assert_eq!((hit.n, hit.tier, hit.state.as_slice()), (300, Tier::Disk, &[5u8; 4000][..]));
    assert!(l.warnings.is_empty());
    // Another key (another model or state format) finds nothing and deletes nothing.
    let other = PromptCache::open(&dir.settings(0, 1 << 20), || Ok(Key([4; 32]))).unwrap();
    let l = other.lookup(&prompt, prompt.len() - 1, MIN_TOKENS, &yes);
    assert!(l.hit.is_none() && l.warnings.is_empty());
    assert_eq!(dir.files().len(), 1);
}

#[test]
fn bad_files_are_ignored_once_with_a_warning_and_deleted() {
    let dir = TestDir::new();
    let c = disk(&dir, 0, 1 << 20);
    let (a, b, d) = (toks(0, 100), toks(1000, 100), toks(2000, 100));
    for t in [&a, &b, &d] {
        c.keep(t.clone(), vec![1; 3000], false);
    }
    c.flush();
    let path = |t: &[Token]| dir.0.join(file::name(&Key([3; 32]), t));
    // a truncated, b with a flipped bit in its state, d another key's content under this name.
    let full = std::fs::read(path(&a)).unwrap();
    std::fs::write(path(&a), &full[..full.len() - 10]).unwrap();
    let mut flipped = std::fs::read(path(&b)).unwrap();
    flipped[2000] ^= 0x10;
    std::fs::write(path(&b), &flipped).unwrap();
    let mut foreign = std::fs::read(path(&d)).unwrap();
    foreign[8] ^= 1;
    std::fs::write(path(&d), &foreign).unwrap();

    let fresh = disk(&dir, 0, 1 << 20);
    let l = fresh.lookup(&a, 99, MIN_TOKENS, &yes);
    assert!(l.hit.is_none());
    let w = l.warnings.join("\n");
    assert!(w.contains("truncated") && w.contains("another model"), "{w}");
    let l = fresh.lookup(&b, 99, MIN_TOKENS, &yes);
    assert!(l.hit.is_none());
    assert!(l.warnings.join("\n").contains("MAC"), "{:?}", l.warnings);
    assert!(fresh.lookup(&d, 99, MIN_TOKENS, &yes).warnings.is_empty(), "reported once");
    assert!(dir.files().is_empty(), "bad files deleted: {:?}", dir.files());
    assert_eq!(fresh.stats()["disk_files_ignored"], 3);
}

#[test]
fn the_disk_budget_holds_under_many_conversations() {
    let dir = TestDir::new();
    let budget = 50_000;
    let c = disk(&dir, 0, budget);
    for i in 0..40 {
        c.keep(toks(i * 1000, 100), vec![i as u8; 9000], false);
        c.flush();
        assert!(dir.bytes() <= budget, "after {i}: {} bytes", dir.bytes());
    }
    assert_eq!(dir.files().len(), 5, "the 5 newest fit");
    let last = toks(39 * 1000, 100);
    assert!(c.lookup(&last, 99, MIN_TOKENS, &yes).hit.is_some());
    assert!(c.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes).hit.is_none());
    assert!(c.stats()["disk_evictions"].as_u64().unwrap() >= 35);
    // Bigger than the whole budget: never written.
    c.keep(toks(90_000, 100), vec![0; 60_000], false);
    c.flush();
    assert!(dir.bytes() <= budget);
}

#[test]
fn two_caches_writing_one_dir_at_once_lose_nothing() {
    let dir = TestDir::new();
    let (c1, c2) = (disk(&dir, 0, 1 << 24), disk(&dir, 0, 1 << 24));
    std::thread::scope(|s| {
        for (k, c) in [&c1, &c2].into_iter().enumerate() {
            s.spawn(move || {
                for i in 0..20 {
                    // Both write the shared conversation 0 too: the same name, one file.
                    let t = if i == 0 { toks(0, 100) } else { toks((k as i32 + 1) * 100_000 + i * 1000, 100) };
                    c.keep(t, vec![k as u8; 2000], true);
                }
                c.flush();
            });
        }
    });
    assert_eq!(dir.files().len(), 39, "{:?}", dir.files());
    let fresh = disk(&dir, 0, 1 << 24);
    for k in 0..2 {
        for i in 1..20 {
            let t = toks((k + 1) * 100_000 + i * 1000, 100);
            let l = fresh.lookup(&t, 99, MIN_TOKENS, &yes);
            assert!(l.warnings.is_empty(), "{:?}", l.warnings);
            assert_eq!(l.hit.map(|h| h.state[0]), Some(k as u8));
        }
    }
}

#[test]
fn a_longer_state_on_disk_replaces_the_prefix_it_extends() {
    let dir = TestDir::new();
    let c = disk(&dir, 0, 1 << 20);
    let a = toks(0, 100);
    c.keep(a.clone(), vec![1; 100], false);
    c.flush();
    c.keep(after(&a, 500, 80), vec![2; 100], false);
    c.flush();
    assert_eq!(dir.files().len(), 1);
    assert_eq!(c.lookup(&a, 99, MIN_TOKENS, &yes).hit.map(|h| h.state[0]), Some(2));
}

#[test]
fn a_model_key_changes_with_the_file_and_the_format() {
    let dir = TestDir::new();
    let p = dir.0.join("m.gguf");
    std::fs::write(&p, vec![7u8; 100_000]).unwrap();
    let k1 = key(&p, "f16").unwrap();
    assert_eq!(k1, key(&p, "f16").unwrap());
    assert_ne!(k1, key(&p, "q8_0").unwrap());
    let mut bytes = vec![7u8; 100_000];
    bytes[99_000] = 8; // a weight near the end
    std::fs::write(&p, bytes).unwrap();
    assert_ne!(k1, key(&p, "f16").unwrap());
}

#[test]
fn files_and_dir_are_private_and_another_secret_reads_nothing() {
    use std::os::unix::fs::MetadataExt;
    let dir = TestDir::new();
    std::fs::remove_dir_all(&dir.0).unwrap(); // made by the cache itself
    let c = disk(&dir, 0, 1 << 20);
    c.keep(toks(0, 100), vec![1; 500], false);
    c.flush();
    assert_eq!(std::fs::metadata(&dir.0).unwrap().mode() & 0o777, 0o700);
    let files = dir.files();
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().mode() & 0o777, 0o600);
    // Another installation (another secret) with the same model: the file is refused, deleted.
    let other = Settings { secret_file: Some(dir.0.with_extension("key2")), ..dir.settings(0, 1 << 20) };
    let c2 = PromptCache::open(&other, || Ok(Key([3; 32]))).unwrap();
    let l = c2.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes);
    assert!(l.hit.is_none() && l.warnings.join("").contains("MAC"), "{:?}", l.warnings);
    let _ = std::fs::remove_file(dir.0.with_extension("key2"));
}

#[test]
fn eviction_deletes_only_llb_files_and_never_follows_a_symlink() {
    let dir = TestDir::new();
    let outside = dir.0.with_extension("outside");
    std::fs::write(&outside, b"not llb's").unwrap();
    // Another program's files, old enough to look abandoned, and a symlink named like a cache file.
    let theirs = [dir.0.join("notes.part"), dir.0.join(".data.1234-0.part"), dir.0.join("x.llbkv")];
    for f in &theirs {
        std::fs::write(f, vec![0u8; 20_000]).unwrap();
        std::fs::File::options().write(true).open(f).unwrap().set_modified(std::time::UNIX_EPOCH).unwrap();
    }
    let fake = dir.0.join(file::name(&Key([3; 32]), &toks(777, 100)));
    std::os::unix::fs::symlink(&outside, &fake).unwrap();
    let c = disk(&dir, 0, 30_000);
    for i in 0..6 {
        c.keep(toks(i * 1000, 100), vec![1; 9000], false);
        c.flush();
    }
    assert!(theirs.iter().all(|f| f.exists()), "another program's files are kept");
    assert_eq!(std::fs::read(&outside).unwrap(), b"not llb's");
    assert!(c.lookup(&toks(5000, 100), 99, MIN_TOKENS, &yes).hit.is_some());
    let _ = std::fs::remove_file(outside);
}

#[test]
fn what_the_disk_could_not_do_is_reported_once() {
    let dir = TestDir::new();
    let c = disk(&dir, 0, 1000);
    c.keep(toks(0, 100), vec![1; 5000], false);
    c.keep(toks(1000, 100), vec![1; 5000], false);
    c.flush();
    let w = c.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes).warnings;
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("does not fit prompt_cache.disk_bytes"), "{w:?}");
    assert!(c.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes).warnings.is_empty());
    let zero = TestDir::new();
    let z = disk(&zero, 0, 0);
    assert!(z.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes).warnings.join("").contains("disk_bytes is 0"));
    // A directory that cannot be written (a file where the directory was): reported.
    let gone = TestDir::new();
    let g = disk(&gone, 0, 1 << 20);
    std::fs::remove_dir_all(&gone.0).unwrap();
    std::fs::write(&gone.0, b"").unwrap();
    g.keep(toks(0, 100), vec![1; 500], false);
    g.flush();
    assert!(g.lookup(&toks(0, 100), 99, MIN_TOKENS, &yes).warnings.join("").contains("cannot write"));
    let _ = std::fs::remove_file(&gone.0);
}

#[test]
fn a_rejected_state_is_gone_from_both_tiers() {
    let dir = TestDir::new();
    let c = disk(&dir, 1 << 20, 1 << 20);
    let a = toks(0, 100);
    c.keep(a.clone(), vec![1; 500], false);
    c.flush();
    let hit = c.lookup(&a, 99, MIN_TOKENS, &yes).hit.unwrap();
    c.reject(&hit.tokens, hit.file.as_deref());
    assert!(c.lookup(&a, 99, MIN_TOKENS, &yes).hit.is_none());
    assert!(dir.files().is_empty());
    assert_eq!(c.stats()["states_rejected"], 1);
}

#[test]
fn a_restore_the_cost_model_refuses_reads_no_file() {
    let dir = TestDir::new();
    let c = disk(&dir, 1 << 20, 1 << 20);
    let a = toks(0, 100);
    c.keep(a.clone(), vec![1; 500], false);
    c.flush();
    let no = |_: usize, _: u64, _: Tier| false;
    assert!(c.lookup(&a, 99, MIN_TOKENS, &no).hit.is_none());
    // Seen by the model: 99 tokens and the state's 500 bytes, from RAM then from disk.
    let seen = std::sync::Mutex::new(Vec::new());
    let log = |n: usize, b: u64, t: Tier| {
        seen.lock().unwrap().push((n, b, t));
        t == Tier::Disk
    };
    let hit = c.lookup(&a, 99, MIN_TOKENS, &log).hit.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(99, 500, Tier::Ram), (99, 500, Tier::Disk)]);
    assert!(hit.tier == Tier::Disk && hit.load_time.is_some());
}

#[test]
fn an_as_cold_cache_restores_only_as_cold_files_and_others_restore_them_too() {
    let dir = TestDir::new();
    let open = |as_cold: bool| {
        let s = Settings { as_cold, ..dir.settings(0, 1 << 20) };
        PromptCache::open(&s, || Ok(Key([3; 32]))).unwrap()
    };
    let (engines, pools) = (toks(0, 200), toks(1000, 200));
    let engine = open(true);
    engine.keep(engines.clone(), vec![1; 100], false);
    engine.flush();
    let pool = open(false);
    pool.keep(pools.clone(), vec![2; 100], false);
    pool.flush();
    // A pool's state may hold cells computed otherwise than a cold read: not for the engine.
    assert!(engine.lookup(&pools, 199, MIN_TOKENS, &yes).hit.is_none());
    assert_eq!(engine.lookup(&engines, 199, MIN_TOKENS, &yes).hit.unwrap().state[0], 1);
    // The engine's serve a pool as well as its own.
    assert_eq!(pool.lookup(&engines, 199, MIN_TOKENS, &yes).hit.unwrap().state[0], 1);
    assert_eq!(pool.lookup(&pools, 199, MIN_TOKENS, &yes).hit.unwrap().state[0], 2);
    // A pool's longer state of the engine's conversation does not replace the engine's file.
    pool.keep(after(&engines, 5000, 50), vec![3; 100], false);
    pool.flush();
    assert_eq!(dir.files().len(), 3);
    assert_eq!(engine.lookup(&after(&engines, 5000, 60), 259, MIN_TOKENS, &yes).hit.unwrap().n, 200);
}
