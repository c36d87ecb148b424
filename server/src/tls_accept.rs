//! The server side of a TLS handshake on an accepted connection, for the
//! client port and the peer port alike.
//!
//! Design: one function, [`accept`], starts the session, bounds the
//! handshake by the port's timeout through the runtime's timer, and on
//! failure logs one warning an operator can act on: who (the remote
//! address), where (client or peer port) and why, in etcd's wording —
//! `rejected connection from "ADDR" (error "REASON", ServerName "")` —
//! because runbooks and test harnesses match on it (`tls: bad
//! certificate` for a certificate the other side or we refused). A flood
//! of bad handshakes must not become a flood of log lines: each port keeps
//! its own [`LogBudget`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxetcd_tls::rustls::{self, AlertDescription, CertificateError, ServerConfig};
use oxetcd_tls::TlsStream;
use tracing::warn;

use crate::log_budget::LogBudget;
use crate::runtime::{timeout, Runtime};

/// Longest a client may take over its TLS handshake. Generous for any
/// real client; it bounds what a connection that never speaks can hold.
/// (A peer has the peer transport's shorter handshake timeout.)
const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which listener a connection came to, for its timeout and the log: the
/// port the TLS settings were built for.
pub(crate) use oxetcd_tls::Port;

/// Longest a handshake on `port` may take.
fn handshake_timeout(port: Port) -> Duration {
    match port {
        Port::Client => CLIENT_HANDSHAKE_TIMEOUT,
        Port::Peer => crate::peer::HANDSHAKE_TIMEOUT,
    }
}

/// The log budget of `port`'s refused handshakes.
fn rejections(port: Port) -> &'static LogBudget {
    static CLIENT: LogBudget = LogBudget::new();
    static PEER: LogBudget = LogBudget::new();
    match port {
        Port::Client => &CLIENT,
        Port::Peer => &PEER,
    }
}

/// Completes the server side of TLS on `io` from `remote`, or logs why it
/// failed and returns `None`.
pub(crate) async fn accept<R: Runtime>(
    runtime: &R,
    io: R::Io,
    remote: crate::socket::Remote,
    config: Arc<ServerConfig>,
    port: Port,
) -> Option<TlsStream<R::Io>> {
    let mut stream = match TlsStream::server(io, config) {
        Ok(stream) => stream,
        Err(e) => {
            warn!(port = port.as_str(), error = %e, "cannot start a TLS session");
            return None;
        }
    };
    let limit = handshake_timeout(port);
    let reason = match timeout(runtime, limit, stream.handshake()).await {
        Some(Ok(())) => return Some(stream),
        Some(Err(e)) => handshake_error(&e),
        None => format!("handshake not completed within {limit:?}"),
    };
    rejections(port).log(Instant::now(), |held_back| {
        warn!(
            port = port.as_str(),
            held_back,
            "rejected connection from \"{remote}\" (error \"{reason}\", ServerName \"\")"
        );
    });
    None
}

/// Why a handshake failed, in the words of Go's TLS stack where tools
/// match on them (either side of a connection).
pub(crate) fn handshake_error(error: &std::io::Error) -> String {
    match oxetcd_tls::tls_cause(error) {
        Some(cause) => go_reason(cause),
        None => error.to_string(),
    }
}

/// A rustls error in the words of Go's TLS stack where tools match on
/// them, with rustls' own detail after it. An alert is the other side's
/// refusal: Go calls it a remote error.
fn go_reason(error: &rustls::Error) -> String {
    let go = match error {
        // On a listener a certificate is checked against a name only by
        // `--peer-cert-allowed-cn`/`-hostname`; etcd refuses it in these
        // words, which its e2e tests and runbooks look for.
        rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => {
            return "client certificate authentication failed".to_owned()
        }
        rustls::Error::NoCertificatesPresented => "tls: client didn't provide a certificate",
        rustls::Error::InvalidCertificate(CertificateError::Revoked) => {
            "tls: bad certificate: certificate revoked"
        }
        rustls::Error::InvalidCertificate(_) => "tls: bad certificate",
        rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown,
        ) => "remote error: tls: bad certificate",
        rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. }
        | rustls::Error::InvalidMessage(_) => {
            "tls: first record does not look like a TLS handshake"
        }
        _ => return error.to_string(),
    };
    format!("{go} ({error})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_peer_name_is_told_in_etcds_words() {
        let refused = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert_eq!(
            go_reason(&refused),
            "client certificate authentication failed"
        );
    }

    #[test]
    fn reasons_use_gos_words_for_certificates() {
        let unknown = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(go_reason(&unknown).starts_with("tls: bad certificate ("));
        let alert = rustls::Error::AlertReceived(AlertDescription::BadCertificate);
        assert!(go_reason(&alert).starts_with("remote error: tls: bad certificate ("));
        let revoked = rustls::Error::InvalidCertificate(CertificateError::Revoked);
        assert!(go_reason(&revoked).contains("revoked"));
        let none = rustls::Error::NoCertificatesPresented;
        assert!(go_reason(&none).starts_with("tls: client didn't provide a certificate"));
    }
}
