//! Storage migration: the steps that move the backend's data format from
//! one storage version to another. The storage version follows the cluster
//! version, so enabling a downgrade migrates every member's backend down
//! and cancelling it migrates back up.
//!
//! Between oxetcd 3.5 and 3.6 the backend's format is the same, so every
//! plan today has no steps and only the recorded version changes; a future
//! format change adds its steps here, in both directions.

use super::Version;

/// One change to the backend's format. None exists yet between the
/// versions this build supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {}

/// How to move the backend from one storage version to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationPlan {
    /// The storage version before; `None` on a backend that never
    /// recorded one.
    pub from: Option<Version>,
    /// The storage version after.
    pub to: Version,
    /// The changes to make, in order.
    pub steps: Vec<Step>,
}

/// The plan from `from` to `to` (both by major and minor); `None` when
/// there is nothing to do.
pub fn plan(from: Option<Version>, to: Version) -> Option<MigrationPlan> {
    let to = to.major_minor();
    if from.map(Version::major_minor) == Some(to) {
        return None;
    }
    Some(MigrationPlan {
        from,
        to,
        steps: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_format_between_3_5_and_3_6() {
        let v36 = Version::new(3, 6, 0);
        let v35 = Version::new(3, 5, 0);
        assert_eq!(plan(Some(v36), Version::new(3, 6, 4)), None);
        let down = plan(Some(v36), v35).expect("a plan");
        assert_eq!((down.from, down.to), (Some(v36), v35));
        assert!(down.steps.is_empty());
        let first = plan(None, v36).expect("a plan");
        assert_eq!(first.from, None);
    }
}
