//! The rewrite read through every chunking: HTTP/1.1 and unchanged blocks
//! pass byte for byte, repaired blocks are framed as HTTP/2 requires, and
//! malformed input passes unchanged.

use std::task::Waker;

use super::frame::{
    frame_header, push_frame_header, FLAG_END_HEADERS, FLAG_END_STREAM, FLAG_PADDED, FLAG_PRIORITY,
    FRAME_HEADER_BYTES, FRAME_PAYLOAD_BYTES_MAX, PRIORITY_BYTES, TYPE_CONTINUATION, TYPE_HEADERS,
};
use super::hpack::tests::{field, Decoder, Encoder, Field, Repr};
use super::*;
use crate::test_io::Trickle;

/// Everything hyper would read from `input` through the rewrite, the
/// connection giving `read_chunk` bytes at a time and hyper asking for
/// `hyper_chunk`.
fn through(input: &[u8], read_chunk: usize, hyper_chunk: usize) -> Vec<u8> {
    let mut io = AuthorityRewrite::new(Trickle::new(input, read_chunk));
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    let mut chunk = vec![0; hyper_chunk];
    let mut pendings = 0;
    loop {
        let mut buf = ReadBuf::new(&mut chunk);
        match Pin::new(&mut io).poll_read(&mut cx, buf.unfilled()) {
            Poll::Ready(Ok(())) if buf.filled().is_empty() => return out,
            Poll::Ready(Ok(())) => out.extend_from_slice(buf.filled()),
            Poll::Ready(Err(e)) => panic!("read failed: {e}"),
            Poll::Pending => {
                pendings += 1;
                assert!(pendings <= 2 * input.len() + 2, "no progress");
            }
        }
    }
}

/// Chunkings every stream is tried with: byte by byte both ways, odd
/// sizes, and big reads.
const CHUNKINGS: &[(usize, usize)] = &[
    (1, 1),
    (1, 4096),
    (4096, 1),
    (7, 13),
    (13, 7),
    (65_536, 65_536),
];

/// The stream read through every chunking; they must all agree.
fn rewritten(input: &[u8]) -> Vec<u8> {
    let first = through(input, CHUNKINGS[0].0, CHUNKINGS[0].1);
    for &(read_chunk, hyper_chunk) in &CHUNKINGS[1..] {
        assert!(
            through(input, read_chunk, hyper_chunk) == first,
            "chunking ({read_chunk}, {hyper_chunk}) changed the output"
        );
    }
    first
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_frame_header(&mut out, payload.len(), kind, flags, stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[derive(Debug, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    assert_eq!(&bytes[..PREFACE.len()], PREFACE);
    bytes = &bytes[PREFACE.len()..];
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let header = frame_header(bytes);
        let end = FRAME_HEADER_BYTES + header.length;
        frames.push(Frame {
            kind: header.kind,
            flags: header.flags,
            stream: u32::from_be_bytes(bytes[5..9].try_into().unwrap()),
            payload: bytes[FRAME_HEADER_BYTES..end].to_vec(),
        });
        bytes = &bytes[end..];
    }
    frames
}

/// Decodes every header block in a frame stream (checking the framing
/// rules on the way) and returns the header lists, and the other frames.
fn decode_stream(bytes: &[u8]) -> (Vec<Vec<Field>>, Vec<Frame>) {
    let mut decoder = Decoder::new();
    let mut lists = Vec::new();
    let mut others = Vec::new();
    let mut block: Option<Vec<u8>> = None;
    for frame in frames(bytes) {
        assert!(frame.payload.len() <= FRAME_PAYLOAD_BYTES_MAX);
        let ends_block = frame.flags & FLAG_END_HEADERS != 0
            && matches!(frame.kind, TYPE_HEADERS | TYPE_CONTINUATION);
        match (frame.kind, block.as_mut()) {
            (TYPE_HEADERS, None) => {
                let mut payload = &frame.payload[..];
                if frame.flags & FLAG_PADDED != 0 {
                    let pad = usize::from(payload[0]);
                    payload = &payload[1..payload.len() - pad];
                }
                if frame.flags & FLAG_PRIORITY != 0 {
                    payload = &payload[PRIORITY_BYTES..];
                }
                block = Some(payload.to_vec());
            }
            (TYPE_CONTINUATION, Some(block)) => block.extend_from_slice(&frame.payload),
            (_, None) => others.push(frame),
            (kind, Some(_)) => panic!("frame type {kind} inside a header block"),
        }
        if ends_block {
            lists.push(decoder.decode(&block.take().unwrap()));
        }
    }
    assert!(block.is_none(), "header block left open");
    (lists, others)
}

fn settings() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0x10, 0, 0]));
    out.extend(frame(0x8, 0, 0, &[0, 0x0f, 0, 1]));
    out
}

