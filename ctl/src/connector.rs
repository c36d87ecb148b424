//! Connecting to endpoints: tonic connectors that open a TCP connection,
//! or one to a unix socket (`unix://` and `unixs://` endpoints), and for
//! `https://` and `unixs://` complete a TLS handshake over it with
//! oxetcd's rustls stream (the same one the server uses). Both kinds of
//! socket are one [`Stream`], so everything above them is written once.
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
use std::path::{Path, PathBuf};
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
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tonic::transport::Uri;

/// Longest the connector waits for a server that asked for a client
/// certificate, which we do not have, to accept or refuse the connection.
/// An accepting HTTP/2 server answers within a round trip.
const CLIENT_CERT_VERDICT_WAIT: Duration = Duration::from_secs(1);

/// A TLS connection as tonic's channel uses it.
pub type TlsConnection = TlsStream<TokioIo<Stream>>;

/// A connection to a TCP address or to a unix socket.
#[derive(Debug)]
pub enum Stream {
    /// TCP, with no Nagle delay.
    Tcp(TcpStream),
    /// A unix domain socket.
    Unix(UnixStream),
}

/// Where a connector dials: the URI's host and port, or a unix socket
/// (whose file name is then the TLS server name, as etcd's clients take
/// it).
#[derive(Clone, Debug, Default)]
pub struct Socket(Option<Arc<Path>>);

impl Socket {
    /// The URI's host and port.
    pub fn tcp() -> Self {
        Self(None)
    }

    /// The unix socket at `path`.
    pub fn unix(path: PathBuf) -> Self {
        Self(Some(path.into()))
    }

    /// Whether this is a unix socket.
    pub fn is_unix(&self) -> bool {
        self.0.is_some()
    }

    /// Opens the connection, and names the host it reached.
    async fn open(&self, uri: &Uri, default_port: u16) -> io::Result<(Stream, String)> {
        if let Some(path) = &self.0 {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            return Ok((
                Stream::Unix(UnixStream::connect(path).await?),
                name.into_owned(),
            ));
        }
        let host = uri
            .host()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(default_port);
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        Ok((Stream::Tcp(tcp), host))
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Opens TLS connections with one rustls configuration; the server name is
/// the endpoint's host (a unix socket's file name).
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
    socket: Socket,
}

impl TlsConnector {
    /// A connector with `config`, dialing `socket`.
    pub fn new(config: Arc<ClientConfig>, socket: Socket) -> Self {
        Self { config, socket }
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
        let socket = self.socket.clone();
        Box::pin(async move {
            let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
            let (stream, host) = socket.open(&uri, 443).await?;
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
            let mut stream = TlsStream::client(TokioIo::new(stream), config, server_name)
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

/// Opens plaintext connections (TCP with no Nagle delay, or to a unix
/// socket).
#[derive(Clone, Debug, Default)]
pub struct PlainConnector(pub Socket);

impl tower_service::Service<Uri> for PlainConnector {
    type Response = TokioIo<Stream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Stream>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let socket = self.0.clone();
        Box::pin(async move { Ok(TokioIo::new(socket.open(&uri, 80).await?.0)) })
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
