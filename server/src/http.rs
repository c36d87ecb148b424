//! Plain HTTP endpoints on the client port (everything that is not gRPC).
//!
//! The health probes (`/health`, `/livez`, `/readyz`) are module
//! [`health`]'s; `GET /version` reports the server and cluster versions; `GET /metrics` is
//! [`crate::metrics`]'s; on the client port, the JSON gateway's paths
//! (`/v3/…`) are [`crate::gateway`]'s; anything else is 404. The
//! endpoints other than the gateway only read: they never change state.

mod health;

pub(crate) use health::is_probe;

use bytes::Bytes;
use http::{header, Method, StatusCode};
use http_body_util::Full;
use oxetcd_core::storage::KvStore;
use tonic::body::Body;

use crate::driver::Handle;
use crate::gateway::Gateway;
use crate::runtime::Runtime;

/// Serves the HTTP endpoints.
pub struct HttpEndpoints<R, K: KvStore> {
    runtime: R,
    handle: Handle<K>,
    /// The JSON gateway, on the client port only.
    gateway: Option<Gateway<K>>,
}

impl<R: Runtime, K: KvStore> HttpEndpoints<R, K> {
    /// Endpoints answering through `handle`.
    pub fn new(runtime: R, handle: Handle<K>) -> Self {
        Self {
            runtime,
            handle,
            gateway: None,
        }
    }

    /// The same endpoints, serving the JSON gateway's paths too.
    pub fn with_gateway(mut self, gateway: Gateway<K>) -> Self {
        self.gateway = Some(gateway);
        self
    }

    /// Answers one HTTP request.
    pub async fn route(&self, request: http::Request<Body>) -> http::Response<Body> {
        let path = request.uri().path();
        if let Some(gateway) = self.gateway.as_ref().filter(|_| Gateway::<K>::serves(path)) {
            return gateway.route(request).await;
        }
        if health::is_probe(path) {
            let query = request.uri().query();
            return health::answer(&self.runtime, &self.handle, request.method(), path, query)
                .await;
        }
        let known = matches!(path, "/version" | "/metrics");
        if known && request.method() != Method::GET && request.method() != Method::HEAD {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            response
                .headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
            return response;
        }
        match path {
            "/metrics" => crate::metrics::scrape(&self.handle).await,
            "/version" => {
                // etcd's words before the leader set the cluster version.
                let cluster = self
                    .handle
                    .metrics()
                    .cluster_version()
                    .map_or_else(|| "not_decided".to_owned(), |v| v.to_string());
                let server = self.handle.metrics().server_version();
                json(
                    StatusCode::OK,
                    format!(r#"{{"etcdserver":"{server}","etcdcluster":"{cluster}"}}"#),
                )
            }
            _ => text(StatusCode::NOT_FOUND, "404 page not found\n"),
        }
    }
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

/// An answer with `status`, `content_type` and the whole `body`.
pub(crate) fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> http::Response<Body> {
    let mut response = http::Response::new(Body::new(Full::new(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}
