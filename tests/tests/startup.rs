//! Startup and shutdown as etcd's tooling expects: the server creates its
//! data dir, logs etcd's two readiness lines once clients are served, and
//! stops on SIGTERM without losing acknowledged writes. Debian's etcd runs
//! the same checks as the reference.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use oxetcd_tests::{Grpc, Server, ServerKind};

/// etcd's cluster ID for a default single member.
const DEFAULT_CLUSTER_ID: &str = "cdf818194e3a8c32";

/// Longest a server may take to stop after SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(10);

/// Longest to wait for the readiness lines once the server answers.
const LOG_DEADLINE: Duration = Duration::from_secs(10);

/// Writes made before the SIGTERM.
const WRITES: usize = 20;

fn readiness(kind: ServerKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("not/yet/there");
    let server = Server::start_in(kind, &data_dir).unwrap_or_else(|e| panic!("{e}"));
    // Readiness is logged around the time the client listener accepts
    // connections (etcd may log `published` just after its first answer),
    // so wait, bounded, for both lines to reach the log file.
    Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    let published = format!(
        "published {{Name:default ClientURLs:[{}]}} to cluster {DEFAULT_CLUSTER_ID}",
        server.endpoint()
    );
    let logged_by = std::time::Instant::now() + LOG_DEADLINE;
    let mut log = server.log();
    while !(log.contains(&published) && log.contains("enabled capabilities for version "))
        && std::time::Instant::now() < logged_by
    {
        std::thread::sleep(Duration::from_millis(20));
        log = server.log();
    }
    assert!(
        log.contains(&published),
        "{} did not log `{published}`:\n{log}",
        kind.name()
    );
    assert!(
        log.contains("enabled capabilities for version "),
        "{} did not log `enabled capabilities for version`:\n{log}",
        kind.name()
    );
    assert!(
        data_dir.is_dir(),
        "{} did not create --data-dir {}",
        kind.name(),
        data_dir.display()
    );
}

fn sigterm_keeps_writes(kind: ServerKind) {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("data");
    let mut server = Server::start_in(kind, &data_dir).unwrap_or_else(|e| panic!("{e}"));
    let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..WRITES {
        let put = PutRequest {
            key: format!("term/{i:03}").into_bytes(),
            value: i.to_string().into_bytes(),
            ..Default::default()
        };
        client.put(put).unwrap_or_else(|e| panic!("put {i}: {e}"));
    }
    drop(client);
    server
        .terminate(STOP_DEADLINE)
        .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
    drop(server);

    let server = Server::start_in(kind, &data_dir).unwrap_or_else(|e| panic!("restart: {e}"));
    let mut client = Grpc::connect(server.endpoint()).unwrap_or_else(|e| panic!("{e}"));
    let all = client
        .range(RangeRequest {
            key: b"term/".to_vec(),
            range_end: b"term0".to_vec(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("range: {e}"));
    let revision = all.header.map_or(0, |h| h.revision);
    assert_eq!(
        (all.kvs.len(), revision),
        (WRITES, 1 + WRITES as i64),
        "{}: keys and revision after a SIGTERM restart\n{}",
        kind.name(),
        server.log_tail()
    );
}

#[test]
fn oxetcd_logs_readiness_and_creates_its_data_dir() {
    readiness(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_logs_readiness_and_creates_its_data_dir() {
    readiness(ServerKind::OxetcdSmol);
}

#[test]
fn etcd_logs_readiness_and_creates_its_data_dir() {
    readiness(ServerKind::Etcd);
}

#[test]
fn oxetcd_stops_on_sigterm_and_keeps_writes() {
    sigterm_keeps_writes(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_stops_on_sigterm_and_keeps_writes() {
    sigterm_keeps_writes(ServerKind::OxetcdSmol);
}

#[test]
fn etcd_stops_on_sigterm_and_keeps_writes() {
    sigterm_keeps_writes(ServerKind::Etcd);
}
