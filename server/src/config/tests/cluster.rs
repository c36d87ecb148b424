use super::*;
use oxetcd_core::ids;

#[test]
fn peer_urls_and_token_give_the_member_id() {
    // With the default name, etcd requires --initial-cluster to match
    // the advertised URLs; another name derives it from them.
    let a = run(
        &[
            "--name=n1",
            "--initial-advertise-peer-urls",
            "http://10.0.0.1:2380",
        ],
        &[],
    );
    let b = run(
        &[
            "--name=n1",
            "--initial-advertise-peer-urls",
            "http://10.0.0.1:2380",
            "--initial-cluster-token",
            "t",
        ],
        &[],
    );
    let expected = ids::member_id(&["http://10.0.0.1:2380"], "etcd-cluster");
    assert_eq!(a.member_id(), expected);
    assert_ne!(a.member_id(), b.member_id());
    assert_eq!(a.node_config().member_id, expected);
    assert_eq!(a.node_config().cluster_id, ids::cluster_id(&[expected]));
}

#[test]
fn cluster_flags_default_like_etcd() {
    let config = run(&[], &[]);
    assert_eq!(
        config.initial_cluster,
        [InitialMember {
            name: "default".into(),
            peer_urls: vec!["http://localhost:2380".into()],
        }]
    );
    assert_eq!(config.initial_cluster_state, ClusterState::New);
    assert_eq!(config.heartbeat_interval_ms, 100);
    assert_eq!(config.election_timeout_ms, 1000);
    assert_eq!(config.snapshot_count, 10_000);
    assert_eq!(config.max_learners, 1);
    assert!(config.initial_peers().is_empty());
    // A single default member keeps etcd's well-known IDs.
    assert_eq!(format!("{:x}", config.cluster_id()), "cdf818194e3a8c32");
}

#[test]
fn initial_cluster_defaults_to_the_name_when_only_the_name_is_set() {
    let config = run(
        &[
            "--name=n1",
            "--initial-advertise-peer-urls=http://127.0.0.1:12380,http://10.0.0.1:12380",
        ],
        &[],
    );
    assert_eq!(config.initial_cluster.len(), 1);
    assert_eq!(config.initial_cluster[0].name, "n1");
    assert_eq!(
        config.initial_cluster[0].peer_urls,
        ["http://10.0.0.1:12380", "http://127.0.0.1:12380"]
    );
    assert_eq!(config.cluster_id(), ids::cluster_id(&[config.member_id()]));
}

#[test]
fn three_member_cluster_ids() {
    let cluster = "a=http://127.0.0.1:1,b=http://127.0.0.1:2,c=http://127.0.0.1:3";
    let member = |name: &str, port: u16| {
        run(
            &[
                "--name",
                name,
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{port}"),
                "--initial-cluster",
                cluster,
                "--initial-cluster-token",
                "tok",
                "--initial-cluster-state=existing",
            ],
            &[],
        )
    };
    let (a, b, c) = (member("a", 1), member("b", 2), member("c", 3));
    assert_eq!(a.initial_cluster_state, ClusterState::Existing);
    let ids = [a.member_id(), b.member_id(), c.member_id()];
    assert_eq!(ids[0], ids::member_id(&["http://127.0.0.1:1"], "tok"));
    // Every member derives the same cluster ID from the same flags.
    assert_eq!(a.cluster_id(), ids::cluster_id(&ids));
    assert_eq!(a.cluster_id(), b.cluster_id());
    assert_eq!(b.cluster_id(), c.cluster_id());
    assert_eq!(
        a.initial_peers(),
        [
            (ids[1], vec!["http://127.0.0.1:2".to_owned()]),
            (ids[2], vec!["http://127.0.0.1:3".to_owned()])
        ]
    );
    let transport = a.peer_transport_config();
    assert_eq!(transport.member_id, ids[0]);
    // Joining (`existing`), a member learns the ID from its peers (see
    // `running_cluster_id`).
    assert_eq!(transport.cluster_id, 0);
    assert_eq!(a.node_config().cluster_id, 0);
    assert!(transport.frame_bytes_max >= a.max_request_bytes);
    // One member listed with two URLs (name repeated).
    let two = run(
        &[
            "--initial-advertise-peer-urls=http://127.0.0.1:2,http://127.0.0.1:1",
            "--initial-cluster=default=http://127.0.0.1:1,default=http://127.0.0.1:2",
        ],
        &[],
    );
    assert_eq!(two.initial_cluster.len(), 1);
    assert_eq!(two.initial_cluster[0].peer_urls.len(), 2);
}

