//! TLS between members, end to end: three-member clusters of real
//! processes on 127.0.0.1 whose peer URLs are all `https://`, with
//! `--peer-client-cert-auth`, so every raft message and every snapshot
//! crosses a mutually authenticated TLS link.
//!
//! - A cluster (all tokio, and one mixed tokio and smol) elects a leader,
//!   replicates writes, survives a kill -9 of its leader and the restart
//!   of that member, which catches up; a learner added later with an
//!   `https://` peer URL catches up by snapshot over TLS; `member update`
//!   moves a member to another `https://` URL (by host name), and the
//!   others follow it there.
//! - A member whose certificate another CA signed is refused by the
//!   others (its connections are closed) while they go on serving, and
//!   a raw TLS client with such a certificate, plaintext and garbage on
//!   the peer port each lose only their own connection.
//! - `--peer-auto-tls` members (self-signed certificates, not verified)
//!   form a cluster too.
//!
//! Certificates are made at test time (`oxetcd_tls::test_pki`). Every wait
//! is bounded; each test prints how long it took.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::PutRequest;
use oxetcd_tests::cluster::MIXED;
use oxetcd_tests::etcdctl::{ctl, ctl_ok};
use oxetcd_tests::pki::{logged_refusal, peer_tls_flags, pki};
use oxetcd_tests::probe::member_id;
use oxetcd_tests::{Cluster, ClusterOptions, Grpc, Ports, ServerKind};
use oxetcd_tls::rustls;

/// Longest to wait for a leader that all running members agree on.
const LEADER_DEADLINE: Duration = Duration::from_secs(15);

/// Longest to wait for a member to catch up with a write.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(20);

/// Longest a raw socket read may block.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// A small snapshot count, so a new member is sent a snapshot quickly.
const SNAPSHOT_COUNT: u64 = 50;

/// This file's clusters: `https://` peer URLs with `tls` flags on every
/// member, ports below the ephemeral range, the harness's fast raft
/// timing and [`SNAPSHOT_COUNT`].
fn options(tls: &[String]) -> ClusterOptions {
    ClusterOptions::new("peer-tls-test")
        .flags(&[
            "--snapshot-count",
            &SNAPSHOT_COUNT.to_string(),
            "--experimental-snapshot-catchup-entries",
            "10",
        ])
        .peer_tls(tls)
        .ports(Ports::BELOW_EPHEMERAL)
        .deadlines(LEADER_DEADLINE, CATCH_UP_DEADLINE)
}

