//! What the node counts for the runtime's metrics (etcd's `etcd_server_*`,
//! `etcd_mvcc_*` and `etcd_debugging_mvcc_*` families that only the node
//! can know).
//!
//! Design. The node keeps plain numbers ([`Counters`]) and bumps them where
//! the event happens: a leader change in `role_changed`, a failed proposal
//! where it is answered, a key created or deleted where a write is applied.
//! [`Node::metrics`] adds what the node's state already says (role,
//! indexes, watchers) and hands the runtime one copyable [`NodeMetrics`]; the
//! runtime publishes it however it likes. This module never reads the
//! clock: durations (slow applies, compaction pauses) are the runtime's to
//! measure.

use std::ops::ControlFlow;

use oxetcd_proto::etcdserverpb::{response_op, ResponseOp};

use super::Node;
use crate::raft::Role;
use crate::storage::{KeyVersion, KvRead, KvStore, LogStore, RangeEnd, StorageError};
use crate::Response;

/// A copy of the node's numbers at one moment. Counters only grow (a
/// restart starts them at zero, as etcd's); the rest are levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMetrics {
    /// A leader is known.
    pub has_leader: bool,
    /// This member leads.
    pub is_leader: bool,
    /// This member is a learner.
    pub is_learner: bool,
    /// Times a leader (other than the one known before) became known.
    pub leader_changes_seen: u64,
    /// The raft's commit index (etcd's `proposals_committed_total`).
    pub proposals_committed: u64,
    /// The applied index (etcd's `proposals_applied_total`).
    pub proposals_applied: u64,
    /// This member's proposals waiting to be applied.
    pub proposals_pending: u64,
    /// This member's proposals that failed (leader changed, timed out).
    pub proposals_failed: u64,
    /// Reads that timed out waiting for their read index.
    pub slow_read_indexes: u64,
    /// Reads whose read-index round was lost to a leader change.
    pub read_indexes_failed: u64,
    /// Leases this member, as leader, found expired and revoked.
    pub leases_expired: u64,
    /// Puts applied (top level and inside transactions).
    pub puts: u64,
    /// Delete ranges applied (top level and inside transactions).
    pub deletes: u64,
    /// Ranges asked of this member, and ranges inside applied transactions.
    pub ranges: u64,
    /// Transactions that ran more than one operation (etcd counts its
    /// storage transactions so: a lone put, delete or range is not one).
    pub txns: u64,
    /// Keys that exist (have a live version) at the applied revision; 0
    /// until the runtime counted those the member started with
    /// ([`Node::keys_counted`]).
    pub keys: u64,
    /// Watchers of every stream.
    pub watchers: u64,
    /// Watchers catching up from storage (etcd's unsynced watchers).
    pub slow_watchers: u64,
    /// Watch streams.
    pub watch_streams: u64,
    /// Bytes in use in the backend as of the last apply (what the quota
    /// is judged on).
    pub bytes_in_use: u64,
    /// Compactions applied.
    pub compactions: u64,
    /// The cluster version as of the applied index, once set.
    pub cluster_version: Option<crate::version::Version>,
}

/// The node's running counts behind [`NodeMetrics`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counters {
    pub(super) leader_changes_seen: u64,
    pub(super) proposals_failed: u64,
    pub(super) slow_read_indexes: u64,
    pub(super) read_indexes_failed: u64,
    pub(super) leases_expired: u64,
    pub(super) puts: u64,
    pub(super) deletes: u64,
    pub(super) ranges: u64,
    pub(super) txns: u64,
    /// Live keys, moved by every applied change.
    pub(super) keys: KeyCount,
    pub(super) compactions: u64,
}

impl Counters {
    /// Counts one applied answer's operations, as etcd's mvcc counts them:
    /// each put, delete range and range of a transaction's chosen branch
    /// (nested ones included), and the transaction itself when it ran more
    /// than one of them — etcd counts storage transactions, and a `Txn`
    /// of one operation is a single put, delete or range to its storage.
    /// (etcd also counts each compare as a range; oxetcd does not.)
    pub(super) fn count_applied(&mut self, response: &Response) {
        match response {
            Response::Put(_) => self.puts += 1,
            Response::DeleteRange(_) => self.deletes += 1,
            Response::Txn(txn) => {
                let ran = self.count_ops(&txn.responses);
                self.txns += u64::from(ran > 1);
            }
            Response::Compact(_) => self.compactions += 1,
            _ => {}
        }
    }

