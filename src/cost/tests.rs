//! The decisions under injected device profiles: a GPU's (a prompt read at 35k tokens/s, rows
//! free up to 32, states at 0.8 GB/s) and a CPU's (a batch costs about its length, a state is a
//! memcpy), each fed through the same `record_*` calls the scheduler makes.

use super::*;

const N_BATCH: usize = 2048;
/// A Qwen2.5-1.5B-shaped sequence: ~28 KiB of KV per token.
const BYTES_PER_TOKEN: usize = 28 * 1024;

/// Feeds `costs` decodes of every size class, timed by `ms(n)`.
fn feed(costs: &Costs, ms: impl Fn(usize) -> f64) {
    for _ in 0..3 {
        for n in [1, 2, 3, 5, 8, 13, 17, 24, 32, 48, 64, 100, 128, 256, 512, 1024, 2048] {
            costs.record_batch(n, 1, 0, ms(n));
        }
    }
}

/// One H100's figures (issue 41): a step of up to 32 rows costs what one does (3 ms), a prompt
/// reads at 35k tokens/s, a state moves at 0.8 GB/s in and out.
fn gpu() -> Costs {
    let c = Costs::default();
    feed(&c, |n| 3.0 + n.saturating_sub(32) as f64 / 35.0);
    for t in [Transfer::Out, Transfer::In] {
        c.record_state(t, 2900 * BYTES_PER_TOKEN, 2900, 2900.0 * BYTES_PER_TOKEN as f64 / 0.8e6);
    }
    c
}

/// Two CPU cores with a Q4_1 model (docs/benchmarks.md): one token 10.4 ms, 5.6 ms more per
/// token of a batch, states at 4 GB/s.
fn cpu() -> Costs {
    let c = Costs::default();
    feed(&c, |n| 10.4 + 5.6 * (n - 1) as f64);
    for t in [Transfer::Out, Transfer::In] {
        c.record_state(t, 2900 * BYTES_PER_TOKEN, 2900, 2900.0 * BYTES_PER_TOKEN as f64 / 4e6);
    }
    c
}

#[test]
fn the_curve_interpolates_between_measured_sizes_and_extrapolates_by_tokens() {
    let c = Costs::default();
    assert_eq!(c.prompt_ms(100, 512), None, "nothing measured");
    c.record_batch(1, 1, 0, 10.0);
    c.record_batch(65, 1, 0, 74.0);
    let m = c.model();
    assert_eq!(m.batch.at(1), Some(10.0));
    assert!((m.batch.at(33).unwrap() - 42.0).abs() < 1e-9, "{:?}", m.batch.at(33));
    assert!((m.batch.at(130).unwrap() - 148.0).abs() < 1e-9);
    drop(m);
    assert!((c.prompt_ms(130 + 33, 130).unwrap() - (148.0 + 42.0)).abs() < 1e-9);
}

#[test]
fn a_lone_lane_whose_first_verifying_step_was_slow_tries_again_before_it_believes_it() {
    // bench_costs (2), a random-weight model: one token 0.7 ms, a prompt of 35 tokens 2.9 ms,
    // and the first verifying step of 17 rows 17.2 ms (llama.cpp grew its output buffer).
    let c = Costs::default();
    for _ in 0..3 {
        c.record_batch(1, 1, 0, 0.7);
        c.record_batch(35, 1, 0, 2.9);
    }
    c.record_batch(17, 17, 16, 17.2);
    // The step held this lane's own 16 rows (own_last).
    let copier = |k: usize| k as f64;
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copier).verify, 16, "a size measured once is tried again");
    // The second says what such a step costs: ~3 ms, and whole drafts pay.
    c.record_batch(17, 17, 16, 3.1);
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copier).verify, 16);
    // A size that goes on costing what the first said is believed: 16 rows for 16 tokens of
    // 0.7 ms do not pay.
    (0..10).for_each(|_| c.record_batch(17, 17, 16, 17.2));
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copier).verify, 0);
}

#[test]
fn on_a_gpu_rereading_a_long_prompt_beats_restoring_its_state() {
    let c = gpu();
    let bytes = (2900 * BYTES_PER_TOKEN) as u64;
    // ~83 ms to read 2,900 tokens, ~101 ms to put 81 MB back.
    assert!(!c.restore_pays(2900, bytes, false, N_BATCH));
    assert!(!c.restore_pays(2900, bytes, true, N_BATCH));
    // A small state (a model with little KV per token) still pays.
    assert!(c.restore_pays(2900, bytes / 20, false, N_BATCH));
    assert_eq!(c.stats()["restores_skipped"], 2);
}

