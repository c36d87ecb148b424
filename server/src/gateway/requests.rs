//! The JSON requests of one gateway call, read off its HTTP body.
//!
//! Design: the body is read frame by frame into one buffer, bounded by
//! the call's byte limit, and parsed one JSON value at a time by the
//! route's [`RequestCodec`]. A unary call reads the whole body first and
//! parses once; a stream's body yields its requests as they complete, so
//! a watch created by the first value starts before the client sends the
//! second. What cannot be parsed ends this call only.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tonic::body::Body;

use super::codec::{Parsed, RequestCodec};

/// Why a body gave no request.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// Not JSON of the request message (Go's decoder words it
    /// differently; clients see a 400 with a message either way).
    Invalid(String),
    /// Longer than the call's limit.
    TooLarge { limit: usize },
    /// The connection failed while the body was read.
    Read(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(e) => f.write_str(e),
            Self::TooLarge { limit } => {
                write!(f, "request body larger than max ({limit} bytes)")
            }
            Self::Read(e) => write!(f, "reading the request body: {e}"),
        }
    }
}

/// The requests of one call.
pub(crate) struct JsonRequests {
    body: Body,
    buffer: BytesMut,
    codec: RequestCodec,
    /// Bytes the buffer may hold: the whole body of a unary call, one
    /// pending request of a stream.
    limit: usize,
    ended: bool,
}

impl JsonRequests {
    pub(crate) fn new(body: Body, codec: RequestCodec, limit: usize) -> Self {
        Self {
            body,
            buffer: BytesMut::new(),
            codec,
            limit,
            ended: false,
        }
    }

    /// The one request of a unary or server-streaming call: the first JSON
    /// value of the whole body, protobuf-encoded; an empty body is the
    /// default request, as grpc-gateway's decoder treats EOF.
    pub(crate) async fn whole(mut self) -> Result<Bytes, BodyError> {
        while !self.ended {
            self.read().await?;
        }
        match (self.codec)(&self.buffer) {
            Parsed::Message { proto, .. } => Ok(proto),
            Parsed::Empty => Ok(Bytes::new()),
            Parsed::Incomplete => Err(BodyError::Invalid("unexpected EOF".into())),
            Parsed::Invalid(e) => Err(BodyError::Invalid(e)),
        }
    }

    /// The next request of a stream, protobuf-encoded; `None` once the
    /// body has ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, BodyError> {
        loop {
            match (self.codec)(&self.buffer) {
                Parsed::Message { proto, used } => {
                    self.buffer.advance(used);
                    return Ok(Some(proto));
                }
                Parsed::Empty if self.ended => return Ok(None),
                Parsed::Incomplete if self.ended => {
                    return Err(BodyError::Invalid("unexpected EOF".into()))
                }
                Parsed::Invalid(e) => return Err(BodyError::Invalid(e)),
                Parsed::Empty | Parsed::Incomplete => self.read().await?,
            }
        }
    }

    /// Reads the next frame of the body into the buffer.
    async fn read(&mut self) -> Result<(), BodyError> {
        match self.body.frame().await {
            None => self.ended = true,
            Some(Err(e)) => return Err(BodyError::Read(e.to_string())),
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if self.buffer.len() + data.len() > self.limit {
                        return Err(BodyError::TooLarge { limit: self.limit });
                    }
                    self.buffer.extend_from_slice(data);
                }
            }
        }
        Ok(())
    }
}
