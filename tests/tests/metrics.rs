//! `/metrics`, end to end: both binaries serve etcd's metrics on the client
//! port and on `--listen-metrics-urls`, in the Prometheus text format, read
//! here with a real parser (`prometheus-parse`).
//!
//! Each family this server promises is checked for etcd's type, label
//! names and (for histograms) etcd's buckets, and the counters are checked
//! to move when they should: a put moves `etcd_mvcc_put_total` and the
//! `Put` method's gRPC series, a read `etcd_mvcc_range_total`, a leader
//! change `etcd_server_leader_changes_seen_total`. A three-member cluster
//! shows the peer families (bytes each way, active peers, heartbeat round
//! trips). Every wait is bounded.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::etcdctl::{ctl, ctl_ok};
use oxetcd_tests::{Cluster, ClusterOptions, Launch, Ports, Server, ServerKind};
use prometheus_parse::{Sample, Scrape, Value};

/// Longest a scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a server may take to say it serves clients.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// Longest a cluster may take to agree on a leader, or a member to see
/// a change.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(15);

/// The line a server logs once it serves clients.
const READY_LINE: &str = "enabled capabilities for version";

/// A family's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
    Histogram,
}

/// Families every member serves, with etcd's type and label names.
const FAMILIES: &[(&str, Type, &[&str])] = &[
    ("etcd_server_has_leader", Type::Gauge, &[]),
    ("etcd_server_is_leader", Type::Gauge, &[]),
    ("etcd_server_is_learner", Type::Gauge, &[]),
    ("etcd_server_leader_changes_seen_total", Type::Counter, &[]),
    ("etcd_server_proposals_committed_total", Type::Gauge, &[]),
    ("etcd_server_proposals_applied_total", Type::Gauge, &[]),
    ("etcd_server_proposals_pending", Type::Gauge, &[]),
    ("etcd_server_proposals_failed_total", Type::Counter, &[]),
    ("etcd_server_version", Type::Gauge, &["server_version"]),
    ("etcd_cluster_version", Type::Gauge, &["cluster_version"]),
    ("etcd_server_id", Type::Gauge, &["server_id"]),
    (
        "etcd_server_feature_enabled",
        Type::Gauge,
        &["name", "stage"],
    ),
    (
        "etcd_server_heartbeat_send_failures_total",
        Type::Counter,
        &[],
    ),
    ("etcd_server_slow_apply_total", Type::Counter, &[]),
    ("etcd_server_slow_read_indexes_total", Type::Counter, &[]),
    ("etcd_server_read_indexes_failed_total", Type::Counter, &[]),
    ("etcd_server_quota_backend_bytes", Type::Gauge, &[]),
    (
        "etcd_server_client_requests_total",
        Type::Counter,
        &["type", "client_api_version"],
    ),
    ("etcd_server_lease_expired_total", Type::Counter, &[]),
    (
        "etcd_debugging_server_lease_expired_total",
        Type::Counter,
        &[],
    ),
    ("etcd_mvcc_db_total_size_in_bytes", Type::Gauge, &[]),
    ("etcd_mvcc_db_total_size_in_use_in_bytes", Type::Gauge, &[]),
    ("etcd_mvcc_put_total", Type::Counter, &[]),
    ("etcd_mvcc_delete_total", Type::Counter, &[]),
    ("etcd_mvcc_range_total", Type::Counter, &[]),
    ("etcd_mvcc_txn_total", Type::Counter, &[]),
    ("etcd_debugging_mvcc_keys_total", Type::Gauge, &[]),
    ("etcd_debugging_mvcc_watcher_total", Type::Gauge, &[]),
    ("etcd_debugging_mvcc_slow_watcher_total", Type::Gauge, &[]),
    (
        "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
        Type::Histogram,
        &[],
    ),
    (
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        Type::Histogram,
        &[],
    ),
    ("etcd_disk_wal_fsync_duration_seconds", Type::Histogram, &[]),
    (
        "etcd_disk_backend_commit_duration_seconds",
        Type::Histogram,
        &[],
    ),
    ("etcd_disk_defrag_inflight", Type::Gauge, &[]),
    (
        "etcd_snap_db_save_total_duration_seconds",
        Type::Histogram,
        &[],
    ),
    (
        "grpc_server_started_total",
        Type::Counter,
        &["grpc_type", "grpc_service", "grpc_method"],
    ),
    (
        "grpc_server_handled_total",
        Type::Counter,
        &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
    ),
    (
        "grpc_server_msg_received_total",
        Type::Counter,
        &["grpc_type", "grpc_service", "grpc_method"],
    ),
    (
        "grpc_server_msg_sent_total",
        Type::Counter,
        &["grpc_type", "grpc_service", "grpc_method"],
    ),
    ("process_resident_memory_bytes", Type::Gauge, &[]),
    ("process_cpu_seconds_total", Type::Counter, &[]),
    ("process_open_fds", Type::Gauge, &[]),
    ("process_start_time_seconds", Type::Gauge, &[]),
];

