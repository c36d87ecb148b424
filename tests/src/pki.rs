//! TLS fixtures: the test PKI in a temporary directory, and the flags
//! that hand its files to a server.
//!
//! The certificates are made at test time by `oxetcd_tls::test_pki`: a
//! CA, a server certificate for 127.0.0.1 and localhost, a client
//! certificate, a peer certificate usable both ways, and a second CA with
//! a peer certificate of its own that the first CA never signed.

use std::path::Path;

use oxetcd_tls::test_pki::TestPkiIn;

/// The test PKI; its files live as long as it does. `pki.dir.path()` is
/// the directory (for files that must not exist, say).
pub type Pki = TestPkiIn<tempfile::TempDir>;

/// A fresh test PKI in a fresh temporary directory.
pub fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    TestPkiIn::write(dir).unwrap_or_else(|e| panic!("test PKI: {e}"))
}

/// `--<flag>=<path>`.
pub fn path_arg(flag: &str, path: &Path) -> String {
    format!("--{flag}={}", path.display())
}

/// Whether `log` holds etcd's line for a TLS handshake from 127.0.0.1
/// refused for `reason` (`rejected connection from "127.0.0.1:…" (error
/// "<reason>…`), which runbooks and etcd's own tests match on. Plain or
/// JSON lines alike: the parts are matched, not the quoting.
pub fn logged_refusal(log: &str, reason: &str) -> bool {
    let parts = ["rejected connection from", "127.0.0.1:", reason];
    log.lines()
        .any(|line| parts.iter().all(|part| line.contains(part)))
}

/// Peer TLS with `cert` and `key`, peers verified against `ca` both ways
/// (`--peer-client-cert-auth`).
pub fn peer_tls_flags(cert: &Path, key: &Path, ca: &Path) -> Vec<String> {
    vec![
        path_arg("peer-cert-file", cert),
        path_arg("peer-key-file", key),
        path_arg("peer-trusted-ca-file", ca),
        "--peer-client-cert-auth".to_owned(),
    ]
}
