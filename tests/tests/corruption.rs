//! Corruption checks on three-member clusters of real processes: one
//! member's backend is changed behind its back (stopped, one stored value
//! rewritten in place with the storage crate, so its revision stays and
//! only its hash moves). Restarted with the initial corruption check it
//! refuses to start, as etcd does; restarted without it, the leader's
//! periodic check finds the divergence and raises the CORRUPT alarm,
//! which stops writes on every member while reads go on. A healthy
//! member passes the initial check, asking its peers over peer TLS.

use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

use oxetcd_core::storage::{KvRead, KvStore, KvWrite};
use oxetcd_tests::cluster::ELECTION_TIMEOUT;
use oxetcd_tests::etcdctl::{ctl, ctl_ok};
use oxetcd_tests::pki::{peer_tls_flags, pki};
use oxetcd_tests::{Cluster, ClusterOptions, Ports, ServerKind};

/// Longest to wait for a check to report.
const CHECK_DEADLINE: Duration = Duration::from_secs(20);

/// How long a graceful stop may take.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Rewrites the newest stored value of `key` in the stopped member's
/// backend at `data_dir`, keeping its revision.
fn corrupt(data_dir: &Path, key: &[u8]) {
    let (_log, kv) = oxetcd_storage::open(data_dir).expect("open the backend");
    let mut newest = None;
    kv.read()
        .expect("read")
        .versions(key, &mut |version| {
            newest = Some(version);
            ControlFlow::Break(())
        })
        .expect("versions");
    let mut version = newest.expect("the key is stored");
    version.value = b"silently changed".to_vec();
    let mut txn = kv.write().expect("write");
    txn.put_version(&version).expect("put_version");
    txn.commit().expect("commit");
    kv.sync().expect("sync");
}

/// Starts `launch` and expects it to exit non-zero on its own (its client
/// port accepts connections before the check runs, so a start may look
/// ready first); returns its log.
fn refused_start(launch: oxetcd_tests::Launch) -> String {
    match launch.start() {
        Err(e) => {
            assert!(e.contains("exited before it was ready"), "{e}");
            e
        }
        Ok(mut server) => {
            let status = server.wait_exit(CHECK_DEADLINE);
            let log = server.log();
            let status = status.unwrap_or_else(|| panic!("still running:\n{log}"));
            assert!(!status.success(), "exited with {status}:\n{log}");
            log
        }
    }
}