#[test]
fn on_a_gpu_a_leaving_sequence_is_not_kept() {
    let c = gpu();
    assert!(!c.stash_pays(2900, 2900, N_BATCH));
    // Nor the tail of a conversation whose prefix stays in the context.
    assert!(!c.stash_pays(2900, 200, N_BATCH));
    assert_eq!(c.stats()["stashes_skipped"], 2);
}

#[test]
fn on_a_cpu_states_are_kept_and_restored() {
    let c = cpu();
    let bytes = (2900 * BYTES_PER_TOKEN) as u64;
    assert!(c.restore_pays(2900, bytes, false, N_BATCH));
    assert!(c.stash_pays(2900, 2900, N_BATCH));
    // Tokens that stay in the context (another sequence shares them) do not count: a stash
    // that would save reading 2 tokens costs more than it saves.
    assert!(!c.stash_pays(2900, 2, N_BATCH));
}

#[test]
fn states_that_never_come_back_stop_being_kept() {
    let c = Costs::default();
    feed(&c, |n| 1.0 + 0.05 * n as f64);
    c.record_state(Transfer::Out, 1000 * 1000, 1000, 1.0);
    c.record_state(Transfer::In, 1000 * 1000, 1000, 1.0);
    // 1000 tokens take 51 ms to read again; the stash costs 1 ms now and the restore 1 ms:
    // worth it even if one in twenty comes back.
    let kept = (0..50).filter(|_| c.stash_pays(1000, 1000, 2048)).count();
    assert_eq!(kept, 50);
    let c2 = Costs::default();
    feed(&c2, |n| 1.0 + 0.05 * n as f64);
    c2.record_state(Transfer::Out, 1000 * 1000, 1000, 20.0);
    c2.record_state(Transfer::In, 1000 * 1000, 1000, 1.0);
    // Reading again costs 51 ms, restoring 1 ms, stashing 20 ms: pays while at least ~40% of
    // kept states come back.
    let kept = (0..50).filter(|_| c2.stash_pays(1000, 1000, 2048)).count();
    assert!((1..10).contains(&kept), "kept {kept}: none came back, so it stops");
    for _ in 0..20 {
        c2.came_back();
    }
    assert!(c2.stash_pays(1000, 1000, 2048), "they come back now");
}

#[test]
fn on_a_gpu_drafts_are_free_up_to_the_rows_a_step_gets_for_nothing() {
    let c = gpu();
    // Solo: any acceptance pays for 16 rows that cost nothing.
    assert_eq!(c.draft_len(16, 0.3, 1), 16);
    // A pool of 8 with no drafts in its step: rows the curve shows free (to its class of 16-31
    // rows, fed 17 and 24 three times: its first decode replaced by its second, the rest
    // averaged in, 21.7) cost nothing, so a lane drafts them whatever its acceptance (its reply
    // comes sooner), and not one row more at that acceptance.
    assert_eq!(c.draft_len(16, 0.3, 8), 13);
    // Whose other lanes already drafted 30 rows: past 32 rows each costs 1/35 ms. With requests
    // waiting for a lane, an accepted token lets one in sooner, worth the step's share per
    // request: a lane that copies drafts, one that seldom does drafts less.
    c.record_batch(38, 38, 30, 3.2);
    c.record_step(0, 4);
    let k = c.draft_len(16, 0.2, 8);
    assert!(k < 16, "low acceptance at a marginal cost: {k}");
    assert!(c.draft_len(16, 0.99, 8) >= 12);
    // With none waiting, the other lanes' steps run anyway: an accepted token spares only the
    // lane's own row in them (1/35 ms), what a drafted row costs, so nothing pays.
    c.record_step(0, 0);
    assert_eq!(c.draft_len(16, 0.99, 8), 0);
}

/// A lane copying a passage, 81% of its drafted tokens accepted (bench (d)'s copiers).
fn copier(k: usize) -> f64 {
    0.81 * k as f64
}

/// A lane accepting nearly all its drafted tokens.
fn whole(k: usize) -> f64 {
    0.97 * k as f64
}

