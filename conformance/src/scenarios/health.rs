//! `/health` as etcd 3.4 and 3.6 both answer it, on the servers (the
//! in-process node has no HTTP): 200 and `"health":"true"` when healthy;
//! 503 and `"health":"false"` while an alarm is active, unless
//! `?exclude=` names it; `?serializable=true` judged alike. The bodies
//! differ only in 3.6's `reason` field (oxetcd answers 3.6's), so the
//! scenario reads the JSON's `health` field.

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmType};

use super::{ensure, ok};
use crate::target::Target;

/// The status code and the `health` field of `path`'s answer.
fn health(t: &Target, path: &str) -> Result<Option<(u16, String)>, String> {
    let Some(answer) = t.http_get(path) else {
        return Ok(None);
    };
    let (code, body) = answer?;
    let json: serde_json::Value =
        serde_json::from_str(body.trim_end()).map_err(|e| format!("{path}: {e}: {body:?}"))?;
    let field = json["health"].as_str().unwrap_or_default().to_owned();
    Ok(Some((code, field)))
}

fn nospace(action: AlarmAction) -> AlarmRequest {
    AlarmRequest {
        action: action as i32,
        member_id: 0x99,
        alarm: AlarmType::Nospace as i32,
    }
}

/// Healthy, then unhealthy under an alarm unless it is excluded, then
/// healthy again once it is cleared.
pub(super) fn health_follows_alarms(t: &mut Target) -> Result<(), String> {
    let healthy = Some((200, "true".to_owned()));
    let unhealthy = Some((503, "false".to_owned()));
    for path in ["/health", "/health?serializable=true"] {
        let answer = health(t, path)?;
        ensure(answer.is_none() || answer == healthy, || {
            format!("{path}: {answer:?}")
        })?;
    }
    if !t.is_server() {
        return Ok(());
    }
    ok(t.alarm(nospace(AlarmAction::Activate)))?;
    for (path, expected) in [
        ("/health", &unhealthy),
        ("/health?serializable=true", &unhealthy),
        ("/health?exclude=CORRUPT", &unhealthy),
        ("/health?exclude=NOSPACE", &healthy),
    ] {
        let answer = health(t, path)?;
        ensure(answer == *expected, || {
            format!("{path}: {answer:?}, expected {expected:?}")
        })?;
    }
    ok(t.alarm(nospace(AlarmAction::Deactivate)))?;
    let answer = health(t, "/health")?;
    ensure(answer == healthy, || format!("after disarming: {answer:?}"))
}
