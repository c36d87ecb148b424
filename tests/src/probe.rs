//! Questions asked of running members through etcdctl: their IDs and the
//! leader they follow, the ID of the member at a peer URL, and whether a
//! write has reached them; and through plain HTTP ([`http_get`]): their
//! health probes. Every wait is bounded by its caller's deadline.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::etcdctl::{ctl, ctl_ok};

/// Pause between two polls of a wait.
const POLL: Duration = Duration::from_millis(50);

/// (member ID, leader ID) from `endpoint status`, or `None` if the member
/// does not answer.
pub fn status(address: &str) -> Option<(u64, u64)> {
    let status = status_json(address)?;
    Some((
        status["header"]["member_id"].as_u64()?,
        status["leader"].as_u64()?,
    ))
}

/// The full `endpoint status` record of `address`, or `None`.
pub fn status_json(address: &str) -> Option<Value> {
    let out = ctl(address, &["endpoint", "status", "-w", "json"]);
    if out.code != 0 {
        return None;
    }
    let json: Value = serde_json::from_str(&out.stdout).ok()?;
    Some(json[0]["Status"].clone())
}

/// The hex ID of the member with `peer_url` from `member list`.
pub fn member_id(address: &str, peer_url: &str) -> String {
    let list = ctl_ok(address, &["member", "list"]);
    list.lines()
        .find(|line| line.split(", ").nth(3) == Some(peer_url))
        .and_then(|line| line.split(", ").next())
        .unwrap_or_else(|| panic!("no member at {peer_url} in {list}"))
        .to_owned()
}

/// Waits until `get key` on `address` prints `value`, for at most
/// `within`; `serializable` reads the member's own state.
pub fn wait_value(
    address: &str,
    key: &str,
    value: &str,
    serializable: bool,
    within: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let consistency = if serializable { "s" } else { "l" };
    loop {
        let out = ctl(
            address,
            &[
                "get",
                key,
                "--print-value-only",
                "--consistency",
                consistency,
            ],
        );
        if out.code == 0 && out.stdout.trim() == value {
            return Ok(());
        }
        if started.elapsed() > within {
            return Err(format!(
                "{address} did not show {key}={value} within {within:?}: {out:?}"
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// A plain HTTP/1.1 GET of `path` on `address` (`127.0.0.1:<port>`): the
/// status code (0 when there is none) and the body.
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    http_request(address, "GET", path)
}

/// An HTTP/1.1 request with `method` and no body; see [`http_get`]. A
/// missing status line reads as code 0.
pub fn http_request(address: &str, method: &str, path: &str) -> (u16, String) {
    match oxetcd_conformance::http_request(address, method, path) {
        Ok(answer) => answer,
        Err(e) if e.starts_with("no HTTP status line") => (0, String::new()),
        Err(e) => panic!("{address}: {e}"),
    }
}
