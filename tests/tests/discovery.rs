//! Discovery end to end: members of both binaries that know only a
//! discovery token and a discovery cluster's endpoints (v3 discovery), or
//! only a DNS domain (SRV discovery, against a DNS server this test runs
//! on 127.0.0.1), bootstrap one cluster; a member too many is told the
//! cluster is full; a token without a size is refused. oxetcdctl finds
//! its endpoints by SRV records too.
//!
//! Every server binds 127.0.0.1; every wait is bounded.

use std::net::UdpSocket;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{binary_path, Launch, Ports, Server, ServerKind};
use simple_dns::rdata::{RData, SRV};
use simple_dns::{Name, Packet, ResourceRecord, CLASS};

/// Longest a cluster may take to form.
const DEADLINE: Duration = Duration::from_secs(30);

/// The kinds of the three members.
const KINDS: [ServerKind; 3] = [
    ServerKind::Oxetcd,
    ServerKind::OxetcdSmol,
    ServerKind::Oxetcd,
];

/// etcdctl `args` against `endpoint`.
fn ctl(endpoint: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    etcdctl::run(endpoint, &args, None).unwrap_or_else(|e| panic!("{e}"))
}

/// A member named `name` of `kind` on fresh ports, advertising its peer
/// URL at `peer_host`, with `flags`; not started.
fn planned(kind: ServerKind, name: &str, root: &Path, peer_host: &str, flags: &[String]) -> Launch {
    let peer_port = Ports::BELOW_EPHEMERAL.take();
    let mut all = vec![format!(
        "--initial-advertise-peer-urls=http://{peer_host}:{peer_port}"
    )];
    all.extend(flags.iter().cloned());
    Launch::new(
        kind,
        name,
        &root.join(name),
        vec![Ports::BELOW_EPHEMERAL.http_url()],
        format!("http://127.0.0.1:{peer_port}"),
    )
    .flags(&all)
}

/// The peer port `launch` listens on.
fn peer_port(launch: &Launch) -> u16 {
    launch
        .listen_peer_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {}", launch.listen_peer_url))
}

