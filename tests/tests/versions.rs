//! Versions on a three-member cluster of real processes (both runtimes):
//! the cluster version reported by `/version` and `etcd_cluster_version`,
//! and `oxetcdctl downgrade validate|enable|cancel` end to end with
//! etcd's answers and errors: enable lowers the cluster version on every
//! member, cancel restores it.
//!
//! `--unsafe-run-as-version` runs members as 3.5 for a rolling downgrade
//! and upgrade with real processes, under a put load whose every
//! acknowledged write must be on every member at the end.
//!
//! Every wait is bounded; each test prints how long it took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::etcdctl::{run_program, Output};
use oxetcd_tests::probe::http_get;
use oxetcd_tests::{binary_path, Cluster, ClusterOptions, Grpc};
use serde_json::Value;

/// Longest to wait for a leader, or a member to catch up.
const DEADLINE: Duration = Duration::from_secs(15);

/// Longest for a cluster version change to reach every member.
const VERSION_DEADLINE: Duration = Duration::from_secs(20);

/// Pause between two polls.
const POLL: Duration = Duration::from_millis(100);

fn oxetcdctl(address: &str, args: &[&str]) -> Output {
    let program = binary_path("oxetcdctl").expect("oxetcdctl is built");
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run_program(&program, address, &args, None).expect("oxetcdctl runs")
}

fn oxetcdctl_ok(address: &str, args: &[&str]) -> String {
    let out = oxetcdctl(address, args);
    assert_eq!(out.code, 0, "oxetcdctl {args:?} on {address}: {out:?}");
    out.stdout
}

/// oxetcdctl `args` must fail with etcd's `message`.
fn oxetcdctl_fails(address: &str, args: &[&str], message: &str) {
    let out = oxetcdctl(address, args);
    assert_ne!(out.code, 0, "oxetcdctl {args:?} succeeded: {out:?}");
    assert!(
        out.stderr.contains(message),
        "oxetcdctl {args:?}: expected {message:?} in {out:?}"
    );
}

/// `/version` of `address`: (etcdserver, etcdcluster).
fn version(address: &str) -> (String, String) {
    let (code, body) = http_get(address, "/version");
    assert_eq!(code, 200, "/version on {address}: {body}");
    let json: Value = serde_json::from_str(&body).expect("/version is JSON");
    let field = |name: &str| json[name].as_str().unwrap_or_default().to_owned();
    (field("etcdserver"), field("etcdcluster"))
}

/// Waits until every member's `/version` shows cluster version `cluster`.
fn wait_cluster_version(addresses: &[String], cluster: &str) {
    let deadline = Instant::now() + VERSION_DEADLINE;
    loop {
        let seen: Vec<(String, String)> = addresses.iter().map(|a| version(a)).collect();
        if seen.iter().all(|(_, c)| c == cluster) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster version {cluster} not reached: {seen:?}"
        );
        std::thread::sleep(POLL);
    }
}

