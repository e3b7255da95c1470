//! A scheduler job's lifecycle as one enum whose variants carry their data (as mistral.rs's
//! `SequenceState`): where the request is, which sequence it holds, since when its caller has been
//! sampling, how it left. The transitions are methods, so a combination the scheduler never
//! means (a queued request with logits outstanding, a parked one that is sampling) cannot be
//! written down.
//!
//! ```text
//! Queued ─place─▶ AwaitingPrefix ─prefix copied─▶ Prefilling ─logits─▶ Sampling ◀─logits─ Generating
//!    └──────────────place, prefix copied────────────▶┘  ▲ │                 └──submit──▶┘   ▲ │
//!                                                  unpark└park─▶ Parked ◀─park────────unpark┘
//! any state ─ticket dropped, or failed─▶ Left(Departure) ─housekeeping─▶ removed
//! ```

use std::time::Instant;

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JobState {
    /// Waits in the queue for a sequence.
    Queued,
    /// Holds sequence `seq` and waits until sequence `src` holds the first `upto` tokens of its
    /// prompt (another request is evaluating them), to copy them.
    AwaitingPrefix { seq: usize, src: usize, upto: usize },
    /// Evaluates its prompt into `seq`; no logits yet, so its caller gets progress messages.
    Prefilling { seq: usize },
    /// Its logits were delivered at `since` and its caller is sampling: nothing to decode until
    /// it submits.
    Sampling { seq: usize, since: Instant },
    /// Its caller submitted the next tokens: they go into the next batch.
    Generating { seq: usize },
    /// Preempted for KV space: `seq` was cleared, and is rebuilt from the request's tokens once
    /// another request leaves. `generating`: it had had logits (it resumes as `Generating`).
    Parked { seq: usize, generating: bool },
    /// Its caller dropped the ticket, or it failed: removed at the next housekeeping.
    Left(Departure),
}

/// What a request that left leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Departure {
    /// It had no sequence yet.
    Unplaced,
    /// Its sequence becomes idle; the tokens stay for reuse.
    Keep { seq: usize },
    /// Its sequence is cleared: the request failed or its caller panicked, so its tokens are
    /// not trusted.
    Clear { seq: usize },
    /// It was parked: its sequence is already empty (cleared again on release), and it no longer
    /// counts as active.
    Parked { seq: usize },
}

impl Departure {
    /// The sequence to release, and whether to clear it.
    pub fn release(self) -> Option<(usize, bool)> {
        match self {
            Departure::Unplaced => None,
            Departure::Keep { seq } => Some((seq, false)),
            Departure::Clear { seq } | Departure::Parked { seq } => Some((seq, true)),
        }
    }
}

impl JobState {
    pub fn is_queued(self) -> bool {
        self == JobState::Queued
    }

    pub fn has_left(self) -> bool {
        matches!(self, JobState::Left(_))
    }

    /// Holds a sequence and has not left: counted as running (stats, `n_parallel`).
    pub fn is_admitted(self) -> bool {
        !self.is_queued() && !self.has_left()
    }

    /// Holds KV cells that its leaving would free: placed and not parked, including a request
    /// that left and whose sequence is not released yet. A full cache parks a request only when
    /// another one is active.
    pub fn is_active(self) -> bool {
        match self {
            JobState::Queued | JobState::Parked { .. } => false,
            JobState::Left(d) => matches!(d, Departure::Keep { .. } | Departure::Clear { .. }),
            _ => true,
        }
    }

    /// The sequence of a request whose sequence grows as it runs (prefilling, sampling or
    /// generating): a prefix it is evaluating can be awaited by others.
    pub fn running_seq(self) -> Option<usize> {
        match self {
            JobState::Prefilling { seq } | JobState::Sampling { seq, .. } | JobState::Generating { seq } => Some(seq),
            _ => None,
        }
    }

    /// A request with something to decode: its sequence and whether it is generating (else it
    /// evaluates its prompt).
    pub fn runnable(self) -> Option<(usize, bool)> {
        match self {
            JobState::Prefilling { seq } => Some((seq, false)),
            JobState::Generating { seq } => Some((seq, true)),
            _ => None,
        }
    }

