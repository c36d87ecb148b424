//! TLS on the client port: the rustls configuration of the `https://`
//! client URLs, and each connection's handshake.
//!
//! Design: the configuration is built once at start from `--cert-file` and
//! `--key-file` (or the `--auto-tls` certificate, made in
//! `<data-dir>/fixtures/client` as etcd does), `--trusted-ca-file`, the
//! versions and the cipher suites; a missing or malformed file stops the
//! server with an error naming it. Each accepted connection then does its
//! handshake within [`HANDSHAKE_TIMEOUT`] before hyper sees it; a failed
//! or slow handshake (plaintext sent to the TLS port, garbage, a client
//! certificate refused) ends that one connection and is logged at debug
//! level, as a failed plaintext connection is. After the handshake the
//! stream is served exactly like a plaintext connection, so gRPC and the
//! HTTP endpoints (`/health`, `/version`, …) share the port over TLS too.
//! This module never reads the clock itself: timeouts go through the
//! runtime.

use std::sync::Arc;
use std::time::Duration;

use oxetcd_tls::rustls::ServerConfig;
use oxetcd_tls::{ServerSettings, TlsStream};
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::runtime::{timeout, Runtime};
use crate::RunError;

/// Longest a client may take over its TLS handshake. Generous for any
/// real client; it bounds what a connection that never speaks can hold.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The configuration of the `https://` client URLs; `None` when every
/// client URL is `http://`.
pub(crate) fn server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, RunError> {
    if !config.listen_client_urls.iter().any(|u| u.is_secure()) {
        return Ok(None);
    }
    let tls = &config.client_tls;
    let (cert_file, key_file) = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ if tls.auto_tls => {
            let dir = config.data_dir.join("fixtures").join("client");
            let hosts: Vec<String> = config
                .listen_client_urls
                .iter()
                .filter_map(|u| url_host(&u.url))
                .collect();
            let (cert, key) = oxetcd_tls::self_signed(&dir, &hosts).map_err(RunError::Tls)?;
            warn!(
                cert_file = %cert.display(),
                "serving clients with a self-signed certificate (--auto-tls); \
                 clients must trust it or skip verification"
            );
            (cert, key)
        }
        // The flags' parser refuses an https:// URL without either.
        _ => {
            return Err(RunError::Tls(oxetcd_tls::TlsError::CertWithoutKey {
                cert_flag: "cert-file",
                key_flag: "key-file",
            }))
        }
    };
    let settings = ServerSettings {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
        client_ca_file: tls.trusted_ca_file.clone(),
        versions: tls.versions,
        cipher_suites: tls.cipher_suites.clone(),
    };
    let server_config = settings.build().map_err(RunError::Tls)?;
    info!(
        cert_file = %cert_file.display(),
        key_file = %key_file.display(),
        trusted_ca_file = ?tls.trusted_ca_file,
        client_cert_auth = tls.trusted_ca_file.is_some(),
        min_version = tls.versions.min().as_str(),
        max_version = tls.versions.max().as_str(),
        "client TLS configured"
    );
    Ok(Some(server_config))
}

/// Completes the server side of the handshake on `io`, or logs why it
/// failed and returns `None`.
pub(crate) async fn handshake<R: Runtime>(
    runtime: &R,
    io: R::Io,
    config: Arc<ServerConfig>,
) -> Option<TlsStream<R::Io>> {
    let mut stream = match TlsStream::server(io, config) {
        Ok(stream) => stream,
        Err(e) => {
            warn!(error = %e, "cannot start a TLS session");
            return None;
        }
    };
    match timeout(runtime, HANDSHAKE_TIMEOUT, stream.handshake()).await {
        Some(Ok(())) => Some(stream),
        Some(Err(e)) => {
            debug!(error = %e, "client TLS handshake failed");
            None
        }
        None => {
            debug!(
                timeout = ?HANDSHAKE_TIMEOUT,
                "client TLS handshake timed out"
            );
            None
        }
    }
}

/// The host of a normalized `scheme://host:port` URL, IPv6 brackets kept.
pub(crate) fn url_host(url: &str) -> Option<String> {
    let (_, authority) = url.split_once("://")?;
    let (host, _) = authority.rsplit_once(':')?;
    Some(host.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_listen_urls() {
        assert_eq!(
            url_host("https://127.0.0.1:2379").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(url_host("https://[::1]:2379").as_deref(), Some("[::1]"));
        assert_eq!(url_host("http://localhost:1").as_deref(), Some("localhost"));
        assert_eq!(url_host("nonsense"), None);
    }
}
