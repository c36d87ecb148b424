//! Three-member clusters of real processes on 127.0.0.1: replication with
//! linearizable reads on every member, a killed leader replaced and
//! restarted, and membership driven by Debian's etcdctl (a learner that
//! catches up by snapshot, promote, remove, move-leader).
//!
//! Every wait is bounded; each test prints how long it took.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oxetcd_conformance::{free_port, Server, ServerKind};
use oxetcd_tests::etcdctl;
use serde_json::Value;

/// Longest to wait for a leader that all running members agree on.
const LEADER_DEADLINE: Duration = Duration::from_secs(10);

/// Longest to wait for a member to catch up with a write.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(15);

/// Raft timing for the tests: etcd's ratio, ten times faster elections
/// than the default would make the kill test slow.
const TIMING: [&str; 4] = ["--heartbeat-interval", "50", "--election-timeout", "500"];

/// A small snapshot count, so a new member is sent a snapshot quickly.
const SNAPSHOT_COUNT: u64 = 100;

struct Member {
    name: String,
    kind: ServerKind,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    server: Option<Server>,
}

impl Member {
    fn new(name: &str, kind: ServerKind, root: &std::path::Path) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            client_port: free_port().unwrap(),
            peer_port: free_port().unwrap(),
            data_dir: root.join(name),
            server: None,
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    fn start(&mut self, initial_cluster: &str, state: &str) {
        let client_url = format!("http://127.0.0.1:{}", self.client_port);
        let mut args: Vec<String> = [
            "--name",
            &self.name,
            "--data-dir",
            &self.data_dir.display().to_string(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &self.peer_url(),
            "--initial-advertise-peer-urls",
            &self.peer_url(),
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            "cluster-test",
            "--snapshot-count",
            &SNAPSHOT_COUNT.to_string(),
            "--experimental-snapshot-catchup-entries",
            "20",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(TIMING.iter().map(|s| s.to_string()));
        let server = Server::start_args(self.kind, self.client_port, &self.data_dir, &args)
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.name));
        self.server = Some(server);
    }

    fn kill(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
    }

    fn is_up(&self) -> bool {
        self.server.is_some()
    }

    fn log_tail(&self) -> String {
        self.server
            .as_ref()
            .map(|s| s.log_tail())
            .unwrap_or_default()
    }
}

struct Cluster {
    members: Vec<Member>,
    _root: tempfile::TempDir,
}

impl Cluster {
    fn start(kinds: [ServerKind; 3]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let mut members: Vec<Member> = kinds
            .iter()
            .enumerate()
            .map(|(i, kind)| Member::new(&format!("m{i}"), *kind, root.path()))
            .collect();
        let initial = initial_cluster(&members);
        for member in &mut members {
            member.start(&initial, "new");
        }
        Self {
            members,
            _root: root,
        }
    }

