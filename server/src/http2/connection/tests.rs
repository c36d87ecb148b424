//! The connection machine driven as a client would: frames in, events
//! and frames out.

use super::*;

const CONFIG: Config = Config {
    max_concurrent_streams: 4,
    stream_window: 1 << 16,
    connection_window: 1 << 20,
    max_header_list_size: 16 << 10,
};

/// A frame as a client writes it.
fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A request header block: `POST`, `http`, `path`, then literal fields
/// without indexing.
fn block(path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = vec![0x83, 0x86, 0x04, path.len() as u8];
    out.extend_from_slice(path.as_bytes());
    for (name, value) in fields {
        out.extend_from_slice(&[0x00, name.len() as u8]);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

fn grpc_block(path: &str) -> Vec<u8> {
    block(
        path,
        &[("content-type", "application/grpc"), ("te", "trailers")],
    )
}

fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in pairs {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    raw(SETTINGS, 0, 0, &payload)
}

struct Client {
    conn: Connection,
    decoder: Decoder,
}

impl Client {
    /// A connection past the preface and both SETTINGS, output drained.
    fn new(config: Config, peer: &[(u16, u32)]) -> Self {
        let mut bytes = frame::PREFACE.to_vec();
        bytes.extend(settings(peer));
        let mut client = Self {
            conn: Connection::new(config),
            decoder: Decoder::new(4096),
        };
        let events = client.send(&bytes);
        assert!(events.is_empty(), "{events:?}");
        let frames = client.frames();
        assert!(matches!(frames[0], Frame::Settings(_)), "{frames:?}");
        assert!(frames.contains(&Frame::SettingsAck), "{frames:?}");
        client
    }

    fn send(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut buf = BytesMut::from(bytes);
        let mut events = Vec::new();
        self.conn.receive(&mut buf, &mut events);
        events
    }

    /// A whole gRPC request (its headers end it) on `id`.
    fn request(&mut self, id: u32) -> Vec<Event> {
        self.send(&raw(
            HEADERS,
            END_HEADERS | END_STREAM,
            id,
            &grpc_block("/a/b"),
        ))
    }

    /// A request on `id` that has ended, answered with response headers.
    fn open(&mut self, id: u32) {
        let events = self.request(id);
        assert_eq!(events.len(), 1, "{events:?}");
        self.conn
            .send_headers(id, StatusCode::OK, &response_headers(), false);
    }

    /// Everything the connection wrote, as frames.
    fn frames(&mut self) -> Vec<Frame> {
        let mut buf = BytesMut::new();
        // Taken in small writes, as a socket may.
        while self.conn.output_len() > 0 {
            let mut slices = [IoSlice::new(&[]); 3];
            let n = self.conn.output(&mut slices);
            let first = slices[..n].iter().find(|s| !s.is_empty()).expect("bytes");
            let take = first.len().min(5000);
            buf.extend_from_slice(&first[..take]);
            self.conn.written(take);
        }
        let mut frames = Vec::new();
        while let Some(frame) = frame::decode(&mut buf, 1 << 20).expect("the server's frames parse")
        {
            frames.push(frame);
        }
        assert!(buf.is_empty());
        frames
    }

    /// A header block the server wrote, decoded.
    fn fields(&mut self, block: &[u8]) -> Vec<(String, String)> {
        let mut fields = Vec::new();
        self.decoder
            .decode(block, 1 << 20, |Field { name, value }| {
                let name = match name {
                    Name::Pseudo(Pseudo::Status) => ":status".to_owned(),
                    Name::Pseudo(other) => format!("{other:?}"),
                    Name::Header(name) => name.as_str().to_owned(),
                };
                fields.push((name, String::from_utf8_lossy(&value).into_owned()));
            })
            .expect("the server's header blocks decode");
        fields
    }
}

fn trailers_ok() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    trailers
}

fn response_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    headers
}