/// What grpc-go sends for one unary call to `authority`.
fn grpc_request(authority: &str) -> Vec<(Field, Repr)> {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/etcdserverpb.Maintenance/Status"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("user-agent", "grpc-go/1.26.0"),
        ("te", "trailers"),
    ]
    .iter()
    .map(|&(name, value)| (field(name, value), Repr::Indexing))
    .collect()
}

fn stripped(fields: &[(Field, Repr)]) -> Vec<Field> {
    fields
        .iter()
        .map(|((name, value), _)| {
            let mut value = value.clone();
            if name == b":authority" {
                for scheme in [&b"http://"[..], b"https://"] {
                    if value.starts_with(scheme) {
                        value.drain(..scheme.len());
                    }
                }
            }
            (name.clone(), value)
        })
        .collect()
}

#[test]
fn http1_passes_through_byte_for_byte() {
    for input in [
        &b"POST /v3/kv/range HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"[..],
        b"PRI * HTTP/1.1\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n",
        b"",
    ] {
        assert_eq!(rewritten(input), input);
    }
}

#[test]
fn grpc_calls_get_a_bare_authority() {
    for huffman in [true, false] {
        let mut encoder = Encoder::new(huffman);
        let mut input = settings();
        let mut expected = Vec::new();
        for (stream, authority) in [
            (1, "http://127.0.0.1:2379"),
            (3, "http://127.0.0.1:2379"),
            (5, "https://10.0.0.1:2379"),
            (7, "127.0.0.1:2379"),
        ] {
            let request = grpc_request(authority);
            input.extend(frame(
                TYPE_HEADERS,
                FLAG_END_HEADERS,
                stream,
                &encoder.encode(&request),
            ));
            input.extend(frame(
                0x0,
                FLAG_END_STREAM,
                stream,
                &[0, 0, 0, 0, 2, 0x08, 0x01],
            ));
            expected.push(stripped(&request));
        }
        let output = rewritten(&input);
        let (lists, others) = decode_stream(&output);
        assert_eq!(lists, expected);
        let (_, original_others) = decode_stream(&input);
        assert_eq!(others, original_others, "other frames changed");
        // The second call names the authority by a dynamic index, which
        // resolved to the rewritten value.
    }
}

#[test]
fn dynamic_table_stays_in_step_across_requests() {
    // A small table forces evictions; values vary in length and scheme,
    // and every representation occurs.
    let mut encoder = Encoder::new(true);
    let mut input = settings();
    let mut expected = Vec::new();
    let mut block = Vec::new();
    encoder.resize(&mut block, 256);
    let reprs = [Repr::Indexing, Repr::WithoutIndexing, Repr::NeverIndexed];
    for request in 0..40u32 {
        let authority = match request % 5 {
            0 => format!("http://host-{}.example:2379", request % 3),
            1 => format!("https://h{request}:1"),
            2 => "http://127.0.0.1:2379".to_owned(),
            3 => format!("plain-{}:2379", request % 2),
            _ => format!(
                "http://a-much-longer-host-name-{}.example.com:2379/path",
                request % 4
            ),
        };
        let mut fields = grpc_request(&authority);
        fields[3].1 = reprs[request as usize % 3];
        fields.push((
            field("x-request", &format!("r{}", request % 6)),
            Repr::Indexing,
        ));
        for (f, repr) in &fields {
            encoder.field(&mut block, f, *repr);
        }
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            2 * request + 1,
            &block,
        ));
        block.clear();
        let mut want = stripped(&fields);
        if let Some(at) = want[3].1.iter().position(|&b| b == b'/') {
            want[3].1.truncate(at);
        }
        expected.push(want);
    }
    let (lists, _) = decode_stream(&rewritten(&input));
    assert_eq!(lists, expected);
}

