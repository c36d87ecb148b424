//! Plain HTTP endpoints on the client port (everything that is not gRPC).
//!
//! `GET /health` answers healthy when a read through the node succeeds in
//! time (`?serializable=true` makes it a local read); `GET /version` reports
//! the API version; `GET /metrics` is [`crate::metrics`]'s; anything else
//! is 404. The endpoints only read: they never
//! change state.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use oxetcd_core::storage::KvStore;
use oxetcd_core::Request;
use oxetcd_proto::etcdserverpb::RangeRequest;
use tonic::body::Body;

use crate::driver::Handle;
use crate::grpc::ETCD_VERSION;
use crate::runtime::{timeout, Runtime};

/// How long a health read may take before the member is reported unhealthy:
/// etcd's request timeout with the default election timeout (5 s + 2 × 1 s).
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(7);

/// Serves the HTTP endpoints.
pub struct HttpEndpoints<R, K> {
    runtime: R,
    handle: Handle<K>,
}

impl<R: Runtime, K: KvStore> HttpEndpoints<R, K> {
    /// Endpoints answering through `handle`.
    pub fn new(runtime: R, handle: Handle<K>) -> Self {
        Self { runtime, handle }
    }

    /// Answers one HTTP request.
    pub async fn route(&self, request: http::Request<Incoming>) -> http::Response<Body> {
        let path = request.uri().path();
        let known = matches!(path, "/health" | "/version" | "/metrics");
        if known && request.method() != Method::GET && request.method() != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
            return response;
        }
        match path {
            "/health" => self.health(serializable(request.uri().query())).await,
            "/metrics" => crate::metrics::scrape(&self.handle).await,
            "/version" => json(
                StatusCode::OK,
                format!(r#"{{"etcdserver":"{ETCD_VERSION}","etcdcluster":"{ETCD_VERSION}"}}"#),
            ),
            _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
        }
    }

    async fn health(&self, serializable: bool) -> http::Response<Body> {
        let probe = RangeRequest {
            key: b"health".to_vec(),
            limit: 1,
            keys_only: true,
            serializable,
            ..Default::default()
        };
        let read = self.handle.request(Request::Range(probe));
        let failure = match timeout(&self.runtime, HEALTH_CHECK_TIMEOUT, read).await {
            Some(Ok(_)) => None,
            Some(Err(e)) => Some(format!("RANGE ERROR:{e}")),
            None => Some("RANGE ERROR:context deadline exceeded".to_owned()),
        };
        match failure {
            None => json(
                StatusCode::OK,
                r#"{"health":"true","reason":""}"#.to_owned(),
            ),
            Some(reason) => {
                tracing::warn!(reason = %reason, "serving /health false");
                let reason = serde_json::Value::String(reason);
                json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(r#"{{"health":"false","reason":{reason}}}"#),
                )
            }
        }
    }
}

/// Whether the query string asks for `serializable=true`.
fn serializable(query: Option<&str>) -> bool {
    query
        .unwrap_or_default()
        .split('&')
        .any(|pair| pair == "serializable=true")
}

fn json(status: StatusCode, body: String) -> http::Response<Body> {
    respond(status, "application/json", Bytes::from(body))
}

fn text(status: StatusCode, body: &'static str) -> http::Response<Body> {
    respond(
        status,
        "text/plain; charset=utf-8",
        Bytes::from_static(body.as_bytes()),
    )
}

fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(Full::new(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializable_query() {
        assert!(serializable(Some("serializable=true")));
        assert!(serializable(Some("a=b&serializable=true")));
        assert!(!serializable(Some("serializable=false")));
        assert!(!serializable(None));
    }
}