/// Writes on the leader are read back on every member; the leader is
/// killed, another one takes over, the old one restarts and catches up; a
/// learner added with an `https://` peer URL after the log was compacted
/// catches up by snapshot, all over TLS with client certificates.
fn secure_cluster(kinds: [ServerKind; 3], learner_kind: ServerKind, allowed: &str) {
    let started = Instant::now();
    let pki = pki();
    let mut flags = peer_tls_flags(&pki.peer_cert, &pki.peer_key, &pki.ca);
    flags.push(allowed.to_owned());
    let mut cluster = Cluster::start(options(&flags), &kinds);
    let leader = cluster.wait_leader();
    for member in &cluster.members {
        assert!(
            member.log().contains("peer TLS configured"),
            "{}",
            member.log_tail()
        );
    }
    ctl_ok(&cluster.members[leader].address(), &["put", "k1", "v1"]);
    for member in 0..3 {
        cluster.wait_value(member, "k1", "v1", false);
    }

    cluster.members[leader].kill();
    let new_leader = cluster.wait_leader();
    assert_ne!(new_leader, leader);
    let follower = (0..3)
        .find(|i| *i != leader && *i != new_leader)
        .expect("a follower");
    ctl_ok(&cluster.members[follower].address(), &["put", "k2", "v2"]);
    cluster.wait_value(new_leader, "k2", "v2", false);
    cluster.members[leader].restart();
    cluster.wait_value(leader, "k2", "v2", true);
    cluster.wait_value(leader, "k2", "v2", false);
    let recovered = started.elapsed();

    // Well past the snapshot count: the log is compacted, so the learner
    // can only catch up by snapshot.
    let leader = cluster.wait_leader();
    let leader_address = cluster.members[leader].address();
    let mut client = Grpc::connect(&format!("http://{leader_address}")).expect("gRPC client");
    for i in 0..SNAPSHOT_COUNT * 3 {
        client
            .put(PutRequest {
                key: format!("bulk{i:04}").into_bytes(),
                value: b"x".to_vec(),
                ..Default::default()
            })
            .expect("bulk put");
    }
    ctl_ok(&leader_address, &["put", "last", "written"]);

    let learner = cluster.add_member(leader, "m3", learner_kind, true);
    cluster.members.push(learner);
    cluster.wait_value(3, "last", "written", true);
    // The data is readable a moment before the node logs the install.
    let waited = Instant::now();
    while !cluster.members[3].log().contains("installed a snapshot") {
        assert!(
            waited.elapsed() < CATCH_UP_DEADLINE,
            "the learner did not catch up by snapshot:\n{}",
            cluster.members[3].log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let learner_id = member_id(&leader_address, &cluster.members[3].peer_url());
    assert!(
        ctl_ok(&leader_address, &["member", "list"]).contains("https://127.0.0.1:"),
        "peer URLs are listed as given"
    );
    let list = ctl_ok(&leader_address, &["member", "list", "-w", "json"]);
    assert!(list.contains("\"isLearner\":true"), "{list}");

    // member update to another https:// URL of the same listener, by host
    // name this time: the others redial and verify the certificate for
    // that name.
    let first_id = member_id(&leader_address, &cluster.members[0].peer_url());
    let moved = format!("https://localhost:{}", cluster.members[0].peer_port);
    let updated = ctl_ok(
        &leader_address,
        &[
            "member",
            "update",
            &first_id,
            &format!("--peer-urls={moved}"),
        ],
    );
    assert!(updated.contains("updated"), "{updated}");
    assert_eq!(member_id(&leader_address, &moved), first_id);
    ctl_ok(&leader_address, &["put", "after", "update"]);
    for member in 0..3 {
        cluster.wait_value(member, "after", "update", false);
    }
    cluster.wait_value(3, "after", "update", true);
    eprintln!(
        "{kinds:?}: leader kill recovered after {recovered:?}; learner {learner_id} caught \
         up; whole test {:?}",
        started.elapsed()
    );
}

#[test]
fn tls_cluster_replicates_survives_a_leader_kill_and_adds_a_learner() {
    secure_cluster(
        [ServerKind::Oxetcd; 3],
        ServerKind::Oxetcd,
        "--peer-cert-allowed-hostname=127.0.0.1",
    );
}

#[test]
fn mixed_tls_cluster_replicates_survives_a_leader_kill_and_adds_a_learner() {
    secure_cluster(
        MIXED,
        ServerKind::OxetcdSmol,
        "--peer-cert-allowed-cn=oxetcd test",
    );
}

/// A TLS client of the peer port at `port` presenting `cert` (signed by
/// whichever CA) and trusting `ca`; the handshake is completed.
fn raw_tls(
    port: u16,
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let settings = oxetcd_tls::PortSettings {
        trusted_ca_file: Some(ca.to_path_buf()),
        ..oxetcd_tls::PortSettings::new(oxetcd_tls::Port::Peer, cert, key)
    };
    let config: Arc<rustls::ClientConfig> = settings.client().map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| e.to_string())?;
    }
    Ok(stream)
}

/// Sends `bytes` and reads until the member closes the connection; an
/// error if it answers with data instead or keeps it open past the
/// timeout.
fn closed_after<S: Read + Write>(stream: &mut S, bytes: &[u8]) -> Result<(), String> {
    // The write may already fail: the member refused during the handshake.
    if stream
        .write_all(bytes)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return Ok(());
    }
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => Ok(()),
        Ok(n) => Err(format!("the member answered {:?}", &buf[..n])),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err("the connection stayed open".to_owned())
        }
        // A TLS alert or a reset: closed.
        Err(_) => Ok(()),
    }
}

/// Sends `bytes` over plain TCP to `port` and reads until the member
/// closes the connection; at most a TLS alert (record type 21) may come
/// back first.
fn raw_closed_after(port: u16, bytes: &[u8]) -> Result<(), String> {
    /// The TLS record type of alerts.
    const ALERT: u8 = 21;
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| e.to_string())?;
    if tcp.write_all(bytes).is_err() {
        return Ok(());
    }
    let mut received = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if received.len() < 4096 => received.extend_from_slice(&buf[..n]),
            Ok(_) => return Err("the member keeps sending".to_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("the connection stayed open".to_owned())
            }
            Err(_) => break,
        }
    }
    match received.first() {
        None | Some(&ALERT) => Ok(()),
        Some(_) => Err(format!("the member answered {received:?}")),
    }
}

