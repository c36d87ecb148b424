//! Three-member clusters of real processes on 127.0.0.1: replication with
//! linearizable reads on every member, a killed leader replaced and
//! restarted, and membership driven by Debian's etcdctl (a learner that
//! catches up by snapshot, promote, remove, move-leader).
//!
//! Members publish their names and client URLs (`member list`, `endpoint
//! status --cluster`), a leader stopped with SIGTERM hands leadership over
//! first, and check-quorum holds over real sockets
//! cut by the members' peer proxies (`oxetcd_tests::proxy`). Leases keep
//! their TTL across a leader kill (with frequent checkpoints, the
//! remaining TTL the old leader recorded), and etcdctl's `lease
//! keep-alive` and `lease timetolive` work through a follower.
//!
//! Every wait is bounded; each test prints how long it took.

use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{
    request_op, LeaseGrantRequest, PutRequest, RequestOp, TxnRequest,
};
use oxetcd_tests::cluster::{CATCH_UP_DEADLINE, ELECTION_TIMEOUT, LEADER_DEADLINE, MIXED};
use oxetcd_tests::etcdctl::{self, ctl, ctl_ok};
use oxetcd_tests::probe::{self, member_id, status, status_json};
use oxetcd_tests::process::ChildGuard;
use oxetcd_tests::{Cluster, ClusterOptions, Grpc, ServerKind};
use serde_json::Value;

/// A small snapshot count, so a new member is sent a snapshot quickly.
const SNAPSHOT_COUNT: u64 = 100;

/// This file's clusters: plaintext peers, the harness's fast raft timing,
/// [`SNAPSHOT_COUNT`], and `flags` on every member.
fn options(flags: &[&str]) -> ClusterOptions {
    ClusterOptions::new("cluster-test")
        .flags(&[
            "--snapshot-count",
            &SNAPSHOT_COUNT.to_string(),
            "--experimental-snapshot-catchup-entries",
            "20",
        ])
        .flags(flags)
}

/// Writes on the leader are read back linearizably on every member; the
/// leader is killed, another one takes over and writes go on; the old
/// leader restarts and catches up.
fn replicate_and_survive_a_leader_kill(kinds: [ServerKind; 3]) {
    let started = Instant::now();
    let mut cluster = Cluster::start(options(&[]), &kinds);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    ctl_ok(&leader_address, &["put", "k1", "v1"]);
    for member in 0..3 {
        cluster.wait_value(member, "k1", "v1", false);
    }

    cluster.members[leader].kill();
    let killed_at = Instant::now();
    let new_leader = cluster.wait_leader();
    let election = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    assert!(
        election < Duration::from_secs(5),
        "new leader after {election:?}"
    );
    let follower = (0..3).find(|i| *i != leader && *i != new_leader).unwrap();
    // A write through a follower is forwarded to the new leader.
    ctl_ok(&cluster.members[follower].address(), &["put", "k2", "v2"]);
    cluster.wait_value(new_leader, "k2", "v2", false);

    cluster.members[leader].restart();
    cluster.wait_value(leader, "k2", "v2", true);
    cluster.wait_value(leader, "k2", "v2", false);
    eprintln!(
        "{kinds:?}: new leader after {election:?}; whole test {:?}",
        started.elapsed()
    );
}

#[test]
fn oxetcd_cluster_replicates_and_survives_a_leader_kill() {
    replicate_and_survive_a_leader_kill([ServerKind::Oxetcd; 3]);
}

#[test]
fn oxetcd_smol_cluster_replicates_and_survives_a_leader_kill() {
    replicate_and_survive_a_leader_kill([ServerKind::OxetcdSmol; 3]);
}

#[test]
fn mixed_cluster_replicates_and_survives_a_leader_kill() {
    replicate_and_survive_a_leader_kill(MIXED);
}

