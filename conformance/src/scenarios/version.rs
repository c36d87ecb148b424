//! Versions: the member's server version and the cluster version
//! (`Status`, `/version`), and `Maintenance.Downgrade`'s rules with etcd
//! 3.6's codes and messages.
//!
//! etcd 3.4 (Debian's reference server) has no storage version and no
//! Downgrade: against it the downgrade steps are not run; the scenario
//! asserts instead that it answers `Unimplemented`, so the 3.6 steps are
//! never skipped on a target that reports 3.6.

use oxetcd_proto::etcdserverpb::downgrade_request::DowngradeAction;
use oxetcd_proto::etcdserverpb::{DowngradeRequest, DowngradeResponse, StatusResponse};

use super::{ensure, ok};
use crate::target::{Failure, Target};

/// gRPC codes as numbers.
const INVALID_ARGUMENT: i32 = 3;
const FAILED_PRECONDITION: i32 = 9;
const UNIMPLEMENTED: i32 = 12;

/// Polls (of 100 ms) for a cluster version change to apply, at most.
const POLLS_MAX: usize = 100;

fn downgrade(
    t: &mut Target,
    action: DowngradeAction,
    version: &str,
) -> Result<DowngradeResponse, Failure> {
    t.downgrade(DowngradeRequest {
        action: action as i32,
        version: version.to_owned(),
    })
}

/// A server of etcd 3.4, which predates Downgrade and storage versions.
fn is_etcd_3_4(status: &StatusResponse) -> bool {
    status.version.starts_with("3.4.")
}

/// Polls status until `done` holds for it.
fn status_until(
    t: &mut Target,
    what: &str,
    done: impl Fn(&StatusResponse) -> bool,
) -> Result<StatusResponse, String> {
    for _ in 0..POLLS_MAX {
        let status = ok(t.status())?;
        if done(&status) {
            return Ok(status);
        }
        t.sleep(std::time::Duration::from_millis(100));
    }
    Err(format!("status never showed {what}"))
}

/// Status reports the member's version, `major.minor.patch`; a 3.6
/// member reports its storage version once the cluster version is set;
/// `/version` names the server and the cluster version as etcd's JSON.
pub(super) fn version_reporting(t: &mut Target) -> Result<(), String> {
    let status = ok(t.status())?;
    let parts: Vec<&str> = status.version.split('.').collect();
    ensure(
        parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
        || format!("version {:?} is not MAJOR.MINOR.PATCH", status.version),
    )?;
    if !is_etcd_3_4(&status) {
        let status = status_until(t, "a storage version", |s| !s.storage_version.is_empty())?;
        let major_minor = format!("{}.{}.0", parts[0], parts[1]);
        ensure(status.storage_version == major_minor, || {
            format!(
                "storage version {:?} != {major_minor}",
                status.storage_version
            )
        })?;
    }
    if let Some(answer) = t.http_get("/version") {
        let (code, body) = answer?;
        let json: serde_json::Value = serde_json::from_str(body.trim_end())
            .map_err(|e| format!("/version: {e}: {body:?}"))?;
        let server = json["etcdserver"].as_str().unwrap_or_default();
        let cluster = json["etcdcluster"].as_str().unwrap_or_default();
        ensure(code == 200 && server == status.version, || {
            format!(
                "/version {code} {body:?}, status version {:?}",
                status.version
            )
        })?;
        let cluster_of_server = format!("{}.{}.0", parts[0], parts[1]);
        ensure(
            cluster == cluster_of_server || cluster == "not_decided",
            || format!("/version cluster {cluster:?}, expected {cluster_of_server}"),
        )?;
    }
    Ok(())
}