#[test]
fn initial_cluster_is_checked_like_etcd() {
    let reason = |args: &[&str]| match error(args, &[]) {
        ConfigError::InvalidValue { flag, reason, .. } => format!("{flag}: {reason}"),
        other => panic!("{other:?}"),
    };
    // This member must be listed.
    let r = reason(&["--name=x", "--initial-cluster=a=http://127.0.0.1:1"]);
    assert!(r.contains("couldn't find local name \"x\""), "{r}");
    // With exactly its advertised URLs.
    let r = reason(&[
        "--initial-advertise-peer-urls=http://127.0.0.1:9",
        "--initial-cluster=default=http://127.0.0.1:1",
    ]);
    assert!(
        r.contains("--initial-cluster has default=http://127.0.0.1:1 but missing from --initial-advertise-peer-urls=http://127.0.0.1:9"),
        "{r}"
    );
    // The default name with custom advertised URLs and no
    // --initial-cluster fails as in etcd.
    let r = reason(&["--initial-advertise-peer-urls=http://127.0.0.1:9"]);
    assert!(
        r.contains("missing from --initial-advertise-peer-urls"),
        "{r}"
    );
    let r = reason(&[
        "--initial-advertise-peer-urls=http://127.0.0.1:1,http://127.0.0.1:2",
        "--initial-cluster=default=http://127.0.0.1:1",
    ]);
    assert!(
        r.contains("--initial-advertise-peer-urls has http://127.0.0.1:2"),
        "{r}"
    );
    let r = reason(&["--initial-cluster=default=http://localhost:2380,b=http://localhost:2380"]);
    assert!(r.contains("duplicate URL"), "{r}");
    for bad in ["default", "default=localhost:2380", ""] {
        let r = reason(&["--initial-cluster", bad]);
        assert!(r.starts_with("initial-cluster: "), "{bad}: {r}");
    }
    let r = reason(&["--initial-cluster-state=maybe"]);
    assert!(r.starts_with("initial-cluster-state: "), "{r}");
}

#[test]
fn raft_timing_is_checked_like_etcd() {
    let config = run(&["--heartbeat-interval=50", "--election-timeout=250"], &[]);
    assert_eq!(
        (config.heartbeat_interval_ms, config.election_timeout_ms),
        (50, 250)
    );
    let e = error(&["--heartbeat-interval=300"], &[]).to_string();
    assert!(
        e.contains("--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"),
        "{e}"
    );
    let e = error(&["--election-timeout=60000"], &[]).to_string();
    assert!(e.contains("is too long"), "{e}");
    for args in [
        &["--heartbeat-interval=0"][..],
        &["--election-timeout=0"],
        &["--election-timeout=soon"],
        &["--max-learners=0"],
        &["--snapshot-count=-1"],
    ] {
        assert!(
            matches!(error(args, &[]), ConfigError::InvalidValue { .. }),
            "{args:?}"
        );
    }
    let config = run(&["--snapshot-count=0", "--max-learners=3"], &[]);
    assert_eq!(config.snapshot_count, 10_000);
    assert_eq!(config.max_learners, 3);
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    let config = run(
        &[],
        &[
            ("ETCD_ELECTION_TIMEOUT", "2000"),
            ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
        ],
    );
    assert_eq!(config.election_timeout_ms, 2000);
    assert_eq!(config.initial_cluster_state, ClusterState::Existing);
}
