//! Unary calls answered without tonic's per-call framing.
//!
//! Design: tonic's unary server wraps each call in a decoding stream and an
//! encoding body, each with a buffer of its own, wraps the request and the
//! response in a one-item stream, and ends with `grpc-status` trailers built
//! through a `Status`. For a put that framing cost more of the async
//! thread than the call itself. [`read`], [`decode`] and [`answer`] do the
//! usual case directly (the router puts them together for each method):
//!
//! 1. It reads the request body to its end and finds one uncompressed
//!    message within the decoding limit, and nothing else, in it; the
//!    message is decoded from the body's own bytes (no copy when one DATA
//!    frame holds it, as it usually does).
//! 2. The router sends the decoded request through the node itself, with
//!    the credentials the request's metadata and extensions carry, as the
//!    service would (no tonic request, no boxed future of the service
//!    trait).
//! 3. It answers with `content-type`, the message in one buffer of its
//!    exact size, and `grpc-status: 0` trailers; an error is answered as
//!    tonic answers one, in the headers alone.
//!
//! Anything else — a `grpc-encoding` other than `identity`, a compressed,
//! oversized or truncated message, a second message, request trailers, a
//! body error, bytes that do not decode — goes to the generated tonic
//! server, with what was read replayed ahead of the rest of the body
//! ([`Replay`]), so those requests are answered exactly as before. The
//! bytes on the wire of a served call are tonic's too (prost's encoding,
//! the same frame prefix and headers).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tonic::body::Body;
use tonic::{Code, Status};

/// A gRPC message's prefix: the compressed flag and the length.
const PREFIX_BYTES: usize = 5;

/// The request's compression, when it has one.
static GRPC_ENCODING: http::HeaderName = http::HeaderName::from_static("grpc-encoding");

/// The `grpc-encoding` of an uncompressed request, which some clients send.
const IDENTITY: &str = "identity";

/// What [`read`] found in a request.
pub(crate) enum Read<B: HttpBody> {
    /// The request's parts and its one message.
    Message(http::request::Parts, Bytes),
    /// Not the usual case: the request as it came, for tonic.
    Tonic(http::Request<Replay<B>>),
}

/// Reads the one uncompressed message of `request`, of at most
/// `max_decoding` bytes; anything else is handed back whole (see the
/// module docs).
pub(crate) async fn read<B>(request: http::Request<B>, max_decoding: usize) -> Read<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    let (parts, mut body) = request.into_parts();
    let compressed = parts
        .headers
        .get(&GRPC_ENCODING)
        .is_some_and(|encoding| encoding != IDENTITY);
    if compressed {
        return Read::Tonic(Replay::start(parts, Chunks::None, None, Some(body)));
    }
    let mut chunks = Chunks::None;
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(e)) => {
                return Read::Tonic(Replay::start(parts, chunks, Some(Err(e)), Some(body)));
            }
        };
        match frame.into_data() {
            Ok(data) => chunks.push(data, max_decoding),
            Err(trailers) => {
                return Read::Tonic(Replay::start(parts, chunks, Some(Ok(trailers)), Some(body)));
            }
        }
        if chunks.too_much(max_decoding) {
            return Read::Tonic(Replay::start(parts, chunks, None, Some(body)));
        }
    }
    match chunks.message(max_decoding) {
        Ok(message) => Read::Message(parts, message),
        Err(chunks) => Read::Tonic(Replay::start(parts, chunks, None, None)),
    }
}