/// The pool of 8 of bench_speculative (d) on two CPU cores (docs/benchmarks.md): a step of 1 row
/// 7.9 ms, then ~2.8 ms a row.
fn cpu_pool() -> Costs {
    let c = Costs::default();
    for _ in 0..3 {
        for (n, ms) in [(1, 7.9), (3, 16.2), (4, 22.3), (11, 39.9), (23, 77.2), (45, 137.6)] {
            c.record_batch(n, n, 0, ms);
        }
    }
    c
}

#[test]
fn in_a_pool_nobody_waits_for_a_lane_drafts_only_where_its_rows_cost_less_than_the_rows_they_spare() {
    let c = cpu_pool();
    // Half the pool copying (81% of drafted tokens accepted), the other half writing: the
    // writers' steps run until they end whatever the copiers do, so a copier's accepted token
    // spares one row of a step and costs one: no draft pays (bench (d) ran 0.87-0.94x drafting).
    assert_eq!(c.draft_rows(16, 16, 8, 0, &copier).verify, 0);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 0);
    // With requests waiting, a copier that ends sooner lets one in, which is worth a share of
    // the step (~4 ms) only where the queue outlasts the lanes' work: half is believed, and a
    // row of ~2.8 ms does not pay (bench (e) lost 4% drafting while a share was believed).
    c.record_step(0, 8);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 0);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &copier).verify, 0);
    // Alone, an accepted token saves a whole step.
    c.record_step(0, 0);
    assert_eq!(c.draft_rows(16, 16, 1, 0, &copier).verify, 16);
    // Where every request running has something to copy (the copiers outlived the stories),
    // the pool's steps get fewer as all of theirs do: a whole copy's drafts pay.
    c.record_step(8, 0);
    (0..8).for_each(|_| c.copying(true));
    assert!(c.draft_rows(16, 16, 8, 0, &whole).verify >= 8);
    // The lanes say so once, not every step: a lane late for a step still counts.
    c.record_step(8, 0);
    assert!(c.draft_rows(16, 16, 8, 0, &whole).verify >= 8);
    // Seven of eight: the one writing runs its steps anyway.
    c.copying(false);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 0);
    // The writer ended: the seven left all copy.
    c.record_step(7, 0);
    assert!(c.draft_rows(16, 16, 7, 0, &whole).verify >= 8);
}

/// A CPU with batched kernels, one row 10 ms and 0.8 ms each row more (a step of 8: ~2 ms a
/// request), with requests waiting for a lane.
fn cpu_batched_queue() -> Costs {
    let c = Costs::default();
    feed(&c, |n| 10.0 + 0.8 * (n - 1) as f64);
    c.record_step(8, 4);
    c
}

#[test]
fn with_a_queue_a_lanes_draft_pays_where_its_rows_cost_under_half_a_share() {
    // Half of a share (~1 ms) is believed: a lane accepting nearly all its drafted tokens
    // drafts, one accepting 81% does not.
    let c = cpu_batched_queue();
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 16);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &copier).verify, 0);
    // No request waiting, some lane writing: the rows cost what they spare.
    c.record_step(8, 0);
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 0);
}

#[test]
fn on_a_queue_a_token_is_worth_what_the_step_costs_per_token_it_yields() {
    let c = cpu_batched_queue();
    // No lane drafted yet: a token is worth a step of 8 rows over its 8 tokens; the whole
    // copier's drafts are verified and accepted.
    for _ in 0..10 {
        assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 16);
        c.accepted(15);
    }
    // The last step held 48 drafted rows of the other lanes, nearly all accepted: the step of
    // 56 rows (~54 ms) yields ~52 tokens, ~1 ms each, half of it believed: no more rows pay
    // (valuing the step over its 8 requests, ~7 ms a token, made every lane draft because the
    // others did: bench (e) drafted 405-570 tokens at 69-79% and lost 4-5%).
    (0..3).for_each(|_| c.record_batch(56, 56, 48, 10.0 + 0.8 * 55.0));
    assert_eq!(c.draft_rows(16, 16, 8, 0, &whole).verify, 0);
    assert!(c.stats()["drafted_rows_accepted"].as_f64().unwrap() > 0.9, "{}", c.stats());
}