    /// Since when its caller has been sampling.
    pub fn sampling_since(self) -> Option<Instant> {
        match self {
            JobState::Sampling { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Its prefix is in its sequence: it runs, prompt first.
    pub fn prefix_ready(&mut self) {
        if let JobState::AwaitingPrefix { seq, .. } = *self {
            *self = JobState::Prefilling { seq };
        }
    }

    /// Logits were delivered (at `now`).
    pub fn logits_delivered(&mut self, now: Instant) {
        if let JobState::Prefilling { seq } | JobState::Generating { seq } = *self {
            *self = JobState::Sampling { seq, since: now };
        }
    }

    /// The caller submitted its next tokens.
    pub fn submitted(&mut self) {
        if let JobState::Sampling { seq, .. } = *self {
            *self = JobState::Generating { seq };
        }
    }

    /// Its sequence was cleared for KV space.
    pub fn park(&mut self) {
        *self = match *self {
            JobState::Prefilling { seq } => JobState::Parked { seq, generating: false },
            JobState::Generating { seq } => JobState::Parked { seq, generating: true },
            JobState::Left(Departure::Keep { seq } | Departure::Clear { seq }) => {
                JobState::Left(Departure::Parked { seq })
            }
            other => other,
        };
    }

    /// Another request left: a parked request runs again.
    pub fn unpark(&mut self) {
        if let JobState::Parked { seq, generating } = *self {
            *self = if generating { JobState::Generating { seq } } else { JobState::Prefilling { seq } };
        }
    }

    /// Its caller dropped the ticket (`panicking`: while unwinding, so its tokens may be wrong).
    pub fn leave(&mut self, panicking: bool) {
        *self = JobState::Left(self.departure(panicking));
    }

    /// The request failed (its caller was told): it leaves, and its sequence is cleared.
    pub fn fail(&mut self) {
        *self = JobState::Left(self.departure(true));
    }

    /// How the request leaves from here; `clear`: its tokens are not trusted. A request that
    /// left already can only get cleared, never un-cleared.
    fn departure(self, clear: bool) -> Departure {
        match self {
            JobState::Queued => Departure::Unplaced,
            JobState::Parked { seq, .. } => Departure::Parked { seq },
            JobState::Left(Departure::Keep { seq }) if clear => Departure::Clear { seq },
            JobState::Left(d) => d,
            JobState::AwaitingPrefix { seq, .. }
            | JobState::Prefilling { seq }
            | JobState::Sampling { seq, .. }
            | JobState::Generating { seq } => {
                if clear {
                    Departure::Clear { seq }
                } else {
                    Departure::Keep { seq }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn a_request_runs_prompt_then_alternates_sampling_and_generating() {
        let mut s = AwaitingPrefix { seq: 2, src: 0, upto: 20 };
        assert_eq!(s.runnable(), None, "nothing to decode while waiting for a prefix");
        assert_eq!(s.running_seq(), None, "nobody waits on a request that waits");
        s.prefix_ready();
        assert_eq!(s, Prefilling { seq: 2 });
        assert_eq!(s.runnable(), Some((2, false)));
        let now = Instant::now();
        s.logits_delivered(now);
        assert_eq!(s, Sampling { seq: 2, since: now });
        assert_eq!(s.runnable(), None, "nothing to decode until the caller submits");
        assert_eq!(s.sampling_since(), Some(now));
        s.submitted();
        assert_eq!(s, Generating { seq: 2 });
        assert_eq!(s.runnable(), Some((2, true)));
        assert_eq!(s.running_seq(), Some(2));
    }

    #[test]
    fn a_parked_request_resumes_where_it_was() {
        let mut s = Prefilling { seq: 1 };
        s.park();
        assert_eq!(s, Parked { seq: 1, generating: false });
        assert!(!s.is_active() && s.is_admitted());
        assert_eq!(s.runnable(), None);
        s.unpark();
        assert_eq!(s, Prefilling { seq: 1 });

        let mut s = Generating { seq: 1 };
        s.park();
        s.unpark();
        assert_eq!(s, Generating { seq: 1 });
    }

    #[test]
    fn leaving_keeps_the_tokens_unless_panicking_parked_or_failed() {
        let cases = [
            (Queued, false, Departure::Unplaced),
            (Generating { seq: 3 }, false, Departure::Keep { seq: 3 }),
            (Generating { seq: 3 }, true, Departure::Clear { seq: 3 }),
            (AwaitingPrefix { seq: 3, src: 1, upto: 40 }, false, Departure::Keep { seq: 3 }),
            (Parked { seq: 3, generating: true }, false, Departure::Parked { seq: 3 }),
        ];
        for (from, panicking, departure) in cases {
            let mut s = from;
            s.leave(panicking);
            assert_eq!(s, Left(departure), "{from:?} panicking={panicking}");
        }
        assert_eq!(Departure::Unplaced.release(), None);
        assert_eq!(Departure::Keep { seq: 3 }.release(), Some((3, false)));
        assert_eq!(Departure::Clear { seq: 3 }.release(), Some((3, true)));
        assert_eq!(Departure::Parked { seq: 3 }.release(), Some((3, true)));
    }

    #[test]
    fn a_failed_request_stays_cleared_when_its_ticket_is_dropped() {
        let mut s = Sampling { seq: 0, since: Instant::now() };
        s.fail();
        assert_eq!(s, Left(Departure::Clear { seq: 0 }));
        s.leave(false);
        assert_eq!(s, Left(Departure::Clear { seq: 0 }));
        // A ticket dropped normally, then the request failed in the batch it was in.
        let mut s = Generating { seq: 4 };
        s.leave(false);
        s.fail();
        assert_eq!(s, Left(Departure::Clear { seq: 4 }));
    }

    #[test]
    fn a_request_that_left_still_counts_as_active_until_parked() {
        let mut s = Generating { seq: 1 };
        s.leave(false);
        assert!(s.is_active(), "its sequence is about to become idle");
        assert!(!s.is_admitted());
        s.park();
        assert_eq!(s, Left(Departure::Parked { seq: 1 }));
        assert!(!s.is_active());
        assert!(!Queued.is_active() && !Left(Departure::Unplaced).is_active());
    }
}
