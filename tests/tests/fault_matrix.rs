//! The process-level fault matrix: the history workload of `history.rs`
//! (`oxetcd_tests::history_load`) on three cluster kinds — three tokio
//! members, three smol members, both mixed — under each fault of
//! [`Fault::MATRIX`]: the leader isolated both ways, a follower isolated,
//! one-way partitions of the leader, a slow link to the leader, the leader
//! killed with SIGKILL and restarted, the leader paused with SIGSTOP, a
//! follower replaced by a new member. Every member is behind a
//! fault-injecting peer proxy (`oxetcd_tests::proxy`). Each run's history
//! must be linearizable, its watch exact, and every member must show the
//! final put.
//!
//! CI runs a subset of the (kind × fault) cells in which every kind and
//! every fault appears; `scripts/fault-matrix.sh` runs every cell, with
//! more operations, through [`one_cell_from_the_environment`]. Each run
//! prints one `fault-matrix:` line (kind, fault, operations, unknown
//! outcomes, violations, seconds), which the script reads.

use std::time::Instant;

use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::history_load::{run, Fault, Workload};
use oxetcd_tests::{ClusterOptions, ServerKind};

/// Clients, each on one member.
const CLIENTS: usize = 6;
/// The workload in CI: 150 operations per client.
const CI: Workload = Workload::new(CLIENTS, 150);

/// The cluster kinds, by name.
const KINDS: [(&str, [ServerKind; 3]); 3] = [
    ("oxetcd", [ServerKind::Oxetcd; 3]),
    ("smol", [ServerKind::OxetcdSmol; 3]),
    ("mixed", MIXED),
];

#[test]
fn tokio_cluster_with_its_leader_isolated() {
    cell("oxetcd", Fault::IsolateLeader, CI);
}

#[test]
fn tokio_cluster_with_its_leader_paused() {
    cell("oxetcd", Fault::PauseLeader, CI);
}

#[test]
fn smol_cluster_with_a_follower_isolated() {
    cell("smol", Fault::IsolateFollower, CI);
}

#[test]
fn smol_cluster_with_a_slow_link_to_its_leader() {
    cell("smol", Fault::SlowLeaderLink, CI);
}

#[test]
fn smol_cluster_with_its_leader_killed() {
    cell("smol", Fault::KillLeader, CI);
}

#[test]
fn mixed_cluster_with_one_way_partitions_of_its_leader() {
    cell("mixed", Fault::OneWayLeader, CI);
}

#[test]
fn mixed_cluster_with_a_follower_replaced() {
    cell("mixed", Fault::ReplaceFollower, CI);
}

/// One cell named by the environment, for `scripts/fault-matrix.sh`:
/// `FAULT_KIND` (`oxetcd`, `smol`, `mixed`), `FAULT_NAME` (a fault's
/// name, e.g. `isolate-leader`), `FAULT_OPS` (operations per client,
/// default 400), `FAULT_CLIENTS` (default 6).
#[test]
#[ignore = "run by scripts/fault-matrix.sh"]
fn one_cell_from_the_environment() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let number = |name: &str, default: usize| {
        std::env::var(name).map_or(default, |value| {
            value
                .parse()
                .unwrap_or_else(|e| panic!("{name}={value}: {e}"))
        })
    };
    let fault_name = var("FAULT_NAME");
    let fault =
        Fault::from_name(&fault_name).unwrap_or_else(|| panic!("no fault named {fault_name}"));
    let workload = Workload::new(number("FAULT_CLIENTS", CLIENTS), number("FAULT_OPS", 400));
    cell(&var("FAULT_KIND"), fault, workload);
}

/// Runs `fault` on a cluster of kind `kind` under `workload`, prints its
/// `fault-matrix:` line, and fails on a violation.
fn cell(kind: &str, fault: Fault, workload: Workload) {
    let started = Instant::now();
    let (_, kinds) = KINDS
        .iter()
        .find(|(name, _)| *name == kind)
        .unwrap_or_else(|| panic!("no cluster kind {kind}"));
    let options = ClusterOptions::new("fault-matrix").peer_proxies(true);
    let report = run(kinds, fault, workload, options);
    eprintln!(
        "fault-matrix: kind={kind} fault={} operations={} unknown={} violations={} seconds={:.1} \
         during-fault={} fault-seconds={:.1}",
        fault.name(),
        report.operations,
        report.unknown,
        report.violations.len(),
        started.elapsed().as_secs_f64(),
        report.during_fault.0,
        report.during_fault.1.as_secs_f64(),
    );
    report.assert_checked(&format!("{kind} × {}", fault.name()));
}
