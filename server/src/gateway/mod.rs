//! etcd's JSON gateway (grpc-gateway v1) on the client port.
//!
//! Design: a `POST` under `/v3/` (or `/v3beta/`, `/v3alpha/`) is looked up
//! in [`routes::ROUTES`]; its JSON body becomes the method's prost request
//! (the proto3 JSON mapping of `oxetcd-proto`'s `json` feature), which is
//! framed as a gRPC message and handed to the same [`GrpcRouter`] the
//! wire's gRPC calls go to. Auth, limits, metrics and errors are therefore
//! one code path: the gateway is an in-process gRPC client, as etcd's is a
//! loopback one. The token travels as etcd's gateway forwards it:
//! `Grpc-Metadata-Token` as metadata `token`, `Authorization` as
//! `authorization`. The answer is decoded back and written by [`answer`].
//!
//! A body that is not JSON of the request gets HTTP 400 with the
//! decoder's message; an unknown path under a prefix gets grpc-gateway's
//! plain `404 Not Found`, another method `405`. Nothing a client sends
//! here can panic the server or cost more than its own call.
//!
//! Gateway calls in flight at once are bounded by
//! `--max-concurrent-streams`, as etcd's are: its gateway multiplexes
//! every call over one gRPC connection to the server, so a call beyond
//! the bound (a watch held open counts) waits until one ends.
//!
//! Every answer carries etcd's CORS headers (`--cors` defaults to `*`).
//!
//! Election and Lock are in the table like every other service; they
//! answer here as soon as the gRPC router serves them (in
//! [`GrpcRouter::route`]'s service match), with no change to the gateway.

mod answer;
mod codec;
mod error;
mod requests;
mod routes;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{header, HeaderName, HeaderValue, Method, StatusCode};
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use oxetcd_core::storage::KvStore;
use tonic::body::Body;
use tonic::{Code, Status};

use crate::grpc::GrpcRouter;
use crate::serve::ClientCommonName;
use codec::frame;
use requests::{BodyError, JsonRequests};
use routes::{Route, Shape};

/// How much larger than the gRPC message limit a JSON body may be: base64
/// costs a third more, and field names and quoting cost more again.
const JSON_PER_PROTO_BYTES: usize = 4;

/// etcd's CORS headers for `--cors '*'`, its default.
const CORS: &[(&str, &str)] = &[
    (
        "access-control-allow-methods",
        "POST, GET, OPTIONS, PUT, DELETE",
    ),
    ("access-control-allow-origin", "*"),
    (
        "access-control-allow-headers",
        "accept, content-type, authorization",
    ),
];

/// Metadata a gateway request may carry with this header prefix, forwarded
/// without it (grpc-gateway's `MetadataHeaderPrefix`).
const METADATA_PREFIX: &str = "grpc-metadata-";

/// Serves the JSON gateway through the gRPC router.
pub struct Gateway<K: KvStore> {
    grpc: Arc<GrpcRouter<K>>,
    /// One permit per call in flight (`--max-concurrent-streams`).
    calls: Arc<async_lock::Semaphore>,
    /// Bytes a request body (or one request of a stream) may have.
    body_bytes_max: usize,
}

impl<K: KvStore> Gateway<K> {
    /// A gateway calling `grpc`, whose messages are limited by
    /// `--max-request-bytes`, with at most `max_concurrent_streams` calls
    /// in flight.
    pub fn new(
        grpc: Arc<GrpcRouter<K>>,
        max_request_bytes: usize,
        max_concurrent_streams: u32,
    ) -> Self {
        let calls = usize::try_from(max_concurrent_streams).unwrap_or(usize::MAX);
        Self {
            grpc,
            calls: Arc::new(async_lock::Semaphore::new(calls)),
            body_bytes_max: oxetcd_core::grpc_message_bytes(max_request_bytes)
                .saturating_mul(JSON_PER_PROTO_BYTES),
        }
    }

    /// Whether `path` is the gateway's (under one of its prefixes).
    pub fn serves(path: &str) -> bool {
        routes::find(path).is_some()
    }

