//! Unix socket URLs end to end: members listening on `unix://` client,
//! peer and metrics sockets, served to Debian's etcdctl and to oxetcdctl;
//! a cluster whose members reach each other over unix peer sockets; and
//! `unixs://`, TLS over a socket. The single-member case runs against
//! Debian's etcd started the same way too, which shows the expectations
//! are etcd's.
//!
//! Sockets live in each test's temporary directory; every server also
//! binds one TCP port on 127.0.0.1 (the harness waits for it). Every wait
//! is bounded.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::pki::{path_arg, pki};
use oxetcd_tests::{binary_path, Launch, Ports, Server, ServerKind};

/// What etcd and oxetcd log once they serve clients.
const READY_LINE: &str = "enabled capabilities for version";

/// Longest a server may take to log [`READY_LINE`], or a cluster to agree.
const DEADLINE: Duration = Duration::from_secs(20);

/// Starts `launch` and waits for its readiness line.
fn start(launch: &Launch) -> Server {
    let server = launch.start().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while !server.log().contains(READY_LINE) {
        assert!(
            started.elapsed() < DEADLINE,
            "{} never logged {READY_LINE:?}\n{}",
            launch.kind.name(),
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// `unix://<dir>/<name>`.
fn unix_url(dir: &Path, name: &str) -> String {
    format!("unix://{}", dir.join(name).display())
}

/// `program` (etcdctl or oxetcdctl) run against `endpoint` with `args`.
fn run(program: &Path, endpoint: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run_program(program, endpoint, &args, None).unwrap_or_else(|e| panic!("{e}"))
}

/// `args` run by `program`, which must succeed; its stdout.
fn run_ok(program: &Path, endpoint: &str, args: &[&str]) -> String {
    let out = run(program, endpoint, args);
    assert_eq!(
        out.code,
        0,
        "{} {args:?} on {endpoint}: {out:?}",
        program.display()
    );
    out.stdout
}

/// An HTTP/1.0 GET of `path` over the unix socket at `socket`: the whole
/// response, head and body. HTTP/1.0, so that no server chunks the body
/// (a chunk boundary could split the text a test looks for).
fn http_get(socket: &Path, path: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap_or_else(|e| panic!("{socket:?}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    response
}

/// Socket files named relative to the working directory, removed when
/// dropped.
struct RelativeSockets(Vec<String>);

impl Drop for RelativeSockets {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = std::fs::remove_file(name);
        }
    }
}

/// One member serving clients on a TCP port and a unix socket, metrics on
/// a unix socket, and its peers on a unix socket; both etcdctl and
/// oxetcdctl put and get over the socket, and the member lists its unix
/// URLs. etcd 3.4 takes only sockets named `host:port` relative to its
/// working directory (the form of etcd's e2e `TestEtcdUnixPeers`,
/// `unix://etcd.unix:1`), so the sockets are named so, in the working
/// directory the server shares with the test.
fn single_member(kind: ServerKind) {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("oxetcd-test-{}-{}", std::process::id(), kind.name());
    let names = ["client", "peer", "metrics"].map(|role| format!("{tag}-{role}.unix:1"));
    let _sockets = RelativeSockets(names.to_vec());
    let client = format!("unix://{}", names[0]);
    let peer = format!("unix://{}", names[1]);
    let metrics = Path::new(&names[2]).to_path_buf();
    let launch = Launch::new(
        kind,
        "u1",
        &dir.path().join("data"),
        vec![Ports::Kernel.http_url(), client.clone()],
        peer.clone(),
    )
    .member(&peer, &format!("u1={peer}"), "new", "unix-sockets")
    .flags(&[format!(
        "--listen-metrics-urls=unix://{}",
        metrics.display()
    )]);
    let server = start(&launch);

    let etcdctl = etcdctl::program().unwrap_or_else(|e| panic!("{e}"));
    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        run_ok(&etcdctl, &client, &["put", "k", "from-etcdctl"]),
        "OK\n"
    );
    assert_eq!(
        run_ok(&oxetcdctl, &client, &["get", "k"]),
        "k\nfrom-etcdctl\n"
    );
    assert_eq!(
        run_ok(&oxetcdctl, &client, &["put", "k", "from-oxetcdctl"]),
        "OK\n"
    );
    assert_eq!(
        run_ok(&etcdctl, &client, &["get", "k", "--print-value-only"]),
        "from-oxetcdctl\n"
    );

    let members = run_ok(&etcdctl, &client, &["member", "list"]);
    assert!(members.contains(&format!(", u1, {peer}, ")), "{members}");
    assert!(members.contains(&client), "{members}");

    let health = http_get(&metrics, "/health");
    assert!(
        health.starts_with("HTTP/1.") && health.contains(" 200 "),
        "{health}"
    );
    assert!(health.contains(r#""health":"true""#), "{health}");
    let scrape = http_get(&metrics, "/metrics");
    assert!(
        scrape.contains("etcd_server_has_leader 1"),
        "{}",
        &scrape[..scrape.len().min(500)]
    );

    // A socket that is not there fails the call, and nothing else.
    let missing = unix_url(dir.path(), "missing.sock");
    assert_ne!(run(&oxetcdctl, &missing, &["get", "k"]).code, 0);
    drop(server);
}

#[test]
fn oxetcd_serves_on_unix_sockets() {
    single_member(ServerKind::Oxetcd);
}

#[test]
fn oxetcd_smol_serves_on_unix_sockets() {
    single_member(ServerKind::OxetcdSmol);
}

#[test]
fn etcd_serves_on_unix_sockets_the_same_way() {
    single_member(ServerKind::Etcd);
}

/// Three members of both binaries whose peer URLs are unix sockets: a
/// write through one member is read from each of the others.
#[test]
fn a_cluster_talks_over_unix_peer_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let kinds = [
        ServerKind::Oxetcd,
        ServerKind::OxetcdSmol,
        ServerKind::Oxetcd,
    ];
    let names = ["m0", "m1", "m2"];
    let peers: Vec<String> = names
        .iter()
        .map(|name| unix_url(dir.path(), &format!("{name}-peer.sock")))
        .collect();
    let initial_cluster = names
        .iter()
        .zip(&peers)
        .map(|(name, peer)| format!("{name}={peer}"))
        .collect::<Vec<_>>()
        .join(",");
    let launches: Vec<Launch> = (0..3)
        .map(|i| {
            Launch::new(
                kinds[i],
                names[i],
                &dir.path().join(names[i]),
                vec![Ports::BELOW_EPHEMERAL.http_url()],
                peers[i].clone(),
            )
            .member(&peers[i], &initial_cluster, "new", "unix-peers")
        })
        .collect();
    // Each member waits for a quorum before it is ready: start them all,
    // then wait.
    let servers: Vec<Server> = launches
        .iter()
        .map(|l| l.start().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let endpoints: Vec<&String> = launches.iter().map(|l| &l.client_urls[0]).collect();
    let etcdctl = etcdctl::program().unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    while run(&etcdctl, endpoints[0], &["put", "shared", "over-unix"]).code != 0 {
        assert!(
            started.elapsed() < DEADLINE,
            "no quorum\n{}",
            servers[0].log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for endpoint in &endpoints[1..] {
        let out = run_ok(&etcdctl, endpoint, &["get", "shared", "--print-value-only"]);
        assert_eq!(out, "over-unix\n", "{endpoint}");
    }
    let members = run_ok(&etcdctl, endpoints[2], &["member", "list"]);
    for peer in &peers {
        assert!(members.contains(peer.as_str()), "{members}");
    }
}

/// `unixs://`: TLS over a unix socket, the server name being the socket's
/// file name (here `localhost`, which the test certificate names). A
/// client without the CA is refused.
#[test]
fn unixs_is_tls_over_a_socket() {
    let pki = pki();
    let dir = tempfile::tempdir().unwrap();
    let socket = format!("unixs://{}", dir.path().join("localhost").display());
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let data = dir.path().join(kind.name());
        let launch = Launch::new(
            kind,
            "default",
            &data,
            vec![Ports::Kernel.http_url(), socket.clone()],
            Ports::Kernel.http_url(),
        )
        .flags(&[
            path_arg("cert-file", &pki.server_cert),
            path_arg("key-file", &pki.server_key),
        ]);
        let server = start(&launch);
        let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
        let cacert = path_arg("cacert", &pki.ca);
        assert_eq!(
            run_ok(&oxetcdctl, &socket, &[&cacert, "put", "t", "v"]),
            "OK\n"
        );
        assert_eq!(
            run_ok(&oxetcdctl, &socket, &[&cacert, "get", "t"]),
            "t\nv\n"
        );
        let refused = run(&oxetcdctl, &socket, &["get", "t"]);
        assert_ne!(refused.code, 0, "{}: {refused:?}", kind.name());
        assert!(
            refused.stderr.contains("certificate"),
            "{}: {refused:?}",
            kind.name()
        );
        drop(server);
    }
}
