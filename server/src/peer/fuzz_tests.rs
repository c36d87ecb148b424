//! Fuzzing what a peer connection reads, in the order the listener reads
//! it: the hello, then frames, each body decoded as its kind says. Any
//! bytes give a refusal (the connection would close), never a panic.

use oxetcd_proto::eraftpb::{Entry, Message, MessageType};
use protobuf::Message as _;

use super::inbound::decode_message;
use super::wire::{
    parse_frame_header, put_frame_header, FrameKind, Hello, StreamKind, FRAME_HEADER_BYTES,
    HELLO_BYTES, PROTOCOL_VERSION,
};

/// Frames larger than this are refused, as a small `--max-request-bytes`
/// would make them.
const FRAME_BYTES_MAX: usize = 4096;

fn seeds() -> Vec<Vec<u8>> {
    let hello = Hello {
        version: PROTOCOL_VERSION,
        kind: StreamKind::Messages,
        cluster_id: 0xc1,
        from: 2,
        to: 1,
    };
    let mut stream = hello.encode().to_vec();
    for (kind, entries) in [(MessageType::MsgHeartbeat, 0), (MessageType::MsgAppend, 2)] {
        let message = Message {
            msg_type: kind,
            from: 2,
            to: 1,
            term: 3,
            entries: (1..=entries)
                .map(|index| Entry {
                    index,
                    term: 3,
                    data: vec![7; 16].into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let body = message.write_to_bytes().expect("a message encodes");
        put_frame_header(&mut stream, FrameKind::Message, body.len());
        stream.extend_from_slice(&body);
    }
    let mut hash_kv = Hello {
        kind: StreamKind::HashKv,
        ..hello
    }
    .encode()
    .to_vec();
    put_frame_header(&mut hash_kv, FrameKind::HashKvAsk, 8);
    hash_kv.extend_from_slice(&5i64.to_be_bytes());
    vec![stream, hash_kv]
}

/// Reads `bytes` as one inbound connection.
fn read_connection(bytes: &[u8]) {
    let Some((head, mut rest)) = bytes.split_first_chunk::<HELLO_BYTES>() else {
        return;
    };
    let Ok(hello) = Hello::decode(head) else {
        return;
    };
    while let Some((header, after)) = rest.split_first_chunk::<FRAME_HEADER_BYTES>() {
        let Ok((kind, len)) = parse_frame_header(header, FRAME_BYTES_MAX) else {
            return;
        };
        let Some(body) = after.get(..len) else {
            return;
        };
        rest = &after[len..];
        let decoded = match kind {
            FrameKind::Message => decode_message(body, hello.from, hello.to).map(|_| ()),
            FrameKind::SnapshotEnd => Message::parse_from_bytes(body)
                .map(|_| ())
                .map_err(|_| "not a message"),
            _ => Ok(()),
        };
        if decoded.is_err() {
            return;
        }
    }
}

#[test]
fn fuzz_peer_connection() {
    let ran = oxetcd_fuzz::fuzz("peer-connection", &seeds(), read_connection);
    assert!(ran > 0);
}