/// Starts every member (each waits in discovery for the others), then
/// waits until a put through the first one succeeds.
fn start_cluster(launches: &[Launch]) -> Vec<Server> {
    let servers: Vec<Server> = launches
        .iter()
        .map(|l| l.start().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let first = &launches[0].client_urls[0];
    let started = Instant::now();
    while ctl(first, &["put", "formed", "yes"]).code != 0 {
        assert!(
            started.elapsed() < DEADLINE,
            "the cluster never formed\n{}",
            servers
                .iter()
                .map(Server::log_tail)
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    servers
}

/// Every member lists the same three members, with the names and peer
/// URLs they started with, and reads what another wrote.
fn check_cluster(launches: &[Launch], peer_host: &str) {
    let listed = ctl(&launches[2].client_urls[0], &["member", "list"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert_eq!(listed.stdout.lines().count(), 3, "{}", listed.stdout);
    for launch in launches {
        let peer = format!("http://{peer_host}:{}", peer_port(launch));
        let line = format!(", started, {}, {peer}, ", launch.name);
        assert!(listed.stdout.contains(&line), "{line}\n{}", listed.stdout);
    }
    for launch in &launches[1..] {
        let out = ctl(
            &launch.client_urls[0],
            &["get", "formed", "--print-value-only"],
        );
        assert_eq!(out.stdout, "yes\n", "{}: {out:?}", launch.name);
    }
}

/// A server that must fail: its error, from its log.
fn failure_of(launch: &Launch) -> String {
    match launch.start() {
        Err(e) => e,
        Ok(mut server) => {
            let status = server.wait_exit(Duration::from_secs(20));
            assert!(
                status.is_some_and(|s| !s.success()),
                "{}",
                server.log_tail()
            );
            server.log()
        }
    }
}

#[test]
fn three_members_bootstrap_through_v3_discovery() {
    let root = tempfile::tempdir().unwrap();
    let registry = Launch::new(
        ServerKind::Oxetcd,
        "registry",
        &root.path().join("registry"),
        vec![Ports::BELOW_EPHEMERAL.http_url()],
        Ports::BELOW_EPHEMERAL.http_url(),
    );
    let _registry = registry.start().unwrap_or_else(|e| panic!("{e}"));
    let endpoint = registry.client_urls[0].clone();
    let size_key = "/_etcd/registry/token-1/_config/size";
    assert_eq!(ctl(&endpoint, &["put", size_key, "3"]).code, 0);
    let flags = |token: &str| {
        vec![
            format!("--discovery-token={token}"),
            format!("--discovery-endpoints={endpoint}"),
        ]
    };
    let launches: Vec<Launch> = (0..3)
        .map(|i| {
            planned(
                KINDS[i],
                &format!("d{i}"),
                root.path(),
                "127.0.0.1",
                &flags("token-1"),
            )
        })
        .collect();
    let _servers = start_cluster(&launches);
    check_cluster(&launches, "127.0.0.1");
    // The registry holds each member's key, under its ID in hex.
    let keys = ctl(
        &endpoint,
        &[
            "get",
            "/_etcd/registry/token-1/members/",
            "--prefix",
            "--keys-only",
        ],
    );
    assert_eq!(
        keys.stdout.lines().filter(|l| !l.is_empty()).count(),
        3,
        "{keys:?}"
    );

    let fourth = planned(
        ServerKind::OxetcdSmol,
        "d3",
        root.path(),
        "127.0.0.1",
        &flags("token-1"),
    );
    let error = failure_of(&fourth);
    assert!(error.contains("discovery: cluster is full"), "{error}");

    let unsized_member = planned(
        ServerKind::Oxetcd,
        "u0",
        root.path(),
        "127.0.0.1",
        &flags("no-size"),
    );
    let error = failure_of(&unsized_member);
    assert!(error.contains("discovery: size key not found"), "{error}");
}

/// The registry served over TLS with auth on: members given its CA and a
/// user (`--discovery-cacert`, `--discovery-user`) bootstrap through it.
#[test]
fn v3_discovery_through_a_tls_registry_with_auth() {
    let pki = oxetcd_tests::pki::pki();
    let root = tempfile::tempdir().unwrap();
    let url = Ports::BELOW_EPHEMERAL.https_url();
    let registry = Launch::new(
        ServerKind::OxetcdSmol,
        "registry",
        &root.path().join("registry"),
        vec![url.clone()],
        Ports::BELOW_EPHEMERAL.http_url(),
    )
    .flags(&[
        oxetcd_tests::pki::path_arg("cert-file", &pki.server_cert),
        oxetcd_tests::pki::path_arg("key-file", &pki.server_key),
    ]);
    let _registry = registry.start().unwrap_or_else(|e| panic!("{e}"));
    let cacert = oxetcd_tests::pki::path_arg("cacert", &pki.ca);
    let admin = |args: &[&str]| {
        let mut all = vec![cacert.as_str()];
        all.extend_from_slice(args);
        let out = ctl(&url, &all);
        assert_eq!(out.code, 0, "{args:?}: {out:?}");
    };
    admin(&["user", "add", "root:rootpw"]);
    admin(&["user", "grant-role", "root", "root"]);
    admin(&["auth", "enable"]);
    admin(&[
        "--user=root:rootpw",
        "put",
        "/_etcd/registry/secure/_config/size",
        "3",
    ]);
    let flags = vec![
        "--discovery-token=secure".to_owned(),
        format!("--discovery-endpoints={url}"),
        oxetcd_tests::pki::path_arg("discovery-cacert", &pki.ca),
        "--discovery-user=root:rootpw".to_owned(),
    ];
    let launches: Vec<Launch> = (0..3)
        .map(|i| planned(KINDS[i], &format!("t{i}"), root.path(), "127.0.0.1", &flags))
        .collect();
    let _servers = start_cluster(&launches);
    check_cluster(&launches, "127.0.0.1");
}

#[test]
fn discovery_flags_are_checked_as_etcd_checks_them() {
    let root = tempfile::tempdir().unwrap();
    let both = planned(
        ServerKind::Oxetcd,
        "c0",
        root.path(),
        "127.0.0.1",
        &[
            "--discovery-token=t".to_owned(),
            "--discovery-endpoints=http://127.0.0.1:1".to_owned(),
            "--initial-cluster=c0=http://127.0.0.1:1".to_owned(),
        ],
    );
    let error = failure_of(&both);
    assert!(
        error.contains("multiple discovery or bootstrap flags are set"),
        "{error}"
    );
}

/// A DNS server on 127.0.0.1 answering SRV queries for `name` with
/// `targets` (host, port) and nothing for anything else; it stops when
/// dropped.
struct DnsServer {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl DnsServer {
    fn start(records: Vec<(String, Vec<(String, u16)>)>) -> Self {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let port = socket.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1500];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buffer) else {
                    continue;
                };
                if let Some(reply) = answer(&buffer[..n], &records) {
                    let _ = socket.send_to(&reply, from);
                }
            }
        });
        Self { port, stop }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The reply to `query`: the SRV records of the name asked, or none.
fn answer(query: &[u8], records: &[(String, Vec<(String, u16)>)]) -> Option<Vec<u8>> {
    let query = Packet::parse(query).ok()?;
    let question = query.questions.first()?;
    let asked = question.qname.to_string();
    let mut reply = Packet::new_reply(query.id());
    reply.questions.push(question.clone());
    for (name, targets) in records {
        if asked.trim_end_matches('.') != name {
            continue;
        }
        for (host, port) in targets {
            reply.answers.push(ResourceRecord::new(
                Name::new(name).ok()?,
                CLASS::IN,
                60,
                RData::SRV(SRV {
                    priority: 0,
                    weight: 0,
                    port: *port,
                    target: Name::new(host).ok()?,
                }),
            ));
        }
    }
    reply.build_bytes_vec().ok()
}

#[test]
fn three_members_bootstrap_through_srv_records_and_oxetcdctl_finds_them() {
    let root = tempfile::tempdir().unwrap();
    let domain = "oxetcd.test";
    let flags = vec![format!("--discovery-srv={domain}")];
    let launches: Vec<Launch> = (0..3)
        .map(|i| planned(KINDS[i], &format!("s{i}"), root.path(), "localhost", &flags))
        .collect();
    let peers: Vec<(String, u16)> = launches
        .iter()
        .map(|l| ("localhost.".to_owned(), peer_port(l)))
        .collect();
    let clients: Vec<(String, u16)> = launches
        .iter()
        .map(|l| {
            let port = l.client_urls[0]
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            ("localhost.".to_owned(), port)
        })
        .collect();
    let dns = DnsServer::start(vec![
        (format!("_etcd-server._tcp.{domain}"), peers),
        (format!("_etcd-client._tcp.{domain}"), clients),
    ]);
    // The servers (and oxetcdctl) this test starts ask this DNS server.
    std::env::set_var(
        oxetcd_urls::srv::DNS_SERVER_VARIABLE,
        format!("127.0.0.1:{}", dns.port),
    );
    let _servers = start_cluster(&launches);
    check_cluster(&launches, "localhost");

    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    let out = std::process::Command::new(&oxetcdctl)
        .args([
            &format!("--discovery-srv={domain}"),
            "get",
            "formed",
            "--print-value-only",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yes\n");
    let out = std::process::Command::new(&oxetcdctl)
        .args(["--discovery-srv=nowhere.test", "get", "formed"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("dns lookup errors"),
        "{out:?}"
    );
}
