use super::*;

/// A conversation that says the same 40 tokens twice, and then starts a third time.
fn repeating() -> Vec<Token> {
    let phrase: Vec<Token> = (100..140).collect();
    let mut h: Vec<Token> = (1..30).collect();
    h.extend(&phrase);
    h.extend(500..530);
    h.extend(&phrase);
    h.extend(600..610);
    h.extend(&phrase[..14]);
    h
}

/// A lane of `d` whose reply has just started the phrase a third time ([`repeating`]): its
/// next 16 tokens are 114..130.
fn at_the_phrase(d: &Drafters) -> Speculation<'_> {
    let h = repeating();
    let mut s = Speculation::start(d, &h[..h.len() - 1]).unwrap().unwrap();
    s.follow(&h[h.len() - 1..]);
    s
}

#[test]
fn a_repeated_passage_is_drafted_from_where_it_was_seen() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap();
    let h = repeating();
    let mut s = Speculation::start(&d, &h[..h.len() - 1]).unwrap().unwrap();
    assert_eq!(s.follow(&h[h.len() - 1..]), Followed::Diverged { matched: 0, retract: 0 }, "no draft yet");
    let draft = s.draft(64, |t| Ok(t.len())).unwrap();
    assert_eq!(draft, (114..130).collect::<Vec<_>>(), "the phrase goes on, draft_max tokens of it");
    assert_eq!((s.stats.drafted, s.stats.accepted), (16, 0));
}

#[test]
fn the_grammar_and_the_room_cut_a_draft_and_short_drafts_are_dropped() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 5).unwrap();
    let h = repeating();
    let mut s = Speculation::start(&d, &h).unwrap().unwrap();
    assert_eq!(s.draft(64, |_| Ok(6)).unwrap().len(), 6, "cut where the grammar stops admitting it");
    s.pending.clear();
    s.round = 0;
    assert_eq!(s.draft(3, |t| Ok(t.len())).unwrap(), Vec::<Token>::new(), "room for 3 is under draft_min 5");
    assert_eq!(s.draft(64, |_| Ok(4)).unwrap(), Vec::<Token>::new(), "4 admitted is under draft_min 5");
    drop(s);
    let mut s = Speculation::start(&d, &h[..20]).unwrap().unwrap();
    assert!(s.draft(64, |t| Ok(t.len())).unwrap().is_empty(), "nothing repeats");
}

#[test]
fn steps_follow_the_draft_until_one_differs() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap();
    let mut s = Speculation::start(&d, &[1, 2, 3]).unwrap().unwrap();
    s.pending.extend([10, 11, 12, 13]);
    (s.round, s.real) = (4, 4);
    assert_eq!(s.follow(&[10]), Followed::Whole(1));
    assert_eq!(s.follow(&[11, 12]), Followed::Whole(2), "a step of two drafted tokens");
    assert_eq!(s.follow(&[13, 99]), Followed::Diverged { matched: 1, retract: 0 }, "past the draft's end");
    assert_eq!(s.stats.accepted, 4);
    s.pending.extend([20, 21, 22]);
    s.real = 3;
    assert_eq!(s.follow(&[7]), Followed::Diverged { matched: 0, retract: 3 }, "the whole draft taken back");
    assert_eq!(s.follow(&[8]), Followed::Diverged { matched: 0, retract: 0 }, "no draft");
    assert_eq!(s.fresh, [10, 11, 12, 13, 99, 7, 8], "every step goes to the drafter, once");
}

