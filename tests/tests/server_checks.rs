//! What a running server does on its own, as etcd does it: the leader's
//! auto-compaction on its periodic schedule (alone, and in a cluster
//! where only the leader compacts and every member follows through the
//! log), and the warnings for slow requests (`--warning-apply-duration`,
//! `--warning-unary-request-duration`).

use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::{Grpc, Server, ServerKind};

/// Longest to wait for something the server does by itself.
const DEADLINE: Duration = Duration::from_secs(15);

fn put(client: &mut Grpc, key: &str) {
    client
        .put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            ..Default::default()
        })
        .expect("put");
}

/// Waits, bounded, until the server's log has every one of `lines`.
fn wait_logged(server: &Server, lines: &[&str]) -> String {
    let until = Instant::now() + DEADLINE;
    let mut log = server.log();
    while !lines.iter().all(|l| log.contains(l)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        log = server.log();
    }
    log
}

#[test]
fn periodic_auto_compaction_compacts_the_revision_of_a_retention_ago() {
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        // A two-second retention: looks every 200 ms, first compaction
        // two seconds after start.
        let flags = [
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=2s",
        ];
        let server = Server::start_flags(kind, &flags).unwrap_or_else(|e| panic!("{e}"));
        let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
        for n in 0..5 {
            put(&mut client, &format!("k{n}"));
        }
        let until = Instant::now() + DEADLINE;
        let mut compacted = 0;
        // Keep writing, so each window has new revisions to compact.
        for n in 0..1_000 {
            compacted = client.hash_kv(0).expect("hash_kv").compact_revision;
            if compacted >= 6 || Instant::now() > until {
                break;
            }
            put(&mut client, &format!("later{n}"));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            compacted >= 6,
            "{}: compact revision {compacted}, expected the first writes compacted:\n{}",
            kind.name(),
            server.log()
        );
        let log = wait_logged(
            &server,
            &[
                "starting auto periodic compaction",
                "completed auto periodic compaction",
            ],
        );
        assert!(
            log.contains("completed auto periodic compaction"),
            "{}:\n{log}",
            kind.name()
        );
    }
}

#[test]
fn slow_requests_are_warned_as_etcd_warns_them() {
    let flags = [
        "--warning-apply-duration=1ns",
        "--warning-unary-request-duration=1ns",
    ];
    let server = Server::start_flags(ServerKind::Oxetcd, &flags).unwrap_or_else(|e| panic!("{e}"));
    let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    put(&mut client, "slow");
    client
        .range(RangeRequest {
            key: b"slow".to_vec(),
            ..Default::default()
        })
        .expect("range");
    let lines = [
        "apply request took too long",
        "read-only range ",
        "request stats",
        "value_size:1",
    ];
    let log = wait_logged(&server, &lines);
    for line in lines {
        assert!(log.contains(line), "no `{line}` in:\n{log}");
    }
    assert!(!log.contains("not yet supported: --warning"), "{log}");
}

/// In a cluster only the leader compacts, through the log: every member
/// ends up compacted, and only the leader logged a compaction.
#[test]
fn only_the_leader_auto_compacts_and_every_member_follows() {
    use oxetcd_tests::etcdctl::ctl_ok;
    use oxetcd_tests::{Cluster, ClusterOptions};
    let options = ClusterOptions::new("auto-compaction-test").flags(&[
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1s",
    ]);
    let cluster = Cluster::start(
        options,
        &[
            ServerKind::Oxetcd,
            ServerKind::OxetcdSmol,
            ServerKind::Oxetcd,
        ],
    );
    let leader = cluster.wait_leader();
    let address = cluster.members[leader].address();
    let until = Instant::now() + DEADLINE;
    let mut compacted = vec![0; 3];
    for n in 0..1_000 {
        ctl_ok(&address, &["put", &format!("k{n}"), "v"]);
        for (member, at) in compacted.iter_mut().enumerate() {
            let endpoint = format!("http://{}", cluster.members[member].address());
            let mut client = Grpc::connect(&endpoint).unwrap_or_else(|e| panic!("{e}"));
            *at = client.hash_kv(0).expect("hash_kv").compact_revision;
        }
        if compacted.iter().all(|at| *at >= 3) || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        compacted.iter().all(|at| *at >= 3),
        "compact revisions {compacted:?}:\n{}",
        cluster.members[leader].log_tail()
    );
    // A member compacts only while it leads (an election under load may
    // have moved leadership meanwhile, so a former leader may have too).
    let mut compactors = 0;
    for (member, m) in cluster.members.iter().enumerate() {
        let log = m.log();
        if log.contains("starting auto periodic compaction") {
            compactors += 1;
            assert!(
                log.contains("became leader"),
                "member {member} compacted without ever leading:\n{log}"
            );
        }
    }
    assert!(compactors >= 1);
    assert!(
        compactors < 3
            || cluster
                .members
                .iter()
                .all(|m| m.log().contains("became leader")),
        "followers compacted"
    );
}
