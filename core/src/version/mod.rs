//! Versions: a member's server version, the cluster version every member
//! agrees on through the log, and the downgrade job.
//!
//! Design. [`Version`] is a plain `major.minor.patch` value with etcd's
//! parsing rules. [`ClusterVersions`] is the node's sub-state-machine for
//! everything versioned: the server version each member published, the
//! cluster version (the minimum over members, set by the leader through
//! the log once all have published, never above any member's), the
//! downgrade job and its rules ([`downgrade`]), and the storage version
//! that follows the cluster version ([`migration`]); what a cluster version
//! enables is [`capability`]. It changes only when
//! log entries apply, so every member holds the same state at the same
//! applied index, and it is stored with the membership.
//!
//! This module never reads the clock and never touches storage.

pub mod capability;
mod cluster;
pub mod downgrade;
pub mod migration;

use std::fmt;
use std::str::FromStr;

pub use self::cluster::{check_server_version, ClusterVersions, VersionRefusal};

/// The server version of this build of oxetcd: the etcd release whose
/// API and behaviour it implements.
pub const SERVER_VERSION: Version = Version::new(3, 6, 0);

/// The oldest cluster version a member of this build joins: etcd lets a
/// member run in a cluster one minor version older (a rolling upgrade).
pub fn min_cluster_version(server: Version) -> Version {
    Version::new(server.major, server.minor.saturating_sub(1), 0)
}

/// A `major.minor.patch` version. Pre-release and build suffixes are
/// accepted when parsing and dropped: etcd compares cluster versions by
/// major and minor only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Incompatible API changes.
    pub major: u64,
    /// New features; the cluster version moves by minors.
    pub minor: u64,
    /// Fixes.
    pub patch: u64,
}

/// A string that is not a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseVersionError;

impl fmt::Display for ParseVersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a major.minor.patch version")
    }
}

impl std::error::Error for ParseVersionError {}

impl Version {
    /// The version `major.minor.patch`.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// The version with its patch dropped: what a cluster version keeps.
    pub const fn major_minor(self) -> Self {
        Self::new(self.major, self.minor, 0)
    }

    /// `major.minor`, as etcd's metrics and readiness line print it.
    pub fn major_minor_string(self) -> String {
        format!("{}.{}", self.major, self.minor)
    }

    /// A downgrade target as etcd reads it: a full version or
    /// `major.minor`, kept as `major.minor.0`.
    pub fn parse_target(text: &str) -> Result<Self, ParseVersionError> {
        text.parse::<Self>()
            .or_else(|_| format!("{text}.0").parse::<Self>())
            .map(Self::major_minor)
    }

    /// A stored or published version; `None` when empty or malformed
    /// (a member that predates versions publishes none).
    pub fn parse_stored(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl FromStr for Version {
    type Err = ParseVersionError;

    /// `major.minor.patch`, optionally followed by `-pre` or `+build`, as
    /// semantic versioning writes it; no leading `v`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let core = text.split_once(['-', '+']).map_or(text, |(core, _)| core);
        let mut parts = core.split('.');
        let mut number = || -> Result<u64, ParseVersionError> {
            let part = parts.next().ok_or(ParseVersionError)?;
            let digits_only = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
            let leading_zero = part.len() > 1 && part.starts_with('0');
            if !digits_only || leading_zero {
                return Err(ParseVersionError);
            }
            part.parse().map_err(|_| ParseVersionError)
        };
        let version = Self::new(number()?, number()?, number()?);
        if parts.next().is_some() {
            return Err(ParseVersionError);
        }
        Ok(version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_semantic_versions() {
        assert_eq!("3.6.0".parse(), Ok(Version::new(3, 6, 0)));
        assert_eq!("3.5.17".parse(), Ok(Version::new(3, 5, 17)));
        assert_eq!("3.6.0-alpha.0".parse(), Ok(Version::new(3, 6, 0)));
        assert_eq!("3.6.1+git".parse(), Ok(Version::new(3, 6, 1)));
        for bad in [
            "", "3", "3.6", "3.6.0.1", "v3.6.0", "3.06.0", "a.b.c", "3..0", "-1.0.0",
        ] {
            assert_eq!(bad.parse::<Version>(), Err(ParseVersionError), "{bad:?}");
        }
    }

    #[test]
    fn downgrade_targets_as_etcd_reads_them() {
        assert_eq!(Version::parse_target("3.5"), Ok(Version::new(3, 5, 0)));
        assert_eq!(Version::parse_target("3.5.9"), Ok(Version::new(3, 5, 0)));
        assert_eq!(Version::parse_target("3"), Err(ParseVersionError));
        assert_eq!(Version::parse_target("three"), Err(ParseVersionError));
        assert_eq!(Version::parse_target(""), Err(ParseVersionError));
    }

    #[test]
    fn prints_and_orders() {
        let v = Version::new(3, 6, 2);
        assert_eq!(v.to_string(), "3.6.2");
        assert_eq!(v.major_minor().to_string(), "3.6.0");
        assert_eq!(v.major_minor_string(), "3.6");
        assert!(Version::new(3, 5, 9) < Version::new(3, 6, 0));
        assert!(Version::new(2, 9, 0) < Version::new(3, 0, 0));
        assert_eq!(min_cluster_version(SERVER_VERSION), Version::new(3, 5, 0));
        assert_eq!(Version::parse_stored(""), None);
    }
}