/// Families a member with peers serves too.
const PEER_FAMILIES: &[(&str, Type, &[&str])] = &[
    (
        "etcd_network_active_peers",
        Type::Gauge,
        &["Local", "Remote"],
    ),
    ("etcd_network_peer_sent_bytes_total", Type::Counter, &["To"]),
    (
        "etcd_network_peer_received_bytes_total",
        Type::Counter,
        &["From"],
    ),
    (
        "etcd_network_peer_round_trip_time_seconds",
        Type::Histogram,
        &["To"],
    ),
];

/// etcd's buckets (Go's `ExponentialBuckets(start, 2, count)`) as
/// (family, start, count).
const BUCKETS: &[(&str, f64, usize)] = &[
    ("etcd_disk_wal_fsync_duration_seconds", 0.001, 14),
    ("etcd_disk_backend_commit_duration_seconds", 0.001, 14),
    ("etcd_snap_db_save_total_duration_seconds", 0.1, 10),
    (
        "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
        1.0,
        13,
    ),
    (
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        100.0,
        14,
    ),
    ("etcd_network_peer_round_trip_time_seconds", 0.0001, 16),
];

// ---------------------------------------------------------------------
// Scraping.

/// One scrape: the raw text and what the parser made of it.
struct Metrics {
    text: String,
    scrape: Scrape,
}

impl Metrics {
    /// `GET /metrics` on `address` (`127.0.0.1:port`), parsed.
    fn get(address: &str) -> Self {
        let (head, text) = http_get(address, "/metrics");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        let lines = text.lines().map(|line| Ok(line.to_owned()));
        let scrape = Scrape::parse(lines).expect("a parsable scrape");
        Self { text, scrape }
    }

    /// The samples of `family` (a histogram's buckets as one sample per
    /// label set).
    fn samples(&self, family: &str) -> Vec<&Sample> {
        self.scrape
            .samples
            .iter()
            .filter(|s| s.metric == family)
            .collect()
    }

