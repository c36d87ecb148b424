//! TLS on the client port, end to end: Debian's etcdctl and oxetcdctl over
//! `https://` against both oxetcd binaries and against Debian's etcd
//! started the same way (which shows the expectations are etcd's).
//!
//! Certificates are made at test time (`oxetcd_tls::test_pki`): a CA, a server
//! certificate for 127.0.0.1 and localhost, a client certificate, and a
//! second CA that signed none of them. Every server binds 127.0.0.1 only,
//! every wait is bounded, and every check is one that a broken TLS setup
//! would fail.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::pki::{logged_refusal, path_arg, pki, Pki};
use oxetcd_tests::{binary_path, Launch, Ports, Server, ServerKind};
use oxetcd_tls::rustls;
use serde_json::Value;

/// Longest a raw socket read may block in these tests.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(5);

/// What etcd and oxetcd log once they serve clients.
const READY_LINE: &str = "enabled capabilities for version";

/// Longest a server may take to log [`READY_LINE`].
const READY_DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------
// Servers.

/// A server whose client URLs are given by the test.
struct Running {
    server: Server,
    _data: tempfile::TempDir,
}

/// Starts `kind` serving clients at `client_urls` (the first one's port is
/// waited for) with `flags` added; the URLs are advertised as given.
fn start(kind: ServerKind, client_urls: &[String], flags: &[String]) -> Result<Running, String> {
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;
    let server = Launch::new(
        kind,
        "default",
        &data.path().join("data"),
        client_urls.to_vec(),
        Ports::Kernel.http_url(),
    )
    .flags(flags)
    .start()?;
    // The port accepts connections from the moment it is bound, before
    // certificates are loaded or made; the readiness line comes after.
    let started = Instant::now();
    while !server.log().contains(READY_LINE) {
        if started.elapsed() > READY_DEADLINE {
            return Err(format!(
                "{} never logged {READY_LINE:?}\n{}",
                kind.name(),
                server.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Running {
        server,
        _data: data,
    })
}

/// Starts `kind` on one `https://` URL with the test PKI's server
/// certificate and `flags`; returns it and its URL.
fn start_tls(kind: ServerKind, pki: &Pki, flags: &[&str]) -> (Running, String) {
    let url = Ports::Kernel.https_url();
    let mut all = vec![
        path_arg("cert-file", &pki.server_cert),
        path_arg("key-file", &pki.server_key),
    ];
    all.extend(flags.iter().map(|f| (*f).to_owned()));
    let running = start(kind, std::slice::from_ref(&url), &all)
        .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
    (running, url)
}

// ---------------------------------------------------------------------
// Clients.

fn args(words: &str) -> Vec<String> {
    words.split_whitespace().map(str::to_owned).collect()
}

/// Debian's etcdctl at `endpoint` with `tls` flags, then `command`.
fn etcdctl(endpoint: &str, tls: &[String], command: &str) -> Output {
    let mut all = tls.to_vec();
    all.extend(args(command));
    etcdctl::run(endpoint, &all, None).unwrap_or_else(|e| panic!("{e}"))
}

/// oxetcdctl, invoked exactly as [`etcdctl`] invokes etcdctl.
fn oxetcdctl(endpoint: &str, tls: &[String], command: &str) -> Output {
    let program = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    let mut all = tls.to_vec();
    all.extend(args(command));
    etcdctl::run_program(&program, endpoint, &all, None).unwrap_or_else(|e| panic!("{e}"))
}

/// oxetcdctl with exactly `args` (no default flags; clap refuses a flag
/// given twice), killed if it runs too long.
fn oxetcdctl_exactly(args: &[String]) -> Output {
    let program = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    etcdctl::run_exactly(&program, args, None).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts a client failed with a request error, not a usage error.
fn failed_to_connect(what: &str, output: &Output) {
    assert_ne!(output.code, 0, "{what}: {output:?}");
    assert!(
        output.stderr.contains("Error: ") && !output.stderr.contains("argument"),
        "{what}: {output:?}"
    );
}

fn cacert(path: &Path) -> Vec<String> {
    vec![path_arg("cacert", path)]
}

fn succeeded(what: &str, output: &Output, server: &Server) {
    assert_eq!(
        output.code,
        0,
        "{what} against {}: {output:?}\n--- server log ---\n{}",
        server.kind().name(),
        server.log_tail()
    );
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", output.stdout))
}

/// A plain HTTP/1.1 GET over TLS with rustls, verifying against `ca`:
/// the status line and the body.
fn https_get(url: &str, ca: &Path, path: &str) -> Result<(String, String), String> {
    let settings = oxetcd_tls::ClientSettings {
        ca_file: Some(ca.to_path_buf()),
        ..Default::default()
    };
    let mut config = (*settings.build().map_err(|e| e.to_string())?).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let address = url.trim_start_matches("https://");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let socket = TcpStream::connect(address).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // The server may end the connection without close_notify once the
    // response is complete; what arrived before counts.
    if let Err(e) = stream.read_to_end(&mut response) {
        if response.is_empty() {
            return Err(e.to_string());
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    ))
}

/// Sends `bytes` on a fresh TCP connection to `url`'s port and reads until
/// the server closes it; returns what came back. Fails if the server
/// neither answers nor closes within [`SOCKET_TIMEOUT`].
fn raw_exchange(url: &str, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let address = url.split_once("://").map_or(url, |(_, a)| a);
    let mut socket = TcpStream::connect(address).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| e.to_string())?;
    socket.write_all(bytes).map_err(|e| e.to_string())?;
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    while started.elapsed() < SOCKET_TIMEOUT * 2 {
        match socket.read(&mut chunk) {
            Ok(0) => return Ok(received),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(received),
            Err(e) => return Err(format!("the server kept the connection open: {e}")),
        }
    }
    Err("the server kept the connection open".to_owned())
}

// ---------------------------------------------------------------------
// etcdctl against the oxetcd binaries.

fn etcdctl_works_over_tls(kind: ServerKind) {
    let pki = pki();
    let (running, url) = start_tls(kind, &pki, &[]);
    let server = &running.server;
    let tls = cacert(&pki.ca);

    let put = etcdctl(&url, &tls, "put tls-key tls-value");
    succeeded("put", &put, server);
    assert_eq!(put.stdout.trim(), "OK");
    let get = etcdctl(&url, &tls, "get tls-key");
    succeeded("get", &get, server);
    assert_eq!(get.stdout, "tls-key\ntls-value\n");

    let status = etcdctl(&url, &tls, "endpoint status -w json");
    succeeded("endpoint status", &status, server);
    let status = json(&status);
    assert_eq!(status[0]["Endpoint"], url.as_str(), "{status}");
    assert!(status[0]["Status"]["header"]["member_id"]
        .as_u64()
        .is_some());

    let health = etcdctl(&url, &tls, "endpoint health -w json");
    succeeded("endpoint health", &health, server);
    assert_eq!(json(&health)[0]["health"], true);

    // The advertised URL is published as configured.
    let members = etcdctl(&url, &tls, "member list -w json");
    succeeded("member list", &members, server);
    assert_eq!(json(&members)["members"][0]["clientURLs"][0], url.as_str());

    // The HTTP endpoints share the TLS port.
    let (status_line, body) = https_get(&url, &pki.ca, "/health").expect("GET /health");
    assert!(status_line.contains("200"), "{status_line}: {body}");
    assert!(body.contains("\"health\":\"true\""), "{body}");
    let (status_line, body) = https_get(&url, &pki.ca, "/version").expect("GET /version");
    assert!(status_line.contains("200"), "{status_line}");
    assert!(body.contains("etcdserver"), "{body}");

    let log = server.log();
    assert!(log.contains("serving client traffic securely"), "{log}");
    assert!(!log.contains("serving client traffic insecurely"), "{log}");
}

#[test]
fn etcdctl_over_tls_against_oxetcd() {
    etcdctl_works_over_tls(ServerKind::Oxetcd);
}

#[test]
fn etcdctl_over_tls_against_oxetcd_smol() {
    etcdctl_works_over_tls(ServerKind::OxetcdSmol);
}

fn client_certificates_are_required(kind: ServerKind) {
    let pki = pki();
    let (running, url) = start_tls(
        kind,
        &pki,
        &[&path_arg("trusted-ca-file", &pki.ca), "--client-cert-auth"],
    );
    let server = &running.server;
    let quick = [
        "--dial-timeout=2s".to_owned(),
        "--command-timeout=3s".to_owned(),
    ];
    let mut without = cacert(&pki.ca);
    without.extend(quick.iter().cloned());
    let mut with = cacert(&pki.ca);
    with.push(path_arg("cert", &pki.client_cert));
    with.push(path_arg("key", &pki.client_key));

    let refused = etcdctl(&url, &without, "put k v");
    failed_to_connect("etcdctl without a client certificate", &refused);
    let started = Instant::now();
    let refused = oxetcdctl(&url, &cacert(&pki.ca), "put k v");
    failed_to_connect("oxetcdctl without a client certificate", &refused);
    // Said at once, and said clearly: the server's alert, not a timeout.
    assert!(
        refused.stderr.to_ascii_lowercase().contains("certificate"),
        "{}: {refused:?}",
        kind.name()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The server says who it refused and why, as etcd words it.
    let log = server.log();
    assert!(
        logged_refusal(&log, "tls: client didn't provide"),
        "{}: no refusal logged:\n{log}",
        kind.name()
    );

    let accepted = etcdctl(&url, &with, "put k v");
    succeeded("etcdctl put with a client certificate", &accepted, server);
    let accepted = oxetcdctl(&url, &with, "get k --print-value-only");
    succeeded("oxetcdctl get with a client certificate", &accepted, server);
    assert_eq!(accepted.stdout, "v\n");
}

#[test]
fn client_cert_auth_on_oxetcd() {
    client_certificates_are_required(ServerKind::Oxetcd);
}

#[test]
fn client_cert_auth_on_oxetcd_smol() {
    client_certificates_are_required(ServerKind::OxetcdSmol);
}

#[test]
fn client_cert_auth_on_etcd() {
    client_certificates_are_required(ServerKind::Etcd);
}

// ---------------------------------------------------------------------
// oxetcdctl against etcd and oxetcd over TLS, compared with etcdctl.

const SESSION: &[&str] = &[
    "put a 1",
    "put b 2 -w json",
    "get a",
    "get a -w json",
    "get a --from-key --keys-only",
    "get b --print-value-only",
    "del a",
    "get a -w json",
    "endpoint health",
    "endpoint status",
    "endpoint status -w json",
];

/// Runs [`SESSION`] with `client` on a fresh TLS server of `kind`,
/// normalised.
fn session(kind: ServerKind, client: fn(&str, &[String], &str) -> Output) -> Vec<Output> {
    let pki = pki();
    let (running, url) = start_tls(kind, &pki, &[]);
    let tls = cacert(&pki.ca);
    SESSION
        .iter()
        .map(|command| {
            let output = client(&url, &tls, command);
            assert_eq!(
                output.code,
                0,
                "{command} on {}: {output:?}\n{}",
                kind.name(),
                running.server.log_tail()
            );
            etcdctl::normalise(&output, &url)
        })
        .collect()
}

fn assert_same(what: &str, want: &[Output], got: &[Output]) {
    for ((command, want), got) in SESSION.iter().zip(want).zip(got) {
        assert_eq!(want, got, "{what}: `{command}` differs");
    }
}

#[test]
fn oxetcdctl_over_tls_prints_what_etcdctl_prints() {
    let reference = session(ServerKind::Etcd, etcdctl);
    assert_same(
        "oxetcdctl against etcd",
        &reference,
        &session(ServerKind::Etcd, oxetcdctl),
    );
    assert_same(
        "etcdctl against oxetcd",
        &reference,
        &session(ServerKind::Oxetcd, etcdctl),
    );
    assert_same(
        "oxetcdctl against oxetcd",
        &reference,
        &session(ServerKind::Oxetcd, oxetcdctl),
    );
}

#[test]
fn oxetcdctl_skips_verification_when_asked() {
    let pki = pki();
    let (running, url) = start_tls(ServerKind::Oxetcd, &pki, &[]);
    let server = &running.server;
    let skip = vec!["--insecure-skip-tls-verify".to_owned()];
    let put = oxetcdctl(&url, &skip, "put skip yes");
    succeeded("put with --insecure-skip-tls-verify", &put, server);
    // A bare address with --insecure-transport=false is a TLS endpoint too.
    let address = url.trim_start_matches("https://");
    let bare = vec![
        "--insecure-skip-tls-verify".to_owned(),
        "--insecure-transport=false".to_owned(),
    ];
    let get = oxetcdctl(address, &bare, "get skip --print-value-only");
    succeeded("get on a bare address", &get, server);
    assert_eq!(get.stdout, "yes\n");
    // The environment forms.
    let program = binary_path("oxetcdctl").expect("oxetcdctl");
    let output = std::process::Command::new(program)
        .env("ETCDCTL_ENDPOINTS", address)
        .env("ETCDCTL_CACERT", &pki.ca)
        .args(["get", "skip", "--print-value-only"])
        .output()
        .expect("run oxetcdctl");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(output.stdout, b"yes\n");
}

#[test]
fn a_wrong_ca_fails_clearly_and_quickly() {
    let pki = pki();
    let (_running, url) = start_tls(ServerKind::Oxetcd, &pki, &[]);
    let started = Instant::now();
    let output = oxetcdctl(&url, &cacert(&pki.other_ca), "get k");
    assert_ne!(output.code, 0, "{output:?}");
    assert!(
        output.stderr.starts_with("Error: ") && output.stderr.contains("certificate"),
        "{output:?}"
    );
    assert!(output.stderr.contains(&url), "{output:?}");
    // Not retried until the command timeout (10 s here): it cannot heal.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // etcdctl refuses it too.
    let mut wrong = cacert(&pki.other_ca);
    wrong.extend([
        "--dial-timeout=2s".to_owned(),
        "--command-timeout=3s".to_owned(),
    ]);
    failed_to_connect("etcdctl with a wrong CA", &etcdctl(&url, &wrong, "get k"));
    // A CA file that does not exist is named.
    let missing = pki.dir.path().join("missing-ca.pem");
    let output = oxetcdctl(&url, &cacert(&missing), "get k");
    failed_to_connect("oxetcdctl with a missing CA file", &output);
    assert!(output.stderr.contains("missing-ca.pem"), "{output:?}");
}

#[test]
fn failover_moves_across_tls_endpoints() {
    let pki = pki();
    let (running, url) = start_tls(ServerKind::Oxetcd, &pki, &[]);
    // Nothing listens on the first endpoint.
    let dead = Ports::Kernel.https_url();
    let endpoints = format!("{dead},{url}");
    let put = oxetcdctl(&endpoints, &cacert(&pki.ca), "put failover ok");
    succeeded("put with a dead first endpoint", &put, &running.server);
    let get = oxetcdctl(
        &endpoints,
        &cacert(&pki.ca),
        "get failover --print-value-only",
    );
    succeeded("get", &get, &running.server);
    assert_eq!(get.stdout, "ok\n");
}

// ---------------------------------------------------------------------
// Bad traffic on the TLS port, plaintext beside it, broken setups.

fn bad_traffic_ends_one_connection(kind: ServerKind) {
    let pki = pki();
    let (running, url) = start_tls(kind, &pki, &[]);
    let server = &running.server;
    for bytes in [
        &b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        &[0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0x00, 0xff, 0xff],
        &[0xAB; 2048],
    ] {
        let answer = raw_exchange(&url, bytes).unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
        // At most a TLS alert comes back, never an HTTP answer.
        assert!(
            answer.is_empty() || answer[0] == 0x15,
            "{}: {:?}",
            kind.name(),
            String::from_utf8_lossy(&answer)
        );
    }
    // A client that connects and says nothing does not block others.
    let idle = TcpStream::connect(url.trim_start_matches("https://")).expect("idle connection");
    // A plaintext gRPC client on the TLS port fails, quickly.
    let address = url.trim_start_matches("https://");
    let plaintext = oxetcdctl_exactly(&args(&format!(
        "--endpoints=http://{address} --command-timeout=2s get k"
    )));
    failed_to_connect("plaintext on the TLS port", &plaintext);

    let put = etcdctl(&url, &cacert(&pki.ca), "put still serving");
    succeeded("put after bad traffic", &put, server);
    let get = oxetcdctl(&url, &cacert(&pki.ca), "get still --print-value-only");
    succeeded("get after bad traffic", &get, server);
    assert_eq!(get.stdout, "serving\n");
    let _ = idle.shutdown(Shutdown::Both);
}

#[test]
fn bad_traffic_on_the_tls_port_of_oxetcd() {
    bad_traffic_ends_one_connection(ServerKind::Oxetcd);
}

#[test]
fn bad_traffic_on_the_tls_port_of_oxetcd_smol() {
    bad_traffic_ends_one_connection(ServerKind::OxetcdSmol);
}

#[test]
fn http_and_https_side_by_side() {
    let pki = pki();
    let secure = Ports::Kernel.https_url();
    let plain = Ports::Kernel.http_url();
    let running = start(
        ServerKind::Oxetcd,
        &[secure.clone(), plain.clone()],
        &[
            path_arg("cert-file", &pki.server_cert),
            path_arg("key-file", &pki.server_key),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let server = &running.server;
    let put = etcdctl(&plain, &[], "put side by-side");
    succeeded("plaintext put", &put, server);
    let get = etcdctl(&secure, &cacert(&pki.ca), "get side --print-value-only");
    succeeded("TLS get", &get, server);
    assert_eq!(get.stdout, "by-side\n");
    let members = oxetcdctl(&plain, &[], "member list -w json");
    succeeded("member list", &members, server);
    let members = json(&members);
    assert_eq!(
        members["members"][0]["clientURLs"],
        serde_json::json!([secure, plain]),
        "{members}"
    );
    let log = server.log();
    assert!(log.contains("serving client traffic securely"), "{log}");
    assert!(log.contains("serving client traffic insecurely"), "{log}");
    // TLS on the plaintext port fails; plaintext keeps working.
    let address = plain.trim_start_matches("http://");
    let tls_on_plain = oxetcdctl_exactly(&[
        format!("--endpoints=https://{address}"),
        path_arg("cacert", &pki.ca),
        "--command-timeout=2s".to_owned(),
        "get".to_owned(),
        "side".to_owned(),
    ]);
    failed_to_connect("TLS on the plaintext port", &tls_on_plain);
    succeeded("plaintext get", &etcdctl(&plain, &[], "get side"), server);
}

#[test]
fn auto_tls_serves_a_self_signed_certificate() {
    let url = Ports::Kernel.https_url();
    let running = start(
        ServerKind::Oxetcd,
        std::slice::from_ref(&url),
        &["--auto-tls".to_owned()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let server = &running.server;
    let cert = server
        .data_dir()
        .join("fixtures")
        .join("client")
        .join("cert.pem");
    assert!(cert.is_file(), "{}", server.log_tail());
    let put = oxetcdctl(
        &url,
        &["--insecure-skip-tls-verify".to_owned()],
        "put auto tls",
    );
    succeeded("put with verification skipped", &put, server);
    // The certificate verifies when it is trusted itself.
    let get = oxetcdctl(&url, &cacert(&cert), "get auto --print-value-only");
    succeeded("get trusting the generated certificate", &get, server);
    assert_eq!(get.stdout, "tls\n");
    // Without either, the unknown issuer is refused.
    let refused = etcdctl(
        &url,
        &[
            "--dial-timeout=2s".to_owned(),
            "--command-timeout=3s".to_owned(),
        ],
        "get auto",
    );
    failed_to_connect("etcdctl not trusting the certificate", &refused);
}

#[test]
fn broken_tls_setups_stop_the_server_with_a_clear_error() {
    let pki = pki();
    let missing = pki.dir.path().join("no-such-cert.pem");
    for (flags, expected) in [
        (vec![], "must be provided for client url"),
        (
            vec![
                path_arg("cert-file", &missing),
                path_arg("key-file", &pki.server_key),
            ],
            "no-such-cert.pem",
        ),
        (
            vec![
                path_arg("cert-file", &pki.server_cert),
                path_arg("key-file", &pki.client_key),
            ],
            "client-key.pem",
        ),
        (
            vec![
                "--auto-tls".to_owned(),
                path_arg("peer-cert-file", &missing),
                path_arg("peer-key-file", &pki.peer_key),
            ],
            "cannot set up peer TLS: cannot read",
        ),
        (
            vec![
                "--auto-tls".to_owned(),
                path_arg("peer-cert-file", &pki.peer_cert),
                path_arg("peer-key-file", &pki.client_key),
            ],
            "client-key.pem",
        ),
    ] {
        let url = Ports::Kernel.https_url();
        let error = match start(ServerKind::Oxetcd, &[url], &flags) {
            Ok(_) => panic!("{flags:?}: the server started"),
            Err(e) => e,
        };
        assert!(error.contains(expected), "{flags:?}: {error}");
    }
}

#[test]
fn bench_runs_over_tls() {
    let pki = pki();
    let (running, url) = start_tls(ServerKind::OxetcdSmol, &pki, &[]);
    let output = oxetcdctl_exactly(&[
        format!("--endpoints={url}"),
        path_arg("cacert", &pki.ca),
        "bench".to_owned(),
        "put".to_owned(),
        "--total=100".to_owned(),
        "--clients=4".to_owned(),
        "--conns=2".to_owned(),
    ]);
    succeeded("bench put", &output, &running.server);
    assert!(output.stdout.contains("Summary:"), "{output:?}");
    let wrong = oxetcdctl_exactly(&[
        format!("--endpoints={url}"),
        path_arg("cacert", &pki.other_ca),
        "bench".to_owned(),
        "put".to_owned(),
        "--total=10".to_owned(),
    ]);
    failed_to_connect("bench with a wrong CA", &wrong);
    assert!(wrong.stderr.contains("certificate"), "{wrong:?}");
}
