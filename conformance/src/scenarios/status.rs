//! Maintenance status and the identity fields of response headers.

use super::{ensure, ok, put};
use crate::target::Target;

/// etcd's IDs for a default single member (`--name default`, advertised
/// peer URL `http://localhost:2380`, token `etcd-cluster`).
const DEFAULT_MEMBER_ID: u64 = 0x8e9e_05c5_2164_694d;
const DEFAULT_CLUSTER_ID: u64 = 0xcdf8_1819_4e3a_8c32;

/// Status reports the current revision, this member as leader, a raft term
/// and indexes that grow with writes; headers carry etcd's default IDs.
pub(super) fn status_reports_revision_and_leader(t: &mut Target) -> Result<(), String> {
    ok(t.put(put("a", "1")))?;
    let put_header = ok(t.put(put("b", "1")))?.header.unwrap_or_default();
    let before = ok(t.status())?;
    let header = before.header.unwrap_or_default();
    ensure(header.revision == 3, || {
        format!("status header revision {} != 3", header.revision)
    })?;
    ensure(header.member_id == DEFAULT_MEMBER_ID, || {
        format!("member_id {:x} != {DEFAULT_MEMBER_ID:x}", header.member_id)
    })?;
    ensure(header.cluster_id == DEFAULT_CLUSTER_ID, || {
        format!(
            "cluster_id {:x} != {DEFAULT_CLUSTER_ID:x}",
            header.cluster_id
        )
    })?;
    ensure(
        put_header.member_id == header.member_id
            && put_header.cluster_id == header.cluster_id
            && put_header.raft_term == header.raft_term,
        || format!("put header {put_header:?} differs from status header {header:?}"),
    )?;
    ensure(before.leader == header.member_id, || {
        format!(
            "leader {:x} is not this member {:x}",
            before.leader, header.member_id
        )
    })?;
    ensure(
        before.raft_term >= 1 && before.raft_term == header.raft_term,
        || {
            format!(
                "raft_term {} (header {})",
                before.raft_term, header.raft_term
            )
        },
    )?;
    ensure(
        before.raft_applied_index >= 3 && before.raft_index >= before.raft_applied_index,
        || {
            format!(
                "raft_index {} applied {}",
                before.raft_index, before.raft_applied_index
            )
        },
    )?;
    ensure(!before.is_learner && before.errors.is_empty(), || {
        format!(
            "is_learner {} errors {:?}",
            before.is_learner, before.errors
        )
    })?;
    if t.is_server() {
        let version_ok = before.version.split('.').count() == 3
            && before.version.split('.').all(|p| p.parse::<u32>().is_ok());
        ensure(version_ok, || {
            format!("version {:?} is not MAJOR.MINOR.PATCH", before.version)
        })?;
        ensure(
            before.db_size > 0
                && before.db_size_in_use > 0
                && before.db_size_in_use <= before.db_size,
            || {
                format!(
                    "db_size {} in use {}",
                    before.db_size, before.db_size_in_use
                )
            },
        )?;
    }
    ok(t.put(put("c", "1")))?;
    let after = ok(t.status())?;
    let revision = after.header.as_ref().map_or(0, |h| h.revision);
    ensure(revision == 4, || {
        format!("revision after a put: {revision} != 4")
    })?;
    ensure(
        after.raft_index > before.raft_index
            && after.raft_applied_index > before.raft_applied_index,
        || {
            format!(
                "indexes did not grow with a write: {}/{} -> {}/{}",
                before.raft_index,
                before.raft_applied_index,
                after.raft_index,
                after.raft_applied_index
            )
        },
    )
}
