//! [`ClusterVersions`]: what the cluster agreed on about versions, as of
//! the applied index: every member's published server version, the
//! cluster version, the downgrade job and the storage version.
//!
//! Invariants: the state changes only by applying entries (members'
//! publications, the leader's `ClusterVersionSet`, `DowngradeInfoSet`);
//! the cluster version the leader proposes ([`ClusterVersions::decide`])
//! is never above any member's server version; the storage version
//! follows the cluster version.

use std::collections::BTreeMap;

use oxetcd_proto::etcdserverpb::DowngradeInfo;
use oxetcd_proto::oxetcdpb::{DowngradeInfoSet, MemberVersion};
use tracing::{info, warn};

use super::downgrade;
use super::migration::{self, MigrationPlan};
use super::Version;
use crate::error::Error;
use crate::storage::VersionRecord;

/// Why a member may not run in this cluster at its server version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionRefusal {
    /// The member runs below the cluster version (and is not the target
    /// of a downgrade in progress): it would not understand what the
    /// cluster writes.
    BelowClusterVersion {
        /// The member's server version.
        server: Version,
        /// The cluster version.
        cluster: Version,
    },
    /// The member runs more than one minor above the cluster version:
    /// outside the range a rolling upgrade allows.
    AboveClusterRange {
        /// The member's server version.
        server: Version,
        /// The cluster version.
        cluster: Version,
    },
}

impl std::fmt::Display for VersionRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BelowClusterVersion { server, cluster } => write!(
                f,
                "invalid downgrade; server version is lower than determined cluster version \
                 (server version {server}, cluster version {cluster})"
            ),
            Self::AboveClusterRange { server, cluster } => write!(
                f,
                "incompatible with current running cluster \
                 (server version {server}, cluster version {cluster})"
            ),
        }
    }
}

/// Whether a member running `server` may run in a cluster at version
/// `cluster` with a downgrade to `downgrade` in progress (see
/// [`ClusterVersions::check_member`]); a joining member checks it with
/// what its peers tell before it starts.
pub fn check_server_version(
    server: Version,
    cluster: Option<Version>,
    downgrade: Option<Version>,
) -> Result<(), VersionRefusal> {
    let Some(cluster) = cluster else {
        return Ok(());
    };
    let server_minor = server.major_minor();
    if downgrade == Some(server_minor) {
        return Ok(());
    }
    if server_minor < cluster {
        return Err(VersionRefusal::BelowClusterVersion { server, cluster });
    }
    if cluster < super::min_cluster_version(server) {
        return Err(VersionRefusal::AboveClusterRange { server, cluster });
    }
    Ok(())
}

/// The versioned state of the cluster, as of the applied index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterVersions {
    /// Each member's published server version, by member ID.
    members: BTreeMap<u64, Version>,
    /// `None` until the leader first sets it.
    cluster: Option<Version>,
    /// The target of the downgrade in progress.
    downgrade: Option<Version>,
    /// The backend's data format version.
    storage: Option<Version>,
}

impl ClusterVersions {
    /// The state as the backend stored it. Malformed versions read as
    /// unknown (the leader sets them again).
    pub fn from_record(record: &VersionRecord) -> Self {
        Self {
            members: record
                .members
                .iter()
                .filter_map(|m| Some((m.id, Version::parse_stored(&m.server_version)?)))
                .collect(),
            cluster: Version::parse_stored(&record.cluster),
            downgrade: record
                .downgrade
                .as_ref()
                .filter(|d| d.enabled)
                .and_then(|d| Version::parse_stored(&d.target_version)),
            storage: Version::parse_stored(&record.storage),
        }
    }

    /// The state in its stored form.
    pub fn record(&self) -> VersionRecord {
        VersionRecord {
            members: self
                .members
                .iter()
                .map(|(&id, v)| MemberVersion {
                    id,
                    server_version: v.to_string(),
                })
                .collect(),
            cluster: self.cluster.map(|v| v.to_string()).unwrap_or_default(),
            downgrade: self.downgrade.map(|target| DowngradeInfoSet {
                enabled: true,
                target_version: target.to_string(),
            }),
            storage: self.storage.map(|v| v.to_string()).unwrap_or_default(),
        }
    }

    /// Whether the cluster, at its cluster version, has `capability`.
    pub fn capable(&self, capability: super::capability::Capability) -> bool {
        super::capability::enabled(self.cluster, capability)
    }

    /// The cluster version, once set.
    pub fn cluster(&self) -> Option<Version> {
        self.cluster
    }

    /// The backend's data format version, once the cluster version set it.
    pub fn storage(&self) -> Option<Version> {
        self.storage
    }

    /// The server version member `id` published, if it did.
    pub fn member(&self, id: u64) -> Option<Version> {
        self.members.get(&id).copied()
    }

    /// The target of the downgrade in progress.
    pub fn downgrade_target(&self) -> Option<Version> {
        self.downgrade
    }