#[test]
fn lanes_asking_at_once_share_one_run_and_get_their_own_drafts() {
    let d = Drafters::new("ngram-simple", 12, 3, 16, 0).unwrap();
    let h = repeating();
    let other: Vec<Token> = h.iter().map(|t| t + 1000).collect();
    let lanes: Vec<Speculation> = (0..3).map(|_| Speculation::start(&d, &[]).unwrap().unwrap()).collect();
    let alone = d.draft(lanes[0].lane, h.clone(), 16).unwrap();
    assert_eq!(alone, (114..130).collect::<Vec<_>>());
    let (l1, l2) = (lanes[1].lane, lanes[2].lane);
    // Lanes 1 and 2 posted their asks while another lane held the drafter (what a lane does
    // before it waits for the lock): lane 0's next draft runs them too.
    d.board().asks[l1] = Some(Ask { fresh: h.clone(), n_max: 16 });
    d.board().asks[l2] = Some(Ask { fresh: other.clone(), n_max: 8 });
    let runs = d.runs.load(Ordering::Relaxed);
    d.draft(lanes[0].lane, vec![130], 16).unwrap();
    assert_eq!(d.runs.load(Ordering::Relaxed), runs + 1, "one run for three lanes");
    assert_eq!(d.stats()["draft_asks"], 4);
    // Each lane then finds its own draft made, without a run.
    assert_eq!(d.draft(l1, Vec::new(), 16).unwrap(), (114..130).collect::<Vec<_>>());
    assert_eq!(d.draft(l2, Vec::new(), 8).unwrap(), (1114..1122).collect::<Vec<_>>());
    assert_eq!(d.runs.load(Ordering::Relaxed), runs + 1);
}

#[test]
fn lanes_drafting_from_many_threads_get_what_they_would_alone() {
    let d = Drafters::new("ngram-simple", 12, 4, 16, 0).unwrap();
    let h = repeating();
    std::thread::scope(|s| {
        for k in 0..4 {
            let (d, h) = (&d, &h);
            s.spawn(move || {
                let conv: Vec<Token> = h.iter().map(|t| t + 1000 * k).collect();
                let spec = Speculation::start(d, &[]).unwrap().unwrap();
                for _ in 0..50 {
                    let got = d.draft(spec.lane, conv.clone(), 16).unwrap();
                    assert_eq!(got, (114..130).map(|t| t + 1000 * k).collect::<Vec<_>>(), "lane of thread {k}");
                    d.drafter().begin(spec.lane, &[]).unwrap();
                }
            });
        }
    });
    assert_eq!(d.stats()["draft_asks"], 200);
}

#[test]
fn lanes_are_taken_and_given_back() {
    let d = Drafters::new("ngram-map-k", 12, 2, 16, 0).unwrap();
    let a = Speculation::start(&d, &[1]).unwrap().unwrap();
    let b = Speculation::start(&d, &[1]).unwrap().unwrap();
    assert_ne!(a.lane, b.lane);
    assert!(Speculation::start(&d, &[1]).unwrap().is_none(), "every lane is taken: no speculation");
    drop(a);
    assert!(Speculation::start(&d, &[1]).unwrap().is_some());
}

#[test]
fn every_self_drafting_type_is_llamas_and_others_are_refused() {
    for kind in crate::request::SPECULATIVE_TYPES {
        Drafters::new(kind, 12, 2, 16, 0).unwrap_or_else(|e| panic!("{kind}: {}", e.message));
    }
    for kind in ["draft-simple", "none", "ngram"] {
        assert!(Drafters::new(kind, 12, 1, 16, 0).is_err(), "{kind}");
    }
}

#[test]
fn a_failing_drafter_costs_the_request_its_drafts_not_its_reply() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap();
    let h = repeating();
    let mut s = Speculation::start(&d, &h).unwrap().unwrap();
    crate::shim::testing_throw_next();
    assert_eq!(s.draft(64, |t| Ok(t.len())).unwrap(), Vec::<Token>::new(), "the failure is no draft, not an error");
    crate::shim::testing_clear();
    assert!(s.draft(64, |t| Ok(t.len())).unwrap().is_empty(), "and the request drafts no more");
    s.follow(&[1, 2, 3]);
    assert!(s.fresh.is_empty(), "nor keeps tokens for a drafter it no longer asks");
    assert_eq!(s.stats.drafted, 0);
    drop(s);
    let mut s = Speculation::start(&d, &h).unwrap().unwrap();
    assert_eq!(s.draft(64, |t| Ok(t.len())).unwrap().len(), 16, "the lane's next request drafts again");
}

