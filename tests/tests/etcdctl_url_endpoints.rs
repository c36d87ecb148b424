//! Debian's etcdctl 3.4 given `--endpoints http://127.0.0.1:PORT` (a URL,
//! not a bare address) against both oxetcd binaries, and against etcd to
//! show the expectations are etcd's.
//!
//! Regression: etcdctl dials `passthrough:///http://127.0.0.1:PORT` for
//! its per-endpoint commands, so grpc-go sends `:authority:
//! http://127.0.0.1:PORT`, which etcd accepts; a server that refuses it
//! as a malformed authority fails `endpoint status` and `endpoint
//! health`. oxetcd routes by `:path` and takes the authority as sent.

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Server, ServerKind};
use serde_json::Value;

/// Runs `etcdctl --endpoints <server's URL> <command>`, which must succeed,
/// and parses its JSON output.
fn json(server: &Server, command: &str) -> Value {
    let args: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    let output = etcdctl::run(server.endpoint(), &args, None).unwrap_or_else(|e| panic!("{e}"));
    let Output {
        stdout,
        stderr,
        code,
    } = &output;
    assert_eq!(
        *code,
        0,
        "{}: etcdctl --endpoints {} {command} exited {code}\nstdout: {stdout}\nstderr: {stderr}\n--- server log ---\n{}",
        server.kind().name(),
        server.endpoint(),
        server.log_tail()
    );
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{command}: {e}: {stdout}"))
}

fn check(kind: ServerKind) {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    assert!(server.endpoint().starts_with("http://"));

    let status = json(&server, "endpoint status -w json");
    let entries = status.as_array().expect("endpoint status prints an array");
    assert_eq!(entries.len(), 1, "{status}");
    assert_eq!(entries[0]["Endpoint"], server.endpoint(), "{status}");
    let member_id = &entries[0]["Status"]["header"]["member_id"];
    assert!(member_id.as_u64().is_some_and(|id| id != 0), "{status}");
    assert_eq!(entries[0]["Status"]["leader"], *member_id, "{status}");

    let health = json(&server, "endpoint health -w json");
    assert_eq!(health[0]["endpoint"], server.endpoint(), "{health}");
    assert_eq!(health[0]["health"], true, "{health}");

    // The plain form of both commands, and a key-value round trip.
    for command in ["endpoint status", "endpoint health", "put url-endpoint yes"] {
        let args: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
        let output = etcdctl::run(server.endpoint(), &args, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(output.code, 0, "{command}: {output:?}");
    }
    let got = json(&server, "get url-endpoint -w json");
    assert_eq!(got["count"], 1, "{got}");
}

#[test]
fn oxetcd_serves_etcdctl_with_url_endpoints() {
    check(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_serves_etcdctl_with_url_endpoints() {
    check(ServerKind::OxetcdSmol);
}

#[test]
fn etcd_serves_etcdctl_with_url_endpoints() {
    check(ServerKind::Etcd);
}
