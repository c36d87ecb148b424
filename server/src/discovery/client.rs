//! A gRPC client of another etcd-compatible cluster, on any [`Runtime`]:
//! what v3 discovery talks to its registry with.
//!
//! Design: one HTTP/2 connection made with hyper's client over the
//! runtime's own sockets (so it needs no tokio reactor), TLS by oxetcd's
//! rustls stream when asked; tonic's generated KV, Watch and Auth clients
//! run over it through [`Http2`]. The endpoints are tried in order until
//! one connects (and authenticates, given credentials). Every call is
//! bounded by the request timeout; the watch, which waits for others by
//! nature, is not.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use oxetcd_proto::etcdserverpb::auth_client::AuthClient;
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::{
    watch_request, AuthenticateRequest, PutRequest, RangeRequest, RangeResponse,
    WatchCreateRequest, WatchRequest, WatchResponse,
};
use oxetcd_tls::rustls::ClientConfig;
use oxetcd_tls::TlsStream;
use tonic::body::Body;
use tonic::metadata::{Ascii, MetadataValue};

use crate::config::V3Discovery;
use crate::dial::resolve;
use crate::runtime::{timeout, HyperExecutor, HyperTimer, Runtime};

/// One HTTP/2 connection as a tonic transport.
#[derive(Clone, Debug)]
pub(super) struct Http2(SendRequest<Body>);

impl tower_service::Service<http::Request<Body>> for Http2 {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// A connected, authenticated client of the discovery cluster.
pub(super) struct Client<R> {
    runtime: R,
    kv: KvClient<Http2>,
    watch: WatchClient<Http2>,
    token: Option<MetadataValue<Ascii>>,
    request_timeout: Duration,
}

/// A watch's stream of responses.
pub(super) type WatchStream = tonic::Streaming<WatchResponse>;

impl<R: Runtime> Client<R> {
    /// Connects to the first of `settings`' endpoints that answers.
    pub(super) async fn connect(runtime: &R, settings: &V3Discovery) -> Result<Self, String> {
        let tls = match &settings.tls {
            Some(tls) => Some(tls.build().map_err(|e| e.to_string())?),
            None => None,
        };
        let mut last = String::from("no discovery endpoints");
        for endpoint in &settings.endpoints {
            match Self::connect_one(runtime, settings, tls.as_ref(), endpoint).await {
                Ok(client) => return Ok(client),
                Err(e) => last = format!("{endpoint}: {e}"),
            }
        }
        Err(last)
    }

    async fn connect_one(
        runtime: &R,
        settings: &V3Discovery,
        tls: Option<&Arc<ClientConfig>>,
        endpoint: &str,
    ) -> Result<Self, String> {
        let url = if endpoint.contains("://") || endpoint.starts_with("unix") {
            endpoint.to_owned()
        } else if tls.is_some() {
            format!("https://{endpoint}")
        } else {
            format!("http://{endpoint}")
        };
        let mut last = String::from("no address");
        for target in resolve(runtime, &[url]).await? {
            let connecting = runtime.connect(target.addr.clone());
            let io = match timeout(runtime, settings.dial_timeout, connecting).await {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    last = e.to_string();
                    continue;
                }
                None => {
                    last = "dial timed out".to_owned();
                    continue;
                }
            };
            let send = match (tls, target.tls) {
                (Some(config), Some(name)) => {
                    let mut stream =
                        TlsStream::client(io, config.clone(), name).map_err(|e| e.to_string())?;
                    match timeout(runtime, settings.dial_timeout, stream.handshake()).await {
                        Some(Ok(())) => handshake(runtime, settings, stream).await?,
                        Some(Err(e)) => return Err(format!("TLS handshake: {e}")),
                        None => return Err("TLS handshake timed out".to_owned()),
                    }
                }
                (None, Some(_)) => return Err("a TLS endpoint, but no TLS configured".to_owned()),
                (_, None) => handshake(runtime, settings, io).await?,
            };
            let origin: http::Uri = "http://discovery".parse().map_err(|e| format!("{e}"))?;
            let mut client = Self {
                runtime: runtime.clone(),
                kv: KvClient::with_origin(Http2(send.clone()), origin.clone()),
                watch: WatchClient::with_origin(Http2(send.clone()), origin.clone()),
                token: None,
                request_timeout: settings.request_timeout,
            };
            if let Some((user, password)) = &settings.credentials {
                let mut auth = AuthClient::with_origin(Http2(send), origin);
                let request = AuthenticateRequest {
                    name: user.clone(),
                    password: password.clone(),
                };
                let answer = timeout(
                    runtime,
                    settings.request_timeout,
                    auth.authenticate(request),
                )
                .await
                .ok_or("authenticate timed out")?
                .map_err(|status| status.message().to_owned())?;
                let token = answer.into_inner().token;
                client.token = Some(token.parse().map_err(|_| "an unusable auth token")?);
            }
            return Ok(client);
        }
        Err(last)
    }

