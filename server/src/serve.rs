//! The client port: listeners, accept loops, and one connection.
//!
//! Design: each `--listen-client-urls` address is bound with `std` (so a bad
//! address fails before anything is announced), registered with the
//! runtime, and served by one accept loop task. A connection that opens
//! with HTTP/2's preface (h2c, or h2 over TLS) is served by oxetcd's own
//! framing (`http2`, over [`crate::http2`]), every other one by hyper's
//! HTTP/1.1; both on the same port. Each request goes to gRPC when its
//! content type is `application/grpc*`, otherwise to the plain HTTP
//! endpoints, which include the JSON gateway (itself a client of the same
//! gRPC router). A connection's errors end that connection only.
//! `https://` URLs are served the same way once `tls` has completed the
//! connection's handshake; `http://` and `https://` URLs may be listened
//! on side by side.

mod http2;
pub(crate) mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use hyper::body::Incoming;
use oxetcd_core::storage::KvStore;
use tonic::body::Body;
use tracing::{debug, error, info, warn};

use crate::config::{Config, ListenUrl};
use crate::driver::Handle;
use crate::gateway::Gateway;
use crate::grpc::{GrpcRouter, Member};
use crate::http::HttpEndpoints;
use crate::runtime::{deadline_after, HyperTimer, Runtime};
use crate::socket::{BoundSocket, Remote, SocketAddress};
use crate::RunError;
use http2::{Rewind, Sniffed};

/// Each HTTP/2 stream's receive window, and the connection's.
const HTTP2_STREAM_WINDOW: u32 = 1 << 20;
const HTTP2_CONNECTION_WINDOW: u32 = 1 << 20;

/// The largest request header list an HTTP/2 client may send.
const HTTP2_MAX_HEADER_LIST_BYTES: u32 = 64 << 10;

/// Pause after a failed accept (out of file descriptors, typically), so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// A bound client (or metrics) listener.
pub(crate) struct Bound<L> {
    pub(crate) url: ListenUrl,
    pub(crate) local_addr: SocketAddress,
    pub(crate) listener: L,
}

/// Binds every URL of `urls` (`--listen-client-urls`, or
/// `--listen-metrics-urls`).
pub(crate) fn bind<R: Runtime>(
    runtime: &R,
    urls: &[ListenUrl],
) -> Result<Vec<Bound<R::Listener>>, RunError> {
    urls.iter()
        .map(|url| {
            let bind_error = |error| RunError::Bind {
                url: url.url.clone(),
                error,
            };
            let socket = BoundSocket::bind(&url.addr).map_err(bind_error)?;
            let local_addr = socket.local_address().map_err(bind_error)?;
            let listener = runtime.listener(socket).map_err(bind_error)?;
            Ok(Bound {
                url: url.clone(),
                local_addr,
                listener,
            })
        })
        .collect()
}