/// The message's length, when `bytes` start with the prefix of an
/// uncompressed message of at most `max_decoding` bytes (none while fewer
/// than [`PREFIX_BYTES`] came).
fn message_len(bytes: &[u8], max_decoding: usize) -> Option<usize> {
    let [0, a, b, c, d, ..] = *bytes else {
        return None;
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    (len <= max_decoding).then_some(len)
}

/// The body's bytes read so far.
enum Chunks {
    None,
    /// One DATA frame's bytes, kept as they came.
    One(Bytes),
    /// Several, joined.
    Many(BytesMut),
}

impl Chunks {
    /// Adds a DATA frame's bytes; joined, they get room for the whole
    /// message its prefix announces, when that is within `max_decoding`.
    fn push(&mut self, data: Bytes, max_decoding: usize) {
        if data.is_empty() {
            return;
        }
        *self = match std::mem::replace(self, Chunks::None) {
            Chunks::None => Chunks::One(data),
            Chunks::One(first) => {
                let announced =
                    message_len(&first, max_decoding).map_or(0, |len| PREFIX_BYTES + len);
                let room = announced.max(first.len() + data.len());
                let mut joined = BytesMut::with_capacity(room);
                joined.put(first);
                joined.put(data);
                Chunks::Many(joined)
            }
            Chunks::Many(mut joined) => {
                joined.put(data);
                Chunks::Many(joined)
            }
        };
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Chunks::None => &[],
            Chunks::One(bytes) => bytes,
            Chunks::Many(bytes) => bytes,
        }
    }

    /// Whether what was read already cannot be the one message [`read`] takes:
    /// its prefix refuses it, or more than the message came.
    fn too_much(&self, max_decoding: usize) -> bool {
        let bytes = self.bytes();
        if bytes.len() < PREFIX_BYTES {
            return false;
        }
        match message_len(bytes, max_decoding) {
            Some(len) => bytes.len() > PREFIX_BYTES + len,
            None => true,
        }
    }

    /// The whole body read: its one message, or the bytes back.
    fn message(self, max_decoding: usize) -> Result<Bytes, Chunks> {
        let bytes = self.bytes();
        let whole = bytes
            .len()
            .checked_sub(PREFIX_BYTES)
            .is_some_and(|len| message_len(bytes, max_decoding) == Some(len));
        if !whole {
            return Err(self);
        }
        Ok(match self {
            Chunks::None => Bytes::new(),
            Chunks::One(bytes) => bytes.slice(PREFIX_BYTES..),
            Chunks::Many(bytes) => bytes.freeze().slice(PREFIX_BYTES..),
        })
    }

    fn into_bytes(self) -> Option<Bytes> {
        match self {
            Chunks::None => None,
            Chunks::One(bytes) => Some(bytes),
            Chunks::Many(bytes) => Some(bytes.freeze()),
        }
    }
}

/// A request body given back: what was read, the frame or error that
/// stopped the reading, then the rest of the body.
pub(crate) struct Replay<B: HttpBody> {
    read: Option<Bytes>,
    stopped: Option<Result<Frame<Bytes>, B::Error>>,
    rest: Option<B>,
}

impl<B: HttpBody> Replay<B> {
    fn start(
        parts: http::request::Parts,
        read: Chunks,
        stopped: Option<Result<Frame<Bytes>, B::Error>>,
        rest: Option<B>,
    ) -> http::Request<Self> {
        http::Request::from_parts(
            parts,
            Self {
                read: read.into_bytes(),
                stopped,
                rest,
            },
        )
    }
}

// Nothing in it is ever pinned: the rest of the body is polled only when
// it is `Unpin` itself, and the error is only moved.
impl<B: HttpBody + Unpin> Unpin for Replay<B> {}

impl<B> HttpBody for Replay<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(read) = this.read.take() {
            return Poll::Ready(Some(Ok(Frame::data(read))));
        }
        if let Some(stopped) = this.stopped.take() {
            return Poll::Ready(Some(stopped));
        }
        match &mut this.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }
}

/// What [`decode`] made of a message. The usual case is the large variant,
/// held only while the call starts: boxing it would cost every call an
/// allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Decoded<M, B: HttpBody> {
    /// The call's request parts (its metadata) and message.
    Call(http::request::Parts, M),
    /// Bytes that do not decode: the request as it came, for tonic (boxed:
    /// the rare case).
    Tonic(Box<http::Request<Replay<B>>>),
}

impl<M, B: HttpBody> Decoded<M, B> {
    /// The message made into another.
    pub(crate) fn map<N>(self, f: impl FnOnce(M) -> N) -> Decoded<N, B> {
        match self {
            Decoded::Call(parts, message) => Decoded::Call(parts, f(message)),
            Decoded::Tonic(request) => Decoded::Tonic(request),
        }
    }
}

