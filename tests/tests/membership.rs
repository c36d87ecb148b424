//! Membership changes that end or begin a member's life, with real
//! processes on 127.0.0.1: a removed member exits (as etcd's does), a
//! leader that removes itself leaves a cluster that works, and a member
//! added later learns the cluster's ID and its own from its peers.
//!
//! Every wait is bounded; each test prints how long it took.

use std::time::{Duration, Instant};

use oxetcd_tests::cluster::{CATCH_UP_DEADLINE, MIXED};
use oxetcd_tests::etcdctl::{ctl, ctl_ok};
use oxetcd_tests::probe::{self, member_id, status_json};
use oxetcd_tests::{Cluster, ClusterOptions, ServerKind};

/// This file's clusters: plaintext peers and the harness's fast raft timing.
fn options() -> ClusterOptions {
    ClusterOptions::new("membership-test")
}

/// A member removed with `etcdctl member remove` while it runs stops by
/// itself, as etcd's does.
#[test]
fn a_removed_member_exits() {
    let started = Instant::now();
    let mut cluster = Cluster::start(options(), &MIXED);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    for victim in [(leader + 1) % 3] {
        let id = member_id(&leader_address, &cluster.members[victim].peer_url());
        ctl_ok(&leader_address, &["member", "remove", &id]);
        let removed_at = Instant::now();
        let server = cluster.members[victim].server.as_mut().unwrap();
        while server.is_running() && removed_at.elapsed() < CATCH_UP_DEADLINE {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !server.is_running(),
            "removed member still running:\n{}",
            server.log_tail()
        );
        assert!(
            server.log().contains("removed from the cluster"),
            "{}",
            server.log_tail()
        );
        eprintln!(
            "removed member exited {:?} after the remove",
            removed_at.elapsed()
        );
        cluster.members[victim].kill();
    }
    let put = ctl(&leader_address, &["put", "after", "remove"]);
    assert!(put.code == 0, "{put:?}\n{}", logs(&cluster));
    eprintln!("removal test took {:?}", started.elapsed());
}

