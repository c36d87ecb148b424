//! `--listen-metrics-urls`: listeners that serve `/metrics` and the health
//! probes (`/health`, `/livez`, `/readyz`) only, as etcd 3.6's do, over
//! plain HTTP or, for `https://` URLs, over TLS
//! with the client port's certificate (and its client-certificate rules).
//! HTTP/1.1 and h2c, like the client port; anything else is 404.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper_util::server::conn::auto;
use oxetcd_core::storage::KvStore;
use oxetcd_tls::rustls::ServerConfig;
use tracing::{debug, error, info};

use crate::driver::Handle;
use crate::http::HttpEndpoints;
use crate::runtime::{HyperExecutor, HyperTimer, Runtime};
use crate::serve::{accept_each, Bound};
use crate::tls_accept::{self, Port};

/// What every metrics connection shares.
struct MetricsApp<R: Runtime, K: KvStore> {
    runtime: R,
    http: HttpEndpoints<R, K>,
    builder: auto::Builder<HyperExecutor<R>>,
}

/// Serves `/metrics` and the health probes on every bound metrics
/// listener.
pub(crate) fn serve_metrics_urls<R: Runtime, K: KvStore>(
    runtime: &R,
    handle: Handle<K>,
    listeners: Vec<Bound<R::Listener>>,
    tls: Option<Arc<ServerConfig>>,
) {
    if listeners.is_empty() {
        return;
    }
    let mut builder = auto::Builder::new(HyperExecutor(runtime.clone()));
    builder.http1().timer(HyperTimer(runtime.clone()));
    builder.http2().timer(HyperTimer(runtime.clone()));
    let app = Arc::new(MetricsApp {
        runtime: runtime.clone(),
        http: HttpEndpoints::new(runtime.clone(), handle),
        builder,
    });
    for bound in listeners {
        let tls = match (bound.url.is_secure(), &tls) {
            (false, _) => None,
            (true, Some(tls)) => Some(tls.clone()),
            (true, None) => {
                error!(url = %bound.url, "no TLS configuration for this metrics URL; not serving it");
                continue;
            }
        };
        info!(url = %bound.url, address = %bound.local_addr, "serving /metrics and the health probes");
        let app = app.clone();
        let spawner = runtime.clone();
        runtime.spawn(accept_each(
            runtime.clone(),
            bound.listener,
            move |io, remote| {
                let app = app.clone();
                match &tls {
                    None => spawner.spawn(app.serve(io)),
                    Some(tls) => {
                        let tls = tls.clone();
                        spawner.spawn(async move {
                            let runtime = app.runtime.clone();
                            if let Some(stream) =
                                tls_accept::accept(&runtime, io, remote, tls, Port::Client).await
                            {
                                app.serve(stream).await;
                            }
                        });
                    }
                }
            },
        ));
    }
}

impl<R: Runtime, K: KvStore> MetricsApp<R, K> {
    async fn serve<IO>(self: Arc<Self>, io: IO)
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let app = self.clone();
        let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let app = app.clone();
            async move {
                let path = request.uri().path();
                let response = if path == "/metrics" || crate::http::is_probe(path) {
                    Box::pin(app.http.route(request.map(tonic::body::Body::new))).await
                } else {
                    not_found()
                };
                Ok::<_, Infallible>(response)
            }
        });
        if let Err(e) = self.builder.serve_connection(io, service).await {
            debug!(error = %e, "metrics connection ended with an error");
        }
    }
}

fn not_found() -> http::Response<tonic::body::Body> {
    let body = http_body_util::Full::new(bytes::Bytes::from_static(b"404 page not found\n"));
    let mut response = http::Response::new(tonic::body::Body::new(body));
    *response.status_mut() = http::StatusCode::NOT_FOUND;
    response
}
