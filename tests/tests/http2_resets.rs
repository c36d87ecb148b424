//! Streams a client resets before their answer, on both binaries, over a
//! plain TCP connection written frame by frame: a client that opens and
//! resets streams at once, faster than the server's bound a second
//! ("rapid reset"), is sent GOAWAY `ENHANCE_YOUR_CALM` and the connection
//! closes; one that resets the bound's worth, pauses past the server's
//! period and resets as many again keeps its connection (a PING is still
//! acknowledged). Every read is bounded by a timeout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use oxetcd_server::UNANSWERED_RESETS_MAX;
use oxetcd_tests::{Server, ServerKind};

/// Longest the server may take to answer what a test waits for.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// Longer than the server's period for unanswered resets (a second).
const PAST_THE_PERIOD: Duration = Duration::from_millis(1500);

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A put's request headers (HPACK: POST, http, a literal path and
/// content type); its body never comes, so it is never answered.
fn put_headers(stream: u32) -> Vec<u8> {
    let path = b"/etcdserverpb.KV/Put";
    let kind = b"application/grpc";
    let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path);
    block.extend_from_slice(&[0x00, 12]);
    block.extend_from_slice(b"content-type");
    block.push(kind.len() as u8);
    block.extend_from_slice(kind);
    frame(HEADERS, END_HEADERS, stream, &block)
}

/// Opens and at once resets `count` streams from `first` on, in one write.
fn open_and_reset(server: &Server, socket: &mut TcpStream, first: u32, count: usize) -> u32 {
    let mut bytes = Vec::new();
    let mut id = first;
    for _ in 0..count {
        bytes.extend(put_headers(id));
        bytes.extend(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
        id += 2;
    }
    if let Err(e) = socket.write_all(&bytes) {
        panic!("the frames are written: {e}\n{}", server.log_tail());
    }
    id
}

fn connect(server: &Server) -> TcpStream {
    let mut socket = TcpStream::connect(server.address()).expect("connects");
    socket
        .set_read_timeout(Some(ANSWER_DEADLINE))
        .expect("a read timeout");
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    socket.write_all(&hello).expect("the preface is written");
    socket
}

/// Reads frames until `wanted` finds one (its kind, flags and payload),
/// the connection closes (`None`) or the deadline passes (a panic).
fn read_until(socket: &mut TcpStream, wanted: impl Fn(u8, u8, &[u8]) -> bool) -> Option<Vec<u8>> {
    let started = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let (kind, flags) = (buf[3], buf[4]);
            let payload = buf[9..9 + len].to_vec();
            buf.drain(..9 + len);
            if wanted(kind, flags, &payload) {
                return Some(payload);
            }
        }
        assert!(started.elapsed() < ANSWER_DEADLINE, "no answer in time");
        match socket.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading the server's frames: {e}"),
        }
    }
}

fn rapid_resets_are_told_to_calm_down(kind: ServerKind) {
    let server = Server::start(kind).expect("server starts");
    let bound = UNANSWERED_RESETS_MAX as usize;

    // The bound's worth, a pause past the period, as many again: the
    // connection stays and answers a PING.
    let mut socket = connect(&server);
    let next = open_and_reset(&server, &mut socket, 1, bound);
    std::thread::sleep(PAST_THE_PERIOD);
    open_and_reset(&server, &mut socket, next, bound);
    socket
        .write_all(&frame(PING, 0, 0, b"stillok!"))
        .expect("a ping is written");
    let pong = read_until(&mut socket, |kind, flags, payload| {
        kind == GOAWAY || (kind == PING && flags & ACK != 0 && payload == b"stillok!")
    });
    assert_eq!(
        pong.as_deref(),
        Some(&b"stillok!"[..]),
        "{}",
        server.log_tail()
    );

    // Past the bound at once: GOAWAY ENHANCE_YOUR_CALM, then the end.
    let mut socket = connect(&server);
    open_and_reset(&server, &mut socket, 1, bound + 1);
    let goaway = read_until(&mut socket, |kind, _, _| kind == GOAWAY)
        .expect("a GOAWAY before the connection closes");
    let code = u32::from_be_bytes([goaway[4], goaway[5], goaway[6], goaway[7]]);
    assert_eq!(code, ENHANCE_YOUR_CALM);
    assert_eq!(
        read_until(&mut socket, |_, _, _| false),
        None,
        "the connection closes"
    );

    // The server goes on serving others.
    let mut socket = connect(&server);
    socket
        .write_all(&frame(PING, 0, 0, b"another!"))
        .expect("a ping is written");
    let pong = read_until(&mut socket, |kind, flags, _| {
        kind == PING && flags & ACK != 0
    });
    assert_eq!(pong.as_deref(), Some(&b"another!"[..]));
}

#[test]
fn rapid_resets_are_told_to_calm_down_on_tokio() {
    rapid_resets_are_told_to_calm_down(ServerKind::Oxetcd);
}

#[test]
fn rapid_resets_are_told_to_calm_down_on_smol() {
    rapid_resets_are_told_to_calm_down(ServerKind::OxetcdSmol);
}
