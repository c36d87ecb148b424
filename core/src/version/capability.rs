//! Capabilities: what the cluster does depending on its cluster version,
//! so that a member never behaves as a newer release while an older one
//! may still apply the same entries (during a rolling upgrade, a
//! downgrade, or with a member run as the previous minor).
//!
//! Design. [`CAPABILITIES`] is data: each capability with the first
//! cluster version that has it, as etcd keeps its capability map by
//! version. [`enabled`] answers from the cluster version the log set, so
//! every member decides alike at the same applied index; nothing is
//! enabled before the cluster version is decided. The node logs etcd's
//! `enabled capabilities for version X` when the cluster version moves.

use super::Version;

/// A behaviour that depends on the cluster version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// Lease checkpoints are written to the backend, so a remaining TTL
    /// survives a restart (etcd 3.6; before, only with the
    /// `LeaseCheckpointPersist` gate, as a 3.5 member keeps them in
    /// memory only).
    LeaseCheckpointPersist,
}

/// Each capability and the first cluster version that has it.
pub const CAPABILITIES: &[(Capability, Version)] =
    &[(Capability::LeaseCheckpointPersist, Version::new(3, 6, 0))];

/// Whether a cluster at version `cluster` (`None`: not decided yet) has
/// `capability`.
pub fn enabled(cluster: Option<Version>, capability: Capability) -> bool {
    let Some(cluster) = cluster else {
        return false;
    };
    CAPABILITIES
        .iter()
        .any(|&(c, since)| c == capability && cluster.major_minor() >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_comes_with_its_cluster_version() {
        let persist = Capability::LeaseCheckpointPersist;
        assert!(!enabled(None, persist), "undecided");
        assert!(!enabled(Some(Version::new(3, 5, 0)), persist));
        assert!(!enabled(Some(Version::new(3, 5, 9)), persist));
        assert!(enabled(Some(Version::new(3, 6, 0)), persist));
        assert!(enabled(Some(Version::new(3, 7, 0)), persist));
    }
}