/// Decodes `message`, or gives the request back to tonic (which reports
/// the decoding error as it always has).
pub(crate) fn decode<M, B>(parts: http::request::Parts, message: Bytes) -> Decoded<M, B>
where
    M: prost::Message + Default,
    B: HttpBody,
{
    match M::decode(message.clone()) {
        Ok(decoded) => Decoded::Call(parts, decoded),
        Err(_) => {
            let mut framed = BytesMut::with_capacity(PREFIX_BYTES + message.len());
            framed.put_u8(0);
            framed.put_u32(message.len() as u32);
            framed.put(message);
            Decoded::Tonic(Box::new(Replay::start(
                parts,
                Chunks::Many(framed),
                None,
                None,
            )))
        }
    }
}

/// Makes room in an empty buffer for a message of `len` bytes and its
/// prefix, and writes the prefix (its length is set once it is written).
/// The buffer is a `Vec`: prost writes a varint a byte at a time, and a
/// byte pushed onto a `Vec` costs a fraction of one put into a `BytesMut`
/// (about half of the instructions encoding a put's answer went to them).
pub(crate) type Reserve = fn(&mut Vec<u8>, usize);

/// The answer to a served call: the response framed as tonic frames it,
/// or the error as tonic answers it, with the status it carries (so the
/// call's metrics need not read it back). `encode` writes the message,
/// first calling the [`Reserve`] it is given with the message's exact
/// length.
pub(crate) fn answer<M>(
    response: Result<M, Status>,
    encode: impl FnOnce(M, &mut Vec<u8>, Reserve),
) -> (http::Response<Body>, Code) {
    let message = match response {
        Ok(message) => message,
        Err(status) => return failed(status),
    };
    let mut framed = Vec::new();
    encode(message, &mut framed, |buffer, len| {
        buffer.reserve_exact(PREFIX_BYTES + len);
        buffer.extend_from_slice(&[0; PREFIX_BYTES]);
    });
    let Some(len) = framed.len().checked_sub(PREFIX_BYTES) else {
        return failed(Status::internal(
            "etcdserver: a response was encoded without its prefix",
        ));
    };
    let Ok(len) = u32::try_from(len) else {
        return failed(Status::resource_exhausted(format!(
            "Cannot return body with more than 4GB of data but got {len} bytes"
        )));
    };
    framed[1..PREFIX_BYTES].copy_from_slice(&len.to_be_bytes());
    let mut answer = http::Response::new(Body::new(Answer {
        // No copy, and no allocation beside the buffer's when the message
        // filled the room reserved for it, as it does.
        message: Some(Bytes::from(framed)),
        trailers: true,
    }));
    *answer.version_mut() = http::Version::HTTP_2;
    answer.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    (answer, Code::Ok)
}

/// An error answered as tonic answers one, in the headers alone.
fn failed(status: Status) -> (http::Response<Body>, Code) {
    let code = status.code();
    (status.into_http(), code)
}