/// Waits, bounded, until some running member's log has `line`.
fn wait_logged(cluster: &Cluster, line: &str) -> bool {
    let until = Instant::now() + CHECK_DEADLINE;
    while Instant::now() < until {
        if cluster.members.iter().any(|m| m.log().contains(line)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn a_diverged_member_is_refused_at_start_and_flagged_by_the_leader() {
    let started = Instant::now();
    let options =
        ClusterOptions::new("corruption-test").flags(&["--experimental-corrupt-check-time", "1s"]);
    let mut cluster = Cluster::start(options, &[ServerKind::Oxetcd; 3]);
    let leader = cluster.wait_leader();
    let address = cluster.members[leader].address();
    for n in 0..5 {
        ctl_ok(&address, &["put", &format!("k{n}"), "v"]);
    }
    for member in 0..3 {
        cluster.wait_value(member, "k4", "v", true);
    }
    // A healthy cluster passes both checks.
    assert!(
        wait_logged(&cluster, "finished peer corruption check"),
        "no periodic check ran:\n{}",
        cluster.members[leader].log_tail()
    );
    assert!(
        !cluster.members.iter().any(|m| m.log().contains("CORRUPT")),
        "a healthy cluster raised the alarm"
    );
    let victim = (leader + 1) % 3;
    let initial = cluster.initial_cluster();
    {
        let member = &mut cluster.members[victim];
        let mut server = member.server.take().expect("running");
        server.terminate(STOP_DEADLINE).expect("stops");
        corrupt(&member.data_dir, b"k2");
        for flag in [
            "--experimental-initial-corrupt-check",
            // 3.6's gate says the same thing.
            "--feature-gates=InitialCorruptCheck=true",
        ] {
            let refused = refused_start(member.launch(&initial, "new").flags(&[flag]));
            assert!(
                refused.contains("found data inconsistency with peers")
                    && refused.contains("found different hash values from remote peer"),
                "{flag}: {refused}"
            );
        }
    }
    // Without the initial check it starts; the leader's check notices.
    cluster.members[victim].restart();
    std::thread::sleep(ELECTION_TIMEOUT);
    assert!(
        wait_logged(&cluster, "same compact revision then hashes must match"),
        "the periodic check did not notice:\n{}",
        cluster
            .members
            .iter()
            .map(|m| m.log_tail())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    assert!(wait_logged(&cluster, "raising the CORRUPT alarm"));
    // The alarm goes through the log: every member lists it, writes stop
    // everywhere, reads go on.
    for member in 0..3 {
        let address = cluster.members[member].address();
        let listed = Instant::now();
        loop {
            let alarms = ctl_ok(&address, &["alarm", "list"]);
            if alarms.contains("alarm:CORRUPT") {
                break;
            }
            assert!(
                listed.elapsed() < CHECK_DEADLINE,
                "member {member}: {alarms:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let refused = ctl(&address, &["put", "after", "x"]);
        assert!(
            refused.stderr.contains("etcdserver: corrupt cluster"),
            "member {member}: {refused:?}"
        );
        ctl_ok(&address, &["get", "", "--prefix", "--consistency=s"]);
    }
    println!("corruption checks took {:?}", started.elapsed());
}

/// With the compact hash check on, each compaction records the hash of
/// the history it drops and the leader compares them: a healthy cluster
/// agrees; after one member's backend is changed behind its back, the
/// next compaction's hashes differ and that member, the minority, is
/// flagged.
#[test]
fn the_compact_hash_check_flags_the_member_that_diverged() {
    let options = ClusterOptions::new("compact-hash-test").flags(&[
        "--experimental-compact-hash-check-enabled",
        "--experimental-compact-hash-check-time",
        "1s",
    ]);
    let mut cluster = Cluster::start(options, &[ServerKind::Oxetcd; 3]);
    let leader = cluster.wait_leader();
    let address = cluster.members[leader].address();
    for n in 0..5 {
        ctl_ok(&address, &["put", &format!("k{n}"), "v"]);
    }
    // Revision 6: five puts on a fresh cluster.
    ctl_ok(&address, &["compaction", "6"]);
    assert!(
        wait_logged(&cluster, "successfully checked hash on whole cluster"),
        "the healthy compaction was not checked:\n{}",
        cluster.members[leader].log_tail()
    );
    assert!(!cluster.members.iter().any(|m| m.log().contains("CORRUPT")));
    let victim = (leader + 1) % 3;
    {
        let member = &mut cluster.members[victim];
        let mut server = member.server.take().expect("running");
        server.terminate(STOP_DEADLINE).expect("stops");
        corrupt(&member.data_dir, b"k2");
    }
    cluster.members[victim].restart();
    let leader = cluster.wait_leader();
    let address = cluster.members[leader].address();
    ctl_ok(&address, &["put", "k9", "v"]);
    for member in 0..3 {
        cluster.wait_value(member, "k9", "v", true);
    }
    ctl_ok(&address, &["compaction", "7"]);
    assert!(
        wait_logged(&cluster, "Detected compaction hash mismatch"),
        "the mismatch was not found:\n{}",
        cluster.members[leader].log_tail()
    );
    let victim_id = format!("{:x}", member_id_of(&cluster, victim));
    assert!(
        cluster.members[leader].log().contains(&format!(
            "\"member-id\":\"{victim_id}\",\"alarm\":\"CORRUPT\""
        )),
        "the victim {victim_id} was not the one flagged:\n{}",
        cluster.members[leader].log_tail()
    );
}

/// A member's ID, from its own status.
fn member_id_of(cluster: &Cluster, member: usize) -> u64 {
    let address = cluster.members[member].address();
    let (id, _leader) = oxetcd_tests::probe::status(&address).expect("status");
    id
}

/// Over `https://` peer URLs with client certificates, on both runtimes:
/// the members' questions ride the peer TLS, and a healthy member passes.
#[test]
fn healthy_members_pass_the_initial_check_over_peer_tls() {
    let pki = pki();
    let tls = peer_tls_flags(&pki.peer_cert, &pki.peer_key, &pki.ca);
    let options = ClusterOptions::new("corruption-healthy")
        .peer_tls(&tls)
        .ports(Ports::BELOW_EPHEMERAL);
    let kinds = [
        ServerKind::Oxetcd,
        ServerKind::OxetcdSmol,
        ServerKind::OxetcdSmol,
    ];
    let mut cluster = Cluster::start(options, &kinds);
    let leader = cluster.wait_leader();
    ctl_ok(&cluster.members[leader].address(), &["put", "k", "v"]);
    for member in 0..3 {
        cluster.wait_value(member, "k", "v", true);
    }
    let restarted = (leader + 1) % 3;
    let initial = cluster.initial_cluster();
    let member = &mut cluster.members[restarted];
    let mut server = member.server.take().expect("running");
    server.terminate(STOP_DEADLINE).expect("stops");
    let server = member
        .launch(&initial, "new")
        .flags(&["--experimental-initial-corrupt-check"])
        .start()
        .unwrap_or_else(|e| panic!("a healthy member must start: {e}"));
    let until = Instant::now() + CHECK_DEADLINE;
    let mut log = server.log();
    while !log.contains("initial corruption checking passed") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        log = server.log();
    }
    assert!(
        log.contains("initial corruption checking passed; no corruption"),
        "{log}"
    );
    // Passing means the peers answered: one that cannot is only skipped.
    assert!(!log.contains("failed hash kv request"), "{log}");
    member.server = Some(server);
    cluster.wait_value(restarted, "k", "v", true);
}