#[test]
fn continuations_and_padding_become_one_frame() {
    let mut encoder = Encoder::new(false);
    let request = grpc_request("http://127.0.0.1:2379");
    let block = encoder.encode(&request);
    let (a, rest) = block.split_at(10);
    let (b, c) = rest.split_at(20);
    let priority = [0x80, 0, 0, 0x01, 0x0f];
    let mut headers = vec![3u8];
    headers.extend_from_slice(&priority);
    headers.extend_from_slice(a);
    headers.extend_from_slice(&[0, 0, 0]);
    let mut input = settings();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_STREAM | FLAG_PADDED | FLAG_PRIORITY,
        3,
        &headers,
    ));
    input.extend(frame(TYPE_CONTINUATION, 0, 3, b));
    input.extend(frame(TYPE_CONTINUATION, 0, 3, &[]));
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, c));
    input.extend(frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]));

    let output = rewritten(&input);
    let out = frames(&output);
    assert_eq!(out.len(), 4, "{out:?}");
    assert_eq!(out[2].kind, TYPE_HEADERS);
    assert_eq!(
        out[2].flags,
        FLAG_END_STREAM | FLAG_PRIORITY | FLAG_END_HEADERS
    );
    assert_eq!(out[2].stream, 3);
    assert_eq!(out[2].payload[..PRIORITY_BYTES], priority);
    assert_eq!(out[3].kind, 0x6);
    let (lists, _) = decode_stream(&output);
    assert_eq!(lists, [stripped(&request)]);
}

#[test]
fn long_blocks_are_split_into_continuations() {
    let mut encoder = Encoder::new(false);
    let mut request = grpc_request("http://127.0.0.1:2379");
    for i in 0..20 {
        let value = format!("{i:0>1000}");
        request.push((field(&format!("x-big-{i}"), &value), Repr::WithoutIndexing));
    }
    let block = encoder.encode(&request);
    assert!(block.len() > FRAME_PAYLOAD_BYTES_MAX);
    let mut input = settings();
    let mut pieces = block.chunks(FRAME_PAYLOAD_BYTES_MAX).peekable();
    let mut kind = TYPE_HEADERS;
    while let Some(piece) = pieces.next() {
        let flags = if pieces.peek().is_none() {
            FLAG_END_HEADERS
        } else {
            0
        };
        input.extend(frame(kind, flags, 1, piece));
        kind = TYPE_CONTINUATION;
    }
    let output = rewritten(&input);
    let out = frames(&output);
    assert_eq!(
        out.len(),
        2 + 2,
        "{:?}",
        out.iter()
            .map(|f| (f.kind, f.flags, f.payload.len()))
            .collect::<Vec<_>>()
    );
    assert_eq!(out[2].payload.len(), FRAME_PAYLOAD_BYTES_MAX);
    assert_eq!(out[2].flags, 0);
    assert_eq!(out[3].flags, FLAG_END_HEADERS);
    let (lists, _) = decode_stream(&output);
    assert_eq!(lists, [stripped(&request)]);
}

#[test]
fn blocks_that_grow_past_a_frame_are_split() {
    // A Huffman-coded authority of `a`s (five bits each) grows when
    // re-encoded raw, so a block that filled one frame needs two.
    let authority = format!("http://{}:1", "a".repeat(80));
    // '0' takes five bits: start the search just short of a full frame.
    let bare = Encoder::new(true).encode(&grpc_request(&authority)).len();
    let start = (FRAME_PAYLOAD_BYTES_MAX - bare - 20) * 8 / 5;
    let (request, block) = (start..)
        .find_map(|filler| {
            let mut request = grpc_request(&authority);
            let value = "0".repeat(filler);
            request.push((field("x-filler", &value), Repr::WithoutIndexing));
            let block = Encoder::new(true).encode(&request);
            (block.len() >= FRAME_PAYLOAD_BYTES_MAX - 2).then_some((request, block))
        })
        .unwrap();
    assert!(block.len() <= FRAME_PAYLOAD_BYTES_MAX);
    let mut input = settings();
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS | FLAG_END_STREAM,
        1,
        &block,
    ));
    let output = rewritten(&input);
    let out = frames(&output);
    assert_eq!(out.len(), 4);
    assert_eq!((out[2].kind, out[2].flags), (TYPE_HEADERS, FLAG_END_STREAM));
    assert_eq!(
        (out[3].kind, out[3].flags),
        (TYPE_CONTINUATION, FLAG_END_HEADERS)
    );
    let (lists, _) = decode_stream(&output);
    assert_eq!(lists, [stripped(&request)]);
}

