//! Connecting to `https://` endpoints: a tonic connector that opens a TCP
//! connection and completes a TLS handshake over it with oxetcd's rustls
//! stream (the same one the server uses).
//!
//! The handshake finishes inside the connector, so a certificate problem
//! (unknown CA, wrong name, a refused client certificate) fails the dial
//! with a TLS error ([`oxetcd_tls::tls_cause`] finds it) instead of
//! surfacing later as a broken request. Under TLS 1.3 a server refuses a
//! missing client certificate only after the client's side of the
//! handshake is done; so when the server asked for one and none is
//! configured, the connector waits (briefly) for the server's first bytes:
//! an HTTP/2 server sends its SETTINGS at once if it accepts, an alert if
//! it does not.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use oxetcd_tls::coalesce::WriteCoalesce;
use oxetcd_tls::rustls::client::ResolvesClientCert;
use oxetcd_tls::rustls::pki_types::ServerName;
use oxetcd_tls::rustls::sign::CertifiedKey;
use oxetcd_tls::rustls::{ClientConfig, SignatureScheme};
use oxetcd_tls::TlsStream;
use tokio::net::TcpStream;
use tonic::transport::Uri;

/// Longest the connector waits for a server that asked for a client
/// certificate, which we do not have, to accept or refuse the connection.
/// An accepting HTTP/2 server answers within a round trip.
const CLIENT_CERT_VERDICT_WAIT: Duration = Duration::from_secs(1);

/// A TLS connection as tonic's channel uses it.
pub type TlsConnection = TlsStream<TokioIo<TcpStream>>;

/// Opens TLS connections with one rustls configuration; the server name is
/// the endpoint's host.
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
}

impl TlsConnector {
    /// A connector with `config`.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self { config }
    }
}

impl tower_service::Service<Uri> for TlsConnector {
    type Response = TlsConnection;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsConnection>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.config.clone();
        Box::pin(async move {
            let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
            let host = uri
                .host()
                .ok_or_else(|| invalid(format!("{uri}: no host")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let server_name = ServerName::try_from(host.clone())
                .map_err(|e| invalid(format!("{host:?} is not a valid TLS server name: {e}")))?;
            let asked = Arc::new(AtomicBool::new(false));
            let config = if config.client_auth_cert_resolver.has_certs() {
                config
            } else {
                // A resolver of this connection's own, to learn whether
                // the server asked for a certificate.
                let mut own = (*config).clone();
                own.client_auth_cert_resolver = Arc::new(NoClientCert {
                    asked: asked.clone(),
                });
                Arc::new(own)
            };
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let mut stream = TlsStream::client(TokioIo::new(tcp), config, server_name)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            stream.handshake().await?;
            if asked.load(Ordering::Relaxed) {
                // A refusal comes as an error; acceptance, or no word
                // within the wait, lets the connection be used.
                if let Ok(Err(e)) =
                    tokio::time::timeout(CLIENT_CERT_VERDICT_WAIT, stream.read_ahead()).await
                {
                    return Err(e);
                }
            }
            Ok(stream)
        })
    }
}

/// Offers no client certificate, and records that the server asked for one.
#[derive(Debug)]
struct NoClientCert {
    asked: Arc<AtomicBool>,
}

impl ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// Opens plaintext TCP connections (no Nagle delay); the benchmark's
/// connector for `http://` endpoints, wrapped in [`Coalesced`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnector;

impl tower_service::Service<Uri> for TcpConnector {
    type Response = TokioIo<TcpStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<TcpStream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host"))
                })?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            Ok(TokioIo::new(tcp))
        })
    }
}

/// Wraps the connections another connector opens in
/// [`WriteCoalesce`](oxetcd_tls::coalesce::WriteCoalesce), so that the
/// requests a burst of client tasks starts go out in one write. The
/// benchmark uses it: its clients share few connections, and without it
/// the client spends more on syscalls than on everything else.
#[derive(Clone, Debug)]
pub struct Coalesced<C>(pub C);

impl<C> tower_service::Service<Uri> for Coalesced<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Response: 'static,
{
    type Response = WriteCoalesce<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move { connecting.await.map(WriteCoalesce::new) })
    }
}