/// A run of bench_speculative (d) on two CPU cores where a copier drafted 137 tokens with none
/// waiting: steps of ~2.7 ms a row from 4 rows up, its verifying steps of 24 rows, and the
/// prompts' batch of 175 tokens, cheaper per token than a step's rows.
fn cpu_pool_drafting() -> Costs {
    let c = Costs::default();
    for _ in 0..3 {
        c.record_batch(175, 8, 0, 360.871);
        for (n, ms) in [(3, 18.065), (4, 19.233), (10, 35.923), (24, 73.385)] {
            c.record_batch(n, n, n.saturating_sub(8).min(16), ms);
        }
    }
    c
}

#[test]
fn a_copier_weighs_its_next_draft_against_the_step_without_its_own_last_draft() {
    let c = cpu_pool_drafting();
    c.record_step(8, 0);
    let copier = |k: usize| 0.99 * k as f64;
    // The last step held this lane's 16 drafted rows: without them the step is 8 rows, where a
    // row costs what the draft's rows do, so a draft within the curve's noise does not pay.
    assert_eq!(c.draft_rows(16, 16, 8, 16, &copier).verify, 0);
    // Every request running copies: the pool's steps get fewer as its lanes' do, and that pays.
    (0..8).for_each(|_| c.copying(true));
    assert_eq!(c.draft_rows(16, 16, 8, 16, &copier).verify, 16);
}

#[test]
fn on_a_cpu_only_high_acceptance_pays_for_its_rows() {
    let c = cpu();
    // A verifying batch of 17 costs 106 ms against 10.4 for one token.
    assert_eq!(c.draft_len(16, 0.5, 1), 0, "a free-text lane does not draft");
    let k = c.draft_len(16, 0.97, 1);
    assert!(k >= 8, "a lane copying a passage drafts: {k}");
    // In a pool of 8 the same rows cost every lane: even a copying lane drafts less.
    assert!(c.draft_len(16, 0.97, 8) < k);
    assert!(c.stats()["draft_tokens_cut"].as_u64().unwrap() > 16);
}

#[test]
fn acceptance_follows_recent_rounds() {
    let mut a = Acceptance::default();
    assert_eq!(a.p(), 0.5);
    for _ in 0..10 {
        a.record(16, 16);
    }
    assert!(a.p() > 0.95, "{}", a.p());
    for _ in 0..10 {
        a.record(16, 0);
    }
    assert!(a.p() < 0.35, "{}", a.p());
}

#[test]
fn unmeasured_costs_mean_try_it() {
    let c = Costs::default();
    assert!(c.restore_pays(1000, 1 << 30, true, 512));
    assert!(c.stash_pays(1000, 1000, 512));
    assert_eq!(c.draft_len(8, 0.1, 1), 8);
}

#[test]
fn a_lane_that_copies_expects_whole_drafts_and_one_that_does_not_expects_little() {
    let mut copy = Acceptance::default();
    let mut story = Acceptance::default();
    for _ in 0..8 {
        copy.record(16, 16);
        story.record(16, if story.runs.len() % 4 == 0 { 1 } else { 0 });
    }
    assert_eq!(copy.expected(16), 16.0);
    assert_eq!(story.expected(16), 0.25);
    let c = cpu();
    // 16 accepted tokens save 16 steps of 10.4 ms for a batch of 17 costing 106: worth all 16.
    assert_eq!(c.draft_rows(16, 16, 1, 0, &|k| copy.expected(k)).verify, 16);
    assert_eq!(c.draft_rows(16, 16, 1, 0, &|k| story.expected(k)).verify, 0, "a quarter token does not pay a row");
    // A copy that broke off half the time: still worth it, per the runs it had.
    let mut half = Acceptance::default();
    for i in 0..8 {
        half.record(16, if i % 2 == 0 { 16 } else { 0 });
    }
    assert_eq!(half.expected(16), 8.0);
}

/// Feeds `costs` every size class as a device with captured graphs runs it: the first step of a
/// shape at `changed(n)` ms, the next (the graph's capture) at twice that, then three replays at
/// `repeated(n)`; twice over.
fn feed_shapes(costs: &Costs, repeated: impl Fn(usize) -> f64, changed: impl Fn(usize) -> f64) {
    feed_runs(costs, &[1, 2, 4, 8, 17, 24, 33, 40, 72], repeated, changed);
}