    /// Counts a branch's operations, and answers how many there were.
    fn count_ops(&mut self, ops: &[ResponseOp]) -> u64 {
        let mut ran = 0;
        for op in ops {
            ran += match &op.response {
                Some(response_op::Response::ResponsePut(_)) => {
                    self.puts += 1;
                    1
                }
                Some(response_op::Response::ResponseDeleteRange(_)) => {
                    self.deletes += 1;
                    1
                }
                Some(response_op::Response::ResponseRange(_)) => {
                    self.ranges += 1;
                    1
                }
                Some(response_op::Response::ResponseTxn(txn)) => self.count_ops(&txn.responses),
                None => 0,
            };
        }
        ran
    }

    /// Moves the live key count by one write's changes: a version 1 is a
    /// key created, a tombstone a key deleted.
    pub(super) fn count_changes(&mut self, changes: &[KeyVersion]) {
        let moved: i64 = changes
            .iter()
            .map(|change| match (change.tombstone, change.version) {
                (true, _) => -1,
                (false, 1) => 1,
                _ => 0,
            })
            .sum();
        self.keys = match self.keys {
            KeyCount::Known(keys) => KeyCount::Known(keys.saturating_add_signed(moved)),
            KeyCount::Counting { moved: before } => KeyCount::Counting {
                moved: before + moved,
            },
        };
    }
}

/// The live key count. Counting the keys a member starts with is one pass
/// over the key space, which the runtime makes off the node's thread on
/// the view the node started from ([`Node::keys_counted`]); until then
/// the node only adds up what its applies changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyCount {
    /// The start's count is not in yet; applies since moved it this much.
    Counting {
        moved: i64,
    },
    Known(u64),
}

impl Default for KeyCount {
    fn default() -> Self {
        Self::Counting { moved: 0 }
    }
}

/// Keys with a live version at `revision`: one pass over the key space
/// (what the member starts with, and a snapshot it installs).
pub fn live_keys(view: &impl KvRead, revision: i64) -> Result<u64, StorageError> {
    let mut keys = 0;
    view.scan(b"", RangeEnd::Unbounded, revision, &mut |version| {
        keys += u64::from(!version.tombstone);
        ControlFlow::Continue(())
    })?;
    Ok(keys)
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// The node's numbers for the runtime's metrics.
    pub fn metrics(&self) -> NodeMetrics {
        let c = &self.counters;
        let (watchers, slow_watchers, watch_streams) = self.watches.counts();
        NodeMetrics {
            has_leader: self.raft.leader().is_some(),
            is_leader: self.raft.role() == Role::Leader,
            is_learner: self.is_learner(),
            leader_changes_seen: c.leader_changes_seen,
            proposals_committed: self.raft.committed(),
            proposals_applied: self.meta.applied_index,
            proposals_pending: self.proposals.len() as u64,
            proposals_failed: c.proposals_failed,
            slow_read_indexes: c.slow_read_indexes,
            read_indexes_failed: c.read_indexes_failed,
            leases_expired: c.leases_expired,
            puts: c.puts,
            deletes: c.deletes,
            ranges: c.ranges,
            txns: c.txns,
            keys: match c.keys {
                KeyCount::Known(keys) => keys,
                KeyCount::Counting { .. } => 0,
            },
            watchers,
            slow_watchers,
            watch_streams,
            bytes_in_use: self.alarms.used_bytes,
            compactions: c.compactions,
            cluster_version: self.versions.cluster(),
        }
    }

    /// The runtime counted `keys` live keys (with [`live_keys`]) on a view
    /// of the backend taken when the node was built, before it applied
    /// anything: the live key count is that plus what applies changed
    /// since. Ignored once the count is known (a snapshot was installed
    /// meanwhile and counted).
    pub fn keys_counted(&mut self, keys: u64) {
        if let KeyCount::Counting { moved } = self.counters.keys {
            self.counters.keys = KeyCount::Known(keys.saturating_add_signed(moved));
        }
    }

    /// Compactions applied so far: cheap enough to ask around every
    /// output, so the runtime can time the apply that compacted.
    pub fn compactions(&self) -> u64 {
        self.counters.compactions
    }
}
