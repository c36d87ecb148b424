//! The bug canaries ([`crate::canary`]) against the node simulator: each
//! canary, turned on alone, must make some seed fail (a history that is
//! not linearizable, a watch that breaks a promise, members that
//! disagree, or a cluster that does not recover) within [`SEEDS_MAX`]
//! seeds (a few canaries need rarer runs, and name their own bound) and
//! [`TIME_MAX`]. A canary the simulator cannot catch is a blind spot in
//! the simulator, and fails here.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant as WallClock};

use super::sim_tests;
use crate::canary::{turn_on, Canary};

/// Seeds tried per canary at most.
const SEEDS_MAX: u64 = 400;
/// Wall time per canary at most.
const TIME_MAX: Duration = Duration::from_secs(60);

/// The first seed whose run fails with `canary` on, and the failure's
/// first line.
fn caught(canary: Canary, seeds: u64) -> Option<(u64, String)> {
    let _on = turn_on(canary);
    // The test's own wall-clock bound; the nodes see only virtual time.
    #[allow(clippy::disallowed_methods)]
    let started = WallClock::now();
    for seed in 0..seeds {
        if started.elapsed() > TIME_MAX {
            break;
        }
        if let Err(failure) = catch_unwind(AssertUnwindSafe(|| sim_tests::run(seed))) {
            let text = failure
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| failure.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            let first = text.lines().next().unwrap_or_default().to_owned();
            return Some((seed, first));
        }
    }
    None
}

fn must_be_caught(canary: Canary) {
    must_be_caught_within(canary, SEEDS_MAX);
}

fn must_be_caught_within(canary: Canary, seeds: u64) {
    match caught(canary, seeds) {
        Some((seed, failure)) => {
            eprintln!("canary {canary:?} caught at seed {seed}: {failure}");
        }
        None => panic!("canary {canary:?} not caught within {seeds} seeds or {TIME_MAX:?}"),
    }
}

#[test]
fn a_stale_read_without_a_read_index_is_caught() {
    must_be_caught(Canary::StaleRead);
}

#[test]
fn an_entry_applied_twice_after_a_restart_is_caught() {
    must_be_caught(Canary::ApplyTwice);
}

#[test]
fn a_vote_without_the_log_check_is_caught() {
    must_be_caught(Canary::VoteWithoutLogCheck);
}

#[test]
fn prev_kv_from_the_wrong_revision_is_caught() {
    must_be_caught(Canary::PrevKvWrongRevision);
}

#[test]
fn a_txn_comparing_a_stale_revision_is_caught() {
    must_be_caught(Canary::TxnCompareStale);
}

#[test]
fn an_applied_index_persisted_before_its_data_is_caught() {
    must_be_caught(Canary::AppliedIndexBeforeData);
}

#[test]
fn a_watch_skipping_its_start_revision_is_caught() {
    must_be_caught(Canary::WatchSkipsStartRevision);
}

#[test]
fn a_compacted_watch_cancelled_without_its_revision_is_caught() {
    must_be_caught(Canary::CompactedWatchWithoutRevision);
}

#[test]
fn events_duplicated_at_the_catch_up_boundary_are_caught() {
    must_be_caught(Canary::DuplicateEventsAtCatchUp);
}

#[test]
fn a_revoke_not_atomic_with_its_keys_is_caught() {
    must_be_caught(Canary::RevokeLeavesKeyBehind);
}

#[test]
fn lease_ttls_reset_on_a_leader_change_are_caught() {
    // Only a run with a long lease, most of its TTL gone, then a leader
    // change without a keep-alive shows it: rarer than the others.
    must_be_caught_within(Canary::LeaseTtlResetOnLeaderChange, 1_000);
}

/// Learners join the node simulator's runs with its membership changes
/// (`sim_members`); the raft simulator catches this canary too.
#[test]
fn a_learner_counted_in_the_quorum_is_caught() {
    must_be_caught_within(Canary::LearnerInQuorum, 1_000);
}