    /// A range, bounded by the request timeout.
    pub(super) async fn range(&mut self, request: RangeRequest) -> Result<RangeResponse, String> {
        let request = self.request(request);
        let answer = timeout(&self.runtime, self.request_timeout, self.kv.range(request))
            .await
            .ok_or("range timed out")?;
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| status.message().to_owned())
    }

    /// A put, bounded by the request timeout.
    pub(super) async fn put(&mut self, request: PutRequest) -> Result<(), String> {
        let request = self.request(request);
        let answer = timeout(&self.runtime, self.request_timeout, self.kv.put(request))
            .await
            .ok_or("put timed out")?;
        answer
            .map(|_| ())
            .map_err(|status| status.message().to_owned())
    }

    /// Opens a watch and waits (bounded) for its creation.
    pub(super) async fn watch(
        &mut self,
        create: WatchCreateRequest,
    ) -> Result<WatchStream, String> {
        let first = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(create)),
        };
        // The request stream stays open: closing it would end the watch.
        let requests = futures_util::stream::once(std::future::ready(first))
            .chain(futures_util::stream::pending());
        let request = self.request(requests);
        let opened = timeout(
            &self.runtime,
            self.request_timeout,
            self.watch.watch(request),
        )
        .await
        .ok_or("watch timed out")?
        .map_err(|status| status.message().to_owned())?;
        let mut stream = opened.into_inner();
        let created = timeout(&self.runtime, self.request_timeout, stream.next())
            .await
            .ok_or("watch creation timed out")?;
        match created {
            Some(Ok(response)) if response.created && !response.canceled => Ok(stream),
            Some(Ok(response)) => Err(format!("watch refused: {}", response.cancel_reason)),
            Some(Err(status)) => Err(status.message().to_owned()),
            None => Err("watch ended".to_owned()),
        }
    }

    /// `message` with the auth token, if any.
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("token", token.clone());
        }
        request
    }
}

/// The HTTP/2 handshake over `io`; the connection is driven by a task of
/// its own until either side drops it.
async fn handshake<R, IO>(
    runtime: &R,
    settings: &V3Discovery,
    io: IO,
) -> Result<SendRequest<Body>, String>
where
    R: Runtime,
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = hyper::client::conn::http2::Builder::new(HyperExecutor(runtime.clone()));
    builder
        .timer(HyperTimer(runtime.clone()))
        .keep_alive_interval(settings.keepalive_time)
        .keep_alive_timeout(settings.keepalive_timeout)
        .keep_alive_while_idle(true);
    let (send, connection) = timeout(runtime, settings.dial_timeout, builder.handshake(io))
        .await
        .ok_or("HTTP/2 handshake timed out")?
        .map_err(|e| e.to_string())?;
    runtime.spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "discovery connection ended");
        }
    });
    Ok(send)
}
