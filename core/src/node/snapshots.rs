//! Snapshots and log compaction: the backend sent to a follower that needs
//! compacted entries, a received snapshot installed, and the log trimmed
//! every `snapshot_count` applied entries.
//!
//! Design. The leader asks the runtime to stream its backend
//! (`Output::SendSnapshot`); a follower installs a received one with the
//! `Output::Persist` that carries its metadata and reloads its state from
//! the backend once that write is durable. Compaction keeps
//! `snapshot_catch_up_entries` behind the applied index for slow
//! followers, and never passes what is persisted.

use oxetcd_proto::eraftpb::SnapshotMetadata;
use tracing::{debug, info, warn};

use super::membership::Members;
use super::{Node, Output};
use crate::auth::AuthStore;
use crate::error::Error;
use crate::lease::Lessor;
use crate::raft::{self, PersistId, Role};
use crate::storage::{KvMeta, KvRead, KvStore, LogStore, StorageError};

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// The leader streams a snapshot of the backend as of the applied
    /// index, which the raft's applied index matches: entries are applied
    /// as soon as the raft hands them out.
    pub(super) fn send_snapshot(&mut self, to: u64, term: u64) {
        let index = self.raft.applied();
        let Some(snapshot_term) = self.raft.log_term(index) else {
            warn!(to, index, "no term for the snapshot index; not sending");
            return self.raft.report_snapshot(to, false);
        };
        assert_eq!(
            index, self.meta.applied_index,
            "raft applied {index} but the backend holds {}",
            self.meta.applied_index
        );
        let metadata = SnapshotMetadata {
            conf_state: Some(self.raft.conf_state()).into(),
            index,
            term: snapshot_term,
            ..Default::default()
        };
        let message = raft::snapshot_message(self.config.member_id, to, term, metadata);
        self.outputs.push_back(Output::SendSnapshot { to, message });
    }

    pub(super) fn handle_persisted(&mut self, id: PersistId) {
        if self.restoring.is_some_and(|r| r <= id) {
            self.restoring = None;
            if let Err(e) = self.reload_backend() {
                return self.poison(e);
            }
        }
        self.raft.persisted(self.now, id);
    }

    /// The runtime installed a snapshot in the backend: everything derived
    /// from it is read again.
    pub(super) fn reload_backend(&mut self) -> Result<(), StorageError> {
        let view = self.kv.read()?;
        let meta = view.meta()?;
        self.meta = KvMeta {
            revision: meta.revision.max(1),
            ..meta
        };
        if let Some(stored) = view.membership()? {
            self.versions = crate::version::ClusterVersions::from_record(&stored.versions);
            self.members = Members::from_list(stored.members);
        }
        self.membership_unsaved = false;
        self.lessor = Lessor::recover(self.config.lease, &view)?;
        self.auth = AuthStore::recover(view.auth()?, self.config.auth_token_ttl);
        self.alarms = super::alarms::AlarmState::recover(&view)?;
        let keys = super::metrics::live_keys(&view, self.meta.revision)?;
        self.counters.keys = super::metrics::KeyCount::Known(keys);
        if self.raft.role() == Role::Leader {
            self.lessor.promote(self.now);
        }
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            applied_index = self.meta.applied_index,
            revision = self.meta.revision,
            "installed a snapshot"
        );
        // Proposals the snapshot covers may or may not be in it.
        let applied = self.meta.applied_index;
        for ticket in self.proposals.covered_by_snapshot(applied) {
            self.counters.proposals_failed += 1;
            self.answer(ticket, Err(Error::LeaderChanged));
        }
        self.with_watches(|watches, cx| watches.handle_restored(cx));
        self.update_sole_voter();
        self.release_reads();
        Ok(())
    }

    /// Every `snapshot_count` applied entries, the log is compacted up to
    /// `snapshot_catch_up_entries` before the applied index.
    pub(super) fn maybe_compact(&mut self) {
        let applied = self.meta.applied_index;
        if applied < self.compacted_at + self.config.snapshot_count {
            return;
        }
        self.compacted_at = applied;
        let index = applied.saturating_sub(self.config.snapshot_catch_up_entries);
        let index = index.min(self.raft.persisted_index());
        if index > self.raft.snapshot_index() && self.raft.compact_log(index) {
            debug!(index, applied, "compacting the log");
            self.outputs.push_back(Output::CompactLog { index });
        }
    }
}
