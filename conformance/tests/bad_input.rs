//! Bad input fails alone: a request whose protobuf does not decode gets a
//! gRPC error and the same connection keeps serving; a connection that sends
//! garbage (before or after the HTTP/2 preface) is closed while the server
//! keeps serving everyone else. Run against both binaries and etcd, so the
//! expected status code is etcd's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut};
use oxetcd_conformance::{Grpc, Server, ServerKind};
use oxetcd_proto::etcdserverpb::{PutRequest, RangeRequest};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;

/// gRPC's status code for a request that fails to decode.
const CODE_INTERNAL: i32 = 13;

/// Longest to wait for a server to close a bad connection.
const CLOSE_DEADLINE: Duration = Duration::from_secs(10);

/// Sends and receives message bodies as raw bytes, to put undecodable
/// protobuf on the wire.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

/// Sends `body` as a unary call to `path`; returns the status code (0 on
/// success) and message.
fn raw_call(endpoint: &str, path: &'static str, body: Vec<u8>) -> (i32, String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .expect("endpoint")
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("connect");
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        let answer = grpc
            .unary(
                tonic::Request::new(body),
                PathAndQuery::from_static(path),
                RawCodec,
            )
            .await;
        match answer {
            Ok(_) => (0, String::new()),
            Err(status) => (status.code() as i32, status.message().to_owned()),
        }
    })
}

/// Writes `garbage` on a fresh connection and waits for the server to close
/// it (EOF or reset); fails if it stays open past [`CLOSE_DEADLINE`].
fn assert_closes(address: &str, garbage: &[u8]) {
    let mut stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // The server may close before reading everything; a failed write is fine.
    let _ = stream.write_all(garbage);
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < CLOSE_DEADLINE {
        match stream.read(&mut buffer) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return,
        }
    }
    panic!("connection sending {garbage:?} was not closed within {CLOSE_DEADLINE:?}");
}

fn bad_input_fails_alone(kind: ServerKind) {
    let server = Server::start(kind).expect("server starts");
    let endpoint = server.endpoint().to_owned();
    let address = server.address();
    let mut client = Grpc::connect(&endpoint).expect("client connects");
    client
        .put(PutRequest {
            key: b"kept".to_vec(),
            value: b"1".to_vec(),
            ..Default::default()
        })
        .expect("first put");

    // Field 1 claims 100 bytes that never come: not a protobuf message.
    let (code, message) = raw_call(&endpoint, "/etcdserverpb.KV/Put", vec![0x0a, 0x64, 0x01]);
    assert_eq!(
        code,
        CODE_INTERNAL,
        "{}: undecodable put: {message}",
        kind.name()
    );
    let (code, message) = raw_call(&endpoint, "/etcdserverpb.KV/Range", vec![0xff; 7]);
    assert_eq!(
        code,
        CODE_INTERNAL,
        "{}: undecodable range: {message}",
        kind.name()
    );

    // Garbage instead of HTTP, and a bad frame right after the preface.
    assert_closes(&address, b"\x16\x03\x01 not a request at all\r\n\r\n");
    let mut bad_frame = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bad_frame.extend_from_slice(&[0xff, 0xff, 0xff, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00]);
    bad_frame.extend_from_slice(&[0u8; 64]);
    assert_closes(&address, &bad_frame);

    // Nothing was lost and the server still serves.
    let range = client
        .range(RangeRequest {
            key: b"kept".to_vec(),
            ..Default::default()
        })
        .expect("range after bad input");
    assert_eq!(
        range.kvs.len(),
        1,
        "{}: the earlier put is gone",
        kind.name()
    );
    client
        .put(PutRequest {
            key: b"after".to_vec(),
            value: b"2".to_vec(),
            ..Default::default()
        })
        .expect("put after bad input");
}

#[test]
fn bad_input_fails_alone_on_oxetcd() {
    bad_input_fails_alone(ServerKind::Oxetcd);
}

#[test]
fn bad_input_fails_alone_on_oxetcd_smol() {
    bad_input_fails_alone(ServerKind::OxetcdSmol);
}

#[test]
fn bad_input_fails_alone_on_etcd() {
    bad_input_fails_alone(ServerKind::Etcd);
}
