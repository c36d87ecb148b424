//! The gRPC router's answer to a gateway call, written back as JSON.
//!
//! Design: a unary answer is collected whole and becomes one JSON object
//! (or grpc-gateway's error body). A stream's answer is read message by
//! message: the HTTP status waits for the first message (200) or an
//! error before it (that error's status), as grpc-gateway's headers do;
//! then each message is written and flushed as `{"result":…}` and a
//! newline, and a failure ends the body with grpc-gateway's
//! `{"error":{…}}` chunk. Dropping the HTTP body (the client went away)
//! drops the gRPC call, which ends a watch or a keep-alive stream.

use std::convert::Infallible;

use bytes::{Bytes, BytesMut};
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tonic::body::Body;
use tonic::{Code, Status};

use super::codec::{Deframer, ResponseCodec};
use super::error;

/// The JSON answer to a unary call.
pub(crate) async fn unary(
    response: http::Response<Body>,
    codec: ResponseCodec,
) -> http::Response<Body> {
    let (parts, body) = response.into_parts();
    if let Some(status) = failed(&parts.headers) {
        return error::response(&status);
    }
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(status) => return error::response(&status),
    };
    if let Some(status) = collected.trailers().and_then(failed) {
        return error::response(&status);
    }
    let mut deframer = Deframer::default();
    deframer.push(&collected.to_bytes());
    let Some(message) = deframer.next_message() else {
        return error::response(&Status::internal("empty response"));
    };
    match codec(&message) {
        Ok(json) => {
            let mut response = error::json_response(StatusCode::OK, Bytes::from(json));
            forward_metadata(&parts.headers, response.headers_mut());
            response
        }
        Err(e) => error::response(&Status::internal(e)),
    }
}

/// The gRPC answer's headers, as grpc-gateway passes them on:
/// `Grpc-Metadata-<name>`.
fn forward_metadata(grpc: &http::HeaderMap, http: &mut http::HeaderMap) {
    for (name, value) in grpc {
        let forwarded = format!("grpc-metadata-{name}");
        if let Ok(forwarded) = http::HeaderName::from_bytes(forwarded.as_bytes()) {
            http.append(forwarded, value.clone());
        }
    }
}

/// The answer to a streaming call: newline-delimited results. `permit`
/// is held until the stream ends.
pub(crate) async fn stream(
    response: http::Response<Body>,
    codec: ResponseCodec,
    permit: async_lock::SemaphoreGuardArc,
) -> http::Response<Body> {
    let (parts, body) = response.into_parts();
    if let Some(status) = failed(&parts.headers) {
        return stream_failed(&status);
    }
    let mut results = Results {
        body,
        deframer: Deframer::default(),
        codec,
        _permit: permit,
    };
    let first = match results.next().await {
        None => Bytes::new(),
        Some(Err(status)) => return stream_failed(&status),
        Some(Ok(chunk)) => chunk,
    };
    let rest = futures_util::stream::unfold(Some(results), |results| async move {
        let mut results = results?;
        match results.next().await {
            None => None,
            Some(Ok(chunk)) => Some((chunk, Some(results))),
            Some(Err(status)) => Some((error::stream_chunk(&status), None)),
        }
    });
    let chunks = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(futures_util::stream::once(async { first }), rest),
        |chunk| Ok::<_, Infallible>(Frame::data(chunk)),
    );
    let mut response = error::json_response(StatusCode::OK, Bytes::new());
    forward_metadata(&parts.headers, response.headers_mut());
    *response.body_mut() = Body::new(StreamBody::new(chunks));
    response
}

/// A stream that failed before its first message: the error's status,
/// and the error chunk as the whole body.
fn stream_failed(status: &Status) -> http::Response<Body> {
    error::json_response(
        error::http_status(status.code()),
        error::stream_chunk(status),
    )
}

/// The status a gRPC answer's headers or trailers end it with, if not OK.
fn failed(headers: &http::HeaderMap) -> Option<Status> {
    Status::from_header_map(headers).filter(|status| status.code() != Code::Ok)
}

/// The messages of a streaming answer, each as its `{"result":…}` line.
struct Results {
    body: Body,
    deframer: Deframer,
    codec: ResponseCodec,
    /// The call's place among the gateway's calls in flight.
    _permit: async_lock::SemaphoreGuardArc,
}

impl Results {
    /// The next line; an error ends the stream; `None` at its OK end.
    async fn next(&mut self) -> Option<Result<Bytes, Status>> {
        loop {
            if let Some(message) = self.deframer.next_message() {
                return Some(self.line(&message));
            }
            match self.body.frame().await? {
                Err(status) => return Some(Err(status)),
                Ok(frame) => match frame.into_data() {
                    Ok(data) => self.deframer.push(&data),
                    Err(frame) => {
                        let status = frame.trailers_ref().and_then(failed)?;
                        return Some(Err(status));
                    }
                },
            }
        }
    }

    fn line(&self, message: &[u8]) -> Result<Bytes, Status> {
        let json = (self.codec)(message).map_err(Status::internal)?;
        let mut line = BytesMut::with_capacity(json.len() + 12);
        line.extend_from_slice(b"{\"result\":");
        line.extend_from_slice(&json);
        line.extend_from_slice(b"}\n");
        Ok(line.freeze())
    }
}
