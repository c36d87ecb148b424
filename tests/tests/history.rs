//! What clients see of a three-member cluster (both binaries mixed) under
//! a fault — its leader killed with SIGKILL and restarted, its leader
//! paused with SIGSTOP for two election timeouts and more, a follower
//! killed and restarted — or under maintenance (a compaction, then every
//! member defragmented online), checked by `oxetcd-history`: concurrent
//! puts, linearizable and serializable reads, compare-and-set txns on mod
//! revisions and deletes over a few keys, each recorded with its invoke
//! and completion times; a write that got no answer is recorded as
//! unknown. The history must be linearizable, and a watch on every key
//! from revision 2 (on a member that is not killed) must deliver exactly
//! the history's events, in order, whole. A final put after the restart
//! closes the history. The same run on Debian's etcd shows the checker
//! accepts the reference's answers.
//!
//! The workload, the faults and the checks are `oxetcd_tests::history_load`,
//! shared with the process-level fault matrix (`fault_matrix.rs`).

use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::history_load::{run, Fault, Workload};
use oxetcd_tests::{ClusterOptions, ServerKind};

/// Clients, each on one member.
const CLIENTS: usize = 6;
/// Operations per client.
const OPS: usize = 120;

#[test]
fn a_history_across_a_killed_leader_is_linearizable() {
    history_under(&MIXED, Fault::KillLeader);
}

#[test]
fn a_history_across_a_paused_leader_is_linearizable() {
    history_under(&MIXED, Fault::PauseLeader);
}

#[test]
fn a_history_across_a_killed_follower_is_linearizable() {
    history_under(&MIXED, Fault::KillFollower);
}

#[test]
fn a_history_across_compaction_and_defragmentation_is_linearizable() {
    history_under(&MIXED, Fault::CompactAndDefragment);
}

/// The same workload and fault on Debian's etcd: the checker accepts what
/// etcd itself answers (no false alarm), so a violation on oxetcd is
/// oxetcd's.
#[test]
fn etcds_own_history_across_a_killed_leader_passes_the_checker() {
    history_under(&[ServerKind::Etcd; 3], Fault::KillLeader);
}

fn history_under(kinds: &[ServerKind], fault: Fault) {
    let workload = Workload::new(CLIENTS, OPS);
    let options = ClusterOptions::new("history-test");
    let report = run(kinds, fault, workload, options);
    eprintln!("{fault:?}: {report}");
    report.assert_checked(fault.name());
}