/// [`feed_shapes`] for the step sizes `sizes` only.
fn feed_runs(costs: &Costs, sizes: &[usize], repeated: impl Fn(usize) -> f64, changed: impl Fn(usize) -> f64) {
    for _ in 0..2 {
        for &n in sizes {
            costs.record_batch(n, n, 0, changed(n));
            costs.record_batch(n, n, 0, 2.0 * changed(n));
            for _ in 0..3 {
                costs.record_batch(n, n, 0, repeated(n));
            }
        }
    }
}

/// The H200 of the GPU kit's run (2026-11-28, SmolLM2-135M): a step whose shape repeats replays
/// its graph in ~1.3 ms whatever its rows up to 72; one whose shape changed runs kernel by
/// kernel in ~5 ms.
fn graphs() -> Costs {
    let c = Costs::new(true);
    feed_shapes(&c, |n| 1.3 + n as f64 / 200.0, |n| 5.0 + n as f64 / 100.0);
    c
}

#[test]
fn where_a_changed_shape_costs_a_lane_verifies_whole_rows_or_none() {
    let c = graphs();
    let copy = |k: usize| k as f64;
    // A copying lane: a proposal of 5 is verified and padded to 16 rows, so its steps keep one
    // shape; a whole proposal needs no filler.
    assert_eq!(c.draft_rows(5, 16, 1, 0, &copy), DraftRows { verify: 5, pad: 11 });
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copy), DraftRows { verify: 16, pad: 0 });
    // Nothing to propose after a step of 16 rows: filler keeps the shape; after a step of none,
    // nothing is sent.
    assert_eq!(c.draft_rows(0, 16, 1, 16, &copy), DraftRows { verify: 0, pad: 16 });
    assert_eq!(c.draft_rows(0, 16, 1, 0, &copy), DraftRows::default());
    // A lane whose drafts are not accepted sends no rows, filler or drafted.
    assert_eq!(c.draft_rows(5, 16, 1, 16, &|_| 0.0), DraftRows::default());
    let s = c.stats();
    assert_eq!(s["rows_padded"], 11 + 16);
    assert_eq!(s["draft_tokens_cut"], 5);
    assert_eq!(s["batch_ms_shape_changed"].as_array().unwrap().len(), 7, "{s}");
}

/// A lane that expects whole copies and has sent `filler` rounds of filler alone.
struct Filling {
    filler: usize,
}

impl LaneRecord for Filling {
    fn expected(&self, k: usize) -> f64 {
        k as f64
    }

    fn filler_rounds(&self) -> usize {
        self.filler
    }
}

#[test]
fn a_lane_holds_filler_while_its_rounds_cost_less_than_the_two_changes_they_spare() {
    // Rows the curve shows as free are charged a sixteenth of a change a round: 31 rounds.
    let c = graphs();
    let rounds = |c: &Costs| (0..64).take_while(|&filler| c.draft_rows(0, 16, 1, 16, &Filling { filler }).pad > 0).count();
    assert_eq!(rounds(&c), 31);
    // Rows that cost more end it sooner: 16 rows here add 1 ms to a step of 1.3, a change ~3.7.
    let dear = Costs::new(true);
    feed_shapes(&dear, |n| if n > 8 { 2.3 } else { 1.3 }, |n| 5.0 + n as f64 / 100.0);
    let dear_rounds = rounds(&dear);
    assert!((1..8).contains(&dear_rounds), "{dear_rounds} {}", dear.stats());
    // A lane with a proposal is not held back by the filler it sent before.
    assert_eq!(c.draft_rows(16, 16, 1, 16, &Filling { filler: 9 }), DraftRows { verify: 16, pad: 0 });
}

#[test]
fn in_a_pool_a_size_no_repeated_step_measured_costs_what_its_steps_did() {
    // A pool of 8 on a device where shapes cost (run C's H200: a repeated step of 8 rows 2.5 ms,
    // a changed one 5): the lanes' drafts made steps of 24 rows now and then, never twice in a
    // row, at ~10 ms; no repeated step measured 24 rows.
    let c = Costs::new(true);
    feed_runs(&c, &[1, 2, 4, 8], |n| 1.3 + 0.15 * n as f64, |_| 5.0);
    for _ in 0..4 {
        c.record_batch(24, 24, 16, 10.0);
        c.record_batch(8, 8, 0, 2.5);
    }
    c.record_step(8, 8);
    // A lane on the queue does not take 24 rows for the repeated curve's "not measured: try it":
    // its tries would never repeat the size. Its accepted tokens' share of a step of 8 rows
    // (~0.16 ms believed each) does not pay the ~7.5 ms those steps cost.
    assert_eq!(c.draft_rows(16, 16, 8, 0, &|k: usize| k as f64), DraftRows::default());
    // A lone lane tries a size its own held steps will repeat and measure.
    assert_eq!(c.draft_rows(16, 16, 1, 0, &|k: usize| k as f64).verify, 16);
}