    /// The value of `family`'s sample whose labels include `labels`.
    fn value(&self, family: &str, labels: &[(&str, &str)]) -> f64 {
        let sample = self
            .samples(family)
            .into_iter()
            .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .unwrap_or_else(|| panic!("no {family} with {labels:?} in\n{}", self.text));
        match &sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            Value::Summary(_) => panic!("{family} is a summary"),
        }
    }

    /// Checks `family`'s type, from its `# TYPE` line and as the parser
    /// read its samples, and that every sample has exactly `labels`.
    fn check_family(&self, family: &str, kind: Type, labels: &[&str]) {
        let word = match kind {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
        };
        assert!(
            self.text.contains(&format!("\n# TYPE {family} {word}\n")),
            "{family} is not a {word}:\n{}",
            self.text
        );
        let samples = self.samples(family);
        assert!(!samples.is_empty(), "{family} has no samples");
        let wanted: BTreeSet<&str> = labels.iter().copied().collect();
        for sample in samples {
            let typed = matches!(
                (&sample.value, kind),
                (Value::Counter(_), Type::Counter)
                    | (Value::Gauge(_), Type::Gauge)
                    | (Value::Histogram(_), Type::Histogram)
            );
            assert!(typed, "{family} parsed as {:?}", sample.value);
            let names: BTreeSet<&str> = sample.labels.keys().map(String::as_str).collect();
            assert_eq!(names, wanted, "{family}'s labels");
        }
    }

    /// Checks a histogram's bucket bounds: etcd's exponential ones, then
    /// `+Inf`.
    fn check_buckets(&self, family: &str, start: f64, count: usize) {
        let sample = self.samples(family)[0];
        let Value::Histogram(buckets) = &sample.value else {
            panic!("{family} is not a histogram");
        };
        let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
        let mut expected: Vec<f64> = (0..count).map(|i| start * 2f64.powi(i as i32)).collect();
        expected.push(f64::INFINITY);
        assert_eq!(bounds.len(), expected.len(), "{family}: {bounds:?}");
        for (got, want) in bounds.iter().zip(&expected) {
            assert!(
                (got - want).abs() <= want.abs() * 1e-9 || got == want,
                "{family}: {bounds:?}"
            );
        }
    }
}

