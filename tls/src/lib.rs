//! TLS for oxetcd's client and peer ports and for `oxetcdctl`, on rustls.
//!
//! One mechanism serves both sides:
//!
//! - [`TlsStream`] wraps any stream that implements hyper's I/O traits
//!   (`hyper::rt::Read` + `hyper::rt::Write`) with a rustls connection and
//!   implements the same traits itself. The server wraps its runtime's
//!   accepted sockets with it (tokio or smol alike: this crate knows no
//!   runtime), and `oxetcdctl` hands it to tonic through a connector.
//! - [`PortSettings`] builds the rustls configurations of a member's ports
//!   from PEM files named by etcd's flags, the client port's
//!   (`--cert-file`, `--key-file`, `--trusted-ca-file`, …) and the peer
//!   port's (`--peer-cert-file`, … and `--peer-cert-allowed-*`) alike, with
//!   the protocol versions and cipher suites of `--tls-min-version`,
//!   `--tls-max-version` and `--cipher-suites`. The peer port differs only
//!   in data ([`Port`], [`AllowedPeer`], and its client side: one
//!   certificate served to members that dial in and presented to members
//!   dialed). The certificate and key are re-read when their files change,
//!   so a rotated certificate needs no restart.
//! - [`ClientSettings`] builds etcdctl's side from `--cacert`, `--cert`,
//!   `--key` and `--insecure-skip-tls-verify`.
//! - [`self_signed`] makes the certificate of `--auto-tls` and
//!   `--peer-auto-tls`; [`test_pki`] makes a CA and certificates for tests.
//! - [`coalesce::WriteCoalesce`], another stream over the same traits,
//!   gathers an HTTP/2 connection's writes into one syscall per flush;
//!   `oxetcdctl bench` uses it.
//!
//! Every failure to load a file is a [`TlsError`] that names the file.
//! Cryptography is ring's, through rustls's ring provider only: no aws-lc,
//! so no C build beyond ring's own. This crate does no network I/O of its
//! own and never panics on what a peer sends.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod allowed;
mod anchor;
pub mod coalesce;
mod der;
mod error;
mod port;
mod reload;
mod self_signed;
mod settings;
mod stream;
pub mod test_pki;
mod verify;

pub use allowed::AllowedPeer;
pub use der::subject_common_name;
pub use error::TlsError;
pub use port::{Port, PortSettings};
pub use self_signed::self_signed;
pub use settings::{
    parse_cipher_suites, ClientSettings, TlsVersion, Versions, ALPN_H2, ALPN_HTTP11,
};
pub use stream::TlsStream;

/// The rustls this crate is built on, for callers that name its types
/// (server names, cipher suites, errors) without depending on it directly.
pub use rustls;

/// The rustls error inside `error`, when `error` is a TLS failure of a
/// [`TlsStream`] (a certificate that does not verify, an alert from the
/// peer, a malformed record) rather than a transport failure.
pub fn tls_cause(error: &std::io::Error) -> Option<&rustls::Error> {
    error.get_ref()?.downcast_ref::<rustls::Error>()
}