#[test]
fn cluster_version_and_downgrade_end_to_end() {
    let started = Instant::now();
    let options = ClusterOptions::new("versions-test")
        .flags(&["--downgrade-check-time", "1s"])
        .deadlines(DEADLINE, DEADLINE);
    let cluster = Cluster::start(options, &MIXED);
    let leader = cluster.wait_leader();
    let addresses: Vec<String> = cluster.members.iter().map(|m| m.address()).collect();
    let follower = &addresses[(leader + 1) % 3];

    wait_cluster_version(&addresses, "3.6.0");
    for address in &addresses {
        assert_eq!(version(address).0, "3.6.0");
        let (_, metrics) = http_get(address, "/metrics");
        assert!(
            metrics.contains("etcd_cluster_version{cluster_version=\"3.6\"} 1"),
            "{address}: no etcd_cluster_version 3.6"
        );
    }

    // etcd's rules and errors, through a follower.
    let validated = oxetcdctl_ok(follower, &["downgrade", "validate", "3.5"]);
    assert_eq!(
        validated,
        "Downgrade validate success, cluster version 3.6\n"
    );
    oxetcdctl_fails(
        follower,
        &["downgrade", "validate", "3.4"],
        "etcdserver: invalid downgrade target version",
    );
    oxetcdctl_fails(
        follower,
        &["downgrade", "enable", "3.7"],
        "etcdserver: invalid downgrade target version",
    );
    oxetcdctl_fails(
        follower,
        &["downgrade", "validate", "three"],
        "etcdserver: wrong downgrade target version format",
    );
    oxetcdctl_fails(
        follower,
        &["downgrade", "cancel"],
        "etcdserver: no inflight downgrade job",
    );

    // Enable: every member's cluster version drops to the target.
    let enabled = oxetcdctl_ok(follower, &["downgrade", "enable", "3.5"]);
    assert_eq!(enabled, "Downgrade enable success, cluster version 3.6\n");
    wait_cluster_version(&addresses, "3.5.0");
    for address in &addresses {
        assert_eq!(version(address).0, "3.6.0", "the server version stays");
        let (_, metrics) = http_get(address, "/metrics");
        assert!(
            metrics.contains("etcd_cluster_version{cluster_version=\"3.5\"} 1")
                && !metrics.contains("etcd_cluster_version{cluster_version=\"3.6\"}"),
            "{address}: etcd_cluster_version not 3.5 alone"
        );
    }
    let logs: String = cluster.members.iter().map(|m| m.log()).collect();
    assert!(
        logs.contains("updated the cluster version from 3.6 to 3.5"),
        "no cluster version change logged"
    );
    // The cluster version is 3.5 now, so 3.5 is no longer a valid target.
    oxetcdctl_fails(
        follower,
        &["downgrade", "enable", "3.5"],
        "etcdserver: invalid downgrade target version",
    );

    // Cancel restores the cluster version (every member still runs 3.6).
    let cancelled = oxetcdctl_ok(&addresses[leader], &["downgrade", "cancel"]);
    assert_eq!(cancelled, "Downgrade cancel success, cluster version 3.5\n");
    wait_cluster_version(&addresses, "3.6.0");
    oxetcdctl_fails(
        follower,
        &["downgrade", "cancel"],
        "etcdserver: no inflight downgrade job",
    );
    eprintln!("versions end to end: {:?}", started.elapsed());
}

/// `--unsafe-run-as-version` of the version below this build's.
const RUN_AS_3_5: [&str; 2] = ["--unsafe-run-as-version", "3.5.0"];

/// Longest a refused member may run before it stops.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(10);

/// Restarts member `i` with `flags` and waits until the cluster has a
/// leader again.
fn restart_member(cluster: &mut Cluster, i: usize, flags: &[&str]) {
    cluster.members[i].kill();
    cluster.members[i]
        .restart_with(flags)
        .unwrap_or_else(|e| panic!("member {i} did not restart: {e}"));
    cluster.wait_leader();
}

/// Most puts the load sends, and longest it runs.
const LOAD_PUTS_MAX: u64 = 100_000;
const LOAD_DEADLINE: Duration = Duration::from_secs(180);