/// A plain HTTP/1.1 GET (the connection closed after it): the status
/// line and headers, and the body.
fn http_get(address: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream.set_read_timeout(Some(SCRAPE_TIMEOUT)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    let raw = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = raw.split_once("\r\n\r\n").expect("headers end");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (head.to_owned(), body)
}

/// The body of a chunked answer.
fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

// ---------------------------------------------------------------------
// One member.

/// A member with a metrics URL of its own.
struct Single {
    launch: Launch,
    server: Server,
    client: String,
    metrics: String,
    _data: tempfile::TempDir,
}

fn start_single(kind: ServerKind) -> Single {
    start_single_with(kind, &[])
}

/// [`start_single`] with `flags` too.
fn start_single_with(kind: ServerKind, flags: &[&str]) -> Single {
    let data = tempfile::tempdir().unwrap();
    let client_url = Ports::Kernel.http_url();
    let metrics_url = Ports::Kernel.http_url();
    let launch = Launch::new(
        kind,
        "default",
        &data.path().join("data"),
        vec![client_url.clone()],
        Ports::Kernel.http_url(),
    )
    .flags(&["--listen-metrics-urls", metrics_url.as_str()])
    .flags(flags);
    Single {
        server: start_ready(&launch),
        launch,
        client: client_url.trim_start_matches("http://").to_owned(),
        metrics: metrics_url.trim_start_matches("http://").to_owned(),
        _data: data,
    }
}

/// Starts `launch` and waits until it serves clients.
fn start_ready(launch: &Launch) -> Server {
    let server = launch.start().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while !server.log().contains(READY_LINE) {
        assert!(
            started.elapsed() < READY_DEADLINE,
            "never got ready\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// etcd's gates: name, stage label, default.
const GATES: &[(&str, &str, bool)] = &[
    ("StopGRPCServiceOnDefrag", "ALPHA", false),
    ("InitialCorruptCheck", "ALPHA", false),
    ("CompactHashCheck", "ALPHA", false),
    ("TxnModeWriteWithSharedBuffer", "BETA", true),
    ("LeaseCheckpoint", "ALPHA", false),
    ("LeaseCheckpointPersist", "ALPHA", false),
    ("SetMemberLocalAddr", "ALPHA", false),
    ("FastLeaseKeepAlive", "BETA", true),
    ("PriorityRequest", "ALPHA", false),
    ("LearnerAutoPromote", "ALPHA", false),
    ("AllAlpha", "ALPHA", false),
    ("AllBeta", "BETA", false),
];

/// `etcd_server_feature_enabled` shows every gate with its stage, at its
/// default unless set; `--feature-gates=InitialCorruptCheck=true` runs
/// the initial corruption check before the member serves.
fn feature_gates(kind: ServerKind) {
    let plain = start_single(kind);
    let scrape = Metrics::get(&plain.metrics);
    for &(name, stage, default) in GATES {
        let labels = [("name", name), ("stage", stage)];
        assert_eq!(
            scrape.value("etcd_server_feature_enabled", &labels),
            f64::from(u8::from(default)),
            "{name}"
        );
    }
    assert_eq!(
        scrape.samples("etcd_server_feature_enabled").len(),
        GATES.len()
    );
    assert!(!plain
        .server
        .log()
        .contains("starting initial corruption check"));

    let gated = start_single_with(
        kind,
        &["--feature-gates=InitialCorruptCheck=true,FastLeaseKeepAlive=false"],
    );
    let scrape = Metrics::get(&gated.client);
    let on = |name: &str, stage: &str| {
        scrape.value(
            "etcd_server_feature_enabled",
            &[("name", name), ("stage", stage)],
        )
    };
    assert_eq!(on("InitialCorruptCheck", "ALPHA"), 1.0);
    assert_eq!(on("FastLeaseKeepAlive", "BETA"), 0.0);
    assert_eq!(on("TxnModeWriteWithSharedBuffer", "BETA"), 1.0);
    let log = gated.server.log();
    assert!(
        log.contains("starting initial corruption check")
            && log.contains("initial corruption checking passed"),
        "{}",
        gated.server.log_tail()
    );
    assert!(
        log.contains("Setting ALPHA feature gate InitialCorruptCheck=true"),
        "{}",
        gated.server.log_tail()
    );
}

#[test]
fn oxetcd_shows_its_feature_gates() {
    feature_gates(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_shows_its_feature_gates() {
    feature_gates(ServerKind::OxetcdSmol);
}

/// Every family with etcd's type and labels, on the client port and the
/// metrics URL; the counters a put, a read, a delete and a txn move; the
/// gRPC series of the methods called.
fn single_member(kind: ServerKind) {
    let started = Instant::now();
    let member = start_single(kind);
    let put = ("grpc_method", "Put");
    let before = Metrics::get(&member.client);
    ctl_ok(&member.client, &["put", "k", "v"]);
    ctl_ok(&member.client, &["get", "k"]);
    ctl_ok(&member.client, &["put", "gone", "v"]);
    ctl_ok(&member.client, &["del", "gone"]);
    // A range past the current revision fails with OutOfRange.
    assert_ne!(ctl(&member.client, &["get", "k", "--rev", "1000"]).code, 0);
    // Two operations: etcd counts a txn of one as a plain put.
    let txn = "value(\"k\") = \"v\"\n\nput k2 v2\nget k\n\n\n";
    let out = oxetcd_tests::etcdctl::run(&member.client, &["txn".to_owned()], Some(txn)).unwrap();
    assert_eq!(out.code, 0, "{out:?}");

    for address in [&member.client, &member.metrics] {
        let after = Metrics::get(address);
        for &(family, kind, labels) in FAMILIES {
            after.check_family(family, kind, labels);
        }
        for &(family, start, count) in BUCKETS.iter().filter(|b| !b.0.contains("network")) {
            after.check_buckets(family, start, count);
        }
        let moved = |family: &str, labels: &[(&str, &str)]| {
            after.value(family, labels) - before.value(family, labels)
        };
        assert_eq!(
            moved("etcd_mvcc_put_total", &[]),
            3.0,
            "two puts, one in a txn"
        );
        assert_eq!(moved("etcd_mvcc_delete_total", &[]), 1.0);
        // Every write stored a version: the bytes in use grew.
        assert!(moved("etcd_mvcc_db_total_size_in_use_in_bytes", &[]) > 0.0);
        assert_eq!(moved("etcd_mvcc_txn_total", &[]), 1.0);
        assert!(
            moved("etcd_mvcc_range_total", &[]) >= 2.0,
            "a get, a failed get"
        );
        assert_eq!(
            after.value("etcd_debugging_mvcc_keys_total", &[]),
            2.0,
            "k, k2"
        );
        assert_eq!(moved("grpc_server_started_total", &[put]), 2.0);
        assert_eq!(moved("grpc_server_msg_received_total", &[put]), 2.0);
        assert_eq!(moved("grpc_server_msg_sent_total", &[put]), 2.0);
        let ok = [put, ("grpc_code", "OK"), ("grpc_type", "unary")];
        assert_eq!(moved("grpc_server_handled_total", &ok), 2.0);
        let out_of_range = [("grpc_method", "Range"), ("grpc_code", "OutOfRange")];
        assert_eq!(moved("grpc_server_handled_total", &out_of_range), 1.0);
        // Election and Lock are served, so counted from the start, as
        // go-grpc-prometheus registers every service's methods.
        for (service, method, kind) in [
            ("v3electionpb.Election", "Campaign", "unary"),
            ("v3electionpb.Election", "Observe", "server_stream"),
            ("v3lockpb.Lock", "Lock", "unary"),
        ] {
            let labels = [
                ("grpc_service", service),
                ("grpc_method", method),
                ("grpc_type", kind),
            ];
            assert_eq!(after.value("grpc_server_started_total", &labels), 0.0);
        }
        let unary = [("type", "unary"), ("client_api_version", "3.4")];
        assert!(after.value("etcd_server_client_requests_total", &unary) >= 6.0);
        assert!(moved("etcd_disk_wal_fsync_duration_seconds", &[]) >= 1.0);
        assert!(moved("etcd_disk_backend_commit_duration_seconds", &[]) >= 1.0);
        assert_eq!(after.value("etcd_server_has_leader", &[]), 1.0);
        assert_eq!(after.value("etcd_server_is_leader", &[]), 1.0);
        assert_eq!(
            after.value("etcd_server_leader_changes_seen_total", &[]),
            1.0
        );
        assert!(after.value("etcd_server_proposals_applied_total", &[]) >= 6.0);
        assert!(after.value("etcd_mvcc_db_total_size_in_bytes", &[]) > 0.0);
        assert!(after.value("process_resident_memory_bytes", &[]) > 0.0);
        assert!(after.value("process_open_fds", &[]) > 0.0);
        assert!(after
            .text
            .contains("etcd_server_version{server_version=\"3.6.0\"} 1\n"));
        assert!(after
            .text
            .contains("etcd_cluster_version{cluster_version=\"3.6\"} 1\n"));
        // Without --metrics extensive, no handling-time histograms.
        assert!(!after.text.contains("grpc_server_handling_seconds"));
    }
    // The metrics URL serves the health probes too, and nothing else.
    let (head, body) = http_get(&member.metrics, "/health");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"health\":\"true\""), "{body}");
    for probe in ["/livez", "/readyz", "/readyz/linearizable_read"] {
        let (head, body) = http_get(&member.metrics, probe);
        assert!(head.starts_with("HTTP/1.1 200"), "{probe}: {head}");
        assert_eq!(body, "ok\n", "{probe}");
    }
    let (head, _) = http_get(&member.metrics, "/version");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    // Restarted, the member counts the keys it holds (off its own thread,
    // so soon after it serves). Its counters start again from what it
    // replays of the log (it was killed, so the backend may be behind).
    drop(member.server);
    let _server = start_ready(&member.launch);
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        let metrics = Metrics::get(&member.client);
        if metrics.value("etcd_debugging_mvcc_keys_total", &[]) == 2.0 {
            assert!(metrics.value("etcd_mvcc_put_total", &[]) <= 3.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "keys never counted:\n{}",
            metrics.text
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("{}: {:?}", kind.name(), started.elapsed());
}

#[test]
fn oxetcd_serves_etcds_metrics() {
    single_member(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_serves_etcds_metrics() {
    single_member(ServerKind::OxetcdSmol);
}

/// `--metrics extensive` adds go-grpc-prometheus's handling-time
/// histogram, one series per method, with its default buckets.
#[test]
fn extensive_metrics_time_each_call() {
    let data = tempfile::tempdir().unwrap();
    let client_url = Ports::Kernel.http_url();
    let server = Launch::new(
        ServerKind::Oxetcd,
        "default",
        &data.path().join("data"),
        vec![client_url.clone()],
        Ports::Kernel.http_url(),
    )
    .flags(&["--metrics", "extensive"])
    .start()
    .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while !server.log().contains(READY_LINE) {
        assert!(started.elapsed() < READY_DEADLINE, "{}", server.log_tail());
        std::thread::sleep(Duration::from_millis(20));
    }
    let address = client_url.trim_start_matches("http://");
    ctl_ok(address, &["put", "k", "v"]);
    let metrics = Metrics::get(address);
    metrics.check_family(
        "grpc_server_handling_seconds",
        Type::Histogram,
        &["grpc_type", "grpc_service", "grpc_method"],
    );
    assert_eq!(
        metrics.value(
            "grpc_server_handling_seconds_count",
            &[("grpc_method", "Put")]
        ),
        1.0
    );
}

// ---------------------------------------------------------------------
// A cluster.

/// Peer families on every member; a leader change moves
/// `leader_changes_seen_total` on a member that saw it.
#[test]
fn cluster_members_count_peers_and_leader_changes() {
    let started = Instant::now();
    let options = ClusterOptions::new("metrics-test").deadlines(CLUSTER_DEADLINE, CLUSTER_DEADLINE);
    let cluster = Cluster::start(options, &MIXED);
    let leader = cluster.wait_leader();
    let address = |i: usize| cluster.members[i].address();
    ctl_ok(&address(leader), &["put", "k", "v"]);
    let witness = (leader + 1) % 3;
    let target = (leader + 2) % 3;

    // Once heartbeats have gone round both ways, every peer family has a
    // series per peer (a family appears with its first series).
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    let before = loop {
        let metrics = Metrics::get(&address(leader));
        let answered = metrics
            .samples("etcd_network_peer_round_trip_time_seconds")
            .len();
        let peers_counted = PEER_FAMILIES
            .iter()
            .all(|&(family, _, _)| metrics.samples(family).len() >= 2);
        if (answered == 2 && peers_counted) || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for &(family, kind, labels) in FAMILIES.iter().chain(PEER_FAMILIES) {
        before.check_family(family, kind, labels);
    }
    for &(family, start, count) in BUCKETS {
        before.check_buckets(family, start, count);
    }
    assert_eq!(before.value("etcd_server_is_leader", &[]), 1.0);
    assert_eq!(before.samples("etcd_network_active_peers").len(), 2);
    for sample in before.samples("etcd_network_active_peers") {
        assert_eq!(sample.value, Value::Gauge(1.0), "{sample:?}");
    }
    for sample in before.samples("etcd_network_peer_sent_bytes_total") {
        assert!(
            matches!(sample.value, Value::Counter(v) if v > 0.0),
            "{sample:?}"
        );
    }
    for sample in before.samples("etcd_network_peer_received_bytes_total") {
        assert!(
            matches!(sample.value, Value::Counter(v) if v > 0.0),
            "{sample:?}"
        );
    }

    let seen = Metrics::get(&address(witness));
    assert_eq!(seen.value("etcd_server_is_leader", &[]), 0.0);
    assert_eq!(seen.value("etcd_server_has_leader", &[]), 1.0);
    let changes = seen.value("etcd_server_leader_changes_seen_total", &[]);
    let target_id =
        oxetcd_tests::probe::member_id(&address(leader), &cluster.members[target].peer_url());
    ctl_ok(&address(leader), &["move-leader", &target_id]);
    let deadline = Instant::now() + CLUSTER_DEADLINE;
    loop {
        let now = Metrics::get(&address(witness));
        if now.value("etcd_server_leader_changes_seen_total", &[]) > changes {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no leader change seen:\n{}",
            now.text
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let new_leader = Metrics::get(&address(target));
    assert_eq!(new_leader.value("etcd_server_is_leader", &[]), 1.0);
    eprintln!("cluster: {:?}", started.elapsed());
}
