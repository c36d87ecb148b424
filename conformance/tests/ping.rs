//! HTTP/2 PINGs on the client port are acknowledged with their own data,
//! promptly, on a connection with nothing else to send. oxetcd may hold a
//! lone acknowledgement briefly to send it with the next response
//! (`oxetcd_server`'s HTTP/2 connection); on an idle connection the hold
//! must still end.
//! Run against both binaries and etcd.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use oxetcd_conformance::{Server, ServerKind};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const ACK: u8 = 0x1;

/// Longest to wait for any one frame.
const FRAME_DEADLINE: Duration = Duration::from_secs(5);

fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("small frame")
        .to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, flags, 0, 0, 0, 0];
    bytes.extend_from_slice(payload);
    bytes
}

/// The next frame: its type, flags and payload.
fn read_frame(stream: &mut TcpStream) -> (u8, u8, Vec<u8>) {
    let mut header = [0u8; 9];
    stream
        .read_exact(&mut header)
        .expect("a frame header in time");
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream
        .read_exact(&mut payload)
        .expect("a frame payload in time");
    (header[3], header[4], payload)
}

fn pings_are_acknowledged(kind: ServerKind) {
    let server = Server::start(kind).expect("server starts");
    let mut stream = TcpStream::connect(server.address()).expect("connect");
    stream
        .set_read_timeout(Some(FRAME_DEADLINE))
        .expect("timeout");
    stream.write_all(PREFACE).expect("preface");
    stream
        .write_all(&frame(SETTINGS, 0, &[]))
        .expect("settings");
    // The server's SETTINGS, and its acknowledgement of ours, in any order.
    let (mut settings, mut acked) = (false, false);
    while !(settings && acked) {
        let (frame_type, flags, _) = read_frame(&mut stream);
        match (frame_type, flags & ACK) {
            (SETTINGS, 0) => {
                settings = true;
                stream.write_all(&frame(SETTINGS, ACK, &[])).expect("ack");
            }
            (SETTINGS, _) => acked = true,
            _ => {}
        }
    }
    // The connection is idle now: each PING is all the server has to answer.
    for round in 0..3u8 {
        std::thread::sleep(Duration::from_millis(50));
        let data = [round, 1, 2, 3, 4, 5, 6, 0xff];
        let sent = Instant::now();
        stream.write_all(&frame(PING, 0, &data)).expect("ping");
        loop {
            let (frame_type, flags, payload) = read_frame(&mut stream);
            if frame_type == PING {
                assert_eq!(flags & ACK, ACK, "a PING back, not an acknowledgement");
                assert_eq!(payload, data, "the ack carries the PING's data");
                break;
            }
        }
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "{}: PING {round} acknowledged after {:?}",
            kind.name(),
            sent.elapsed()
        );
    }
}

#[test]
fn pings_are_acknowledged_on_oxetcd() {
    pings_are_acknowledged(ServerKind::Oxetcd);
}

#[test]
fn pings_are_acknowledged_on_oxetcd_smol() {
    pings_are_acknowledged(ServerKind::OxetcdSmol);
}

#[test]
fn pings_are_acknowledged_on_etcd() {
    pings_are_acknowledged(ServerKind::Etcd);
}