/// A served call's response body: the message, then `grpc-status: 0`.
struct Answer {
    message: Option<Bytes>,
    trailers: bool,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(message) = this.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if std::mem::take(&mut this.trailers) {
            let mut trailers = HeaderMap::with_capacity(1);
            trailers.insert(Status::GRPC_STATUS, HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && !self.trailers
    }

    fn size_hint(&self) -> SizeHint {
        // As tonic's body: no length is promised, so none is announced.
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use http_body_util::StreamBody;
    use oxetcd_proto::etcdserverpb::{PutRequest, PutResponse, ResponseHeader};
    use prost::Message;

    type Frames = Vec<Result<Frame<Bytes>, Status>>;
    type TestBody =
        StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Status>>>>;

    const MAX: usize = 1024;

    fn request(
        frames: Frames,
        headers: &[(&'static str, &'static str)],
    ) -> http::Request<TestBody> {
        let mut request = http::Request::new(StreamBody::new(futures_util::stream::iter(frames)));
        for (name, value) in headers {
            request
                .headers_mut()
                .insert(*name, HeaderValue::from_static(value));
        }
        request
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut bytes = vec![flag];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend_from_slice(message);
        bytes
    }

    fn data(bytes: &[u8]) -> Result<Frame<Bytes>, Status> {
        Ok(Frame::data(Bytes::copy_from_slice(bytes)))
    }

    fn put_bytes() -> Vec<u8> {
        PutRequest {
            key: b"foo".to_vec(),
            value: b"bar".to_vec(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// Every frame a replayed body yields: its data joined, and whether
    /// trailers and an error came (in that order, after the data).
    fn replayed(
        request: http::Request<Replay<TestBody>>,
    ) -> (Vec<u8>, Option<HeaderMap>, Option<Status>) {
        let mut body = request.into_body();
        let mut bytes = Vec::new();
        let mut trailers = None;
        let mut error = None;
        block_on(async {
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => match frame.into_data() {
                        Ok(data) => bytes.extend_from_slice(&data),
                        Err(frame) => trailers = frame.into_trailers().ok(),
                    },
                    Err(status) => error = Some(status),
                }
            }
        });
        (bytes, trailers, error)
    }

    #[test]
    fn one_message_is_served_from_the_frame_it_came_in() {
        let message = put_bytes();
        let frame = Bytes::from(framed(0, &message));
        let start = frame.as_ptr() as usize;
        let read = block_on(read(request(vec![Ok(Frame::data(frame))], &[]), MAX));
        let Read::Message(_, got) = read else {
            panic!("not served");
        };
        assert_eq!(&got[..], &message[..]);
        assert_eq!(got.as_ptr() as usize, start + PREFIX_BYTES, "not copied");
    }

    #[test]
    fn a_message_over_several_frames_and_an_empty_end_is_served() {
        let message = put_bytes();
        let bytes = framed(0, &message);
        let frames = vec![
            data(&bytes[..2]),
            data(&bytes[2..7]),
            data(&bytes[7..]),
            data(&[]),
        ];
        let Read::Message(_, got) = block_on(read(request(frames, &[]), MAX)) else {
            panic!("not served");
        };
        assert_eq!(&got[..], &message[..]);
        // An empty message (all fields default) is one too.
        let Read::Message(_, got) = block_on(read(request(vec![data(&framed(0, &[]))], &[]), MAX))
        else {
            panic!("not served");
        };
        assert!(got.is_empty());
    }

    #[test]
    fn anything_unusual_goes_to_tonic_with_every_byte_replayed() {
        let message = put_bytes();
        let whole = framed(0, &message);
        let mut two = whole.clone();
        two.extend_from_slice(&whole);
        let oversized = framed(0, &vec![b'x'; MAX + 1]);
        let cases: Vec<(&str, Frames, Vec<u8>)> = vec![
            (
                "compressed",
                vec![data(&framed(1, &message))],
                framed(1, &message),
            ),
            (
                "over the limit, with the rest unread",
                vec![data(&oversized[..10]), data(&oversized[10..])],
                oversized.clone(),
            ),
            (
                "a second message",
                vec![data(&whole), data(&whole)],
                two.clone(),
            ),
            ("two in one frame", vec![data(&two)], two.clone()),
            (
                "cut short",
                vec![data(&whole[..whole.len() - 1])],
                whole[..whole.len() - 1].to_vec(),
            ),
            (
                "a short prefix",
                vec![data(&whole[..3])],
                whole[..3].to_vec(),
            ),
            ("no message", vec![], vec![]),
        ];
        for (case, frames, expected) in cases {
            let Read::Tonic(request) = block_on(read(request(frames, &[]), MAX)) else {
                panic!("{case}: served");
            };
            let (bytes, trailers, error) = replayed(request);
            assert_eq!(bytes, expected, "{case}");
            assert!(trailers.is_none() && error.is_none(), "{case}");
        }
    }

    #[test]
    fn compression_trailers_and_errors_go_to_tonic_as_they_came() {
        let whole = framed(0, &put_bytes());
        // A compressed request is not read at all.
        let Read::Tonic(compressed) = block_on(read(
            request(vec![data(&whole)], &[("grpc-encoding", "gzip")]),
            MAX,
        )) else {
            panic!("served");
        };
        assert_eq!(compressed.headers()["grpc-encoding"], "gzip");
        assert_eq!(replayed(compressed).0, whole);
        // `identity` is no compression: served.
        let identity = request(vec![data(&whole)], &[("grpc-encoding", "identity")]);
        assert!(matches!(block_on(read(identity, MAX)), Read::Message(..)));
        // Request trailers, then what follows them.
        let mut sent = HeaderMap::new();
        sent.insert("x-extra", HeaderValue::from_static("1"));
        let frames = vec![data(&whole), Ok(Frame::trailers(sent.clone()))];
        let Read::Tonic(with_trailers) = block_on(read(request(frames, &[]), MAX)) else {
            panic!("served");
        };
        let (bytes, trailers, error) = replayed(with_trailers);
        assert_eq!(
            (bytes, trailers, error.is_none()),
            (whole.clone(), Some(sent), true)
        );
        // A body error after part of the message.
        let frames = vec![data(&whole[..4]), Err(Status::cancelled("gone"))];
        let Read::Tonic(failed) = block_on(read(request(frames, &[]), MAX)) else {
            panic!("served");
        };
        let (bytes, _, error) = replayed(failed);
        assert_eq!(bytes, whole[..4].to_vec());
        assert_eq!(error.map(|e| e.code()), Some(tonic::Code::Cancelled));
    }

    #[test]
    fn bytes_that_do_not_decode_go_to_tonic_framed_again() {
        let garbage = Bytes::from_static(&[0xff, 0xff, 0xff]);
        let parts = http::Request::new(()).into_parts().0;
        let Decoded::Tonic(request) = decode::<PutRequest, TestBody>(parts, garbage.clone()) else {
            panic!("decoded");
        };
        assert_eq!(replayed(*request).0, framed(0, &garbage));
        let parts = http::Request::new(()).into_parts().0;
        let Decoded::Call(_, decoded) =
            decode::<PutRequest, TestBody>(parts, Bytes::from(put_bytes()))
        else {
            panic!("not decoded");
        };
        assert_eq!(decoded.key, b"foo".to_vec());
    }

    /// The answer's headers, body and trailers; the code it was made
    /// with is the one it carries.
    fn answered(
        (response, code): (http::Response<Body>, Code),
    ) -> (http::HeaderMap, Vec<u8>, Option<HeaderMap>) {
        let (parts, body) = response.into_parts();
        let collected = block_on(body.collect()).expect("answers never fail");
        let trailers = collected.trailers().cloned();
        let carried = parts
            .headers
            .get("grpc-status")
            .or_else(|| trailers.as_ref().and_then(|t| t.get("grpc-status")))
            .expect("a grpc-status");
        assert_eq!(carried.as_bytes(), (code as i32).to_string().as_bytes());
        (parts.headers, collected.to_bytes().to_vec(), trailers)
    }

    #[test]
    fn an_answer_is_framed_as_tonic_frames_it() {
        let response = PutResponse {
            header: Some(ResponseHeader {
                revision: 7,
                ..Default::default()
            }),
            prev_kv: None,
        };
        let served = answer(Ok(response.clone()), |m, b, reserve| {
            reserve(b, m.encoded_len());
            let start = b.as_ptr();
            m.encode_raw(b);
            assert_eq!(b.as_ptr(), start, "encoded in the room reserved");
            assert_eq!(b.len(), b.capacity(), "the room reserved filled exactly");
        });
        let (headers, body, trailers) = answered(served);
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(body, framed(0, &response.encode_to_vec()));
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.len(), 1);
        assert_eq!(trailers["grpc-status"], "0");
        // An error: in the headers alone, as tonic answers one.
        let failed = answer::<PutResponse>(
            Err(Status::invalid_argument("etcdserver: key is not provided")),
            |_, _, _| unreachable!("nothing to encode"),
        );
        let (headers, body, trailers) = answered(failed);
        assert_eq!(headers["grpc-status"], "3");
        assert_eq!(
            headers["grpc-message"],
            "etcdserver:%20key%20is%20not%20provided"
        );
        assert!(body.is_empty() && trailers.is_none());
        // An encoder that skipped its reservation gets an error, not a
        // frame without a prefix.
        let unframed = answer(Ok(tonic::Response::new(response)), |_, _, _| {});
        assert_eq!(answered(unframed).0["grpc-status"], "13");
    }
}