/// A CPU's costs, a step of `n` tokens taking `ms(n)` (each size measured twice).
fn host_costs(ms: impl Fn(usize) -> f64) -> Arc<Costs> {
    let c = Costs::default();
    for _ in 0..2 {
        for n in 1..=64 {
            c.record_batch(n, 1, 0, ms(n));
        }
    }
    Arc::new(c)
}

/// Costs where a verifying row costs what a step does (a CPU with no batched kernel): no
/// draft pays until the lane's drafts are nearly always accepted.
fn linear_costs() -> Arc<Costs> {
    host_costs(|n| 10.0 * n as f64)
}

#[test]
fn a_draft_that_does_not_pay_is_followed_in_the_shadow_until_it_would() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap().costed(linear_costs());
    let mut s = at_the_phrase(&d);
    // The phrase goes on (114..): drafted, but at one step's cost per row nothing is verified.
    assert!(s.draft(64, |t| Ok(t.len())).unwrap().is_empty(), "not verified");
    assert_eq!(s.stats.drafted, 0);
    assert_eq!(s.shadow.len(), 16, "kept in the shadow");
    // The reply copies the phrase: the shadow is matched step by step, nothing is taken back.
    for t in 114..130 {
        assert_eq!(s.follow(&[t]), Followed::Diverged { matched: 0, retract: 0 }, "no decode was drafted");
        if t < 129 {
            assert!(s.draft(64, |t| Ok(t.len())).unwrap().is_empty(), "no new draft while the shadow runs");
        }
    }
    assert!(s.shadow.is_empty());
    let before = s.acceptance.p();
    s.draft(64, |t| Ok(t.len())).unwrap();
    assert!(s.acceptance.p() > before, "the shadow round counted as accepted: {} -> {}", before, s.acceptance.p());
    assert_eq!(s.stats.accepted, 0, "shadow tokens are not the reply's drafted tokens");
}

#[test]
fn a_lane_tells_the_costs_while_it_has_something_to_copy_and_stops_when_it_leaves() {
    let costs = linear_costs();
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap().costed(costs.clone());
    let copying = || costs.stats()["lanes_copying"].as_u64().unwrap();
    let mut s = at_the_phrase(&d);
    s.draft(64, |t| Ok(t.len())).unwrap();
    assert_eq!(copying(), 1, "a proposal, even one followed in the shadow");
    s.follow(&[114]);
    s.draft(64, |t| Ok(t.len())).unwrap();
    assert_eq!(copying(), 1, "said once, not once a step");
    // The reply leaves the passage: nothing to copy.
    s.follow(&[7]);
    s.draft(64, |t| Ok(t.len())).unwrap();
    assert_eq!(copying(), 0);
    drop(s);
    let mut again = at_the_phrase(&d);
    again.draft(64, |t| Ok(t.len())).unwrap();
    assert_eq!(copying(), 1);
    drop(again);
    assert_eq!(copying(), 0, "a request that ends stops counting");
}

#[test]
fn rows_that_cost_nothing_are_drafted_whole() {
    let c = Costs::default();
    for n in 1..=64 {
        c.record_batch(n, 1, 0, 3.0);
    }
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap().costed(Arc::new(c));
    let mut s = at_the_phrase(&d);
    assert_eq!(s.draft(64, |t| Ok(t.len())).unwrap(), (114..130).collect::<Vec<_>>());
}

/// Costs of a device that replays a captured graph for a repeated shape (`repeated(n)` ms a
/// step of `n` tokens) and runs a changed one kernel by kernel (~5 ms).
fn graph_costs_by(repeated: impl Fn(usize) -> f64) -> Arc<Costs> {
    let c = Costs::new(true);
    for _ in 0..2 {
        for n in [1, 2, 4, 8, 17, 33, 64] {
            c.record_batch(n, n, 0, 5.0);
            c.record_batch(n, n, 0, 9.0);
            for _ in 0..3 {
                c.record_batch(n, n, 0, repeated(n));
            }
        }
    }
    Arc::new(c)
}

/// [`graph_costs_by`] at ~1.3 ms a repeated step of any size here.
fn graph_costs() -> Arc<Costs> {
    graph_costs_by(|_| 1.3)
}