    /// The leader's position once every running member reports the same
    /// one.
    fn wait_leader(&self) -> usize {
        let started = Instant::now();
        loop {
            let mut leaders = Vec::new();
            let mut ids = Vec::new();
            for member in self.members.iter().filter(|m| m.is_up()) {
                match status(&member.address()) {
                    Some((id, leader)) => {
                        leaders.push(leader);
                        ids.push(id);
                    }
                    None => leaders.push(0),
                }
            }
            if leaders[0] != 0 && leaders.iter().all(|l| *l == leaders[0]) {
                if let Some(pos) = ids.iter().position(|id| *id == leaders[0]) {
                    let up: Vec<usize> = (0..self.members.len())
                        .filter(|i| self.members[*i].is_up())
                        .collect();
                    return up[pos];
                }
            }
            if started.elapsed() > LEADER_DEADLINE {
                let logs: Vec<String> = self.members.iter().map(Member::log_tail).collect();
                panic!("no agreed leader within {LEADER_DEADLINE:?}: {leaders:x?}\n{logs:#?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn endpoints(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.is_up())
            .map(Member::address)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn initial_cluster(members: &[Member]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url()))
        .collect::<Vec<_>>()
        .join(",")
}

fn ctl(address: &str, args: &[&str]) -> etcdctl::Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    etcdctl::run(address, &args, None).unwrap()
}

fn ctl_ok(address: &str, args: &[&str]) -> String {
    let out = ctl(address, args);
    assert_eq!(out.code, 0, "etcdctl {args:?} on {address}: {out:?}");
    out.stdout
}

/// (member ID, leader ID) from `endpoint status`, or `None` if the member
/// does not answer.
fn status(address: &str) -> Option<(u64, u64)> {
    let out = ctl(address, &["endpoint", "status", "-w", "json"]);
    if out.code != 0 {
        return None;
    }
    let json: Value = serde_json::from_str(&out.stdout).ok()?;
    let status = &json[0]["Status"];
    Some((
        status["header"]["member_id"].as_u64()?,
        status["leader"].as_u64()?,
    ))
}

/// Waits until `get key` on `address` prints `value`; `serializable` reads
/// the member's own state.
fn wait_value(address: &str, key: &str, value: &str, serializable: bool) {
    if let Err(e) = try_wait_value(address, key, value, serializable) {
        panic!("{e}");
    }
}

fn try_wait_value(address: &str, key: &str, value: &str, serializable: bool) -> Result<(), String> {
    let started = Instant::now();
    let consistency = if serializable { "s" } else { "l" };
    loop {
        let out = ctl(
            address,
            &[
                "get",
                key,
                "--print-value-only",
                "--consistency",
                consistency,
            ],
        );
        if out.code == 0 && out.stdout.trim() == value {
            return Ok(());
        }
        if started.elapsed() > CATCH_UP_DEADLINE {
            return Err(format!(
                "{address} did not show {key}={value} within {CATCH_UP_DEADLINE:?}: {out:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Writes on the leader are read back linearizably on every member; the
/// leader is killed, another one takes over and writes go on; the old
/// leader restarts and catches up.
fn replicate_and_survive_a_leader_kill(kinds: [ServerKind; 3]) {
    let started = Instant::now();
    let mut cluster = Cluster::start(kinds);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    ctl_ok(&leader_address, &["put", "k1", "v1"]);
    for member in &cluster.members {
        wait_value(&member.address(), "k1", "v1", false);
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
    wait_value(&cluster.members[new_leader].address(), "k2", "v2", false);

    let initial = initial_cluster(&cluster.members);
    cluster.members[leader].start(&initial, "new");
    wait_value(&cluster.members[leader].address(), "k2", "v2", true);
    wait_value(&cluster.members[leader].address(), "k2", "v2", false);
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
    replicate_and_survive_a_leader_kill([
        ServerKind::Oxetcd,
        ServerKind::OxetcdSmol,
        ServerKind::Oxetcd,
    ]);
}

/// etcdctl drives membership on a mixed cluster: a learner added to a
/// cluster whose log was compacted catches up by snapshot, is promoted,
/// leadership moves, and a member is removed.
#[test]
fn etcdctl_drives_membership_with_a_snapshot_catch_up() {
    let started = Instant::now();
    let mut cluster = Cluster::start([
        ServerKind::Oxetcd,
        ServerKind::OxetcdSmol,
        ServerKind::Oxetcd,
    ]);
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let list = ctl_ok(&leader_address, &["member", "list"]);
    assert_eq!(list.lines().count(), 3, "{list}");

    // Well past the snapshot count: the log is compacted.
    for i in 0..(SNAPSHOT_COUNT * 3) {
        ctl_ok(&leader_address, &["put", &format!("bulk{i:04}"), "x"]);
    }
    ctl_ok(&leader_address, &["put", "last", "written"]);

    let root = cluster._root.path().to_path_buf();
    let mut learner = Member::new("m3", ServerKind::OxetcdSmol, &root);
    let added = ctl_ok(
        &leader_address,
        &[
            "member",
            "add",
            "m3",
            "--learner",
            "--peer-urls",
            &learner.peer_url(),
        ],
    );
    assert!(added.contains("added"), "{added}");
    let mut everyone: Vec<&Member> = cluster.members.iter().collect();
    everyone.push(&learner);
    let initial = initial_cluster_refs(&everyone);
    learner.start(&initial, "existing");
    if let Err(e) = try_wait_value(&learner.address(), "last", "written", true) {
        let leader_log = cluster.members[leader].log_tail();
        panic!(
            "{e}\n--- learner ---\n{}\n--- leader ---\n{leader_log}",
            learner.log_tail()
        );
    }
    let log = learner.server.as_ref().unwrap().log();
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
    for member in cluster.members.iter().filter(|m| m.is_up()) {
        wait_value(&member.address(), "after", "remove", false);
    }
    eprintln!("membership test took {:?}", started.elapsed());
}

fn initial_cluster_refs(members: &[&Member]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}", m.name, m.peer_url()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The hex ID of the member with `peer_url` from `member list`.
fn member_id(address: &str, peer_url: &str) -> String {
    let list = ctl_ok(address, &["member", "list"]);
    list.lines()
        .find(|line| line.split(", ").nth(3) == Some(peer_url))
        .and_then(|line| line.split(", ").next())
        .unwrap_or_else(|| panic!("no member at {peer_url} in {list}"))
        .to_owned()
}