/// Starts serving clients on every bound listener; `https://` ones with
/// `tls` (see [`tls::server_config`]).
pub(crate) fn start<R: Runtime, K: KvStore>(
    runtime: &R,
    config: &Config,
    handle: Handle<K>,
    listeners: Vec<Bound<R::Listener>>,
    tls: Option<Arc<oxetcd_tls::rustls::ServerConfig>>,
    tokens: crate::auth_token::TokenConfig,
) {
    let member = Member {
        member_id: config.member_id(),
        cluster_id: config.running_cluster_id(),
        data_dir: config.data_dir.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(HyperTimer(runtime.clone()));
    // One timer for the watch streams' pacing and the connections' holds.
    let timer: Arc<dyn hyper::rt::Timer + Send + Sync> = Arc::new(HyperTimer(runtime.clone()));
    let grpc = Arc::new(GrpcRouter::new(
        handle.clone(),
        member,
        config.max_request_bytes,
        config.bcrypt_cost,
        tokens,
        timer.clone(),
    ));
    let gateway = Gateway::new(
        grpc.clone(),
        config.max_request_bytes,
        config.max_concurrent_streams,
    );
    let app = Arc::new(App {
        runtime: runtime.clone(),
        grpc,
        http: HttpEndpoints::new(runtime.clone(), handle).with_gateway(gateway),
        builder,
        timer,
        http2: crate::http2::connection::Config {
            max_concurrent_streams: config.max_concurrent_streams,
            stream_window: HTTP2_STREAM_WINDOW,
            connection_window: HTTP2_CONNECTION_WINDOW,
            max_header_list_size: HTTP2_MAX_HEADER_LIST_BYTES,
        },
    });
    for bound in listeners {
        let tls = match (bound.url.is_secure(), &tls) {
            (false, _) => {
                info!(
                    url = %bound.url,
                    address = %bound.local_addr,
                    "serving client traffic insecurely (gRPC and HTTP)"
                );
                None
            }
            (true, Some(tls)) => {
                info!(
                    url = %bound.url,
                    address = %bound.local_addr,
                    "serving client traffic securely (gRPC and HTTP)"
                );
                Some(tls.clone())
            }
            (true, None) => {
                error!(url = %bound.url, "no TLS configuration for this URL; not serving it");
                continue;
            }
        };
        runtime.spawn(accept_loop(
            runtime.clone(),
            bound.listener,
            app.clone(),
            tls,
        ));
    }
}

/// The common name of the verified client certificate a request came
/// with: who the client is when it sends no token.
#[derive(Clone, Debug)]
pub(crate) struct ClientCommonName(pub(crate) String);

/// What every connection shares.
struct App<R: Runtime, K: KvStore> {
    runtime: R,
    /// Shared with the JSON gateway, which calls through it.
    grpc: Arc<GrpcRouter<K>>,
    http: HttpEndpoints<R, K>,
    builder: hyper::server::conn::http1::Builder,
    /// Holds connections' lone PING acknowledgements a moment.
    timer: Arc<dyn hyper::rt::Timer + Send + Sync>,
    /// What HTTP/2 connections advertise.
    http2: crate::http2::connection::Config,
}

impl<R: Runtime, K: KvStore> App<R, K> {
    async fn serve_tls(
        self: Arc<Self>,
        io: R::Io,
        remote: Remote,
        tls: Arc<oxetcd_tls::rustls::ServerConfig>,
    ) {
        let port = crate::tls_accept::Port::Client;
        if let Some(stream) = crate::tls_accept::accept(&self.runtime, io, remote, tls, port).await
        {
            // A client certificate is only ever verified (and so only ever
            // present) with --client-cert-auth.
            let common_name = stream
                .connection()
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|cert| oxetcd_tls::subject_common_name(cert))
                .map(ClientCommonName);
            self.serve(stream, common_name).await;
        }
    }

    /// Serves one connection: HTTP/2 (its preface first) with oxetcd's
    /// own framing, anything else (HTTP/1.1) with hyper's.
    async fn serve<IO>(self: Arc<Self>, mut io: IO, common_name: Option<ClientCommonName>)
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        match http2::sniff(&mut io).await {
            Ok(Some(Sniffed::Http2(read))) => self.serve_http2(io, read, common_name).await,
            Ok(Some(Sniffed::Other(read))) => {
                self.serve_hyper(Rewind::new(read, io), common_name).await
            }
            Ok(None) => {}
            Err(e) => debug!(error = %e, "client connection ended with an error"),
        }
    }

    async fn serve_http2<IO>(
        self: Arc<Self>,
        io: IO,
        read: bytes::Bytes,
        common_name: Option<ClientCommonName>,
    ) where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let app = self.clone();
        let route = move |mut request: http::Request<http2::RequestBody>| {
            if let Some(name) = &common_name {
                request.extensions_mut().insert(name.clone());
            }
            app.route(request)
        };
        http2::serve(io, read, self.http2, self.timer.clone(), route).await;
    }

    async fn serve_hyper<IO>(self: Arc<Self>, io: IO, common_name: Option<ClientCommonName>)
    where
        IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let app = self.clone();
        let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
            let app = app.clone();
            if let Some(name) = &common_name {
                request.extensions_mut().insert(name.clone());
            }
            let route = app.route(request);
            async move { Ok::<_, Infallible>(route.await) }
        });
        if let Err(e) = self.builder.serve_connection(io, service).await {
            debug!(error = %e, "client connection ended with an error");
        }
    }

    /// Starts answering `request`. The gRPC call starts here, synchronously,
    /// and the future returned is the router's own (see
    /// [`GrpcRouter::route`]): it lives in every request's responder, so
    /// nothing else is kept in it. The HTTP endpoints' future is boxed.
    fn route<B>(
        self: &Arc<Self>,
        request: http::Request<B>,
    ) -> impl Future<Output = http::Response<Body>> + Send + 'static
    where
        B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        if is_grpc(&request) {
            Either::Left(self.grpc.route(request))
        } else {
            let app = self.clone();
            Either::Right(Box::pin(async move {
                app.http.route(request.map(Body::new)).await
            }))
        }
    }
}

/// Accepts connections on `listener` until the process ends, handing
/// each to `serve` (with the remote address); a failed accept pauses the
/// loop briefly.
pub(crate) async fn accept_each<R: Runtime>(
    runtime: R,
    listener: R::Listener,
    mut serve: impl FnMut(R::Io, Remote),
) {
    loop {
        match runtime.accept(&listener).await {
            Ok((io, remote)) => serve(io, remote),
            Err(e) => {
                warn!(error = %e, "accepting a connection failed");
                runtime
                    .sleep_until(deadline_after(ACCEPT_ERROR_BACKOFF))
                    .await;
            }
        }
    }
}

async fn accept_loop<R: Runtime, K: KvStore>(
    runtime: R,
    listener: R::Listener,
    app: Arc<App<R, K>>,
    tls: Option<Arc<oxetcd_tls::rustls::ServerConfig>>,
) {
    loop {
        match runtime.accept(&listener).await {
            Ok((io, remote)) => match &tls {
                None => runtime.spawn(app.clone().serve(io, None)),
                Some(tls) => runtime.spawn(app.clone().serve_tls(io, remote, tls.clone())),
            },
            Err(e) => {
                warn!(error = %e, "accepting a client connection failed");
                runtime
                    .sleep_until(deadline_after(ACCEPT_ERROR_BACKOFF))
                    .await;
            }
        }
    }
}

/// gRPC requests carry `content-type: application/grpc` (or `+proto`, …).
fn is_grpc<B>(request: &http::Request<B>) -> bool {
    request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_is_told_by_content_type() {
        let with = |content_type: &str| {
            http::Request::builder()
                .header(http::header::CONTENT_TYPE, content_type)
                .body(())
                .unwrap()
        };
        assert!(is_grpc(&with("application/grpc")));
        assert!(is_grpc(&with("application/grpc+proto")));
        assert!(!is_grpc(&with("application/json")));
        assert!(!is_grpc(&http::Request::new(())));
    }
}