    /// Answers one gateway request.
    pub async fn route(&self, request: http::Request<Body>) -> http::Response<Body> {
        let mut response = self.answer(request).await;
        let headers = response.headers_mut();
        for (name, value) in CORS {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        response
    }

    async fn answer(&self, request: http::Request<Body>) -> http::Response<Body> {
        if request.method() == Method::OPTIONS {
            // A browser's preflight, answered as etcd does.
            return http::Response::new(Body::empty());
        }
        let route = match routes::find(request.uri().path()) {
            Some(Some(route)) => route,
            Some(None) | None => return error::plain(StatusCode::NOT_FOUND),
        };
        if request.method() != Method::POST {
            return error::plain(StatusCode::METHOD_NOT_ALLOWED);
        }
        let (parts, body) = request.into_parts();
        let mut requests = JsonRequests::new(body, route.request, self.body_bytes_max);
        let body = match route.shape {
            Shape::Unary | Shape::ServerStream => match requests.whole().await {
                Ok(proto) => Body::new(Full::new(frame(&proto))),
                Err(e) => return refused(&e, Code::InvalidArgument),
            },
            Shape::Bidi { ends_with_body } => match requests.next().await {
                // grpc-gateway passes the first request's decoding error
                // on as it is: code Unknown.
                Err(e) => return refused(&e, Code::Unknown),
                Ok(first) => stream_body(first, requests, ends_with_body),
            },
        };
        let permit = self.calls.acquire_arc().await;
        let call = self.grpc.route(grpc_request(&parts, route, body));
        let response = call.await;
        match route.shape {
            Shape::Unary => answer::unary(response, route.response).await,
            Shape::ServerStream | Shape::Bidi { .. } => {
                answer::stream(response, route.response, permit).await
            }
        }
    }
}

/// The error answer to a body that gave no request.
fn refused(error: &BodyError, code: Code) -> http::Response<Body> {
    let code = match error {
        BodyError::TooLarge { .. } => Code::ResourceExhausted,
        BodyError::Invalid(_) | BodyError::Read(_) => code,
    };
    error::response(&Status::new(code, error.to_string()))
}

/// A streaming call's gRPC request body: `first`, then each request as
/// the HTTP body yields it. A request that cannot be parsed ends the
/// stream, as grpc-gateway's sending loop does. Without `ends_with_body`
/// the stream never ends by itself: the call lasts until the client
/// goes.
fn stream_body(first: Option<Bytes>, requests: JsonRequests, ends_with_body: bool) -> Body {
    let first = futures_util::stream::iter(first);
    let rest = futures_util::stream::unfold(Some(requests), |requests| async move {
        let mut requests = requests?;
        match requests.next().await {
            Ok(Some(proto)) => Some((proto, Some(requests))),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "gateway stream request not decoded");
                None
            }
        }
    });
    let messages = first.chain(rest);
    let frames = |proto: Bytes| Ok::<_, std::convert::Infallible>(Frame::data(frame(&proto)));
    if ends_with_body {
        Body::new(StreamBody::new(messages.map(frames)))
    } else {
        let held = messages.chain(futures_util::stream::pending());
        Body::new(StreamBody::new(held.map(frames)))
    }
}

/// The gRPC request for `route`, carrying the metadata etcd's gateway
/// forwards and the client's certificate name.
fn grpc_request(parts: &http::request::Parts, route: &Route, body: Body) -> http::Request<Body> {
    let mut request = http::Request::new(body);
    *request.method_mut() = Method::POST;
    *request.uri_mut() = http::Uri::from_static(route.method);
    let headers = request.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    for (name, value) in &parts.headers {
        if name == header::AUTHORIZATION {
            headers.append(header::AUTHORIZATION, value.clone());
        } else if let Some(key) = name.as_str().strip_prefix(METADATA_PREFIX) {
            // gRPC's own headers stay the gateway's.
            let reserved = key.starts_with("grpc-") || matches!(key, "content-type" | "te");
            if let (false, Ok(key)) = (reserved, HeaderName::from_bytes(key.as_bytes())) {
                headers.append(key, value.clone());
            }
        }
    }
    if let Some(name) = parts.extensions.get::<ClientCommonName>() {
        request.extensions_mut().insert(name.clone());
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut request = http::Request::builder().method("POST").uri("/v3/kv/range");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_token_travels_as_etcds_gateway_forwards_it() {
        let route = routes::find("/v3/kv/range").unwrap().unwrap();
        let parts = parts(&[
            ("Grpc-Metadata-Token", "simple-token"),
            ("Authorization", "other-token"),
            ("Grpc-Metadata-Content-Type", "text/plain"),
            ("Grpc-Metadata-Grpc-Timeout", "1n"),
            ("X-Other", "dropped"),
        ]);
        let request = grpc_request(&parts, route, Body::empty());
        assert_eq!(request.uri().path(), "/etcdserverpb.KV/Range");
        let headers = request.headers();
        assert_eq!(headers["token"], "simple-token");
        assert_eq!(headers["authorization"], "other-token");
        assert_eq!(
            headers
                .get_all(header::CONTENT_TYPE)
                .iter()
                .collect::<Vec<_>>(),
            ["application/grpc"]
        );
        assert!(headers.get("grpc-timeout").is_none());
        assert!(headers.get("x-other").is_none());
    }

    #[test]
    fn a_client_certificates_name_comes_along() {
        let route = routes::find("/v3/kv/put").unwrap().unwrap();
        let mut parts = parts(&[]);
        parts
            .extensions
            .insert(ClientCommonName("alice".to_owned()));
        let request = grpc_request(&parts, route, Body::empty());
        let name = request.extensions().get::<ClientCommonName>().unwrap();
        assert_eq!(name.0, "alice");
    }
}
