//! TLS on the peer links: the one place where a connection becomes TLS.
//!
//! Design: a peer connection is a [`PeerIo`], plaintext or TLS, from the
//! moment it exists: `tls_accept::accept` wraps what an `https://` listener
//! accepted (shared with the client port) and [`connect`] wraps what a dial
//! to an `https://` peer URL opened, each completing the TLS handshake
//! within its timeout before our own
//! handshake (`wire.rs`) starts. Messages and snapshot streams go through
//! the same two functions, and everything after them — handshake, frames,
//! acknowledgements — reads and writes a `PeerIo` without knowing which
//! kind it is. A failed or slow TLS handshake (plaintext or garbage on a
//! TLS port, a certificate the other side refuses) ends that connection
//! only; a dial failure is retried with the transport's backoff, as any
//! other.
//!
//! The rustls configurations ([`TransportTls`]) are built once at start
//! from the `--peer-*` flags by [`configure`]; a missing or malformed file
//! stops the server with an error naming it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use oxetcd_tls::rustls::pki_types::ServerName;
use oxetcd_tls::rustls::{ClientConfig, ServerConfig};
use oxetcd_tls::{Port, PortSettings, TlsStream};
use tracing::{info, warn};

use super::HANDSHAKE_TIMEOUT;
use crate::config::Config;
use crate::runtime::{timeout, Runtime};

/// The built TLS configurations of the peer links.
#[derive(Clone)]
pub struct TransportTls {
    /// Accepts connections on `https://` listen peer URLs.
    pub server: Arc<ServerConfig>,
    /// Dials peers whose URL is `https://`.
    pub client: Arc<ClientConfig>,
}

impl TransportTls {
    /// Both configurations from `settings` (reads the files).
    pub fn new(settings: &PortSettings) -> Result<Self, oxetcd_tls::TlsError> {
        Ok(Self {
            server: settings.server()?,
            client: settings.client()?,
        })
    }
}

impl std::fmt::Debug for TransportTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportTls { .. }")
    }
}

/// The same configurations (rustls's cannot be compared by value).
impl PartialEq for TransportTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.server, &other.server) && Arc::ptr_eq(&self.client, &other.client)
    }
}

impl Eq for TransportTls {}

/// The TLS of the peer links `config` asks for: `None` when no `--peer-*`
/// certificate is given and `--peer-auto-tls` is off (the flags' parser
/// then allows no `https://` peer URL of this member's own).
pub(crate) fn configure(config: &Config) -> Result<Option<TransportTls>, oxetcd_tls::TlsError> {
    let flags = &config.peer_tls;
    let (cert_file, key_file, self_signed) = match (&flags.cert_file, &flags.key_file) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone(), false),
        _ if flags.auto_tls => {
            let dir = config.data_dir.join("fixtures").join("peer");
            let hosts: Vec<String> = config
                .listen_peer_urls
                .iter()
                .filter_map(|u| crate::serve::tls::url_host(&u.url))
                .collect();
            let (cert, key) = oxetcd_tls::self_signed(&dir, &hosts)?;
            warn!(
                cert_file = %cert.display(),
                "peer links use a self-signed certificate (--peer-auto-tls); \
                 peers' certificates are not verified"
            );
            (cert, key, true)
        }
        _ => return Ok(None),
    };
    let settings = PortSettings {
        trusted_ca_file: flags.trusted_ca_file.clone(),
        crl_file: flags.crl_file.clone(),
        allowed: flags.allowed.clone(),
        skip_verify: self_signed,
        versions: flags.versions,
        cipher_suites: flags.cipher_suites.clone(),
        ..PortSettings::new(Port::Peer, cert_file.clone(), key_file.clone())
    };
    let tls = TransportTls::new(&settings)?;
    info!(
        cert_file = %cert_file.display(),
        key_file = %key_file.display(),
        trusted_ca_file = ?flags.trusted_ca_file,
        client_cert_auth = flags.trusted_ca_file.is_some(),
        allowed = ?flags.allowed,
        min_version = settings.versions.min().as_str(),
        max_version = settings.versions.max().as_str(),
        "peer TLS configured"
    );
    Ok(Some(tls))
}

/// A peer connection: the runtime's stream, or TLS over it.
pub(crate) enum PeerIo<IO> {
    /// `http://` peer URLs.
    Plain(IO),
    /// `https://` peer URLs, handshake done.
    Tls(Box<TlsStream<IO>>),
}

/// Completes the client side of TLS on `io`, dialed to a peer URL whose
/// host is `server_name`. The error says why, for the dialer's log.
pub(super) async fn connect<R: Runtime>(
    runtime: &R,
    io: R::Io,
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
) -> Result<PeerIo<R::Io>, String> {
    let mut stream = TlsStream::client(io, config, server_name)
        .map_err(|e| format!("cannot start a TLS session: {e}"))?;
    match timeout(runtime, HANDSHAKE_TIMEOUT, stream.handshake()).await {
        Some(Ok(())) => Ok(PeerIo::Tls(Box::new(stream))),
        Some(Err(e)) => Err(format!(
            "TLS handshake failed: {}",
            crate::tls_accept::handshake_error(&e)
        )),
        None => Err(format!(
            "TLS handshake timed out after {HANDSHAKE_TIMEOUT:?}"
        )),
    }
}

impl<IO: Read + Write + Unpin> Read for PeerIo<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Self::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<IO: Read + Write + Unpin> Write for PeerIo<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Self::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Self::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(io) => io.is_write_vectored(),
            Self::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(io) => Pin::new(io).poll_flush(cx),
            Self::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Self::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}
