//! The schedules on a simulated clock: where etcd's compactor tests
//! (`periodic_test.go`, `revision_test.go`) expect compactions.

use std::time::Duration;

use super::{AutoCompaction, Compactor, REVISION_INTERVAL};
use crate::error::Error;
use crate::Instant;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn at(d: Duration) -> Instant {
    Instant::ZERO + d
}

/// Drives `compactor` from timer to timer until `until`, with the
/// revision one more per elapsed minute and every compaction answered
/// by `outcome`; returns (time, revision) of each compaction handed out.
fn drive(
    compactor: &mut Compactor,
    until: Duration,
    leading: impl Fn(Instant) -> bool,
    outcome: impl Fn(usize) -> Result<(), Error>,
) -> Vec<(Duration, i64)> {
    let revision_at = |t: Instant| 1 + (t.as_nanos() / MINUTE.as_nanos() as u64) as i64;
    let mut compactions = Vec::new();
    for _ in 0..100_000 {
        let Some(t) = compactor.poll_timeout() else {
            panic!("a compactor always has a next look once answered");
        };
        if t > at(until) {
            break;
        }
        if let Some(rev) = compactor.handle_timeout(t, revision_at(t), leading(t)) {
            let result = outcome(compactions.len());
            compactions.push((t.saturating_since(Instant::ZERO), rev));
            assert_eq!(compactor.poll_timeout(), None, "no timer while in flight");
            compactor.handle_result(t, revision_at(t), result.as_ref().map(|_| ()));
        }
    }
    compactions
}

#[test]
fn off_has_no_timer() {
    for mode in [
        AutoCompaction::Off,
        AutoCompaction::Periodic(Duration::ZERO),
        AutoCompaction::Revision(0),
    ] {
        let c = Compactor::new(mode, Instant::ZERO, 5);
        assert_eq!(c.poll_timeout(), None, "{mode:?}");
    }
}

#[test]
fn periodic_hour_compacts_the_revision_of_an_hour_ago_every_hour() {
    let mut c = Compactor::new(AutoCompaction::Periodic(HOUR), Instant::ZERO, 1);
    assert_eq!(c.poll_timeout(), Some(at(6 * MINUTE)), "looks every tenth");
    let got = drive(&mut c, 3 * HOUR, |_| true, |_| Ok(()));
    // First after a whole retention, at the revision sampled at start;
    // then hourly, at the oldest sample of the window (11 samples, the
    // oldest 66 minutes back).
    assert_eq!(got, vec![(HOUR, 1), (2 * HOUR, 55), (3 * HOUR, 115)]);
}

#[test]
fn periodic_day_waits_a_day_then_compacts_hourly() {
    let mut c = Compactor::new(AutoCompaction::Periodic(24 * HOUR), Instant::ZERO, 1);
    let got = drive(&mut c, 27 * HOUR, |_| true, |_| Ok(()));
    let times: Vec<Duration> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![24 * HOUR, 25 * HOUR, 26 * HOUR, 27 * HOUR]);
    // The first compacts what was there at start; the window then keeps
    // a day of samples (241), so each compacts about a day back.
    assert_eq!(got[0].1, 1);
    assert_eq!(got[1].1, 1 + 54, "the sample 24h06m before 25h");
}

#[test]
fn periodic_short_retention_looks_every_tenth() {
    let mut c = Compactor::new(AutoCompaction::Periodic(10 * MINUTE), Instant::ZERO, 1);
    assert_eq!(c.poll_timeout(), Some(at(MINUTE)));
    let got = drive(&mut c, 30 * MINUTE, |_| true, |_| Ok(()));
    let times: Vec<Duration> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![10 * MINUTE, 20 * MINUTE, 30 * MINUTE]);
}

#[test]
fn periodic_failure_retries_an_interval_later() {
    let mut c = Compactor::new(AutoCompaction::Periodic(HOUR), Instant::ZERO, 1);
    let got = drive(
        &mut c,
        HOUR + 20 * MINUTE,
        |_| true,
        |n| {
            if n < 2 {
                Err(Error::Timeout)
            } else {
                Ok(())
            }
        },
    );
    let times: Vec<Duration> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![HOUR, HOUR + 6 * MINUTE, HOUR + 12 * MINUTE]);
}

#[test]
fn periodic_already_compacted_counts_as_done() {
    let mut c = Compactor::new(AutoCompaction::Periodic(HOUR), Instant::ZERO, 1);
    let got = drive(&mut c, 2 * HOUR, |_| true, |_| Err(Error::Compacted));
    let times: Vec<Duration> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, vec![HOUR, 2 * HOUR]);
}

#[test]
fn periodic_follower_samples_but_never_compacts() {
    let mut c = Compactor::new(AutoCompaction::Periodic(HOUR), Instant::ZERO, 1);
    assert!(drive(&mut c, 5 * HOUR, |_| false, |_| Ok(())).is_empty());
    // Once leading it compacts at its next look, at the window's oldest
    // sample: it kept sampling while following.
    let got = drive(&mut c, 6 * HOUR, |_| true, |_| Ok(()));
    assert_eq!(got.first(), Some(&(5 * HOUR + 6 * MINUTE, 1 + 4 * 60)));
}

#[test]
fn revision_compacts_current_minus_retention_every_five_minutes() {
    let mut c = Compactor::new(AutoCompaction::Revision(7), Instant::ZERO, 1);
    assert_eq!(c.poll_timeout(), Some(at(REVISION_INTERVAL)));
    let got = drive(&mut c, 20 * MINUTE, |_| true, |_| Ok(()));
    // Revision 1 + minutes: at 5 min it is 6, 6 - 7 <= 0, nothing.
    assert_eq!(
        got,
        vec![(10 * MINUTE, 4), (15 * MINUTE, 9), (20 * MINUTE, 14)]
    );
}

#[test]
fn revision_skips_a_revision_it_compacted_and_retries_a_failure() {
    let mut c = Compactor::new(AutoCompaction::Revision(2), Instant::ZERO, 10);
    // The revision never moves: one compaction, then nothing new to do.
    let mut handed = Vec::new();
    for n in 1..=4u64 {
        let t = at(REVISION_INTERVAL * n as u32);
        assert_eq!(c.poll_timeout(), Some(t));
        if let Some(rev) = c.handle_timeout(t, 10, true) {
            handed.push(rev);
            let result = if handed.len() == 1 {
                Err(&Error::Timeout)
            } else {
                Ok(())
            };
            c.handle_result(t, 10, result);
        }
    }
    assert_eq!(
        handed,
        vec![8, 8],
        "retried once after failing, then skipped"
    );
}

#[test]
fn revision_follower_does_nothing() {
    let mut c = Compactor::new(AutoCompaction::Revision(1), Instant::ZERO, 100);
    assert!(drive(&mut c, HOUR, |_| false, |_| Ok(())).is_empty());
}

#[test]
fn a_late_wake_does_not_fire_early() {
    let mut c = Compactor::new(AutoCompaction::Revision(1), Instant::ZERO, 100);
    assert_eq!(c.handle_timeout(at(MINUTE), 100, true), None);
    assert_eq!(c.poll_timeout(), Some(at(REVISION_INTERVAL)));
}
