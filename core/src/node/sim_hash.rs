//! `HashKV` for the node simulator: every member's hash of its key space
//! at the final revision must be the same.
//!
//! Design. The node does not answer `HashKV`: the server computes it over
//! a read view of the backend (`oxetcd_storage::bolt::hash`, CRC-32C over
//! etcd's encoding, which core cannot depend on). This is the same rule
//! over the same view: every stored version up to the revision, in
//! revision order, except that a version at or below the compaction
//! counts only if it is its key's live version at that revision (etcd's
//! `keep` set), and every one counts when no key is live. So members that
//! applied the same history answer the same hash however far their
//! compaction got; a hasher of the standard library stands in for
//! CRC-32C, which compares the same.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;

use crate::storage::{KvRead, Revision};

/// The hash of `view`'s key space up to `at` (at most its revision).
pub(super) fn hash_kv(view: &impl KvRead, at: i64) -> u64 {
    let meta = view.meta().expect("an in-memory view reads");
    let upto = at.min(meta.revision);
    let mut latest: HashMap<Vec<u8>, (Revision, bool)> = HashMap::new();
    view.changes(0, upto, &mut |version| {
        latest.insert(version.key, (version.mod_revision, version.tombstone));
        ControlFlow::Continue(())
    })
    .expect("an in-memory view reads");
    let keep: HashSet<Revision> = latest
        .into_values()
        .filter(|(_, tombstone)| !tombstone)
        .map(|(revision, _)| revision)
        .collect();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    view.changes(0, upto, &mut |version| {
        let compacted = version.mod_revision.main <= meta.compact_revision;
        if compacted && !keep.is_empty() && !keep.contains(&version.mod_revision) {
            return ControlFlow::Continue(());
        }
        (
            version.mod_revision.main,
            version.mod_revision.sub,
            version.tombstone,
        )
            .hash(&mut hasher);
        (
            &version.key,
            &version.value,
            version.create_revision,
            version.version,
            version.lease,
        )
            .hash(&mut hasher);
        ControlFlow::Continue(())
    })
    .expect("an in-memory view reads");
    hasher.finish()
}
