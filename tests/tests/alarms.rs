//! The backend quota and alarms in a three-member cluster of real
//! processes (oxetcd and oxetcd-smol): filling past a small
//! `--quota-backend-bytes` raises NOSPACE, which every member lists and
//! enforces; `/health` fails with `ALARM NOSPACE` unless excluded while
//! `/livez` and `/readyz` stay ok; `Hash` is equal on every member and
//! across a restart; oxetcdctl lists the alarms as etcdctl does;
//! compaction, defragmentation and `alarm disarm` make every member accept
//! writes again.
//!
//! Every wait is bounded.

use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::PutRequest;
use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::etcdctl::{ctl, ctl_ok, run_program};
use oxetcd_tests::probe::http_get;
use oxetcd_tests::{binary_path, Cluster, ClusterOptions, Grpc};

/// The quota the cluster is filled to.
const QUOTA_BYTES: u64 = 256 * 1024;

/// Each fill put's value: the quota is reached in about sixteen.
const FILL_VALUE_BYTES: usize = 16 * 1024;

/// Fill puts at most before the test gives up.
const FILL_PUTS_MAX: usize = 200;

/// Longest to wait for every member to show the same thing.
const AGREE_DEADLINE: Duration = Duration::from_secs(15);

const POLL: Duration = Duration::from_millis(100);

const NOSPACE: &str = "etcdserver: mvcc: database space exceeded";

/// Waits until `check` holds on every member's address.
fn on_every_member(cluster: &Cluster, what: &str, check: impl Fn(&str) -> bool) {
    let started = Instant::now();
    for member in &cluster.members {
        let address = member.address();
        while !check(&address) {
            assert!(
                started.elapsed() < AGREE_DEADLINE,
                "{what} never held on {address}\n{:#?}",
                cluster.logs()
            );
            std::thread::sleep(POLL);
        }
    }
}

/// Every member's `Hash`, once all report the same revision.
fn agreed_hashes(cluster: &Cluster) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let answers: Vec<(u32, i64)> = cluster
            .members
            .iter()
            .map(|m| {
                let mut client =
                    Grpc::connect(&format!("http://{}", m.address())).expect("connect");
                let answer = client.hash().expect("hash");
                (answer.hash, answer.header.map_or(0, |h| h.revision))
            })
            .collect();
        if answers.iter().all(|(_, r)| *r == answers[0].1) {
            return answers.into_iter().map(|(h, _)| h).collect();
        }
        assert!(started.elapsed() < AGREE_DEADLINE, "revisions {answers:?}");
        std::thread::sleep(POLL);
    }
}

#[test]
fn nospace_on_every_member_then_compact_defrag_disarm() {
    let started = Instant::now();
    let quota = QUOTA_BYTES.to_string();
    let options =
        ClusterOptions::new("alarms-test").flags(&["--quota-backend-bytes", quota.as_str()]);
    let mut cluster = Cluster::start(options, &MIXED);
    let leader = cluster.wait_leader();
    let follower = (leader + 1) % 3;
    let address = cluster.members[follower].address();
    ctl_ok(&address, &["put", "small", "a"]);

    let mut client = Grpc::connect(&format!("http://{address}")).expect("connect");
    let refused = (0..FILL_PUTS_MAX).find_map(|i| {
        let put = PutRequest {
            key: format!("fill{}", i % 4).into_bytes(),
            value: vec![b'f'; FILL_VALUE_BYTES],
            ..Default::default()
        };
        client.put(put).err()
    });
    let refused = refused.expect("the quota never refused a put");
    assert_eq!((refused.code, refused.message.as_str()), (8, NOSPACE));

    // Raised for the member that refused, applied on every member.
    // etcdctl prints member IDs in decimal.
    let id = client.status().expect("status").header.unwrap().member_id;
    let listed = format!("memberID:{id} alarm:NOSPACE");
    on_every_member(&cluster, "alarm list", |a| {
        ctl(a, &["alarm", "list"]).stdout.contains(&listed)
    });
    for member in &cluster.members {
        let out = ctl(&member.address(), &["put", "more", "x"]);
        assert!(out.stderr.contains(NOSPACE), "{out:?}");
        ctl_ok(&member.address(), &["get", "small"]);
        let (code, body) = http_get(&member.address(), "/health");
        assert_eq!(
            (code, body.as_str()),
            (503, "{\"health\":\"false\",\"reason\":\"ALARM NOSPACE\"}\n")
        );
        let (code, body) = http_get(&member.address(), "/health?exclude=NOSPACE");
        assert_eq!(
            (code, body.as_str()),
            (200, r#"{"health":"true","reason":""}"#)
        );
        let (code, body) = http_get(&member.address(), "/readyz?verbose");
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            body,
            "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\nok\n"
        );
        assert_eq!(
            http_get(&member.address(), "/livez"),
            (200, "ok\n".to_owned())
        );
    }
    ctl_ok(&address, &["del", "small"]);

    // Equal data, equal hashes, before and after a restart.
    let hashes = agreed_hashes(&cluster);
    assert!(hashes.iter().all(|h| *h == hashes[0]), "{hashes:x?}");
    cluster.members[leader].kill();
    cluster.members[leader].restart();
    cluster.wait_leader();
    let after = agreed_hashes(&cluster);
    assert_eq!(after, hashes, "hashes across a restart");

    // Make room, then disarm: every member takes writes again.
    let revision = client.status().expect("status").header.unwrap().revision;
    let endpoints = cluster.endpoints();
    ctl_ok(&address, &["compact", &revision.to_string(), "--physical"]);
    ctl_ok(&endpoints, &["defrag"]);
    // oxetcdctl lists what etcdctl lists, and disarms.
    let oxetcdctl = binary_path("oxetcdctl").expect("oxetcdctl");
    let args = ["alarm".to_owned(), "list".to_owned()];
    let ours = run_program(&oxetcdctl, &address, &args, None).expect("oxetcdctl");
    assert_eq!(ours.stdout, ctl_ok(&address, &["alarm", "list"]));
    let args = ["alarm".to_owned(), "disarm".to_owned()];
    let disarmed = run_program(&oxetcdctl, &address, &args, None).expect("oxetcdctl");
    assert!(disarmed.stdout.contains(&listed), "{disarmed:?}");
    on_every_member(&cluster, "alarm list empty", |a| {
        ctl(a, &["alarm", "list"]).stdout.trim().is_empty()
    });
    for member in &cluster.members {
        ctl_ok(&member.address(), &["put", "after", "y"]);
        let (code, _) = http_get(&member.address(), "/health");
        assert_eq!(code, 200);
    }
    println!("quota, alarms and hashes: {:?}", started.elapsed());
}