/// The 36-byte handshake of the peer protocol, well formed, from and to
/// made-up members.
fn hello() -> Vec<u8> {
    let mut hello = b"oxetcdpr".to_vec();
    hello.extend(2u16.to_be_bytes());
    hello.extend([1, 0]);
    hello.extend(0u64.to_be_bytes());
    hello.extend(7u64.to_be_bytes());
    hello.extend(8u64.to_be_bytes());
    hello
}

/// A member whose certificate another CA signed cannot join: the others
/// refuse its connections and it refuses theirs, and they go on as a
/// two-member quorum. A raw client with such a certificate, plaintext and
/// garbage on a TLS peer port each lose their connection only.
#[test]
fn a_member_with_a_certificate_from_another_ca_is_refused() {
    let started = Instant::now();
    let pki = pki();
    let good = peer_tls_flags(&pki.peer_cert, &pki.peer_key, &pki.ca);
    let stranger = peer_tls_flags(&pki.other_peer_cert, &pki.other_peer_key, &pki.ca);
    let mut cluster = Cluster::plan(options(&good), &MIXED);
    cluster.members[2].peer_tls = Some(stranger);
    cluster.start_all();
    let leader = cluster.wait_leader_among(&[0, 1]);
    ctl_ok(&cluster.members[leader].address(), &["put", "k", "v1"]);
    cluster.wait_value(0, "k", "v1", false);
    cluster.wait_value(1, "k", "v1", false);
    // The stranger never hears of the write: no link carries it.
    std::thread::sleep(Duration::from_millis(500));
    let out = ctl(
        &cluster.members[2].address(),
        &["get", "k", "--print-value-only", "--consistency", "s"],
    );
    assert!(
        out.stdout.trim().is_empty(),
        "the stranger has the data: {out:?}"
    );
    for member in &cluster.members[..2] {
        assert!(
            logged_refusal(&member.log(), "tls: bad certificate"),
            "{} logged no refused handshake:\n{}",
            member.name,
            member.log_tail()
        );
    }

    let port = cluster.members[0].peer_port;
    let refused = match raw_tls(port, &pki.other_peer_cert, &pki.other_peer_key, &pki.ca) {
        // Under TLS 1.2 the handshake itself fails.
        Err(_) => Ok(()),
        // Under TLS 1.3 the refusal comes as an alert after it.
        Ok(mut stream) => closed_after(&mut stream, &hello()),
    };
    refused.expect("a certificate from another CA is refused");
    // A client with the right certificate gets a TLS session, but the
    // peer protocol still checks who it is: a made-up member is refused
    // with an answer, then closed.
    let mut accepted =
        raw_tls(port, &pki.peer_cert, &pki.peer_key, &pki.ca).expect("TLS with the CA's cert");
    accepted.write_all(&hello()).expect("hello");
    let mut answer = [0u8; 12];
    accepted.read_exact(&mut answer).expect("an answer");
    assert_ne!(answer[0], 0, "a made-up member is not accepted");
    // Plaintext peer protocol and garbage on the TLS port.
    for bytes in [
        hello(),
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3],
        (0..4096u32).map(|i| (i * 31 % 256) as u8).collect(),
    ] {
        raw_closed_after(port, &bytes).unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
    }

    // The two good members still serve, with the same leader.
    assert_eq!(cluster.wait_leader_among(&[0, 1]), leader);
    ctl_ok(&cluster.members[1].address(), &["put", "k", "v2"]);
    cluster.wait_value(0, "k", "v2", false);
    eprintln!("refusal test took {:?}", started.elapsed());
}

/// `--peer-auto-tls`: self-signed certificates made in the data dirs, not
/// verified, and the cluster forms and replicates over them.
#[test]
fn auto_tls_members_form_a_cluster() {
    let started = Instant::now();
    let cluster = Cluster::start(options(&["--peer-auto-tls".to_owned()]), &MIXED);
    let leader = cluster.wait_leader();
    ctl_ok(&cluster.members[leader].address(), &["put", "auto", "tls"]);
    for member in 0..3 {
        cluster.wait_value(member, "auto", "tls", false);
    }
    for member in &cluster.members {
        let cert = member
            .data_dir
            .join("fixtures")
            .join("peer")
            .join("cert.pem");
        assert!(cert.is_file(), "no {}", cert.display());
    }
    eprintln!("auto TLS test took {:?}", started.elapsed());
}