/// Puts `load/N` = N for N = 0, 1, … one at a time, each to the next
/// member in turn, until `stop`; returns the numbers acknowledged and
/// how many puts failed (a member down, a leader changing).
fn put_load(addresses: Vec<String>, stop: Arc<AtomicBool>) -> thread::JoinHandle<(Vec<u64>, u64)> {
    thread::spawn(move || {
        let started = Instant::now();
        let mut clients: Vec<Option<Grpc>> = addresses.iter().map(|_| None).collect();
        let (mut acknowledged, mut failed) = (Vec::new(), 0);
        for n in 0..LOAD_PUTS_MAX {
            if stop.load(Ordering::Acquire) || started.elapsed() > LOAD_DEADLINE {
                break;
            }
            let i = n as usize % addresses.len();
            if clients[i].is_none() {
                clients[i] = Grpc::connect(&format!("http://{}", addresses[i])).ok();
            }
            let put = PutRequest {
                key: format!("load/{n}").into_bytes(),
                value: n.to_string().into_bytes(),
                ..Default::default()
            };
            match clients[i].as_mut().map(|c| c.put(put)) {
                Some(Ok(_)) => acknowledged.push(n),
                _ => {
                    failed += 1;
                    clients[i] = None;
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
        (acknowledged, failed)
    })
}

/// Every acknowledged `load/N` is on the member at `address`, with its
/// value (a linearizable read: the member caught up first).
fn holds_every_acknowledged_put(address: &str, acknowledged: &[u64]) {
    let mut grpc = Grpc::connect(&format!("http://{address}")).expect("connect");
    let all = grpc
        .range(RangeRequest {
            key: b"load/".to_vec(),
            range_end: b"load0".to_vec(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("range on {address}: {e:?}"));
    let held: std::collections::HashMap<Vec<u8>, Vec<u8>> =
        all.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
    for n in acknowledged {
        assert_eq!(
            held.get(format!("load/{n}").as_bytes()),
            Some(&n.to_string().into_bytes()),
            "acknowledged put load/{n} missing on {address}"
        );
    }
}

/// A rolling downgrade with real processes, then a rolling upgrade:
/// a member run as 3.5 is refused while the cluster version is 3.6;
/// once a downgrade to 3.5 is enabled, each member is restarted as 3.5,
/// the leader ends the job (`--downgrade-check-time`), and restarting
/// them as 3.6 raises the cluster version again.
#[test]
fn rolling_downgrade_then_upgrade_with_real_processes() {
    let started = Instant::now();
    let options = ClusterOptions::new("versions-rolling")
        .flags(&["--downgrade-check-time", "500ms"])
        .deadlines(DEADLINE, DEADLINE);
    let mut cluster = Cluster::start(options, &MIXED);
    cluster.wait_leader();
    let addresses: Vec<String> = cluster.members.iter().map(|m| m.address()).collect();
    wait_cluster_version(&addresses, "3.6.0");
    let stop = Arc::new(AtomicBool::new(false));
    let load = put_load(addresses.clone(), stop.clone());

    // Without a downgrade, an older member is refused with etcd's words.
    cluster.members[1].kill();
    let refused = cluster.members[1].restart_with(&RUN_AS_3_5);
    if refused.is_ok() {
        let deadline = Instant::now() + REFUSAL_DEADLINE;
        let server = cluster.members[1].server.as_mut().expect("started");
        while server.is_running() {
            assert!(Instant::now() < deadline, "the 3.5 member kept running");
            std::thread::sleep(POLL);
        }
    }
    let log = match refused {
        Err(e) => e,
        Ok(()) => cluster.members[1].log(),
    };
    assert!(
        log.contains("invalid downgrade; server version is lower than determined cluster version"),
        "no refusal logged: {log}"
    );
    cluster.members[1].kill();
    cluster.members[1]
        .restart_with(&[])
        .unwrap_or_else(|e| panic!("member 1 did not restart as 3.6: {e}"));
    cluster.wait_leader();

    oxetcdctl_ok(&addresses[0], &["downgrade", "enable", "3.5"]);
    wait_cluster_version(&addresses, "3.5.0");
    for (i, address) in addresses.iter().enumerate() {
        restart_member(&mut cluster, i, &RUN_AS_3_5);
        assert_eq!(version(address).0, "3.5.0", "member {i} runs as 3.5");
    }
    // Every member runs the target: the leader ends the job. Validating
    // the next minor down finds the job until then.
    let deadline = Instant::now() + VERSION_DEADLINE;
    loop {
        let out = oxetcdctl(&addresses[0], &["downgrade", "validate", "3.4"]);
        if out.code == 0 {
            break;
        }
        assert!(
            out.stderr
                .contains("etcdserver: cluster has a downgrade job in progress"),
            "{out:?}"
        );
        assert!(
            Instant::now() < deadline,
            "the downgrade job never ended: {out:?}"
        );
        std::thread::sleep(POLL);
    }
    let logs: String = cluster.members.iter().map(|m| m.log()).collect();
    assert!(
        logs.contains("the cluster has been downgraded to 3.5"),
        "not logged"
    );
    wait_cluster_version(&addresses, "3.5.0");

    // A rolling upgrade: the cluster version rises once all run 3.6.
    for i in 0..3 {
        restart_member(&mut cluster, i, &[]);
    }
    wait_cluster_version(&addresses, "3.6.0");
    stop.store(true, Ordering::Release);
    let (acknowledged, failed) = load.join().expect("load");
    assert!(
        acknowledged.len() > 100,
        "{} puts acknowledged",
        acknowledged.len()
    );
    for address in &addresses {
        holds_every_acknowledged_put(address, &acknowledged);
    }
    eprintln!(
        "rolling downgrade and upgrade: {:?}; {} puts acknowledged and kept, {failed} failed",
        started.elapsed(),
        acknowledged.len()
    );
}