/// VALIDATE, ENABLE and CANCEL with etcd 3.6's rules: the target must be
/// exactly one minor below the cluster version and well formed; one job
/// at a time; cancel needs a job. Enable lowers the cluster version (and
/// the storage version); cancel restores both.
pub(super) fn downgrade_rules(t: &mut Target) -> Result<(), String> {
    let status = ok(t.status())?;
    if is_etcd_3_4(&status) {
        let answer = downgrade(t, DowngradeAction::Validate, "3.3");
        return ensure(matches!(&answer, Err(f) if f.code == UNIMPLEMENTED), || {
            format!("etcd 3.4 answered Downgrade: {answer:?}")
        });
    }
    let status = status_until(t, "the cluster version", |s| !s.storage_version.is_empty())?;
    let parts: Vec<u32> = status
        .storage_version
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    let &[major, minor, _] = parts.as_slice() else {
        return Err(format!("storage version {:?}", status.storage_version));
    };
    let current = format!("{major}.{minor}");
    let target = format!("{major}.{}", minor - 1);
    let too_old = format!("{major}.{}", minor.saturating_sub(2));
    let newer = format!("{major}.{}", minor + 1);
    let invalid = Failure::new(
        INVALID_ARGUMENT,
        "etcdserver: invalid downgrade target version",
    );
    let format = Failure::new(
        INVALID_ARGUMENT,
        "etcdserver: wrong downgrade target version format",
    );
    let no_job = Failure::new(FAILED_PRECONDITION, "etcdserver: no inflight downgrade job");
    let in_progress = Failure::new(
        FAILED_PRECONDITION,
        "etcdserver: cluster has a downgrade job in progress",
    );
    for (action, version, expected) in [
        (DowngradeAction::Validate, current.as_str(), &invalid),
        (DowngradeAction::Validate, too_old.as_str(), &invalid),
        (DowngradeAction::Enable, newer.as_str(), &invalid),
        (DowngradeAction::Validate, "three", &format),
        (DowngradeAction::Enable, "", &format),
        (DowngradeAction::Cancel, "", &no_job),
    ] {
        let answer = downgrade(t, action, version);
        ensure(answer.as_ref().err() == Some(expected), || {
            format!("{action:?} {version:?}: {answer:?}, expected {expected}")
        })?;
    }
    let validated = ok(downgrade(t, DowngradeAction::Validate, &target))?;
    ensure(validated.version == current, || {
        format!("validate answered version {:?}", validated.version)
    })?;

    let enabled = ok(downgrade(t, DowngradeAction::Enable, &target))?;
    ensure(enabled.version == current, || {
        format!("enable answered version {:?}", enabled.version)
    })?;
    let lowered = format!("{target}.0");
    let status = status_until(t, "the lowered storage version", |s| {
        s.storage_version == lowered
    })?;
    let info = status.downgrade_info.unwrap_or_default();
    ensure(info.enabled && info.target_version == lowered, || {
        format!("downgrade info {info:?}")
    })?;
    // While the job runs, the target is the cluster version already, so
    // a second enable fails the target check; validate of the next minor
    // down finds the job.
    let again = downgrade(t, DowngradeAction::Enable, &target);
    ensure(again.as_ref().err() == Some(&invalid), || {
        format!("second enable: {again:?}")
    })?;
    let below = format!("{major}.{}", minor.saturating_sub(2));
    let below_answer = downgrade(t, DowngradeAction::Validate, &below);
    ensure(below_answer.as_ref().err() == Some(&in_progress), || {
        format!("validate {below} during a downgrade: {below_answer:?}")
    })?;

    let cancelled = ok(downgrade(t, DowngradeAction::Cancel, ""))?;
    ensure(cancelled.version == target, || {
        format!("cancel answered version {:?}", cancelled.version)
    })?;
    let restored = format!("{current}.0");
    let status = status_until(t, "the restored storage version", |s| {
        s.storage_version == restored
    })?;
    ensure(!status.downgrade_info.unwrap_or_default().enabled, || {
        "the job is still enabled after cancel".to_owned()
    })?;
    let again = downgrade(t, DowngradeAction::Cancel, "");
    ensure(again.as_ref().err() == Some(&no_job), || {
        format!("second cancel: {again:?}")
    })
}