#[test]
fn where_shapes_cost_nothing_a_draft_is_cut_to_what_pays_and_never_padded() {
    // A CPU: a step costs its rows, repeated or not.
    let c = Costs::new(false);
    feed_shapes(&c, |n| 10.4 + 5.6 * (n - 1) as f64, |n| 10.4 + 5.6 * (n - 1) as f64);
    let copy = |k: usize| k as f64;
    let rows = c.draft_rows(5, 16, 1, 16, &copy);
    assert_eq!(rows, DraftRows { verify: 5, pad: 0 }, "a copy pays for its own rows, no filler");
    assert_eq!(c.draft_rows(0, 16, 1, 16, &copy), DraftRows::default());
    assert_eq!(c.draft_rows(16, 16, 1, 0, &|k| geometric(0.5, k)).verify, 0, "a free-text lane does not draft");
    assert_eq!(c.stats()["rows_padded"], 0);
    // Nor where a host that runs the steps itself shows slow first steps (threads tried, caches):
    // only a device's steps are held to one shape.
    let host = Costs::new(false);
    feed_shapes(&host, |n| 1.3 + n as f64 / 200.0, |n| 5.0 + n as f64 / 100.0);
    assert_eq!(host.draft_rows(5, 16, 1, 0, &copy).pad, 0);
    assert_eq!(host.draft_rows(0, 16, 1, 16, &copy), DraftRows::default());
}

#[test]
fn a_device_tries_holding_rows_until_runs_of_one_shape_say_whether_it_pays() {
    let copy = |k: usize| k as f64;
    let c = Costs::new(true);
    assert_eq!(c.draft_rows(5, 16, 1, 0, &copy), DraftRows { verify: 5, pad: 11 }, "nothing measured: try it");
    // Four runs whose first step cost what their third did: this device does not care.
    for n in [1, 17, 2, 8] {
        for _ in 0..3 {
            c.record_batch(n, n, 0, 2.0);
        }
    }
    assert_eq!(c.stats()["shape_runs"], 4);
    assert_eq!(c.draft_rows(5, 16, 1, 0, &copy).pad, 0);
    // Four whose first step cost four times their third: this one does.
    let g = Costs::new(true);
    for n in [1, 17, 2, 8] {
        g.record_batch(n, n, 0, 4.0);
        g.record_batch(n, n, 0, 8.0);
        g.record_batch(n, n, 0, 1.0);
    }
    assert_eq!(g.draft_rows(5, 16, 1, 0, &copy), DraftRows { verify: 5, pad: 11 });
    assert_eq!(g.stats()["shape_first_over_third"], 4.0);
}

#[test]
fn a_lane_starts_holding_rows_only_where_its_drafts_repay_the_change() {
    let c = graphs();
    // A step of 8 lanes with requests waiting: a lane expecting one token a round does not pay
    // for a change of every lane's step; one copying whole drafts does.
    c.record_step(0, 2);
    assert_eq!(c.draft_rows(5, 16, 8, 0, &|k| geometric(0.5, k)), DraftRows::default());
    assert_eq!(c.draft_rows(5, 16, 8, 0, &|k| k as f64), DraftRows { verify: 5, pad: 11 });
    // With none waiting, the other lanes' steps run anyway and a copy's tokens spare only its
    // rows in them: not worth changing everyone's step.
    c.record_step(0, 0);
    assert_eq!(c.draft_rows(5, 16, 8, 0, &|k| k as f64), DraftRows::default());
}