/// etcdctl drives membership on a mixed cluster: a learner added to a
/// cluster whose log was compacted catches up by snapshot, is promoted,
/// leadership moves, and a member is removed.
#[test]
fn etcdctl_drives_membership_with_a_snapshot_catch_up() {
    let started = Instant::now();
    let mut cluster = Cluster::start(options(&[]), &MIXED);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let list = ctl_ok(&leader_address, &["member", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");

    // member update: a member's own URLs are accepted, another member's
    // URLs and an unknown member are refused with etcd's errors.
    let first_url = cluster.members[0].peer_url();
    let first_id = member_id(&leader_address, &first_url);
    let peer_urls = format!("--peer-urls={first_url}");
    let updated = ctl_ok(
        &leader_address,
        &["member", "update", &first_id, &peer_urls],
    );
    assert!(updated.contains("updated"), "{updated}");
    let second_id = member_id(&leader_address, &cluster.members[1].peer_url());
    let taken = ctl(
        &leader_address,
        &["member", "update", &second_id, &peer_urls],
    );
    assert!(
        taken.code != 0
            && taken
                .stderr
                .contains("etcdserver: Peer URLs already exists"),
        "{taken:?}"
    );
    let unknown = ctl(
        &leader_address,
        &[
            "member",
            "update",
            "1234abcd",
            "--peer-urls=http://127.0.0.1:9",
        ],
    );
    assert!(
        unknown.code != 0 && unknown.stderr.contains("etcdserver: member not found"),
        "{unknown:?}"
    );

    // Well past the snapshot count: the log is compacted.
    for i in 0..(SNAPSHOT_COUNT * 3) {
        ctl_ok(&leader_address, &["put", &format!("bulk{i:04}"), "x"]);
    }
    ctl_ok(&leader_address, &["put", "last", "written"]);

    let learner = cluster.add_member(leader, "m3", ServerKind::OxetcdSmol, true);
    if let Err(e) = probe::wait_value(
        &learner.address(),
        "last",
        "written",
        true,
        CATCH_UP_DEADLINE,
    ) {
        let leader_log = cluster.members[leader].log_tail();
        panic!(
            "{e}\n--- learner ---\n{}\n--- leader ---\n{leader_log}",
            learner.log_tail()
        );
    }
    let log = learner.log();
    assert!(
        log.contains("installed a snapshot"),
        "the learner did not catch up by snapshot:\n{}",
        learner.log_tail()
    );

    let learner_id = member_id(&leader_address, &learner.peer_url());
    let promote_started = Instant::now();
    loop {
        let out = ctl(&leader_address, &["member", "promote", &learner_id]);
        if out.code == 0 {
            break;
        }
        assert!(
            promote_started.elapsed() < CATCH_UP_DEADLINE,
            "promote kept failing: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.members.push(learner);

    let status = ctl_ok(&cluster.endpoints(), &["endpoint", "status", "-w", "json"]);
    let json: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(4), "{status}");

    // Move leadership to the promoted member.
    let moved_started = Instant::now();
    loop {
        let out = ctl(&leader_address, &["move-leader", &learner_id]);
        if out.code == 0 {
            break;
        }
        assert!(
            moved_started.elapsed() < CATCH_UP_DEADLINE,
            "move-leader kept failing: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cluster.wait_leader(), 3);

    // Remove the old leader; the rest go on.
    let removed_id = member_id(
        &cluster.members[3].address(),
        &cluster.members[leader].peer_url(),
    );
    ctl_ok(
        &cluster.members[3].address(),
        &["member", "remove", &removed_id],
    );
    cluster.members[leader].kill();
    let list = ctl_ok(&cluster.members[3].address(), &["member", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");
    ctl_ok(&cluster.members[3].address(), &["put", "after", "remove"]);
    for member in (0..cluster.members.len()).filter(|i| cluster.members[*i].is_up()) {
        cluster.wait_value(member, "after", "remove", false);
    }
    eprintln!("membership test took {:?}", started.elapsed());
}

/// What `etcdctl member promote` said on a follower, for each case.
#[derive(Debug, PartialEq, Eq)]
struct PromoteErrors {
    not_in_sync: String,
    voter: String,
    unknown: String,
}

/// The `Error: ...` line etcdctl printed.
fn error_line(out: &etcdctl::Output) -> String {
    out.stderr
        .lines()
        .find(|line| line.starts_with("Error:"))
        .unwrap_or_else(|| panic!("no error from etcdctl: {out:?}"))
        .to_owned()
}

/// Longest a refused promote may take: the follower relays the leader's
/// answer, it does not wait out its request timeout.
const PROMOTE_ANSWER_DEADLINE: Duration = Duration::from_secs(4);

/// `etcdctl member promote` sent to a follower: a learner not yet started
/// (so not in sync), a voter and an unknown member are refused with
/// etcd's words, promptly; once the learner caught up, the promote
/// succeeds and every member lists it as a voter.
fn promote_through_a_follower(kinds: [ServerKind; 3], learner_kind: ServerKind) -> PromoteErrors {
    let started = Instant::now();
    let options = ClusterOptions::new("promote-test");
    let mut cluster = Cluster::start(options, &kinds);
    let leader = cluster.wait_leader();
    let follower = (leader + 1) % 3;
    let follower_address = cluster.members[follower].address();
    ctl_ok(&follower_address, &["put", "k", "v"]);

    let mut learner = cluster.new_member("m3", learner_kind);
    let peer_url = learner.peer_url();
    // etcd refuses changes until its members have been connected for a
    // while ("unhealthy cluster"); oxetcd takes them at once.
    let add_started = Instant::now();
    loop {
        let args = ["member", "add", "m3", "--learner", "--peer-urls", &peer_url];
        let out = ctl(&follower_address, &args);
        if out.code == 0 {
            assert!(out.stdout.contains("added"), "{out:?}");
            break;
        }
        assert!(
            out.stderr.contains("etcdserver: unhealthy cluster")
                && add_started.elapsed() < CATCH_UP_DEADLINE,
            "member add failed: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let learner_id = member_id(&follower_address, &peer_url);
    let refused = |id: &str| {
        let asked = Instant::now();
        let out = ctl(&follower_address, &["member", "promote", id]);
        assert_ne!(out.code, 0, "promote {id} succeeded: {out:?}");
        assert!(
            asked.elapsed() < PROMOTE_ANSWER_DEADLINE,
            "promote {id} took {:?}: {out:?}",
            asked.elapsed()
        );
        error_line(&out)
    };
    let not_in_sync = refused(&learner_id);
    let voter_id = member_id(&follower_address, &cluster.members[leader].peer_url());
    let voter = refused(&voter_id);
    let unknown = refused("1234abcd");

    let mut current: Vec<&oxetcd_tests::Member> = cluster.members.iter().collect();
    current.push(&learner);
    let initial = oxetcd_tests::cluster::initial_cluster(&current);
    learner.start(&initial, "existing");
    if let Err(e) = probe::wait_value(&learner.address(), "k", "v", true, CATCH_UP_DEADLINE) {
        panic!("{e}\n--- learner ---\n{}", learner.log_tail());
    }
    let promote_started = Instant::now();
    loop {
        let out = ctl(&follower_address, &["member", "promote", &learner_id]);
        if out.code == 0 {
            assert!(out.stdout.contains("promoted"), "{out:?}");
            break;
        }
        // Only "not in sync yet" may make it try again.
        assert!(
            out.stderr.contains("in sync with leader")
                && promote_started.elapsed() < CATCH_UP_DEADLINE,
            "promote through a follower kept failing: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.members.push(learner);
    for member in 0..cluster.members.len() {
        let list = ctl_ok(&cluster.members[member].address(), &["member", "list"]);
        let until = Instant::now() + CATCH_UP_DEADLINE;
        let mut list = list;
        while list.contains(", true") && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
            list = ctl_ok(&cluster.members[member].address(), &["member", "list"]);
        }
        assert_eq!(list.lines().count(), 4, "{list}");
        assert!(!list.contains(", true"), "a learner is left: {list}");
    }
    // The promoted member votes: writes still commit with it counted.
    ctl_ok(&follower_address, &["put", "after", "promote"]);
    cluster.wait_value(3, "after", "promote", false);
    eprintln!("promote through a follower took {:?}", started.elapsed());
    PromoteErrors {
        not_in_sync,
        voter,
        unknown,
    }
}

/// etcd's answers, which the oxetcd clusters must give word for word.
fn etcd_promote_errors() -> PromoteErrors {
    PromoteErrors {
        not_in_sync: "Error: etcdserver: can only promote a learner member which is in sync \
                      with leader"
            .to_owned(),
        voter: "Error: etcdserver: can only promote a learner member".to_owned(),
        unknown: "Error: etcdserver: member not found".to_owned(),
    }
}

#[test]
fn a_learner_is_promoted_through_a_follower_on_a_mixed_cluster() {
    let errors = promote_through_a_follower(MIXED, ServerKind::Oxetcd);
    assert_eq!(errors, etcd_promote_errors());
}

#[test]
fn a_learner_is_promoted_through_a_follower_on_oxetcd_smol() {
    let errors = promote_through_a_follower([ServerKind::OxetcdSmol; 3], ServerKind::OxetcdSmol);
    assert_eq!(errors, etcd_promote_errors());
}

/// The same steps on Debian's etcd give the words the oxetcd tests expect.
#[test]
fn etcd_promotes_through_a_follower_with_the_same_words() {
    let errors = promote_through_a_follower([ServerKind::Etcd; 3], ServerKind::Etcd);
    assert_eq!(errors, etcd_promote_errors());
}

/// `--feature-gates=LearnerAutoPromote=true`: a learner added with
/// etcdctl becomes a voter once it caught up, with no `member promote`.
#[test]
fn learner_auto_promote_turns_an_in_sync_learner_into_a_voter() {
    let started = Instant::now();
    let mut cluster = Cluster::start(
        options(&["--feature-gates=LearnerAutoPromote=true"]),
        &MIXED,
    );
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    ctl_ok(&leader_address, &["put", "k", "v"]);
    let learner = cluster.add_member(leader, "m3", ServerKind::OxetcdSmol, true);
    let until = Instant::now() + CATCH_UP_DEADLINE;
    let mut list = ctl_ok(&leader_address, &["member", "list"]);
    while (list.lines().count() != 4 || list.contains(", true")) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        list = ctl_ok(&leader_address, &["member", "list"]);
    }
    assert_eq!(list.lines().count(), 4, "{list}");
    assert!(
        !list.contains(", true"),
        "still a learner: {list}\n{}",
        learner.log_tail()
    );
    assert!(
        cluster.members.iter().any(|m| m
            .log()
            .contains("promoting a learner in sync with the leader")),
        "no member said it promoted the learner"
    );
    cluster.members.push(learner);
    ctl_ok(&leader_address, &["put", "after", "promote"]);
    cluster.wait_value(3, "after", "promote", false);
    eprintln!("auto-promote test took {:?}", started.elapsed());
}

/// Every member publishes its name and client URLs through the log, so
/// `member list` shows them and etcdctl's `--cluster` flag reaches every
/// member from one endpoint.
#[test]
fn members_publish_names_and_client_urls() {
    let started = Instant::now();
    let cluster = Cluster::start(options(&[]), &MIXED);
    let leader = cluster.wait_leader();
    let one = cluster.members[(leader + 1) % 3].address();
    let expected: Vec<(String, String)> = cluster
        .members
        .iter()
        .map(|m| (m.name.clone(), format!("http://{}", m.address())))
        .collect();
    let mut shown = Vec::new();
    while started.elapsed() < CATCH_UP_DEADLINE {
        let list = ctl_ok(&one, &["member", "list", "-w", "json"]);
        let json: Value = serde_json::from_str(&list).unwrap();
        shown = json["members"]
            .as_array()
            .map(|members| {
                members
                    .iter()
                    .map(|m| {
                        let name = m["name"].as_str().unwrap_or_default().to_owned();
                        let url = m["clientURLs"][0].as_str().unwrap_or_default().to_owned();
                        (name, url)
                    })
                    .collect()
            })
            .unwrap_or_default();
        shown.sort();
        if shown == expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(shown, expected, "member list never showed every member");

    let status = ctl_ok(&one, &["endpoint", "status", "--cluster", "-w", "json"]);
    let json: Value = serde_json::from_str(&status).unwrap();
    let mut endpoints: Vec<String> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["Endpoint"].as_str().unwrap_or_default().to_owned())
        .collect();
    endpoints.sort();
    let mut urls: Vec<String> = expected.iter().map(|(_, url)| url.clone()).collect();
    urls.sort();
    assert_eq!(endpoints, urls, "{status}");
    let health = ctl(&one, &["endpoint", "health", "--cluster"]);
    assert_eq!(health.code, 0, "{health:?}");
    let healthy = format!("{}{}", health.stdout, health.stderr);
    assert_eq!(healthy.matches("is healthy").count(), 3, "{health:?}");
    eprintln!("publish test took {:?}", started.elapsed());
}

/// A leader stopped with SIGTERM hands leadership to a caught-up voter
/// before it exits: a new leader is in place well within an election
/// timeout of its exit, and every acknowledged write survives.
#[test]
fn sigterm_on_the_leader_hands_leadership_over() {
    let started = Instant::now();
    let mut cluster = Cluster::start(options(&[]), &[ServerKind::Oxetcd; 3]);
    let leader = cluster.wait_leader();
    let follower = (leader + 1) % 3;
    let follower_endpoint = format!("http://{}", cluster.members[follower].address());
    // Writes through a follower go on while the leader stops.
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writer = {
        let writing = writing.clone();
        std::thread::spawn(move || {
            let mut client = Grpc::connect(&follower_endpoint).unwrap();
            let mut acknowledged = Vec::new();
            for i in 0..10_000u32 {
                if !writing.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let key = format!("w{i:05}");
                let put = oxetcd_proto::etcdserverpb::PutRequest {
                    key: key.clone().into_bytes(),
                    value: b"v".to_vec(),
                    ..Default::default()
                };
                if client.put(put).is_ok() {
                    acknowledged.push(key);
                }
            }
            acknowledged
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let terminate_started = Instant::now();
    let status = cluster.members[leader]
        .server
        .as_mut()
        .unwrap()
        .terminate(Duration::from_secs(5))
        .unwrap();
    let exited_at = Instant::now();
    let log = cluster.members[leader].log();
    cluster.members[leader].server = None;
    assert!(status.success(), "the old leader exited with {status}");
    let new_leader = cluster.wait_leader();
    let replaced_after = exited_at.elapsed();
    assert_ne!(new_leader, leader);
    std::thread::sleep(Duration::from_millis(300));
    writing.store(false, std::sync::atomic::Ordering::Release);
    let acknowledged = writer.join().unwrap();
    assert!(!acknowledged.is_empty(), "no write went through");
    // Two status calls at most: a leader was in place at once.
    assert!(
        replaced_after < Duration::from_millis(500),
        "new leader only {replaced_after:?} after the old one exited; old log: {log:?}"
    );
    let address = cluster.members[new_leader].address();
    let out = ctl_ok(&address, &["get", "w", "--prefix", "--keys-only"]);
    let keys: std::collections::HashSet<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    for key in &acknowledged {
        assert!(keys.contains(key.as_str()), "acknowledged {key} was lost");
    }
    eprintln!(
        "SIGTERM to exit {:?}, new leader seen {replaced_after:?} after exit, {} writes kept; whole test {:?}",
        exited_at - terminate_started,
        acknowledged.len(),
        started.elapsed()
    );
}

/// Check-quorum and pre-vote over real sockets: a follower cut off and
/// back does not disturb the leader (same term); a leader cut off steps
/// down within about an election timeout while the others elect a new one.
#[test]
fn check_quorum_and_pre_vote_over_cut_links() {
    let started = Instant::now();
    let cluster = Cluster::start(options(&[]).peer_proxies(true), &[ServerKind::Oxetcd; 3]);
    let names: Vec<String> = cluster.members.iter().map(|m| m.name.clone()).collect();
    let leader = cluster.wait_leader();
    let ids: Vec<u64> = cluster
        .members
        .iter()
        .map(|m| status(&m.address()).unwrap().0)
        .collect();
    let term = |address: &str| status_json(address).and_then(|s| s["raftTerm"].as_u64());
    let leader_address = cluster.members[leader].address();
    ctl_ok(&leader_address, &["put", "before", "cut"]);
    let term_before = term(&leader_address).unwrap();

    // A follower cut off for three election timeouts, then back.
    let follower = (leader + 1) % 3;
    cluster.proxies().cut(&names[follower]);
    std::thread::sleep(Duration::from_millis(1_500));
    ctl_ok(&leader_address, &["put", "while", "cut"]);
    cluster.proxies().heal(&names[follower]);
    cluster.wait_value(follower, "while", "cut", false);
    assert_eq!(
        cluster.wait_leader(),
        leader,
        "the rejoining follower took over"
    );
    assert_eq!(
        term(&leader_address),
        Some(term_before),
        "the rejoining follower disrupted the leader's term"
    );

    // The leader cut off: the others elect a new one, it steps down.
    let cut_at = Instant::now();
    cluster.proxies().cut(&names[leader]);
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let mut new_leader = None;
    let mut stepped_down = None;
    while cut_at.elapsed() < LEADER_DEADLINE && (new_leader.is_none() || stepped_down.is_none()) {
        if new_leader.is_none() {
            let seen: Vec<u64> = others
                .iter()
                .filter_map(|i| status(&cluster.members[*i].address()).map(|s| s.1))
                .collect();
            if seen.len() == 2 && seen[0] == seen[1] && seen[0] != 0 && seen[0] != ids[leader] {
                new_leader = Some((seen[0], cut_at.elapsed()));
            }
        }
        if stepped_down.is_none() {
            // etcdctl leaves out a zero leader (none known).
            let old = status_json(&leader_address).map(|s| s["leader"].as_u64().unwrap_or(0));
            if old.is_some_and(|l| l != ids[leader]) {
                stepped_down = Some(cut_at.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let logs = cluster.logs();
    let (_, elected_after) = new_leader.unwrap_or_else(|| panic!("no new leader\n{logs:#?}"));
    let stepped_down = stepped_down.unwrap_or_else(|| panic!("old leader kept leading\n{logs:#?}"));
    // Check-quorum notices within two election timeouts (500 ms each).
    assert!(
        stepped_down < Duration::from_millis(2_500),
        "old leader stepped down only after {stepped_down:?}"
    );
    cluster.proxies().heal(&names[leader]);
    let agreed = cluster.wait_leader();
    assert_ne!(agreed, leader);
    ctl_ok(
        &cluster.members[agreed].address(),
        &["put", "after", "heal"],
    );
    cluster.wait_value(leader, "after", "heal", false);
    eprintln!(
        "leader cut: new leader after {elected_after:?}, old stepped down after {stepped_down:?}; whole test {:?}",
        started.elapsed()
    );
}

/// Polls that must see a lease's key, or must see it gone, run this often.
const LEASE_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Slack for a poll to notice the revoke: one etcdctl run and one poll
/// interval, generously (the machine is shared).
const LEASE_POLL_SLACK: Duration = Duration::from_millis(1_500);

/// The lease ID etcdctl prints in `lease <hex> granted with TTL(..)`.
fn granted_lease(out: &str) -> String {
    out.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no lease ID in {out:?}"))
        .to_owned()
}

/// `Some(true)` when a serializable `get key` on `address` finds it,
/// `Some(false)` when it finds nothing, `None` when the member does not
/// answer.
fn key_present(address: &str, key: &str) -> Option<bool> {
    let out = ctl(address, &["get", key, "--consistency", "s", "--keys-only"]);
    (out.code == 0).then(|| !out.stdout.trim().is_empty())
}

/// Leases under a leader kill, on real processes with the tests' fast
/// timing (heartbeat 50 ms, election 500 ms: etcd's ratio, and a short
/// election keeps the whole test well under 30 s). A lease of TTL 10 s
/// with a key is granted; a lease of TTL 2 s is kept alive by Debian's
/// `etcdctl lease keep-alive` through a follower for twice its TTL, and
/// `etcdctl lease timetolive --keys` on the follower sees it; then the
/// leader is killed with SIGKILL. The 10 s lease's key must stay until the
/// lease's full TTL from its grant (no early expiry) and be gone once the
/// new leader was elected plus TTL plus an election timeout (a new leader
/// gives an unchecked lease its TTL plus an election timeout, as etcd's).
fn leases_survive_a_leader_kill(kinds: [ServerKind; 3]) {
    const TTL: Duration = Duration::from_secs(10);
    let started = Instant::now();
    let mut cluster = Cluster::start(options(&[]), &kinds);
    let leader = cluster.wait_leader();
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let leader_address = cluster.members[leader].address();
    let follower_address = cluster.members[follower].address();
    let other_address = cluster.members[other].address();

    let grant_sent = Instant::now();
    let long = granted_lease(&ctl_ok(&leader_address, &["lease", "grant", "10"]));
    ctl_ok(
        &leader_address,
        &["put", "long", "v", &format!("--lease={long}")],
    );

    // A short lease kept alive through a follower only.
    let short = granted_lease(&ctl_ok(&follower_address, &["lease", "grant", "2"]));
    ctl_ok(
        &follower_address,
        &["put", "short", "v", &format!("--lease={short}")],
    );
    let mut keep_alive = ChildGuard::spawn(
        etcdctl::command(&etcdctl::program().unwrap(), &follower_address)
            .args(["lease", "keep-alive", &short])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    )
    .expect("etcdctl lease keep-alive starts");
    std::thread::sleep(Duration::from_secs(4));
    let ttl = ctl_ok(
        &follower_address,
        &["lease", "timetolive", &short, "--keys"],
    );
    assert!(
        ttl.contains("granted with TTL(2s)") && ttl.contains("attached keys([short])"),
        "timetolive through a follower: {ttl:?}"
    );
    assert_eq!(
        key_present(&other_address, "short"),
        Some(true),
        "kept-alive key expired"
    );
    let _ = keep_alive.child().kill();
    let mut printed = String::new();
    std::io::Read::read_to_string(keep_alive.child().stdout.as_mut().unwrap(), &mut printed)
        .unwrap();
    keep_alive.kill();
    assert!(
        printed.matches("keepalived with TTL(2)").count() >= 2,
        "etcdctl lease keep-alive through a follower printed {printed:?}"
    );

    cluster.members[leader].kill();
    let killed_at = Instant::now();
    let new_leader = cluster.wait_leader();
    let elected_after = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    let survivor = cluster.members[new_leader].address();
    let no_earlier = grant_sent + TTL;
    let gone_by = killed_at + elected_after + TTL + ELECTION_TIMEOUT + LEASE_POLL_SLACK;
    let gone_at = wait_key_expiry(&survivor, "long", no_earlier, gone_by).unwrap_or_else(|e| {
        panic!("{kinds:?}: new leader {elected_after:?} after the kill of the old: {e}")
    });
    // The short lease, no longer kept alive, expired too.
    assert_eq!(key_present(&survivor, "short"), Some(false));
    eprintln!(
        "{kinds:?}: new leader after {elected_after:?}; 10 s lease gone {:?} after its grant, \
         {:?} after the kill; whole test {:?}",
        gone_at - grant_sent,
        gone_at - killed_at,
        started.elapsed()
    );
}

#[test]
fn oxetcd_leases_survive_a_leader_kill() {
    leases_survive_a_leader_kill([ServerKind::Oxetcd; 3]);
}

#[test]
fn oxetcd_smol_leases_survive_a_leader_kill() {
    leases_survive_a_leader_kill([ServerKind::OxetcdSmol; 3]);
}

/// The remaining TTL etcdctl prints in `lease timetolive`
/// (`… remaining(6s) …`).
fn remaining_secs(out: &str) -> u64 {
    out.split("remaining(")
        .nth(1)
        .and_then(|rest| rest.split("s)").next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("no remaining TTL in {out:?}"))
}

/// Checkpointed leases under a leader kill: with
/// `--experimental-lease-checkpoint-interval=1s` the leader records the
/// remaining TTL of a 10 s lease every second, so after SIGKILL of the
/// leader some seconds later the new leader starts the lease from the
/// last checkpoint plus an election timeout, not from its full TTL (which
/// it would without checkpoints: 10 s plus the election timeout). The key
/// must stay while that remaining TTL runs and be gone soon after.
fn checkpointed_leases_survive_a_leader_kill(kinds: [ServerKind; 3]) {
    const TTL: Duration = Duration::from_secs(10);
    /// Long enough for several checkpoints, short enough that what is
    /// left of the TTL tells a checkpoint from a full renewal.
    const BEFORE_KILL: Duration = Duration::from_secs(5);
    const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
    let started = Instant::now();
    let mut cluster = Cluster::start(
        options(&[
            "--experimental-enable-lease-checkpoint",
            &format!(
                "--experimental-lease-checkpoint-interval={}s",
                CHECKPOINT_INTERVAL.as_secs()
            ),
        ]),
        &kinds,
    );
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let grant_sent = Instant::now();
    let lease = granted_lease(&ctl_ok(&leader_address, &["lease", "grant", "10"]));
    ctl_ok(
        &leader_address,
        &["put", "checkpointed", "v", &format!("--lease={lease}")],
    );
    std::thread::sleep(BEFORE_KILL.saturating_sub(grant_sent.elapsed()));
    cluster.members[leader].kill();
    let killed_at = Instant::now();
    let new_leader = cluster.wait_leader();
    let elected_after = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    let survivor = cluster.members[new_leader].address();

    let asked_at = Instant::now();
    let ttl = ctl_ok(&survivor, &["lease", "timetolive", &lease]);
    let remaining = Duration::from_secs(remaining_secs(&ttl));
    // What the last checkpoint left (taken up to one interval before the
    // kill), plus the election timeout rounded up to whole seconds, plus a
    // second of slack for checkpoints rounding up: 8 s here, where a new
    // leader without checkpoints would report the full 10 s.
    let checkpointed_bound = TTL - (killed_at - grant_sent).min(TTL)
        + CHECKPOINT_INTERVAL
        + Duration::from_secs(ELECTION_TIMEOUT.as_millis().div_ceil(1000) as u64)
        + Duration::from_secs(1);
    assert!(
        remaining > Duration::ZERO && remaining <= checkpointed_bound && remaining < TTL,
        "{kinds:?}: after {:?} of a {TTL:?} lease and a leader kill, the new leader gives it \
         {remaining:?} (bound {checkpointed_bound:?}): {ttl:?}",
        killed_at - grant_sent
    );
    // etcdctl truncates to whole seconds: the key outlives `remaining`.
    let no_earlier = asked_at + remaining;
    let gone_by =
        asked_at + remaining + Duration::from_secs(1) + ELECTION_TIMEOUT + LEASE_POLL_SLACK;
    let gone_at = wait_key_expiry(&survivor, "checkpointed", no_earlier, gone_by)
        .unwrap_or_else(|e| panic!("{kinds:?}: timetolive reported {remaining:?}: {e}"));
    eprintln!(
        "{kinds:?}: killed {:?} after the grant, new leader after {elected_after:?}, \
         remaining {remaining:?}; key gone {:?} after the grant; whole test {:?}",
        killed_at - grant_sent,
        gone_at - grant_sent,
        started.elapsed()
    );
}

/// Polls `key` on `endpoint` until it is gone and returns when it was seen
/// gone; an error if it went before `no_earlier`, was still there after
/// `gone_by`, or the member stopped answering.
fn wait_key_expiry(
    endpoint: &str,
    key: &str,
    no_earlier: Instant,
    gone_by: Instant,
) -> Result<Instant, String> {
    for _ in 0..1_000 {
        let poll_started = Instant::now();
        let present = key_present(endpoint, key);
        let poll_ended = Instant::now();
        match present {
            Some(false) if poll_started < no_earlier => {
                return Err(format!(
                    "{key} expired early, {:?} before it could",
                    no_earlier - poll_started
                ))
            }
            Some(false) => return Ok(poll_ended),
            Some(true) if poll_started > gone_by => {
                return Err(format!(
                    "{key} outlived its lease: still there {:?} after it must have gone",
                    poll_started - gone_by
                ))
            }
            Some(true) => {}
            None if poll_started > gone_by => return Err(format!("{endpoint} stopped answering")),
            None => {}
        }
        std::thread::sleep(LEASE_POLL_INTERVAL);
    }
    Err(format!("{key}: too many polls"))
}

/// `lease timetolive --keys` through a follower for a lease whose key list
/// is larger than one peer frame (4 MiB by default): 50,000 keys of 100
/// bytes, written in txns of 2,500 puts. The follower lists the keys from
/// its own applied state and asks the leader only for the TTL, so the
/// answer is whole (etcd, whose follower reads the leader's whole answer
/// over HTTP, has no limit here either). etcd's default raft timing: the
/// writes are large for a loaded machine running debug builds.
#[test]
fn time_to_live_with_more_keys_than_a_peer_frame_through_a_follower() {
    const KEYS: usize = 50_000;
    const PUTS_PER_TXN: usize = 2_500;
    /// A txn that failed because the leader changed is sent again (its
    /// puts are idempotent) at most this many times.
    const TXN_ATTEMPTS_MAX: usize = 5;
    let started = Instant::now();
    let cluster = Cluster::start(
        options(&[
            "--max-txn-ops",
            &PUTS_PER_TXN.to_string(),
            "--heartbeat-interval",
            "100",
            "--election-timeout",
            "1000",
        ]),
        &[ServerKind::Oxetcd; 3],
    );
    let leader = cluster.wait_leader();
    let follower = cluster.members[(leader + 1) % 3].address();
    let mut client = Grpc::connect(&format!("http://{follower}")).unwrap();
    let lease = client
        .lease_grant(LeaseGrantRequest { ttl: 600, id: 0 })
        .unwrap()
        .id;
    let key = |i: usize| format!("{i:0>100}").into_bytes();
    for batch in 0..KEYS / PUTS_PER_TXN {
        let success = (batch * PUTS_PER_TXN..(batch + 1) * PUTS_PER_TXN)
            .map(|i| RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest {
                    key: key(i),
                    value: b"v".to_vec(),
                    lease,
                    ..Default::default()
                })),
            })
            .collect::<Vec<_>>();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let answer = client.txn(TxnRequest {
                success: success.clone(),
                ..Default::default()
            });
            match answer {
                Ok(_) => break,
                Err(e) if attempts < TXN_ATTEMPTS_MAX => {
                    eprintln!("txn {batch} attempt {attempts}: {e}; again");
                    cluster.wait_leader();
                }
                Err(e) => panic!("txn {batch} failed {attempts} times, last: {e}"),
            }
        }
    }
    let written = started.elapsed();
    let asked = Instant::now();
    let out = ctl_ok(
        &follower,
        &["lease", "timetolive", &format!("{lease:x}"), "--keys"],
    );
    let took = asked.elapsed();
    assert!(
        out.contains("granted with TTL(600s)"),
        "{}",
        &out[..out.len().min(300)]
    );
    let listed = out
        .split("attached keys([")
        .nth(1)
        .and_then(|rest| rest.split("])").next())
        .unwrap_or_else(|| panic!("no attached keys in {}", &out[..out.len().min(300)]));
    let keys: Vec<&str> = listed.split_whitespace().collect();
    assert_eq!(keys.len(), KEYS);
    assert_eq!(keys[0].as_bytes(), key(0).as_slice());
    assert_eq!(keys[KEYS - 1].as_bytes(), key(KEYS - 1).as_slice());
    eprintln!(
        "{KEYS} keys written in {written:?}; timetolive --keys through a follower took {took:?} \
         ({} bytes printed); whole test {:?}",
        out.len(),
        started.elapsed()
    );
}

#[test]
fn oxetcd_checkpointed_leases_survive_a_leader_kill() {
    checkpointed_leases_survive_a_leader_kill([ServerKind::Oxetcd; 3]);
}

#[test]
fn oxetcd_smol_checkpointed_leases_survive_a_leader_kill() {
    checkpointed_leases_survive_a_leader_kill([ServerKind::OxetcdSmol; 3]);
}