    /// The downgrade job as `Status.downgradeInfo` reports it.
    pub fn downgrade_info(&self) -> DowngradeInfo {
        DowngradeInfo {
            enabled: self.downgrade.is_some(),
            target_version: self.downgrade.map(|v| v.to_string()).unwrap_or_default(),
        }
    }

    /// Records a member's published server version (`None`: it published
    /// none, as a member that predates versions).
    pub fn record_member(&mut self, id: u64, version: Option<Version>) {
        match version {
            Some(v) => self.members.insert(id, v),
            None => self.members.remove(&id),
        };
    }

    /// Forgets a removed member's version.
    pub fn forget_member(&mut self, id: u64) {
        self.members.remove(&id);
    }

    /// The lowest server version among `members`, once every one of them
    /// has published one.
    pub fn minimum(&self, members: impl IntoIterator<Item = u64>) -> Option<Version> {
        let mut lowest: Option<Version> = None;
        for id in members {
            let v = self.member(id)?;
            lowest = Some(lowest.map_or(v, |l| l.min(v)));
        }
        lowest
    }

    /// The cluster version the leader should set now, if it should change
    /// (etcd's `decideClusterVersion`): the minimum over `members` by
    /// major and minor once all have published; during a downgrade, the
    /// target. Never above any member's server version, and never lowered
    /// except by a downgrade.
    pub fn decide(&self, members: impl IntoIterator<Item = u64>) -> Option<Version> {
        let minimum = self.minimum(members)?.major_minor();
        let wanted = match (self.downgrade, self.cluster) {
            (Some(target), _) if target <= minimum => target,
            // A member already below the target: wait for the job's end.
            (Some(_), _) => return None,
            (None, None) => minimum,
            (None, Some(cluster)) if cluster < minimum => minimum,
            (None, Some(_)) => return None,
        };
        (Some(wanted) != self.cluster).then_some(wanted)
    }

    /// Whether a member running `server` may run in this cluster (etcd's
    /// start-up checks): not below the cluster version, and at most one
    /// minor above it; a member of a downgrade's target version always
    /// runs. Nothing is refused before the cluster version is set.
    pub fn check_member(&self, server: Version) -> Result<(), VersionRefusal> {
        check_server_version(server, self.cluster, self.downgrade)
    }

    /// Applies the cluster version the leader set; returns the storage
    /// migration it brings, if any.
    pub fn apply_cluster_version(&mut self, version: Version) -> Option<MigrationPlan> {
        let version = version.major_minor();
        match self.cluster.replace(version) {
            // The runtime logs the capabilities line of the first version
            // when the member is ready (scripts wait for that line), so it
            // is not logged here a second time.
            None => info!(
                cluster_version = %version,
                "set the initial cluster version to {}",
                version.major_minor_string()
            ),
            Some(old) if old != version => {
                info!(
                    from = %old,
                    to = %version,
                    "updated the cluster version from {} to {}",
                    old.major_minor_string(),
                    version.major_minor_string()
                );
                info!(
                    cluster_version = %version,
                    "enabled capabilities for version {}",
                    version.major_minor_string()
                );
            }
            Some(_) => return None,
        }
        let plan = migration::plan(self.storage, version)?;
        self.storage = Some(plan.to);
        Some(plan)
    }

    /// Applies a downgrade job change, checked again in log order: an
    /// enable must pass etcd's validation against the state it applies
    /// on, a cancel needs a job in progress.
    pub fn apply_downgrade(&mut self, set: &DowngradeInfoSet) -> Result<(), Error> {
        if set.enabled {
            let target = downgrade::parse_target(&set.target_version)?;
            downgrade::validate(self.cluster, self.downgrade, target)?;
            info!(target_version = %target, "the cluster is being downgraded");
            self.downgrade = Some(target);
        } else {
            downgrade::check_cancel(self.downgrade)?;
            info!("the downgrade job is cancelled");
            self.downgrade = None;
        }
        Ok(())
    }