#[test]
fn a_unary_call_is_read_and_answered() {
    let mut client = Client::new(CONFIG, &[]);
    let mut bytes = raw(HEADERS, END_HEADERS, 1, &grpc_block("/etcdserverpb.KV/Put"));
    bytes.extend(raw(DATA, END_STREAM, 1, b"\0\0\0\0\x02hi"));
    let events = client.send(&bytes);
    let [Event::Request {
        stream: 1,
        request,
        end_stream: false,
    }, Event::Data {
        stream: 1,
        data,
        end_stream: true,
    }] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(request.method(), http::Method::POST);
    assert_eq!(request.uri().path(), "/etcdserverpb.KV/Put");
    assert_eq!(request.headers()["content-type"], "application/grpc");
    assert_eq!(request.version(), http::Version::HTTP_2);
    assert_eq!(&data[..], b"\0\0\0\0\x02hi");

    client
        .conn
        .send_headers(1, StatusCode::OK, &response_headers(), false);
    client
        .conn
        .send_data(1, Bytes::from_static(b"\0\0\0\0\x01x"), false);
    client.conn.send_trailers(1, trailers_ok());
    let frames = client.frames();
    let [Frame::Headers {
        stream: 1,
        block: head,
        end_stream: false,
        end_headers: true,
    }, Frame::Data {
        stream: 1,
        data,
        end_stream: false,
        ..
    }, Frame::Headers {
        stream: 1,
        block: tail,
        end_stream: true,
        end_headers: true,
    }] = &frames[..]
    else {
        panic!("{frames:?}");
    };
    assert_eq!(&data[..], b"\0\0\0\0\x01x");
    let head = client.fields(head);
    assert_eq!(
        head,
        [
            (":status".into(), "200".into()),
            ("content-type".into(), "application/grpc".into())
        ]
    );
    assert_eq!(client.fields(tail), [("grpc-status".into(), "0".into())]);
    // The stream is over: nothing more is sent on it.
    assert!(client.conn.streams.is_empty());
    client.conn.send_data(1, Bytes::from_static(b"late"), true);
    assert!(client.frames().is_empty());
}

#[test]
fn a_header_block_may_span_continuations() {
    let mut client = Client::new(CONFIG, &[]);
    let block = grpc_block("/etcdserverpb.KV/Range");
    let (a, b) = block.split_at(7);
    let mut bytes = raw(HEADERS, END_STREAM, 1, a);
    bytes.extend(raw(CONTINUATION, END_HEADERS, 1, b));
    let events = client.send(&bytes);
    assert!(
        matches!(&events[..], [Event::Request { stream: 1, request, end_stream: true }]
            if request.uri().path() == "/etcdserverpb.KV/Range"),
        "{events:?}"
    );
    // Any other frame inside a block ends the connection.
    let mut bytes = raw(HEADERS, 0, 3, a);
    bytes.extend(raw(PING, 0, 0, &[0; 8]));
    client.send(&bytes);
    assert!(client.conn.is_closed());
    let frames = client.frames();
    assert_eq!(
        frames.last(),
        Some(&Frame::GoAway {
            last_stream: 1,
            reason: Reason::PROTOCOL_ERROR
        })
    );
}

#[test]
fn send_windows_hold_data_and_trailers_back() {
    let mut client = Client::new(CONFIG, &[(0x4, 10)]);
    let events = client.send(&raw(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &grpc_block("/a/b"),
    ));
    assert_eq!(events.len(), 1);
    client
        .conn
        .send_headers(1, StatusCode::OK, &response_headers(), false);
    client.conn.send_data(1, Bytes::from(vec![7; 25]), false);
    client.conn.send_trailers(1, trailers_ok());
    let frames = client.frames();
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert!(matches!(&frames[1], Frame::Data { data, .. } if data.len() == 10));
    // More window: the rest of the data, then the trailers.
    client.send(&raw(WINDOW_UPDATE, 0, 1, &5u32.to_be_bytes()));
    let frames = client.frames();
    assert!(
        matches!(&frames[..], [Frame::Data { data, .. }] if data.len() == 5),
        "{frames:?}"
    );
    client.send(&raw(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()));
    let frames = client.frames();
    assert!(
        matches!(&frames[..], [Frame::Data { data, end_stream: false, .. },
            Frame::Headers { end_stream: true, .. }] if data.len() == 10),
        "{frames:?}"
    );
    assert!(client.conn.streams.is_empty());
}