#[test]
fn a_lane_whose_holds_end_at_once_stops_starting_them_where_a_change_costs() {
    let c = graphs();
    let mut story = Acceptance::default();
    for _ in 0..8 {
        story.record(16, 1);
    }
    // Never held yet: the prior (holds of 8 rounds) says a token a round repays the start, in
    // the shortest hold (3 rows): as many tokens a round as 16 rows give it, for fewer rows.
    assert_eq!(c.draft_rows(5, 16, 1, 0, &story), DraftRows { verify: 3, pad: 0 });
    // Its holds lasted a round each (n-gram matches that broke off at once): a start costs two
    // changed steps for one round of drafts, more than a token a round saves.
    for _ in 0..3 {
        story.hold(16);
        story.hold(0);
    }
    assert!(story.hold_rounds() < 2.5, "{}", story.hold_rounds());
    assert_eq!(c.draft_rows(5, 16, 1, 0, &story), DraftRows::default());
    // Holding already, it goes on while its drafts pay: there is no start to repay (nor a
    // change to a shorter hold worth one).
    assert_eq!(c.draft_rows(5, 16, 1, 16, &story), DraftRows { verify: 5, pad: 11 });
    // A lane copying whole drafts starts whatever its holds lasted.
    let mut copy = story.clone();
    for _ in 0..8 {
        copy.record(16, 16);
    }
    assert_eq!(c.draft_rows(5, 16, 1, 0, &copy), DraftRows { verify: 5, pad: 11 });
    // A request that ends while holding counts the hold it had.
    let mut long = Acceptance::default();
    for _ in 0..20 {
        long.hold(16);
    }
    long.end_hold();
    assert!(long.hold_rounds() > HOLD_ROUNDS, "{}", long.hold_rounds());
}

/// A device whose repeated steps cost ~1.4 ms under 8 rows and ~4 ms past them (an H200's
/// quantized matrix products leave their vector kernel past 8 rows), a changed shape ~5 ms;
/// steps of 8 rows at `eight` ms (None: never run).
fn knee(eight: Option<f64>) -> Costs {
    let c = Costs::new(true);
    let sizes: Vec<usize> = [1, 2, 4, 8, 17, 24, 33, 72].into_iter().filter(|&n| n != 8 || eight.is_some()).collect();
    let repeated = |n: usize| match n {
        8 => eight.unwrap_or(1.4),
        n if n < 8 => 1.4,
        _ => 4.0,
    };
    feed_runs(&c, &sizes, repeated, |_| 5.0);
    c
}

#[test]
fn a_lone_lane_holds_the_rows_that_give_it_the_most_tokens_per_ms() {
    // A copy accepted ~8 tokens a round (the H200's strict call: ~8 tokens a step of 16 rows).
    let copy = |k: usize| k.min(8) as f64;
    // 16 rows measured at ~4 ms a step, 8 not measured: the lane tries a hold of 7 (at what a
    // step of 1 costs until measured).
    assert_eq!(knee(None).draft_rows(16, 16, 1, 0, &copy), DraftRows { verify: 7, pad: 0 });
    // Measured at 1.4 ms: 8 tokens in 1.4 ms beat 9 in 4; a lane holding 16 changes to it.
    let c = knee(Some(1.4));
    assert_eq!(c.draft_rows(16, 16, 1, 0, &copy), DraftRows { verify: 7, pad: 0 });
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copy), DraftRows { verify: 7, pad: 0 });
    // A proposal of 5 is padded to the hold's 7 rows; held, it stays.
    assert_eq!(c.draft_rows(5, 16, 1, 7, &copy), DraftRows { verify: 5, pad: 2 });
    // Where 8 rows cost what 17 do, a copy accepted whole gets more tokens per ms from 16
    // (17 in 4 ms) than from 7 (8) or 3 (4 in 1.4 ms); one accepted ~8 a round, from 3.
    let c = knee(Some(4.0));
    assert_eq!(c.draft_rows(16, 16, 1, 16, &|k: usize| k as f64), DraftRows { verify: 16, pad: 0 });
    assert_eq!(c.draft_rows(16, 16, 1, 16, &copy), DraftRows { verify: 3, pad: 0 });
    // In a pool (requests waiting) a lane holds `k_max` or nothing (the pool's rule: saved ms
    // per step).
    let c = knee(Some(1.4));
    c.record_step(2, 2);
    assert_eq!(c.draft_rows(5, 16, 2, 0, &|k: usize| k as f64), DraftRows { verify: 5, pad: 11 });
}
