//! etcd's rules for `Maintenance.Downgrade`: which target is allowed, and
//! when a job may be enabled or cancelled. Pure checks on the versions the
//! node holds; the node runs them when a request arrives (VALIDATE) and
//! again when the entry applies (ENABLE, CANCEL), so every member decides
//! alike in log order.

use super::Version;
use crate::error::Error;

/// What a downgrade request asks for (etcd's `DowngradeRequest.action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Check that the cluster can downgrade to the target.
    Validate,
    /// Start the downgrade: the cluster version drops to the target.
    Enable,
    /// Stop a downgrade in progress.
    Cancel,
}

/// The target version a request names, as etcd reads it.
pub fn parse_target(text: &str) -> Result<Version, Error> {
    Version::parse_target(text).map_err(|_| Error::WrongDowngradeVersionFormat)
}

/// The one target a cluster at `cluster` may downgrade to: one minor lower.
pub fn allowed_target(cluster: Version) -> Option<Version> {
    Some(Version::new(
        cluster.major,
        cluster.minor.checked_sub(1)?,
        0,
    ))
}

/// etcd's VALIDATE (and the first half of ENABLE): the cluster version is
/// known, the target is exactly one minor below it, and no downgrade is in
/// progress.
pub fn validate(
    cluster: Option<Version>,
    in_progress: Option<Version>,
    target: Version,
) -> Result<(), Error> {
    let cluster = cluster.ok_or(Error::ClusterVersionUnavailable)?;
    if allowed_target(cluster) != Some(target.major_minor()) {
        return Err(Error::InvalidDowngradeTargetVersion);
    }
    if in_progress.is_some() {
        return Err(Error::DowngradeInProcess);
    }
    Ok(())
}

/// etcd's CANCEL: only a downgrade in progress can be cancelled.
pub fn check_cancel(in_progress: Option<Version>) -> Result<(), Error> {
    match in_progress {
        Some(_) => Ok(()),
        None => Err(Error::NoInflightDowngrade),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V36: Version = Version::new(3, 6, 0);
    const V35: Version = Version::new(3, 5, 0);

    #[test]
    fn target_format() {
        assert_eq!(parse_target("3.5"), Ok(V35));
        assert_eq!(parse_target("3.5.1"), Ok(V35));
        let e = parse_target("3,5").unwrap_err();
        assert_eq!(e, Error::WrongDowngradeVersionFormat);
        assert_eq!(
            e.message(),
            "etcdserver: wrong downgrade target version format"
        );
        assert_eq!(e.code(), crate::error::Code::InvalidArgument);
    }

    #[test]
    fn only_one_minor_lower() {
        assert_eq!(validate(Some(V36), None, V35), Ok(()));
        for target in [
            V36,
            Version::new(3, 4, 0),
            Version::new(3, 7, 0),
            Version::new(2, 5, 0),
        ] {
            let e = validate(Some(V36), None, target).unwrap_err();
            assert_eq!(e, Error::InvalidDowngradeTargetVersion, "{target}");
            assert_eq!(e.message(), "etcdserver: invalid downgrade target version");
            assert_eq!(e.code(), crate::error::Code::InvalidArgument);
        }
        assert_eq!(allowed_target(Version::new(4, 0, 0)), None);
        assert_eq!(
            validate(Some(Version::new(4, 0, 0)), None, Version::new(3, 9, 0)),
            Err(Error::InvalidDowngradeTargetVersion)
        );
    }

    #[test]
    fn unknown_cluster_version() {
        let e = validate(None, None, V35).unwrap_err();
        assert_eq!(e, Error::ClusterVersionUnavailable);
        assert_eq!(
            e.message(),
            "etcdserver: cluster version not found during downgrade"
        );
        assert_eq!(e.code(), crate::error::Code::Unavailable);
    }

    #[test]
    fn one_job_at_a_time() {
        let e = validate(Some(V36), Some(V35), V35).unwrap_err();
        assert_eq!(e, Error::DowngradeInProcess);
        assert_eq!(
            e.message(),
            "etcdserver: cluster has a downgrade job in progress"
        );
        assert_eq!(e.code(), crate::error::Code::FailedPrecondition);
        // While the job runs the cluster version is the target already,
        // so the target check fails first, as etcd's order has it.
        assert_eq!(
            validate(Some(V35), Some(V35), V35),
            Err(Error::InvalidDowngradeTargetVersion)
        );
    }

    #[test]
    fn cancel_needs_a_job() {
        assert_eq!(check_cancel(Some(V35)), Ok(()));
        let e = check_cancel(None).unwrap_err();
        assert_eq!(e, Error::NoInflightDowngrade);
        assert_eq!(e.message(), "etcdserver: no inflight downgrade job");
        assert_eq!(e.code(), crate::error::Code::FailedPrecondition);
    }
}
