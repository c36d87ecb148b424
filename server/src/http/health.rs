//! Health probes on the client port: `/health`, `/livez`, `/readyz`, with
//! etcd 3.6's semantics and bodies.
//!
//! Design. `/health` answers JSON (`{"health":"true","reason":""}`, as
//! text; a failure ends with a newline, as etcd writes it) and
//! runs etcd's three checks in order, stopping at the first failure: an
//! active alarm not named in `?exclude=` (`ALARM NOSPACE`), no leader
//! (`RAFT NO LEADER`, skipped with `?serializable=true`), and a one-key
//! range through the node (`RANGE ERROR:…`, a local read with
//! `?serializable=true`). `/livez` and `/readyz` run named checks —
//! `serializable_read` for liveness; `data_corruption`, `serializable_read`
//! and `linearizable_read` for readiness — each also alone under its own
//! sub-path (`/readyz/linearizable_read`); `?exclude=<check>` leaves one
//! out. They answer `ok` (with each check's `[+]name ok` line first when
//! `?verbose` is given), or 503 with every check's line and `<path>
//! failed`. Reads run as root, as etcd's probes do, so auth never fails a
//! probe. The probes only read: they never change state.

use std::time::Duration;

use http::{header, Method, StatusCode};
use oxetcd_core::auth::Credentials;
use oxetcd_core::storage::KvStore;
use oxetcd_core::{Request, Response};
use oxetcd_proto::etcdserverpb::{AlarmType, RangeRequest};
use tonic::body::Body;

use super::{respond, text};
use crate::driver::Handle;
use crate::runtime::{timeout, Runtime};

/// How long a probe's read may take before the member is reported
/// unhealthy: etcd's request timeout with the default election timeout
/// (5 s + 2 × 1 s).
const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(7);

/// The checks `/livez` runs.
const LIVEZ_CHECKS: &[&str] = &["serializable_read"];

/// The checks `/readyz` runs, in the order their lines appear.
const READYZ_CHECKS: &[&str] = &["data_corruption", "serializable_read", "linearizable_read"];

/// Whether `path` is one of the probes this module answers.
pub(crate) fn is_probe(path: &str) -> bool {
    path == "/health" || probe_checks(path).is_some()
}

/// The probe path's checks: a root path's all, or one check's sub-path.
fn probe_checks(path: &str) -> Option<Vec<&'static str>> {
    for (root, checks) in [("/livez", LIVEZ_CHECKS), ("/readyz", READYZ_CHECKS)] {
        if path == root {
            return Some(checks.to_vec());
        }
        let check = path.strip_prefix(root).and_then(|p| p.strip_prefix('/'));
        if let Some(check) = check.and_then(|c| checks.iter().find(|k| **k == c)) {
            return Some(vec![*check]);
        }
    }
    None
}

/// Answers one probe request.
pub(super) async fn answer<R: Runtime, K: KvStore>(
    runtime: &R,
    handle: &Handle<K>,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> http::Response<Body> {
    if method != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET"));
        return response;
    }
    let query = Query::parse(query.unwrap_or_default());
    let probe = Probe { runtime, handle };
    if path == "/health" {
        // etcd writes the JSON as text (Go sniffs it so), and a failure
        // through http.Error, which adds a newline.
        return match probe.health(&query).await {
            None => plain(
                StatusCode::OK,
                r#"{"health":"true","reason":""}"#.to_owned(),
            ),
            Some(reason) => {
                tracing::warn!(reason = %reason, "serving /health false");
                let reason = serde_json::Value::String(reason);
                plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{{\"health\":\"false\",\"reason\":{reason}}}\n"),
                )
            }
        };
    }
    let Some(checks) = probe_checks(path) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    };
    // Exclusions apply to the root path only, as etcd's.
    let checks: Vec<&str> = if checks.len() > 1 {
        checks
            .into_iter()
            .filter(|c| !query.excluded.iter().any(|e| e == c))
            .collect()
    } else {
        checks
    };
    let mut lines = String::new();
    let mut failed = false;
    for check in checks {
        match probe.check(check).await {
            Ok(()) => lines.push_str(&format!("[+]{check} ok\n")),
            Err(why) => {
                failed = true;
                lines.push_str(&format!("[-]{check} failed: {why}\n"));
            }
        }
    }
    if failed {
        tracing::warn!(path, reason = %lines.trim_end(), "health check failed");
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{lines}{path} failed\n"),
        );
    }
    if query.verbose {
        plain(StatusCode::OK, format!("{lines}ok\n"))
    } else {
        plain(StatusCode::OK, "ok\n".to_owned())
    }
}

