//! TLS on the client port: the rustls configuration of the `https://`
//! client URLs, and each connection's handshake.
//!
//! Design: the configuration is built once at start from `--cert-file` and
//! `--key-file` (or the `--auto-tls` certificate, made in
//! `<data-dir>/fixtures/client` as etcd does), `--trusted-ca-file`, the
//! versions and the cipher suites; a missing or malformed file stops the
//! server with an error naming it. Each accepted connection then does its
//! handshake (`tls_accept`, shared with the peer port) before hyper sees
//! it; a failed or slow handshake (plaintext sent to the TLS port, garbage,
//! a client certificate refused) ends that one connection and is logged as
//! a warning with the remote address, rate-limited. After the handshake the
//! stream is served exactly like a plaintext connection, so gRPC and the
//! HTTP endpoints (`/health`, `/version`, …) share the port over TLS too.
//! This module never reads the clock itself: timeouts go through the
//! runtime.

use std::sync::Arc;

use oxetcd_tls::rustls::ServerConfig;
use oxetcd_tls::{Port, PortSettings};
use tracing::{info, warn};

use crate::config::Config;
use crate::RunError;

/// The configuration of the `https://` client URLs; `None` when every
/// client URL is `http://`.
pub(crate) fn server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, RunError> {
    let secure_metrics = config.listen_metrics_urls.iter().any(|u| u.is_secure());
    if !config.listen_client_urls.iter().any(|u| u.is_secure()) && !secure_metrics {
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
    let settings = PortSettings {
        trusted_ca_file: tls.trusted_ca_file.clone(),
        crl_file: tls.crl_file.clone(),
        versions: tls.versions,
        cipher_suites: tls.cipher_suites.clone(),
        ..PortSettings::new(Port::Client, cert_file.clone(), key_file.clone())
    };
    let server_config = settings.server().map_err(RunError::Tls)?;
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
