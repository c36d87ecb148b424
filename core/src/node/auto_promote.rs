//! `--feature-gates=LearnerAutoPromote=true` (oxetcd's own gate): the
//! leader promotes a learner once it is in sync, without `member promote`.
//!
//! Design. At each timer round a leader with the gate on looks at its
//! learners; one whose log matches the leader's as closely as a manual
//! promote demands (`LEARNER_READY_PERCENT`), and whose promotion passes
//! the same strict reconfiguration check, is promoted through the log as
//! an entry no client waits for. The raft takes one membership change at a
//! time, so a learner is proposed again only after a refusal; once the
//! change is applied it is no longer a learner. A learner that has not
//! started (nothing matched) is never promoted.

use bytes::Bytes;
use oxetcd_proto::eraftpb::{ConfChange, ConfChangeType};
use tracing::{debug, info};

use super::{Node, LEARNER_READY_PERCENT};
use crate::raft::Role;
use crate::storage::{KvStore, LogStore};

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Proposes the promotion of the first learner in sync, if any.
    pub(super) fn auto_promote_learners(&mut self) {
        if !self.config.learner_auto_promote || self.raft.role() != Role::Leader {
            return;
        }
        let leader_match = self
            .raft
            .progress(self.config.member_id)
            .map_or(0, |p| p.matched());
        let ready = self.raft.conf_state().learners.into_iter().find(|id| {
            let matched = self.raft.progress(*id).map_or(0, |p| p.matched());
            matched > 0 && matched * 100 >= leader_match * LEARNER_READY_PERCENT
        });
        let Some(id) = ready else {
            return;
        };
        if let Err(e) = self.check_quorum_safe(ConfChangeType::AddNode, id, false) {
            return debug!(learner = %format_args!("{id:x}"), error = %e, "not promoted yet");
        }
        let cc = ConfChange {
            id: 0,
            change_type: ConfChangeType::AddNode,
            node_id: id,
            ..Default::default()
        };
        let data: Bytes = crate::raft::encode_conf_change(&cc);
        match self.raft.propose_conf_change(data) {
            Ok(index) => info!(
                learner = %format_args!("{id:x}"),
                index,
                "promoting a learner in sync with the leader (LearnerAutoPromote)"
            ),
            // Another change is pending, or leadership is moving: next round.
            Err(e) => debug!(learner = %format_args!("{id:x}"), error = %e, "not promoted yet"),
        }
    }
}