    /// True while a downgrade runs and every one of `members` runs its
    /// target version: the leader then ends the job (etcd's "the cluster
    /// has been downgraded").
    pub fn downgrade_complete(&self, members: impl IntoIterator<Item = u64>) -> bool {
        let Some(target) = self.downgrade else {
            return false;
        };
        let mut all = true;
        for id in members {
            match self.member(id) {
                Some(v) if v.major_minor() == target => {}
                Some(v) if v.major_minor() < target => {
                    warn!(member_id = %format_args!("{id:x}"), server_version = %v, "a member runs below the downgrade target");
                    all = false;
                }
                _ => all = false,
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V35: Version = Version::new(3, 5, 0);
    const V36: Version = Version::new(3, 6, 0);

    fn with(members: &[(u64, Version)]) -> ClusterVersions {
        let mut versions = ClusterVersions::default();
        for &(id, v) in members {
            versions.record_member(id, Some(v));
        }
        versions
    }

    #[test]
    fn minimum_once_all_published() {
        let mut v = with(&[(1, Version::new(3, 6, 2)), (2, Version::new(3, 5, 9))]);
        assert_eq!(v.decide([1, 2, 3]), None, "member 3 has not published");
        v.record_member(3, Some(V36));
        assert_eq!(v.decide([1, 2, 3]), Some(V35));
        v.apply_cluster_version(V35);
        assert_eq!(v.cluster(), Some(V35));
        assert_eq!(v.storage(), Some(V35));
        assert_eq!(v.decide([1, 2, 3]), None, "already set");
        // The 3.5 member is upgraded: the cluster version rises.
        v.record_member(2, Some(V36));
        assert_eq!(v.decide([1, 2, 3]), Some(V36));
    }

    #[test]
    fn never_lowered_without_a_downgrade() {
        let mut v = with(&[(1, V36), (2, V36)]);
        v.apply_cluster_version(V36);
        v.record_member(3, Some(V35));
        assert_eq!(v.decide([1, 2, 3]), None);
        // And never raised above a member's version.
        assert_eq!(with(&[(1, V35), (2, V36)]).decide([1, 2]), Some(V35));
    }

    #[test]
    fn downgrade_lowers_then_cancel_restores() {
        let mut v = with(&[(1, V36), (2, V36)]);
        v.apply_cluster_version(V36);
        let enable = DowngradeInfoSet {
            enabled: true,
            target_version: "3.5.0".into(),
        };
        assert_eq!(v.apply_downgrade(&enable), Ok(()));
        assert_eq!(
            v.downgrade_info(),
            DowngradeInfo {
                enabled: true,
                target_version: "3.5.0".into()
            }
        );
        assert_eq!(v.apply_downgrade(&enable), Err(Error::DowngradeInProcess));
        assert_eq!(v.decide([1, 2]), Some(V35));
        let plan = v.apply_cluster_version(V35).expect("storage migrates down");
        assert_eq!((plan.from, plan.to), (Some(V36), V35));
        assert_eq!(v.decide([1, 2]), None);
        assert!(!v.downgrade_complete([1, 2]));
        let cancel = DowngradeInfoSet::default();
        assert_eq!(v.apply_downgrade(&cancel), Ok(()));
        assert_eq!(v.apply_downgrade(&cancel), Err(Error::NoInflightDowngrade));
        assert_eq!(v.decide([1, 2]), Some(V36), "cancel restores");
    }

    #[test]
    fn downgrade_completes_when_every_member_runs_the_target() {
        let mut v = with(&[(1, V36), (2, V36)]);
        v.apply_cluster_version(V36);
        v.apply_downgrade(&DowngradeInfoSet {
            enabled: true,
            target_version: "3.5.0".into(),
        })
        .expect("enabled");
        v.record_member(1, Some(Version::new(3, 5, 7)));
        assert!(!v.downgrade_complete([1, 2]));
        v.record_member(2, Some(V35));
        assert!(v.downgrade_complete([1, 2]));
    }

    #[test]
    fn members_outside_the_cluster_range_are_refused() {
        let mut v = ClusterVersions::default();
        assert_eq!(
            v.check_member(Version::new(3, 4, 0)),
            Ok(()),
            "no cluster version yet"
        );
        v.apply_cluster_version(V36);
        assert_eq!(v.check_member(Version::new(3, 6, 9)), Ok(()));
        assert_eq!(
            v.check_member(Version::new(3, 7, 0)),
            Ok(()),
            "a rolling upgrade"
        );
        let low = v.check_member(Version::new(3, 5, 2)).unwrap_err();
        assert!(low.to_string().starts_with(
            "invalid downgrade; server version is lower than determined cluster version"
        ));
        let high = v.check_member(Version::new(3, 8, 0)).unwrap_err();
        assert!(high
            .to_string()
            .starts_with("incompatible with current running cluster"));
        // Once a downgrade is enabled, members of its target run, even
        // before the cluster version is lowered.
        v.apply_downgrade(&DowngradeInfoSet {
            enabled: true,
            target_version: "3.5.0".into(),
        })
        .expect("enabled");
        assert_eq!(v.check_member(Version::new(3, 5, 2)), Ok(()));
        v.apply_cluster_version(V35);
        assert_eq!(v.check_member(Version::new(3, 5, 2)), Ok(()));
        assert_eq!(v.check_member(V36), Ok(()));
    }

    #[test]
    fn round_trips_through_its_record() {
        let mut v = with(&[(1, V36), (7, V35)]);
        v.apply_cluster_version(V36);
        v.apply_downgrade(&DowngradeInfoSet {
            enabled: true,
            target_version: "3.5.0".into(),
        })
        .expect("enabled");
        assert_eq!(ClusterVersions::from_record(&v.record()), v);
        assert_eq!(
            ClusterVersions::from_record(&VersionRecord::default()),
            ClusterVersions::default()
        );
    }
}
