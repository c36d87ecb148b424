//! The peer transport over real sockets on 127.0.0.1, on a small tokio
//! `Runtime`: members exchanging messages, handshake refusals, bad frames
//! (each closes one connection; the transport keeps serving), a peer
//! restart with reconnect, a multi-MiB snapshot streamed while heartbeats
//! keep arriving, the bounded send queue, and the same traffic over TLS
//! (`https://` peer URLs, certificates from `oxetcd_tls::test_pki`).
//!
//! Raw connections here build the wire format by hand, byte by byte, so
//! these tests also pin the format independently of its encoder.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use oxetcd_proto::eraftpb::{Entry, Message, MessageType, SnapshotMetadata};
use oxetcd_server::peer::{PeerEvent, PeerTransport, PeerTransportConfig, SendError, TransportTls};
use oxetcd_server::{BoundSocket, Remote, Runtime, SocketAddress};
use protobuf::Message as _;

const CLUSTER: u64 = 0xc1;

/// Generous: the machine is shared with other builds.
const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone)]
struct TestRuntime(tokio::runtime::Handle);

impl Runtime for TestRuntime {
    type Listener = tokio::net::TcpListener;
    type Io = TokioIo<tokio::net::TcpStream>;
    type Sleep = tokio::time::Sleep;

    fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(future);
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        self.0.spawn_blocking(work);
    }

    fn listener(&self, socket: BoundSocket) -> io::Result<tokio::net::TcpListener> {
        let _context = self.0.enter();
        match socket {
            BoundSocket::Tcp(listener) => tokio::net::TcpListener::from_std(listener),
            BoundSocket::Unix(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    async fn accept(&self, listener: &tokio::net::TcpListener) -> io::Result<(Self::Io, Remote)> {
        let (stream, remote) = listener.accept().await?;
        stream.set_nodelay(true)?;
        Ok((TokioIo::new(stream), Remote::Tcp(remote)))
    }

    async fn connect(&self, address: SocketAddress) -> io::Result<Self::Io> {
        let SocketAddress::Tcp(addr) = address else {
            return Err(io::ErrorKind::Unsupported.into());
        };
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(TokioIo::new(stream))
    }

    fn sleep_until(&self, deadline: Instant) -> tokio::time::Sleep {
        let _context = self.0.enter();
        tokio::time::sleep_until(deadline.into())
    }

    fn shutdown_signal(&self) -> io::Result<impl Future<Output = ()> + Send + 'static> {
        Ok(std::future::pending())
    }
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One member: its transport, its events, its peer address.
struct Member {
    id: u64,
    transport: PeerTransport<TestRuntime>,
    events: Receiver<PeerEvent>,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Member {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

fn member(rt: &tokio::runtime::Runtime, id: u64) -> Member {
    member_with(rt, id, None, |_| {})
}

/// A member listening on `addr` (default: any port), with `tweak` applied to its
/// config.
fn member_with(
    rt: &tokio::runtime::Runtime,
    id: u64,
    addr: Option<SocketAddr>,
    tweak: impl FnOnce(&mut PeerTransportConfig),
) -> Member {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = PeerTransportConfig::new(CLUSTER, id, dir.path().join("snap"));
    tweak(&mut config);
    let (tx, events) = mpsc::channel();
    let transport = PeerTransport::new(
        TestRuntime(rt.handle().clone()),
        config,
        Arc::new(move |event| {
            let _ = tx.send(event);
        }),
    );
    let listener = bind(addr.unwrap_or_else(|| "127.0.0.1:0".parse().unwrap()));
    let addr = tcp(transport.listen(listener).expect("listen"));
    Member {
        id,
        transport,
        events,
        addr,
        dir,
    }
}

/// A member serving and dialing `https://` peer URLs with `cert` and
/// `key`, verifying peers against `ca` both ways.
fn tls_member(rt: &tokio::runtime::Runtime, id: u64, cert: &Path, key: &Path, ca: &Path) -> Member {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = PeerTransportConfig::new(CLUSTER, id, dir.path().join("snap"));
    let settings = oxetcd_tls::PortSettings {
        trusted_ca_file: Some(ca.to_path_buf()),
        ..oxetcd_tls::PortSettings::new(oxetcd_tls::Port::Peer, cert, key)
    };
    config.tls = Some(TransportTls::new(&settings).expect("peer TLS"));
    let (tx, events) = mpsc::channel();
    let transport = PeerTransport::new(
        TestRuntime(rt.handle().clone()),
        config,
        Arc::new(move |event| {
            let _ = tx.send(event);
        }),
    );
    let addr = tcp(transport
        .listen_tls(bind("127.0.0.1:0".parse().unwrap()))
        .expect("listen"));
    Member {
        id,
        transport,
        events,
        addr,
        dir,
    }
}

/// Binds `addr`, retrying while a just-closed listener still holds it.
/// The TCP address a transport listens on.
fn tcp(address: SocketAddress) -> SocketAddr {
    match address {
        SocketAddress::Tcp(addr) => addr,
        SocketAddress::Unix(path) => panic!("listening on {}, not TCP", path.display()),
    }
}

fn bind(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpListener::bind(addr) {
            Ok(listener) => return listener,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("bind {addr}: {e}"),
        }
    }
}

fn connect_all(members: &[&Member]) {
    for a in members {
        for b in members {
            if a.id != b.id {
                a.transport.add_peer(b.id, vec![b.url()]);
            }
        }
    }
    for a in members {
        for b in members {
            if a.id != b.id {
                wait_connected(a, b.id);
            }
        }
    }
}

fn wait_connected(member: &Member, peer: u64) {
    wait_until(&format!("{:x} connected to {peer:x}", member.id), || {
        member.transport.stats(peer).is_some_and(|s| s.connected)
    });
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Consumes events until `pick` returns something; panics on timeout.
fn next_event<T>(events: &Receiver<PeerEvent>, mut pick: impl FnMut(PeerEvent) -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(event) => {
                if let Some(found) = pick(event) {
                    return found;
                }
            }
            Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for an event"),
            Err(RecvTimeoutError::Disconnected) => panic!("transport dropped its events"),
        }
    }
}

fn heartbeat(from: u64, to: u64, commit: u64) -> Message {
    Message {
        msg_type: MessageType::MsgHeartbeat,
        from,
        to,
        term: 3,
        commit,
        ..Default::default()
    }
}

fn append(from: u64, to: u64, data_bytes: usize) -> Message {
    Message {
        msg_type: MessageType::MsgAppend,
        from,
        to,
        term: 3,
        entries: vec![Entry {
            data: vec![7u8; data_bytes].into(),
            ..Default::default()
        }]
        .into(),
        ..Default::default()
    }
}

/// Waits for the next message from `from` to arrive.
fn next_message(member: &Member) -> Message {
    next_event(&member.events, |event| match event {
        PeerEvent::Message(m) => Some(m),
        _ => None,
    })
}

/// Sends `message` until it is accepted (the connection may still be
/// coming up).
fn send_eventually(member: &Member, message: Message) {
    wait_until("a send to be accepted", || {
        member.transport.send(message.clone()).is_ok()
    });
}

// ---- raw connections -------------------------------------------------------

fn hello(cluster: u64, from: u64, to: u64, kind: u8, version: u16) -> Vec<u8> {
    let mut out = b"oxetcdpr".to_vec();
    out.extend_from_slice(&version.to_be_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(&cluster.to_be_bytes());
    out.extend_from_slice(&from.to_be_bytes());
    out.extend_from_slice(&to.to_be_bytes());
    out
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.push(kind);
    out.extend_from_slice(body);
    out
}

fn raw(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream
}

/// Opens a raw connection with `hello` and returns it with the answer
/// (status, 0, version, then the listener's cluster ID).
fn raw_handshake(addr: SocketAddr, hello: &[u8]) -> (TcpStream, [u8; 12]) {
    let mut stream = raw(addr);
    stream.write_all(hello).unwrap();
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).expect("handshake answer");
    (stream, answer)
}

/// The listener closes `stream` (end of stream or reset), without sending
/// anything first.
fn assert_closed(mut stream: TcpStream) {
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("expected a close, read {n} bytes: {:?}", &buf[..n]),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected a close, got {e}"),
    }
}

/// The transport still takes messages from a well-behaved peer.
fn assert_still_serving(receiver: &Member, sender: &Member, marker: u64) {
    send_eventually(sender, heartbeat(sender.id, receiver.id, marker));
    let got = next_event(&receiver.events, |event| match event {
        PeerEvent::Message(m) if m.commit == marker => Some(m),
        _ => None,
    });
    assert_eq!(got.from, sender.id);
}

// ---- tests -----------------------------------------------------------------

#[test]
fn three_members_exchange_messages() {
    let rt = tokio_runtime();
    let members = [member(&rt, 1), member(&rt, 2), member(&rt, 3)];
    connect_all(&members.iter().collect::<Vec<_>>());
    for from in &members {
        for to in &members {
            if from.id != to.id {
                from.transport
                    .send(heartbeat(from.id, to.id, from.id * 10 + to.id))
                    .expect("send");
            }
        }
    }
    for to in &members {
        let mut commits: Vec<u64> = (0..2).map(|_| next_message(to).commit).collect();
        commits.sort_unstable();
        let mut expected: Vec<u64> = members
            .iter()
            .filter(|m| m.id != to.id)
            .map(|m| m.id * 10 + to.id)
            .collect();
        expected.sort_unstable();
        assert_eq!(commits, expected);
    }
    // Order holds on one stream, and big appends pass whole.
    for i in 0..50 {
        members[0]
            .transport
            .send(heartbeat(1, 2, 1000 + i))
            .unwrap();
    }
    members[0]
        .transport
        .send(append(1, 2, 1024 * 1024))
        .unwrap();
    for i in 0..50 {
        assert_eq!(next_message(&members[1]).commit, 1000 + i);
    }
    let big = next_message(&members[1]);
    assert_eq!(big.msg_type, MessageType::MsgAppend);
    assert_eq!(big.entries[0].data.len(), 1024 * 1024);
    // The writer counts a message once its write returns, which may be
    // after the receiver already has it: wait (bounded) for the count.
    let counted_by = Instant::now() + Duration::from_secs(5);
    let mut stats = members[0].transport.stats(2).unwrap();
    while stats.sent_messages < 52 && Instant::now() < counted_by {
        std::thread::sleep(Duration::from_millis(10));
        stats = members[0].transport.stats(2).unwrap();
    }
    assert!(stats.connected);
    assert_eq!(stats.sent_messages, 52);
    assert_eq!(stats.dropped_messages, 0);
    // Snapshot messages have their own path; unknown peers are refused.
    let snap = Message {
        msg_type: MessageType::MsgSnapshot,
        to: 2,
        ..Default::default()
    };
    assert_eq!(
        members[0].transport.send(snap),
        Err(SendError::SnapshotMessage)
    );
    assert_eq!(
        members[0].transport.send(heartbeat(1, 9, 0)),
        Err(SendError::UnknownPeer)
    );
}

#[test]
fn handshakes_are_checked() {
    let rt = tokio_runtime();
    let (a, b) = (member(&rt, 1), member(&rt, 2));
    connect_all(&[&a, &b]);

    // Not our protocol at all: an HTTP client gets no answer. The peer
    // port serves no client requests.
    let mut http = raw(a.addr);
    http.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n..........")
        .unwrap();
    assert_closed(http);
    let mut grpc = raw(a.addr);
    grpc.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\0\0\0\0\0\0\0\0\0")
        .unwrap();
    assert_closed(grpc);

    // Ours, but refused with a reason code and our version.
    let cases = [
        (hello(CLUSTER, 7, 1, 1, 1), 1u8), // version
        (hello(0xbad, 7, 1, 1, 2), 2),     // cluster ID
        (hello(0, 7, 1, 1, 2), 2),         // joining, but not a member
        (hello(CLUSTER, 7, 99, 1, 2), 3),  // receiver ID
        (hello(CLUSTER, 1, 1, 1, 2), 3),   // sender claims to be the receiver
    ];
    for (bytes, code) in cases {
        let (stream, answer) = raw_handshake(a.addr, &bytes);
        assert_eq!(answer[..4], [code, 0, 0, 2], "expected reason {code}");
        assert_closed(stream);
    }
    // An unknown stream kind in our version is not a handshake.
    let mut stream = raw(a.addr);
    stream.write_all(&hello(CLUSTER, 7, 1, 9, 2)).unwrap();
    assert_closed(stream);
    // A truncated handshake is dropped once the peer closes.
    let mut stream = raw(a.addr);
    stream.write_all(&hello(CLUSTER, 7, 1, 1, 2)[..20]).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_closed(stream);

    // Removed members are refused, and told so.
    a.transport.remove_peer(2);
    let (stream, answer) = raw_handshake(a.addr, &hello(CLUSTER, 2, 1, 1, 2));
    assert_eq!(answer[0], 4);
    assert_closed(stream);
    let by = next_event(&b.events, |event| match event {
        PeerEvent::RemovedFromCluster { by } => Some(by),
        _ => None,
    });
    assert_eq!(by, 1);
    assert!(a.transport.peers().is_empty());

    // Through all of it the transport kept serving: re-adding the member
    // lifts the refusal.
    a.transport.add_peer(2, vec![b.url()]);
    wait_connected(&b, 1);
    assert_still_serving(&a, &b, 4242);
}

/// A member joining an existing cluster starts without a cluster ID: it
/// dials with ID 0, which only a member that knows it as a peer accepts,
/// and takes the ID from the answer; or it takes the ID from a hello of a
/// peer it knows. Either way it tells the driver once.
#[test]
fn a_joining_member_learns_the_cluster_id() {
    let rt = tokio_runtime();
    let a = member(&rt, 1);
    let joining = |id| member_with(&rt, id, None, |c| c.cluster_id = 0);
    // Dialing out: refused until `a` knows it, then taught.
    let c = joining(3);
    c.transport.add_peer(1, vec![a.url()]);
    let (stream, answer) = raw_handshake(a.addr, &hello(0, 3, 1, 1, 2));
    assert_eq!(answer[0], 2, "not yet a member");
    assert_closed(stream);
    a.transport.add_peer(3, vec![c.url()]);
    let learned = next_event(&c.events, |event| match event {
        PeerEvent::ClusterId { id } => Some(id),
        _ => None,
    });
    assert_eq!(learned, CLUSTER);
    wait_connected(&c, 1);
    wait_connected(&a, 3);
    assert_still_serving(&a, &c, 77);
    assert_still_serving(&c, &a, 78);

    // Dialed: only a known peer with an ID teaches it, once.
    let d = joining(4);
    d.transport.add_peer(1, vec!["http://127.0.0.1:9".into()]);
    for (bytes, code) in [
        (hello(0, 1, 4, 1, 2), 2u8),     // neither has an ID
        (hello(CLUSTER, 5, 4, 1, 2), 2), // not a peer
        (hello(CLUSTER, 1, 4, 1, 2), 0), // taught
        (hello(0xbad, 1, 4, 1, 2), 2),   // another ID after that
    ] {
        let (_stream, answer) = raw_handshake(d.addr, &bytes);
        assert_eq!(answer[0], code, "{bytes:x?}");
        if code == 0 {
            assert_eq!(answer[4..], CLUSTER.to_be_bytes());
        }
    }
    let learned: Vec<u64> = d
        .events
        .try_iter()
        .filter_map(|event| match event {
            PeerEvent::ClusterId { id } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(learned, [CLUSTER]);
}

#[test]
fn bad_frames_close_only_their_connection() {
    let rt = tokio_runtime();
    let (a, b) = (member(&rt, 1), member(&rt, 2));
    connect_all(&[&a, &b]);
    let good = heartbeat(7, 1, 5).write_to_bytes().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("oversized frame", {
            let mut header = (64u32 * 1024 * 1024).to_be_bytes().to_vec();
            header.push(1);
            header
        }),
        ("garbage body", frame(1, &[0xff; 40])),
        ("unknown frame kind", frame(9, &good)),
        ("snapshot chunk on a messages stream", frame(2, b"data")),
        (
            "another sender",
            frame(1, &heartbeat(8, 1, 5).write_to_bytes().unwrap()),
        ),
        (
            "another receiver",
            frame(1, &heartbeat(7, 3, 5).write_to_bytes().unwrap()),
        ),
        (
            "snapshot message",
            frame(
                1,
                &Message {
                    msg_type: MessageType::MsgSnapshot,
                    from: 7,
                    to: 1,
                    ..Default::default()
                }
                .write_to_bytes()
                .unwrap(),
            ),
        ),
    ];
    for (i, (what, bytes)) in cases.into_iter().enumerate() {
        let (mut stream, answer) = raw_handshake(a.addr, &hello(CLUSTER, 7, 1, 1, 2));
        assert_eq!(answer[0], 0, "{what}: handshake");
        // A good frame first: it is delivered, then the bad one closes.
        stream.write_all(&frame(1, &good)).unwrap();
        let first = next_message(&a);
        assert_eq!((first.from, first.commit), (7, 5), "{what}");
        stream.write_all(&bytes).unwrap();
        assert_closed(stream);
        assert_still_serving(&a, &b, 100 + i as u64);
    }
    // A frame cut short by the sender's close delivers nothing.
    let (mut stream, _) = raw_handshake(a.addr, &hello(CLUSTER, 7, 1, 1, 2));
    let whole = frame(1, &good);
    stream.write_all(&whole[..whole.len() - 3]).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert_closed(stream);
    assert_still_serving(&a, &b, 999);
    assert!(
        a.events
            .try_iter()
            .all(|e| !matches!(e, PeerEvent::Message(m) if m.from == 7)),
        "nothing from the truncated frame"
    );
}

#[test]
fn restarted_peer_is_redialed_and_moved_peer_followed() {
    let rt = tokio_runtime();
    let a = member(&rt, 1);
    let b = member(&rt, 2);
    connect_all(&[&a, &b]);
    assert_still_serving(&b, &a, 1);

    // B stops: A loses the connection, says so, and refuses sends.
    let b_addr = b.addr;
    b.transport.shutdown();
    drop(b);
    next_event(&a.events, |event| match event {
        PeerEvent::Unreachable { to: 2 } => Some(()),
        _ => None,
    });
    wait_until("A to notice B is gone", || {
        !a.transport.stats(2).unwrap().connected
    });
    assert_eq!(
        a.transport.send(heartbeat(1, 2, 0)),
        Err(SendError::Disconnected)
    );
    assert!(a.transport.stats(2).unwrap().dropped_messages >= 1);
    // Down for a while: A keeps redialing with backoff.
    std::thread::sleep(Duration::from_millis(1500));

    // B comes back on the same address: A reconnects by itself.
    let b = member_with(&rt, 2, Some(b_addr), |_| {});
    b.transport.add_peer(1, vec![a.url()]);
    wait_connected(&a, 2);
    assert_eq!(a.transport.stats(2).unwrap().connects, 2);
    assert_still_serving(&b, &a, 2);
    assert_still_serving(&a, &b, 3);

    // B moves to another address (member update): A follows.
    let moved = member(&rt, 2);
    moved.transport.add_peer(1, vec![a.url()]);
    b.transport.shutdown();
    a.transport.update_peer(2, vec![moved.url()]);
    wait_until("A to reach B's new address", || {
        a.transport.send(heartbeat(1, 2, 77)).is_ok()
            && moved
                .events
                .try_iter()
                .any(|e| matches!(e, PeerEvent::Message(m) if m.commit == 77))
    });
}

#[test]
fn snapshot_streams_while_heartbeats_flow() {
    let rt = tokio_runtime();
    let (a, b) = (member(&rt, 1), member(&rt, 2));
    connect_all(&[&a, &b]);

    const SNAPSHOT_BYTES: usize = 6 * 1024 * 1024 + 12_345;
    let data: Vec<u8> = (0..SNAPSHOT_BYTES).map(|i| (i * 31 % 251) as u8).collect();
    let data = Bytes::from(data);
    let message = oxetcd_core::raft::snapshot_message(
        1,
        2,
        3,
        SnapshotMetadata {
            index: 500,
            term: 3,
            ..Default::default()
        },
    );
    // Chunks of uneven sizes (one larger than a frame's chunk bound),
    // pulled slowly, as if read from disk.
    let mut offsets = vec![0usize];
    let mut at = 0;
    for size in [100_000usize, 3 * 1024 * 1024, 1].iter().cycle() {
        at = (at + size).min(SNAPSHOT_BYTES);
        offsets.push(at);
        if at == SNAPSHOT_BYTES {
            break;
        }
    }
    let source = data.clone();
    let windows: Vec<(usize, usize)> = offsets.windows(2).map(|w| (w[0], w[1])).collect();
    let chunks = windows.into_iter().map(move |(start, end)| {
        std::thread::sleep(Duration::from_millis(40));
        Ok(source.slice(start..end))
    });
    let started = Instant::now();
    a.transport.send_snapshot(message, chunks);

    // Heartbeats keep arriving on the messages stream meanwhile.
    let mut heartbeats_during = 0;
    let mut received = None;
    let mut sent_at = Vec::new();
    let mut marker = 10_000;
    let deadline = Instant::now() + WAIT;
    while received.is_none() {
        assert!(Instant::now() < deadline, "snapshot not received");
        marker += 1;
        if a.transport.send(heartbeat(1, 2, marker)).is_ok() {
            sent_at.push(marker);
        }
        while let Ok(event) = b.events.recv_timeout(Duration::from_millis(20)) {
            match event {
                PeerEvent::Message(m) if m.msg_type == MessageType::MsgHeartbeat => {
                    heartbeats_during += 1
                }
                PeerEvent::Snapshot { message, data } => received = Some((message, data)),
                _ => {}
            }
        }
    }
    let elapsed = started.elapsed();
    let (message, file) = received.unwrap();
    assert_eq!(message.msg_type, MessageType::MsgSnapshot);
    assert_eq!((message.from, message.to), (1, 2));
    assert_eq!(message.get_snapshot().get_metadata().index, 500);
    assert_eq!(file.len_bytes(), SNAPSHOT_BYTES as u64);
    assert_eq!(std::fs::read(file.path()).unwrap(), data);
    // The stream took at least 40 ms per chunk; heartbeats flowed all along.
    assert!(elapsed >= Duration::from_millis(40 * 3), "{elapsed:?}");
    assert!(
        heartbeats_during >= 5,
        "only {heartbeats_during} heartbeats in {elapsed:?}"
    );
    let delivered = next_event(&a.events, |event| match event {
        PeerEvent::SnapshotSent { to: 2, delivered } => Some(delivered),
        _ => None,
    });
    assert!(delivered);
    // Dropping the handle deletes the file; keep() hands it over.
    let path = file.path().to_owned();
    drop(file);
    assert!(!path.exists());
}

#[test]
fn snapshot_over_the_limit_is_refused_and_cleaned_up() {
    let rt = tokio_runtime();
    let a = member(&rt, 1);
    let b = member_with(&rt, 2, None, |c| c.snapshot_bytes_max = 1024 * 1024);
    connect_all(&[&a, &b]);
    let message = oxetcd_core::raft::snapshot_message(1, 2, 3, SnapshotMetadata::default());
    let chunks = (0..4).map(|_| Ok(Bytes::from(vec![1u8; 512 * 1024])));
    a.transport.send_snapshot(message.clone(), chunks);
    let delivered = next_event(&a.events, |event| match event {
        PeerEvent::SnapshotSent { to: 2, delivered } => Some(delivered),
        _ => None,
    });
    assert!(!delivered);
    wait_until("the partial file to be removed", || {
        std::fs::read_dir(b.dir.path().join("snap"))
            .map(|entries| entries.count() == 0)
            .unwrap_or(true)
    });
    // A failing source fails the send; the next one goes through.
    let failing = [Ok(Bytes::from_static(b"x")), Err(io::Error::other("disk"))].into_iter();
    a.transport.send_snapshot(message.clone(), failing);
    let delivered = next_event(&a.events, |event| match event {
        PeerEvent::SnapshotSent { to: 2, delivered } => Some(delivered),
        _ => None,
    });
    assert!(!delivered);
    a.transport
        .send_snapshot(message, std::iter::once(Ok(Bytes::from_static(b"small"))));
    let delivered = next_event(&a.events, |event| match event {
        PeerEvent::SnapshotSent { to: 2, delivered } => Some(delivered),
        _ => None,
    });
    assert!(delivered);
    let file = next_event(&b.events, |event| match event {
        PeerEvent::Snapshot { data, .. } => Some(data),
        _ => None,
    });
    let kept = file.keep();
    assert_eq!(std::fs::read(&kept).unwrap(), b"small");
    // Still serving messages after all that.
    assert_still_serving(&b, &a, 5);
}

#[test]
fn send_queue_is_bounded() {
    let rt = tokio_runtime();
    let a = member_with(&rt, 1, None, |c| c.send_queue_messages_max = 8);
    // A "peer" that completes the handshake and then never reads.
    let stuck = TcpListener::bind("127.0.0.1:0").unwrap();
    let stuck_addr = stuck.local_addr().unwrap();
    let holder = std::thread::spawn(move || {
        let (mut stream, _) = stuck.accept().unwrap();
        let mut hello = [0u8; 36];
        stream.read_exact(&mut hello).unwrap();
        let mut answer = vec![0, 0, 0, 2];
        answer.extend_from_slice(&hello[12..20]);
        stream.write_all(&answer).unwrap();
        // Hold the connection open, unread, until the transport gives up.
        let mut buf = [0u8; 1];
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        std::thread::sleep(Duration::from_secs(30));
        let _ = stream.read(&mut buf);
    });
    a.transport
        .add_peer(9, vec![format!("http://{stuck_addr}")]);
    wait_connected(&a, 9);
    // Fill the socket buffers, then the queue: once the writer is stuck,
    // the queue stays full.
    let mut accepted = 0u64;
    let mut full_since: Option<Instant> = None;
    let deadline = Instant::now() + WAIT;
    while full_since.is_none_or(|t| t.elapsed() < Duration::from_millis(500)) {
        assert!(Instant::now() < deadline, "the queue never stayed full");
        match a.transport.send(append(1, 9, 256 * 1024)) {
            Ok(()) => {
                accepted += 1;
                full_since = None;
            }
            Err(e) => {
                assert_eq!(e, SendError::QueueFull);
                full_since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    assert!(accepted >= 8, "accepted {accepted}");
    let dropped_before = a.transport.stats(9).unwrap().dropped_messages;
    assert!(a.transport.send(heartbeat(1, 9, 0)).is_err());
    assert!(a.transport.stats(9).unwrap().dropped_messages > dropped_before);
    // The writer makes no progress: after the stall timeout the connection
    // is dropped and the peer reported unreachable.
    next_event(&a.events, |event| match event {
        PeerEvent::Unreachable { to: 9 } => Some(()),
        _ => None,
    });
    // With nobody listening any more, sends fail as disconnected.
    drop(holder);
    a.transport.remove_peer(9);
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    a.transport
        .add_peer(10, vec![format!("http://{dead_addr}")]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        a.transport.send(heartbeat(1, 10, 0)),
        Err(SendError::Disconnected)
    );
    assert!(!a.transport.stats(10).unwrap().connected);
}

#[test]
fn tls_members_exchange_messages_and_snapshots_and_refuse_strangers() {
    let rt = tokio_runtime();
    let pki_dir = tempfile::tempdir().expect("tempdir");
    let pki = oxetcd_tls::test_pki::TestPki::write_to(pki_dir.path()).expect("test PKI");
    let member = |id| tls_member(&rt, id, &pki.peer_cert, &pki.peer_key, &pki.ca);
    let (a, b) = (member(1), member(2));
    let https = |m: &Member| format!("https://{}", m.addr);
    a.transport.add_peer(2, vec![https(&b)]);
    b.transport.add_peer(1, vec![https(&a)]);
    wait_connected(&a, 2);
    wait_connected(&b, 1);
    send_eventually(&a, heartbeat(1, 2, 12));
    assert_eq!(next_message(&b).commit, 12);
    send_eventually(&b, append(2, 1, 1024 * 1024));
    let got = next_message(&a);
    assert_eq!(got.entries[0].data.len(), 1024 * 1024);

    // A snapshot on its own TLS connection.
    const SNAPSHOT_BYTES: usize = 3 * 1024 * 1024 + 7;
    let data = Bytes::from(
        (0..SNAPSHOT_BYTES)
            .map(|i| (i % 249) as u8)
            .collect::<Vec<_>>(),
    );
    let message = oxetcd_core::raft::snapshot_message(
        1,
        2,
        3,
        SnapshotMetadata {
            index: 9,
            term: 3,
            ..Default::default()
        },
    );
    let source = data.clone();
    let chunks = (0..4).map(move |i| {
        let step = SNAPSHOT_BYTES / 4 + 1;
        Ok(source.slice((i * step).min(SNAPSHOT_BYTES)..((i + 1) * step).min(SNAPSHOT_BYTES)))
    });
    a.transport.send_snapshot(message, chunks);
    let file = next_event(&b.events, |event| match event {
        PeerEvent::Snapshot { data, .. } => Some(data),
        _ => None,
    });
    assert_eq!(std::fs::read(file.path()).unwrap(), data);
    let delivered = next_event(&a.events, |event| match event {
        PeerEvent::SnapshotSent { to: 2, delivered } => Some(delivered),
        _ => None,
    });
    assert!(delivered);

    // A member whose certificate another CA signed: refused both ways,
    // retried with backoff, and the others are unaffected.
    let c = tls_member(&rt, 3, &pki.other_peer_cert, &pki.other_peer_key, &pki.ca);
    a.transport.add_peer(3, vec![https(&c)]);
    c.transport.add_peer(1, vec![https(&a)]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!a.transport.stats(3).unwrap().connected);
    assert!(!c.transport.stats(1).unwrap().connected);
    assert_eq!(
        a.transport.send(heartbeat(1, 3, 1)),
        Err(SendError::Disconnected)
    );
    // Plaintext and garbage on the TLS port each end their connection.
    let (stream, answer) = {
        let mut stream = raw(a.addr);
        stream.write_all(&hello(CLUSTER, 2, 1, 1, 2)).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        (stream, answer)
    };
    drop(stream);
    assert!(
        answer.is_empty() || answer[0] == 21,
        "plaintext got an answer other than a TLS alert: {answer:?}"
    );
    assert_still_serving(&a, &b, 77);
    assert_still_serving(&b, &a, 78);
    // A plaintext dial to a TLS listener fails cleanly, and so does a TLS
    // dial to a plaintext one.
    let plain_member = self::member(&rt, 5);
    plain_member
        .transport
        .add_peer(1, vec![format!("http://{}", a.addr)]);
    a.transport.add_peer(5, vec![https(&plain_member)]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!plain_member.transport.stats(1).unwrap().connected);
    assert!(!a.transport.stats(5).unwrap().connected);
    assert_still_serving(&a, &b, 79);
}

/// Idle connections held open against `addr`, each reopened (after a
/// millisecond) as soon as the member closes it, until `stop` — an
/// attacker that never sends a byte. Returns how many it reopened.
fn flood(
    addr: SocketAddr,
    connections: usize,
    opened: mpsc::Sender<()>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> usize {
    use std::sync::atomic::Ordering;
    let open = || {
        let stream = TcpStream::connect(addr).ok()?;
        stream.set_nonblocking(true).ok()?;
        Some(stream)
    };
    let mut streams: Vec<Option<TcpStream>> = (0..connections).map(|_| open()).collect();
    let _ = opened.send(());
    let mut reopened = 0;
    let deadline = Instant::now() + 2 * WAIT;
    while !stop.load(Ordering::Acquire) && Instant::now() < deadline {
        for slot in &mut streams {
            let closed = match slot {
                None => true,
                Some(stream) => match stream.read(&mut [0u8; 64]) {
                    Ok(_) => true,
                    Err(e) => e.kind() != io::ErrorKind::WouldBlock,
                },
            };
            if closed {
                std::thread::sleep(Duration::from_millis(1));
                *slot = open();
                reopened += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    reopened
}

/// More idle connections than the member accepts, reopened as soon as
/// they are closed, do not keep a member out: pending handshakes make way
/// for newer ones, so a member's quick handshake gets through.
#[test]
fn a_flood_of_idle_connections_does_not_keep_a_member_out() {
    use oxetcd_server::peer::{HANDSHAKES_MAX, INBOUND_CONNECTIONS_MAX};
    use std::sync::atomic::{AtomicBool, Ordering};
    let rt = tokio_runtime();
    let target = member(&rt, 1);
    let stop = Arc::new(AtomicBool::new(false));
    let idle = INBOUND_CONNECTIONS_MAX + HANDSHAKES_MAX + 16;
    let (opened, flooded) = mpsc::channel();
    let attacker = {
        let (addr, stop) = (target.addr, stop.clone());
        std::thread::spawn(move || flood(addr, idle, opened, stop))
    };
    // The flood fills every queue first.
    flooded
        .recv_timeout(WAIT)
        .expect("the flood opened its connections");
    std::thread::sleep(Duration::from_millis(200));
    let other = member(&rt, 2);
    connect_all(&[&target, &other]);
    assert_still_serving(&target, &other, 77);
    stop.store(true, Ordering::Release);
    let reopened = attacker.join().expect("flood thread");
    assert!(
        reopened >= idle - HANDSHAKES_MAX,
        "the flood was not pushed out ({reopened} reopened)"
    );
}