/// A text answer, as etcd's probes write theirs.
fn plain(status: StatusCode, body: String) -> http::Response<Body> {
    let body = bytes::Bytes::from(body);
    let mut response = respond(status, "text/plain; charset=utf-8", body);
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// What a probe's query string asks for.
#[derive(Debug, Default, PartialEq)]
struct Query {
    serializable: bool,
    verbose: bool,
    /// `exclude=` values: alarm names for `/health`, check names for the
    /// others.
    excluded: Vec<String>,
}

impl Query {
    fn parse(query: &str) -> Self {
        let mut parsed = Self::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "serializable" => parsed.serializable = value == "true",
                "verbose" => parsed.verbose = true,
                "exclude" if !value.is_empty() => parsed.excluded.push(value.to_owned()),
                _ => {}
            }
        }
        parsed
    }
}

struct Probe<'a, R, K> {
    runtime: &'a R,
    handle: &'a Handle<K>,
}

impl<R: Runtime, K: KvStore> Probe<'_, R, K> {
    /// `/health`'s reason for failing, if it fails.
    async fn health(&self, query: &Query) -> Option<String> {
        match self.handle.local_alarms().await {
            Ok(alarms) => {
                let active = alarms.iter().find_map(|a| {
                    let name = AlarmType::try_from(a.alarm).ok()?.as_str_name();
                    (!query.excluded.iter().any(|e| e == name)).then_some(name)
                });
                if let Some(name) = active {
                    return Some(format!("ALARM {name}"));
                }
            }
            Err(e) => return Some(format!("ALARM ERROR:{}", e.message())),
        }
        if !query.serializable {
            match self.handle.request(Request::Status).await {
                Ok(Response::Status(status)) if status.leader != 0 => {}
                _ => return Some("RAFT NO LEADER".to_owned()),
            }
        }
        self.read(query.serializable)
            .await
            .err()
            .map(|e| format!("RANGE ERROR:{e}"))
    }

    /// One named check of `/livez` or `/readyz`.
    async fn check(&self, name: &str) -> Result<(), String> {
        match name {
            "data_corruption" => {
                let alarms = self.handle.local_alarms().await.map_err(|e| e.message())?;
                if alarms.iter().any(|a| a.alarm == AlarmType::Corrupt as i32) {
                    return Err("alarm activated: CORRUPT".to_owned());
                }
                Ok(())
            }
            "serializable_read" => self.read(true).await,
            _ => self.read(false).await,
        }
    }

    /// A one-key range as root, in time.
    async fn read(&self, serializable: bool) -> Result<(), String> {
        let probe = RangeRequest {
            key: b"health".to_vec(),
            limit: 1,
            keys_only: true,
            serializable,
            ..Default::default()
        };
        let root = Credentials::User {
            name: "root".to_owned(),
            revision: None,
        };
        let read = self.handle.request_as(root, Request::Range(probe));
        match timeout(self.runtime, HEALTH_CHECK_TIMEOUT, read).await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(e.message()),
            None => Err("context deadline exceeded".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_paths_read_as_etcd_reads_them() {
        let q = Query::parse("serializable=true&exclude=NOSPACE&verbose&exclude=");
        assert!(q.serializable && q.verbose);
        assert_eq!(q.excluded, vec!["NOSPACE".to_owned()]);
        assert_eq!(Query::parse(""), Query::default());
        assert!(!Query::parse("serializable=false").serializable);
        assert_eq!(probe_checks("/livez"), Some(vec!["serializable_read"]));
        assert_eq!(
            probe_checks("/readyz/linearizable_read"),
            Some(vec!["linearizable_read"])
        );
        assert_eq!(probe_checks("/readyz/nothing"), None);
        assert_eq!(probe_checks("/livez/data_corruption"), None);
        assert!(is_probe("/health") && is_probe("/readyz") && !is_probe("/healthz"));
    }
}