#[test]
fn blocks_needing_no_change_pass_unchanged() {
    let mut encoder = Encoder::new(true);
    let block = encoder.encode(&grpc_request("127.0.0.1:2379"));
    let mut input = settings();
    let mut padded = vec![4u8];
    padded.extend_from_slice(&block);
    padded.extend_from_slice(&[0; 4]);
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_PADDED | FLAG_END_HEADERS,
        1,
        &padded,
    ));
    input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &[]));
    input.extend(frame(0x0, FLAG_END_STREAM, 1, &[0; 40_000][..16_000]));
    assert_eq!(rewritten(&input), input);
}

#[test]
fn oversized_blocks_stop_the_rewrite() {
    let mut encoder = Encoder::new(false);
    let mut input = settings();
    input.extend(frame(
        TYPE_HEADERS,
        0,
        1,
        &encoder.encode(&grpc_request("http://a:1")),
    ));
    for _ in 0..4 {
        input.extend(frame(
            TYPE_CONTINUATION,
            0,
            1,
            &[0x82; FRAME_PAYLOAD_BYTES_MAX],
        ));
    }
    input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[0x82]));
    // Later blocks are not rewritten either.
    input.extend(frame(
        TYPE_HEADERS,
        FLAG_END_HEADERS,
        3,
        &encoder.encode(&grpc_request("http://b:1")),
    ));
    assert_eq!(rewritten(&input), input);
}

#[test]
fn malformed_input_passes_unchanged() {
    let mut encoder = Encoder::new(false);
    let good = encoder.encode(&grpc_request("http://a:1"));
    let cases: Vec<Vec<u8>> = vec![
        // A DATA frame inside a header block.
        [
            frame(TYPE_HEADERS, 0, 1, &good),
            frame(0x0, 0, 1, b"x"),
            frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[]),
        ]
        .concat(),
        // A CONTINUATION of another stream.
        [
            frame(TYPE_HEADERS, 0, 1, &good),
            frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &[]),
        ]
        .concat(),
        // Padding longer than the payload.
        frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_END_HEADERS,
            1,
            &[200, 0x82],
        ),
        // PADDED with no pad length, PRIORITY with no priority.
        frame(TYPE_HEADERS, FLAG_PADDED | FLAG_END_HEADERS, 1, &[]),
        frame(TYPE_HEADERS, FLAG_PRIORITY | FLAG_END_HEADERS, 1, &[0, 0]),
        // HPACK that does not parse, then a block that would be rewritten.
        [
            frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x41, 0x7f]),
            frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &good),
        ]
        .concat(),
        // The input ends inside a block, and inside a frame header.
        frame(TYPE_HEADERS, 0, 1, &good),
        frame(TYPE_HEADERS, 0, 1, &good)[..5].to_vec(),
        [
            frame(TYPE_HEADERS, 0, 1, &good),
            frame(TYPE_CONTINUATION, 0, 1, &[])[..4].to_vec(),
        ]
        .concat(),
        frame(0x0, 0, 1, b"abc")[..6].to_vec(),
    ];
    for case in cases {
        let input = [settings(), case].concat();
        assert_eq!(rewritten(&input), input);
    }
}

#[test]
fn garbage_never_panics() {
    // A seeded linear congruential generator: frames with random
    // types, flags and payloads, some made of HPACK-ish bytes.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as u32
    };
    for _ in 0..300 {
        let mut input = settings();
        for _ in 0..next() % 6 {
            let kind = [TYPE_HEADERS, TYPE_CONTINUATION, 0x0, 0x4][next() as usize % 4];
            let flags = next() as u8;
            let payload: Vec<u8> = (0..next() % 40).map(|_| next() as u8).collect();
            input.extend(frame(kind, flags, next() % 4, &payload));
        }
        if next() % 3 == 0 {
            input.truncate(PREFACE.len() + next() as usize % 60);
        }
        for &(read_chunk, hyper_chunk) in CHUNKINGS {
            through(&input, read_chunk, hyper_chunk);
        }
    }
}