#[test]
fn where_shapes_cost_a_short_draft_is_padded_with_filler_that_only_the_model_can_accept() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap().costed(graph_costs());
    let mut s = at_the_phrase(&d);
    let draft = s.draft(64, |_| Ok(6)).unwrap();
    let mut want: Vec<Token> = (114..120).collect();
    want.extend([119; 10]);
    assert_eq!(draft, want, "six drafted tokens, then filler up to draft_max rows");
    assert_eq!(s.stats.drafted, 6, "filler is not counted as drafted");
    for t in 114..120 {
        assert_eq!(s.follow(&[t]), Followed::Whole(1));
    }
    assert_eq!(s.follow(&[120]), Followed::Diverged { matched: 0, retract: 10 }, "the filler taken back");
    assert_eq!(s.stats.accepted, 6);
    // Nothing repeats now, but the last step had 16 rows: filler alone keeps the shape.
    drop(s);
    let mut s2 = Speculation::start(&d, &[]).unwrap().unwrap();
    s2.follow(&[7]);
    s2.last_rows = 16;
    assert_eq!(s2.draft(64, |t| Ok(t.len())).unwrap(), vec![7; 16]);
    assert_eq!((s2.stats.drafted, s2.real), (0, 0));
    assert_eq!(s2.follow(&[8]), Followed::Diverged { matched: 0, retract: 16 });
    s2.last_rows = 0;
    assert!(s2.draft(64, |t| Ok(t.len())).unwrap().is_empty(), "after a step without rows, none");
    // A lane that holds rows with nothing to propose holds them through a gap of a few steps
    // and stops within 32 (rows that cost nothing are charged a sixteenth of a change a round),
    // and its filler rounds are not rounds of its drafts: what it expects of its next proposal
    // stays what its proposals did.
    let expected = s2.acceptance.expected(16);
    let held = (0..40)
        .take_while(|_| {
            s2.follow(&[9]);
            s2.last_rows = 16;
            !s2.draft(64, |t| Ok(t.len())).unwrap().is_empty()
        })
        .count();
    assert!((8..32).contains(&held), "held filler for {held} steps");
    assert_eq!(s2.acceptance.expected(16), expected);
}

/// Run C's H200: a repeated step ~1.3 ms up to 8 tokens and ~4 past them: a lone lane holds 7
/// rows.
fn knee_costs() -> Arc<Costs> {
    graph_costs_by(|n| if n <= 8 { 1.3 } else { 4.0 + n as f64 / 20.0 })
}

#[test]
fn a_proposal_cut_short_is_verified_on_while_the_reply_follows_it() {
    let d = Drafters::new("ngram-simple", 12, 1, 16, 0).unwrap().costed(knee_costs());
    let mut s = at_the_phrase(&d);
    let mut drafts = vec![s.draft(64, |t| Ok(t.len())).unwrap()];
    let cut = drafts[0].len();
    assert_eq!(cut, 7, "the proposal (114..130) is cut to the lane's hold");
    // The reply copies the proposal to its end: each draft is followed whole, the row after it
    // gives the proposal's next token, and the rest of the proposal is the next draft, not one
    // step a token in the shadow.
    let mut t = 114;
    while t < 130 {
        for _ in 0..drafts.last().unwrap().len() {
            assert_eq!(s.follow(&[t]), Followed::Whole(1));
            t += 1;
        }
        s.follow(&[t]);
        t += 1;
        drafts.push(s.draft(64, |t| Ok(t.len())).unwrap());
    }
    let mut want: Vec<Vec<Token>> = Vec::new();
    let mut at = 114;
    while at < 130 {
        want.push((at..(at + cut as Token).min(130)).collect());
        at += cut as Token + 1;
    }
    assert_eq!(drafts[..want.len()], want[..], "{cut} at a time");
    assert_eq!(want.len(), 2);
    let verified: usize = want.iter().map(Vec::len).sum();
    assert_eq!(s.stats.accepted, verified);
    assert_eq!(s.stats.drafted, drafts.iter().map(Vec::len).sum::<usize>(), "the last: the next proposal's");
    // One round of 16 proposed tokens, every one accepted (verified or followed).
    assert_eq!(s.acceptance.expected(16), 16.0);
}