/// Every member's whole log, for a failure that needs them all.
fn logs(cluster: &Cluster) -> String {
    cluster
        .members
        .iter()
        .map(|m| format!("--- {} ---\n{}", m.name, m.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A leader that removes itself from a two-member cluster exits, and the
/// survivor, alone in the cluster now, leads and takes writes: the leader
/// said its farewell (the survivor learned the removal committed) before
/// it stopped.
#[test]
fn a_leader_that_removes_itself_leaves_a_working_cluster() {
    let mut cluster = Cluster::start(options(), &[ServerKind::Oxetcd, ServerKind::OxetcdSmol]);
    let leader = cluster.wait_leader();
    let survivor = 1 - leader;
    let leader_address = cluster.members[leader].address();
    let id = member_id(&leader_address, &cluster.members[leader].peer_url());
    ctl_ok(&leader_address, &["member", "remove", &id]);
    let removed_at = Instant::now();
    let server = cluster.members[leader].server.as_mut().unwrap();
    while server.is_running() && removed_at.elapsed() < CATCH_UP_DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !server.is_running(),
        "still running:\n{}",
        server.log_tail()
    );
    let exited = removed_at.elapsed();
    cluster.members[leader].kill();
    let survivor_address = cluster.members[survivor].address();
    ctl_ok(&survivor_address, &["put", "after", "remove"]);
    let took_over = removed_at.elapsed();
    assert_eq!(cluster.wait_leader_among(&[survivor]), survivor);
    let members = ctl_ok(&survivor_address, &["member", "list"]);
    assert_eq!(members.lines().count(), 1, "{members}");
    eprintln!(
        "removed leader exited after {exited:?}; the survivor took a write after {took_over:?}"
    );
}

/// A member added after an original one was removed joins with
/// `existing`: it cannot derive the cluster ID from `--initial-cluster`
/// (the member set changed), so it learns it (and its own ID) from its
/// peers before it starts, serves a
/// linearizable read, reports the real ID, and keeps it across a restart.
#[test]
fn a_member_added_after_a_removal_learns_the_cluster_id() {
    let mut cluster = Cluster::start(options(), &MIXED);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let cluster_id = status_json(&leader_address).unwrap()["header"]["cluster_id"].clone();
    let victim = (leader + 1) % 3;
    let id = member_id(&leader_address, &cluster.members[victim].peer_url());
    ctl_ok(&leader_address, &["member", "remove", &id]);
    cluster.members[victim].kill();
    ctl_ok(&leader_address, &["put", "before", "join"]);

    let mut joiner = cluster.add_member(leader, "m3", ServerKind::Oxetcd, false);
    for round in 0..2 {
        if let Err(e) = probe::wait_value(
            &joiner.address(),
            "before",
            "join",
            false,
            CATCH_UP_DEADLINE,
        ) {
            panic!("round {round}: {e}\n--- joiner ---\n{}", joiner.log_tail());
        }
        let status = status_json(&joiner.address()).unwrap();
        assert_eq!(status["header"]["cluster_id"], cluster_id, "{status}");
        // Learned from the peers at first, read from its data after.
        let learned = joiner
            .log()
            .contains("learned this member's ID from the cluster");
        assert_eq!(learned, round == 0, "{}", joiner.log_tail());
        ctl_ok(
            &joiner.address(),
            &["put", "from", &format!("joiner{round}")],
        );
        cluster.wait_value(leader, "from", &format!("joiner{round}"), false);
        joiner.kill();
        joiner.restart();
    }
}

/// A member joining with another `--initial-cluster-token` than the one
/// the cluster was made with (as after `etcdctl snapshot restore` with a
/// token, or a cluster imported from etcd) learns its ID, its peers' and
/// the cluster's from the cluster, matching its advertised peer URLs; on
/// restart it keeps its ID whatever the token says; and a joiner whose
/// `--initial-cluster` does not match the cluster is refused in etcd's
/// words.
#[test]
fn a_joining_member_learns_its_id_from_the_cluster() {
    let started = Instant::now();
    let cluster = Cluster::start(
        ClusterOptions::new("restored").flags(&["--snapshot-count", "100"]),
        &[ServerKind::Oxetcd],
    );
    let first = cluster.members[0].address();
    ctl_ok(&first, &["put", "k", "v"]);

    // Planned with the default token, which derives other IDs.
    let mut joiner = oxetcd_tests::cluster::Member::new(
        "joiner",
        ServerKind::OxetcdSmol,
        cluster.root(),
        &ClusterOptions::new("etcd-cluster"),
    );
    let peer_url = joiner.peer_url();
    let added = ctl_ok(
        &first,
        &["member", "add", "joiner", "--peer-urls", &peer_url],
    );
    let added_id = added
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("{added}"))
        .to_owned();
    let initial = oxetcd_tests::cluster::initial_cluster(&[&cluster.members[0], &joiner]);
    joiner.start(&initial, "existing");
    probe::wait_value(&joiner.address(), "k", "v", true, CATCH_UP_DEADLINE)
        .unwrap_or_else(|e| panic!("{e}\n{}", joiner.log_tail()));
    assert_eq!(member_id(&first, &peer_url), added_id);
    let own = status_json(&joiner.address()).unwrap_or_default();
    assert_eq!(
        format!("{:x}", own["header"]["member_id"].as_u64().unwrap_or(0)),
        added_id,
        "{own}"
    );
    assert!(
        joiner
            .log()
            .contains("learned this member's ID from the cluster"),
        "{}",
        joiner.log_tail()
    );

    // Restarted with yet another token: the stored ID stands.
    joiner.kill();
    joiner
        .restart_with(&["--initial-cluster-token", "another"])
        .unwrap_or_else(|e| panic!("restart: {e}"));
    // Two voters: the put waits out the election the restart may cause.
    let mut put = ctl(&first, &["put", "k", "w"]);
    for _ in 0..50 {
        if put.code == 0 || started.elapsed() > Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        put = ctl(&first, &["put", "k", "w"]);
    }
    let first_log = cluster.members[0].server.as_ref().map(|s| s.log_tail());
    assert!(
        put.code == 0,
        "{put:?}\n--- joiner ---\n{}\n--- first ---\n{}",
        joiner.log_tail(),
        first_log.unwrap_or_default()
    );
    probe::wait_value(&joiner.address(), "k", "w", true, CATCH_UP_DEADLINE)
        .unwrap_or_else(|e| panic!("{e}\n{}", joiner.log_tail()));
    // The first member's ID that the new token derives is no member's:
    // the joiner stops dialing it rather than be refused for ever.
    assert!(
        joiner
            .log()
            .contains("not dialing a peer the members do not list"),
        "{}",
        joiner.log_tail()
    );
    let own = status_json(&joiner.address()).unwrap_or_default();
    assert_eq!(
        format!("{:x}", own["header"]["member_id"].as_u64().unwrap_or(0)),
        added_id,
        "{own}"
    );

    // A joiner whose --initial-cluster leaves a member out.
    let stray = oxetcd_tests::cluster::Member::new(
        "stray",
        ServerKind::Oxetcd,
        cluster.root(),
        &ClusterOptions::new("restored"),
    );
    let stray_peer = stray.peer_url();
    // Learners, so the members never started cost no quorum.
    ctl_ok(
        &first,
        &[
            "member",
            "add",
            "stray",
            "--learner",
            "--peer-urls",
            &stray_peer,
        ],
    );
    let partial = oxetcd_tests::cluster::initial_cluster(&[&cluster.members[0], &stray]);
    let refused = refused_at_start(stray.launch(&partial, "existing"));
    assert!(
        refused.contains("error validating peerURLs")
            && refused.contains("member count is unequal"),
        "{refused}"
    );

    // A joiner run as 3.5 while the cluster runs 3.6: refused before it
    // joins, as etcd's joiner refuses itself. (One learner at a time.)
    let stray_id = member_id(&first, &stray_peer);
    ctl_ok(&first, &["member", "remove", &stray_id]);
    let old = oxetcd_tests::cluster::Member::new(
        "old",
        ServerKind::Oxetcd,
        cluster.root(),
        &ClusterOptions::new("restored"),
    );
    let old_peer = old.peer_url();
    ctl_ok(
        &first,
        &[
            "member",
            "add",
            "old",
            "--learner",
            "--peer-urls",
            &old_peer,
        ],
    );
    let all = oxetcd_tests::cluster::initial_cluster(&[&cluster.members[0], &joiner, &old]);
    let refused = refused_at_start(
        old.launch(&all, "existing")
            .flags(&["--unsafe-run-as-version", "3.5.0"]),
    );
    assert!(
        refused.contains("incompatible with current running cluster (server version 3.5.0"),
        "{refused}"
    );
    eprintln!("join test took {:?}", started.elapsed());
}

/// Starts `launch`, which must exit with a failure within 20 s; its log.
fn refused_at_start(launch: oxetcd_tests::launch::Launch) -> String {
    let mut server = launch.start().unwrap_or_else(|e| panic!("{e}"));
    let exit = server.wait_exit(Duration::from_secs(20));
    let log = server.log();
    assert!(
        exit.is_some_and(|status| !status.success()),
        "{exit:?}: {log}"
    );
    log
}
