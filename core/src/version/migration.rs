//! Storage migration: what the backend holds at each storage version
//! ([`SCHEMAS`], written down as data), and the steps that move it from one
//! storage version to another, computed from the two schemas. The storage
//! version follows the cluster version, so enabling a downgrade migrates
//! every member's backend down and cancelling it migrates back up.
//!
//! Between oxetcd 3.5 and 3.6 the backend's schema is the same, so every
//! plan today has no steps and only the recorded version changes. A
//! format change adds a schema here; the plan then names the tables and
//! `meta` keys to add or drop, in both directions. The node applies a
//! plan with [`crate::storage::KvWrite::migrate`] in the transaction that
//! applies the cluster version and records the new storage version, so a
//! crash leaves either format, never half of one. The storage crate
//! checks in its tests that what it writes is exactly the current
//! schema.
//!
//! A schema names tables and `meta` keys, not how a record is encoded:
//! the storage crate reads every encoding it ever wrote (records with and
//! without checksums alike), so an encoding change needs no step here.
//! The `meta` keys are also what the backend accepts at open: a key no
//! schema names is taken for damage.

use super::Version;

/// What a backend of one storage version holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schema {
    /// The storage version (major and minor).
    pub version: Version,
    /// Its tables.
    pub tables: &'static [&'static str],
    /// The keys of its `meta` table.
    pub meta_keys: &'static [&'static str],
}

/// The backend's tables at 3.5 and 3.6.
const TABLES: &[&str] = &["meta", "revisions", "leases"];

/// The `meta` keys at 3.5 and 3.6: the storage format, the applied index
/// and revisions, the commit sequence, the membership (with the versions),
/// auth, the alarms and the bytes in use.
const META_KEYS: &[&str] = &[
    "format_version",
    "contents",
    "kv_meta",
    "kv_commit_seq",
    "membership",
    "auth",
    "alarms",
    "kv_used_bytes",
];

/// Every storage version this build reads and writes, oldest first.
pub const SCHEMAS: &[Schema] = &[
    Schema {
        version: Version::new(3, 5, 0),
        tables: TABLES,
        meta_keys: META_KEYS,
    },
    Schema {
        version: Version::new(3, 6, 0),
        tables: TABLES,
        meta_keys: META_KEYS,
    },
];

/// The schema of storage version `version` (by major and minor).
pub fn schema(version: Version) -> Option<&'static Schema> {
    let version = version.major_minor();
    SCHEMAS.iter().find(|s| s.version == version)
}

/// One change to the backend's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create an empty table.
    AddTable(&'static str),
    /// Drop a table with what it holds.
    DropTable(&'static str),
    /// Remove a key of the `meta` table.
    DropMetaKey(&'static str),
}

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
/// there is nothing to do. A version without a schema (never written by
/// this build) brings no steps: only the record changes.
pub fn plan(from: Option<Version>, to: Version) -> Option<MigrationPlan> {
    let to = to.major_minor();
    if from.map(Version::major_minor) == Some(to) {
        return None;
    }
    let steps = match (from.and_then(schema), schema(to)) {
        (Some(old), Some(new)) => steps(old, new),
        _ => Vec::new(),
    };
    Some(MigrationPlan { from, to, steps })
}

/// What turns a backend of schema `old` into one of schema `new`: tables
/// added, then tables and `meta` keys dropped. (A `meta` key a newer
/// schema adds is written by the code that owns it.)
fn steps(old: &Schema, new: &Schema) -> Vec<Step> {
    let added = new.tables.iter().filter(|t| !old.tables.contains(t));
    let dropped = old.tables.iter().filter(|t| !new.tables.contains(t));
    let dropped_keys = old.meta_keys.iter().filter(|k| !new.meta_keys.contains(k));
    added
        .map(|t| Step::AddTable(t))
        .chain(dropped.map(|t| Step::DropTable(t)))
        .chain(dropped_keys.map(|k| Step::DropMetaKey(k)))
        .collect()
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
        assert_eq!(schema(Version::new(3, 6, 2)), Some(&SCHEMAS[1]));
        assert_eq!(schema(Version::new(3, 7, 0)), None);
    }

    #[test]
    fn steps_are_the_difference_of_two_schemas_both_ways() {
        let old = Schema {
            version: Version::new(3, 5, 0),
            tables: &["meta", "revisions"],
            meta_keys: &["kv_meta", "old_key"],
        };
        let new = Schema {
            version: Version::new(3, 6, 0),
            tables: &["meta", "revisions", "leases"],
            meta_keys: &["kv_meta", "new_key"],
        };
        assert_eq!(
            steps(&old, &new),
            vec![Step::AddTable("leases"), Step::DropMetaKey("old_key")]
        );
        assert_eq!(
            steps(&new, &old),
            vec![Step::DropTable("leases"), Step::DropMetaKey("new_key")]
        );
        assert_eq!(steps(&new, &new), Vec::new());
    }
}