#[test]
fn the_connection_window_is_shared_and_refilled_in_order() {
    let big = 1 << 20;
    let mut client = Client::new(CONFIG, &[(0x4, big), (0x5, 1 << 20)]);
    for id in [1, 3] {
        client.open(id);
    }
    client.conn.send_data(1, Bytes::from(vec![1; 65_535]), true);
    client.conn.send_data(3, Bytes::from(vec![3; 100]), true);
    let sent: usize = client
        .frames()
        .iter()
        .map(|f| match f {
            Frame::Data { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(sent, 65_535, "the connection's initial window");
    let events = client.send(&raw(WINDOW_UPDATE, 0, 0, &50u32.to_be_bytes()));
    assert!(events.is_empty());
    let frames = client.frames();
    assert!(
        matches!(&frames[..], [Frame::Data { stream: 3, data, end_stream: false, .. }]
            if data.len() == 50),
        "{frames:?}"
    );
    client.send(&raw(WINDOW_UPDATE, 0, 0, &50u32.to_be_bytes()));
    let frames = client.frames();
    assert!(
        matches!(
            &frames[..],
            [
                Frame::Data {
                    stream: 3,
                    end_stream: true,
                    ..
                },
                ..
            ]
        ),
        "{frames:?}"
    );
}

#[test]
fn a_stream_waiting_for_window_waits_for_room() {
    let mut client = Client::new(CONFIG, &[(0x4, 0)]);
    client.open(1);
    assert!(client.conn.has_room(1));
    client.conn.send_data(1, Bytes::from(vec![0; 1500]), false);
    assert!(!client.conn.has_room(1));
    // Part of it leaves: still no room.
    let events = client.send(&raw(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()));
    assert!(events.is_empty(), "{events:?}");
    assert!(!client.conn.has_room(1));
    let events = client.send(&raw(WINDOW_UPDATE, 0, 1, &1000u32.to_be_bytes()));
    assert!(
        matches!(&events[..], [Event::Writable { stream: 1 }]),
        "{events:?}"
    );
    assert!(client.conn.has_room(1));
}

/// `n` bytes of DATA on `stream`, in frames of the default largest size.
fn data(stream: u32, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut left = n;
    while left > 0 {
        let chunk = left.min(frame::DEFAULT_MAX_FRAME_SIZE as usize);
        out.extend(raw(DATA, 0, stream, &vec![0; chunk]));
        left -= chunk;
    }
    out
}

#[test]
fn request_bodies_are_flow_controlled_and_released() {
    let mut client = Client::new(CONFIG, &[]);
    client.send(&raw(HEADERS, END_HEADERS, 1, &grpc_block("/a/b")));
    let half = CONFIG.stream_window as usize / 2;
    let events = client.send(&data(1, half - 1));
    assert_eq!(events.len(), 2);
    client.conn.release(1, half - 1);
    assert!(client.frames().is_empty(), "less than half: no update yet");
    client.send(&data(1, 1));
    client.conn.release(1, 1);
    let frames = client.frames();
    assert_eq!(
        frames,
        [Frame::WindowUpdate {
            stream: 1,
            increment: half as u32
        }]
    );
    // Beyond the stream's window (all of it is again): that stream is
    // reset, the connection goes on.
    let events = client.send(&data(1, CONFIG.stream_window as usize + 1));
    assert!(
        matches!(&events[..], [.., Event::Reset { stream: 1 }]),
        "{events:?}"
    );
    let frames = client.frames();
    assert_eq!(
        frames,
        [Frame::Reset {
            stream: 1,
            reason: Reason::FLOW_CONTROL_ERROR
        }]
    );
    assert!(!client.conn.is_closed());
    // A frame larger than our SETTINGS_MAX_FRAME_SIZE ends the connection.
    let big = frame::DEFAULT_MAX_FRAME_SIZE as usize + 1;
    client.send(&raw(DATA, 0, 3, &vec![0; big]));
    assert!(client.conn.is_closed());
}

#[test]
fn malformed_requests_reset_their_stream_only() {
    let mut client = Client::new(CONFIG, &[]);
    let cases: [Vec<u8>; 5] = [
        // No :path.
        vec![0x83, 0x86],
        // An upper-case name.
        block("/a/b", &[("Content-Type", "application/grpc")]),
        // A connection-specific field.
        block("/a/b", &[("connection", "close")]),
        block("/a/b", &[("te", "gzip")]),
        // A pseudo-header after a regular field.
        {
            let mut b = block("/a/b", &[("x", "y")]);
            b.push(0x86);
            b
        },
    ];
    let mut id = 1;
    for case in cases {
        let events = client.send(&raw(HEADERS, END_HEADERS | END_STREAM, id, &case));
        assert!(events.is_empty(), "{id}: {events:?}");
        assert_eq!(
            client.frames(),
            [Frame::Reset {
                stream: id,
                reason: Reason::PROTOCOL_ERROR
            }]
        );
        id += 2;
    }
    assert_eq!(client.request(id).len(), 1);
    assert!(!client.conn.is_closed());
}

#[test]
fn connection_errors_end_with_goaway() {
    let cases: [(&[u8], Reason); 3] = [
        // An even stream id.
        (
            &[0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 2, 0x83],
            Reason::PROTOCOL_ERROR,
        ),
        // An index beyond both tables.
        (
            &[0, 0, 1, HEADERS, END_HEADERS, 0, 0, 0, 1, 0xff],
            Reason::COMPRESSION_ERROR,
        ),
        // A CONTINUATION with no block open.
        (
            &[0, 0, 0, CONTINUATION, END_HEADERS, 0, 0, 0, 1],
            Reason::PROTOCOL_ERROR,
        ),
    ];
    for (bytes, reason) in cases {
        let mut client = Client::new(CONFIG, &[]);
        client.send(bytes);
        assert!(client.conn.is_closed());
        assert_eq!(
            client.frames(),
            [Frame::GoAway {
                last_stream: 0,
                reason
            }]
        );
        // Nothing more is read.
        assert!(client.send(&raw(PING, 0, 0, &[0; 8])).is_empty());
        assert!(client.frames().is_empty());
    }
    let mut conn = Connection::new(CONFIG);
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\n\r\n"[..]);
    conn.receive(&mut buf, &mut Vec::new());
    assert!(conn.is_closed());
}

#[test]
fn streams_beyond_the_limit_are_refused() {
    let mut client = Client::new(CONFIG, &[]);
    for n in 0..CONFIG.max_concurrent_streams {
        let events = client.send(&raw(HEADERS, END_HEADERS, 2 * n + 1, &grpc_block("/a/b")));
        assert_eq!(events.len(), 1);
    }
    let refused = 2 * CONFIG.max_concurrent_streams + 1;
    let events = client.send(&raw(HEADERS, END_HEADERS, refused, &grpc_block("/a/b")));
    assert!(events.is_empty());
    assert_eq!(
        client.frames(),
        [Frame::Reset {
            stream: refused,
            reason: Reason::REFUSED_STREAM
        }]
    );
    // A client reset frees a place.
    let events = client.send(&raw(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    assert!(matches!(&events[..], [Event::Reset { stream: 1 }]));
    let events = client.send(&raw(HEADERS, END_HEADERS, refused + 2, &grpc_block("/a/b")));
    assert_eq!(events.len(), 1);
}

/// A client that keeps sending malformed requests gets a reset for each,
/// up to the bound, and then GOAWAY `ENHANCE_YOUR_CALM`.
#[test]
fn too_many_error_resets_end_the_connection() {
    let mut client = Client::new(CONFIG, &[]);
    let malformed = [0x83, 0x86]; // no :path
    let mut id = 1;
    for _ in 0..ERROR_RESETS_MAX {
        client.send(&raw(HEADERS, END_HEADERS | END_STREAM, id, &malformed));
        id += 2;
    }
    assert!(!client.conn.is_closed());
    let frames = client.frames();
    assert_eq!(frames.len(), ERROR_RESETS_MAX as usize);
    assert!(frames.iter().all(|f| matches!(
        f,
        Frame::Reset {
            reason: Reason::PROTOCOL_ERROR,
            ..
        }
    )));
    // A good request between them changes nothing: the errors are counted.
    assert_eq!(client.request(id).len(), 1);
    id += 2;
    client.send(&raw(HEADERS, END_HEADERS | END_STREAM, id, &malformed));
    assert!(client.conn.is_closed());
    assert_eq!(
        client.frames(),
        [
            Frame::Reset {
                stream: id,
                reason: Reason::PROTOCOL_ERROR
            },
            Frame::GoAway {
                last_stream: id,
                reason: Reason::ENHANCE_YOUR_CALM
            }
        ]
    );
}

/// Streams opened and reset before their answer ("rapid reset") end the
/// connection past the bound within a period; streams answered before
/// their reset, and streams answered in between, do not count.
#[test]
fn rapid_resets_end_the_connection() {
    let reset = |id: u32| raw(RST_STREAM, 0, id, &8u32.to_be_bytes());
    // Answered, then reset (a watch cancelled): never counted.
    let mut client = Client::new(CONFIG, &[]);
    let mut id = 1;
    for _ in 0..2 * UNANSWERED_RESETS_MAX {
        client.open(id);
        let events = client.send(&reset(id));
        assert!(matches!(&events[..], [Event::Reset { .. }]), "{events:?}");
        id += 2;
    }
    assert!(!client.conn.is_closed());
    // One answered stream for each reset one: the count stays low.
    let mut client = Client::new(CONFIG, &[]);
    let mut id = 1;
    for _ in 0..2 * UNANSWERED_RESETS_MAX {
        client.send(&raw(HEADERS, END_HEADERS, id, &grpc_block("/a/b")));
        client.send(&reset(id));
        client.open(id + 2);
        client.conn.send_trailers(id + 2, trailers_ok());
        id += 4;
    }
    assert!(!client.conn.is_closed());
    // Opened and reset at once, the bound's worth in each period: the
    // count starts again with each.
    let mut client = Client::new(CONFIG, &[]);
    let mut id = 1;
    for _ in 0..3 {
        for _ in 0..UNANSWERED_RESETS_MAX {
            client.send(&raw(HEADERS, END_HEADERS, id, &grpc_block("/a/b")));
            client.send(&reset(id));
            id += 2;
        }
        assert!(client.conn.has_unanswered_resets());
        client.conn.forgive_resets();
        assert!(!client.conn.has_unanswered_resets());
    }
    assert!(!client.conn.is_closed());
    // Opened and reset at once: the bound, then GOAWAY.
    let mut client = Client::new(CONFIG, &[]);
    let mut id = 1;
    for _ in 0..UNANSWERED_RESETS_MAX {
        let events = client.send(&raw(HEADERS, END_HEADERS, id, &grpc_block("/a/b")));
        assert_eq!(events.len(), 1);
        client.send(&reset(id));
        id += 2;
    }
    assert!(!client.conn.is_closed());
    assert!(client.frames().is_empty());
    client.send(&raw(HEADERS, END_HEADERS, id, &grpc_block("/a/b")));
    let events = client.send(&reset(id));
    assert!(matches!(&events[..], [Event::Reset { .. }]), "{events:?}");
    assert!(client.conn.is_closed());
    assert_eq!(
        client.frames(),
        [Frame::GoAway {
            last_stream: id,
            reason: Reason::ENHANCE_YOUR_CALM
        }]
    );
}

#[test]
fn an_answer_before_the_request_ends_resets_with_no_error() {
    let mut client = Client::new(CONFIG, &[]);
    client.send(&raw(HEADERS, END_HEADERS, 1, &grpc_block("/a/b")));
    client
        .conn
        .send_headers(1, StatusCode::OK, &response_headers(), true);
    let frames = client.frames();
    assert!(
        matches!(
            &frames[..],
            [
                Frame::Headers {
                    end_stream: true,
                    ..
                },
                Frame::Reset {
                    stream: 1,
                    reason: Reason::NO_ERROR
                }
            ]
        ),
        "{frames:?}"
    );
    // The client's late data is dropped, its window given back.
    let events = client.send(&raw(DATA, END_STREAM, 1, &[0; 10]));
    assert!(events.is_empty());
}

#[test]
fn a_lone_pong_is_told_apart() {
    let mut client = Client::new(CONFIG, &[]);
    client.send(&raw(PING, 0, 0, &[9; 8]));
    assert!(client.conn.only_pongs());
    client.send(&raw(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &grpc_block("/a/b"),
    ));
    client
        .conn
        .send_headers(1, StatusCode::OK, &response_headers(), true);
    assert!(!client.conn.only_pongs());
    let frames = client.frames();
    assert_eq!(
        frames[0],
        Frame::Ping {
            ack: true,
            payload: [9; 8]
        }
    );
}

#[test]
fn the_hpack_tables_stay_in_step_across_responses() {
    let mut client = Client::new(CONFIG, &[]);
    let mut sizes = Vec::new();
    for id in [1, 3, 5] {
        client.open(id);
        client.conn.send_trailers(id, trailers_ok());
        for frame in client.frames() {
            if let Frame::Headers { block, .. } = frame {
                sizes.push(block.len());
                assert!(!client.fields(&block).is_empty());
            }
        }
    }
    assert!(
        sizes[2] < sizes[0],
        "repeated fields are indexed: {sizes:?}"
    );
    assert_eq!(sizes[2], sizes[4]);
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..2000 {
        let mut client = Client::new(CONFIG, &[]);
        for _ in 0..4 {
            let len = (next() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Mostly well-framed, with random types, flags and payloads.
            if next() % 2 == 0 {
                let kind = (next() % 11) as u8;
                let stream = (next() % 8) as u32;
                bytes = raw(kind, next() as u8, stream, &bytes);
            }
            client.send(&bytes);
            let _ = client.conn.output_len();
            if next() % 3 == 0 {
                client
                    .conn
                    .send_data(1, Bytes::from_static(b"x"), next() % 2 == 0);
            }
        }
    }
}
