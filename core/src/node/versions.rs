//! The node's side of versions ([`crate::version`]): publishing this
//! member's server version with its attributes, the leader's monitor that
//! sets the cluster version and ends a finished downgrade, serving
//! `Maintenance.Downgrade`, and applying the version entries.
//!
//! Design. [`VersionMonitor`] holds the only time-dependent state: when
//! the leader last proposed a cluster version (so it proposes again only
//! after an election timeout if that entry was lost) and when it next
//! checks a downgrade's progress (`--downgrade-check-time`). Everything
//! else lives in [`ClusterVersions`], changed only by applied entries.
//! VALIDATE runs after a read barrier against the applied state (etcd's
//! linearizable read); ENABLE and CANCEL are checked at admission and
//! again when they apply, in log order, so two racing requests cannot
//! both win.

use std::time::Duration;

use bytes::Bytes;
use oxetcd_proto::eraftpb::EntryType;
use oxetcd_proto::etcdserverpb::{
    downgrade_request::DowngradeAction, DowngradeRequest, DowngradeResponse, ResponseHeader,
};
use oxetcd_proto::oxetcdpb::{proposal, ClusterVersionSet, DowngradeInfoSet, Proposal};
use prost::Message as _;
use tracing::info;

use super::reads::ReadKind;
use super::{Node, Ticket};
use crate::auth::AuthInfo;
use crate::error::Error;
use crate::raft::Role;
use crate::storage::{KvStore, KvWrite as _, LogStore, StorageError};
use crate::version::{downgrade, ClusterVersions, Version};
use crate::{Instant, Response};

/// The leader's timers for versions.
#[derive(Debug, Default)]
pub(super) struct VersionMonitor {
    /// The cluster version last proposed, and when to propose again if it
    /// has not applied by then.
    proposed: Option<(Version, Instant)>,
    /// When to check next whether the downgrade in progress is complete.
    check_at: Option<Instant>,
    /// The commit index this member started with: what it applied up to
    /// there may be older than the cluster's state (entries it held but
    /// did not know committed), so it judges its own version only once a
    /// leader moved the commit index past it.
    commit_at_start: u64,
}

impl VersionMonitor {
    pub(super) fn starting_at(commit: u64) -> Self {
        Self {
            commit_at_start: commit,
            ..Self::default()
        }
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.check_at
    }
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// The cluster's versions as of the applied index.
    pub fn versions(&self) -> &ClusterVersions {
        &self.versions
    }

    /// The server version this member runs as.
    pub fn server_version(&self) -> Version {
        self.config.server_version
    }

    /// Why this member may not run in the cluster at its server version,
    /// as of the applied cluster version (etcd refuses such a member at
    /// start): the runtime stops it.
    pub fn version_refusal(&self) -> Option<crate::version::VersionRefusal> {
        // Judged once a leader moved the commit index past where this
        // member started, and all of it is applied: until then the stored
        // cluster version may be older than the cluster's (a downgrade
        // this member had not applied durably before it stopped).
        let committed = self.raft.committed();
        if committed <= self.version_monitor.commit_at_start || self.meta.applied_index < committed
        {
            return None;
        }
        self.versions.check_member(self.config.server_version).err()
    }

    /// On the leader: proposes the cluster version once every member has
    /// published its server version and the minimum differs from the
    /// applied one (etcd's `monitorVersions`). Runs on every drain.
    pub(super) fn maybe_set_cluster_version(&mut self) {
        if self.raft.role() != Role::Leader {
            self.version_monitor.proposed = None;
            return;
        }
        // Runs on every drain: no copy of the membership.
        let Some(wanted) = self.versions.decide(self.members.ids()) else {
            self.version_monitor.proposed = None;
            return;
        };
        if let Some((proposed, retry_at)) = self.version_monitor.proposed {
            if proposed == wanted && self.now < retry_at {
                return;
            }
        }
        self.version_monitor.proposed = Some((wanted, self.now + self.config.election_timeout));
        self.propose_internal(proposal::Request::ClusterVersionSet(ClusterVersionSet {
            version: wanted.to_string(),
        }));
    }

    /// On the leader, every `--downgrade-check-time` while a downgrade
    /// runs: once every member runs the target version, the job ends.
    pub(super) fn check_downgrade(&mut self) {
        let leading = self.raft.role() == Role::Leader;
        let Some(target) = self.versions.downgrade_target().filter(|_| leading) else {
            self.version_monitor.check_at = None;
            return;
        };
        let interval = self
            .config
            .downgrade_check_interval
            .max(Duration::from_millis(1));
        match self.version_monitor.check_at {
            None => {
                self.version_monitor.check_at = Some(self.now + interval);
                return;
            }
            Some(at) if at > self.now => return,
            Some(_) => self.version_monitor.check_at = Some(self.now + interval),
        }
        if self.versions.downgrade_complete(self.members.ids()) {
            info!(
                cluster_version = %target,
                "the cluster has been downgraded to {}",
                target.major_minor_string()
            );
            self.propose_internal(proposal::Request::DowngradeInfoSet(
                DowngradeInfoSet::default(),
            ));
        }
    }

    /// `Maintenance.Downgrade`. A leader must be known (the caller held
    /// the request until then).
    pub(super) fn downgrade(&mut self, ticket: Ticket, request: DowngradeRequest, who: AuthInfo) {
        let action = match DowngradeAction::try_from(request.action) {
            Ok(DowngradeAction::Validate) => downgrade::Action::Validate,
            Ok(DowngradeAction::Enable) => downgrade::Action::Enable,
            Ok(DowngradeAction::Cancel) => downgrade::Action::Cancel,
            Err(_) => {
                return self.answer(ticket, Err(Error::Unimplemented("this downgrade action")))
            }
        };
        let set = match action {
            downgrade::Action::Validate => {
                return self.queue_read(ticket, ReadKind::Downgrade(request.version));
            }
            downgrade::Action::Enable => {
                let checked = downgrade::parse_target(&request.version).and_then(|target| {
                    downgrade::validate(
                        self.versions.cluster(),
                        self.versions.downgrade_target(),
                        target,
                    )
                    .map(|()| target)
                });
                match checked {
                    Ok(target) => DowngradeInfoSet {
                        enabled: true,
                        target_version: target.to_string(),
                    },
                    Err(e) => return self.answer(ticket, Err(e)),
                }
            }
            downgrade::Action::Cancel => {
                if let Err(e) = downgrade::check_cancel(self.versions.downgrade_target()) {
                    return self.answer(ticket, Err(e));
                }
                DowngradeInfoSet::default()
            }
        };
        let proposal = Proposal {
            id: self.next_proposal_id(),
            request: Some(proposal::Request::DowngradeInfoSet(set)),
            user: who.user,
            auth_revision: who.revision,
        };
        let data = Bytes::from(proposal.encode_to_vec());
        self.propose(ticket, proposal.id, EntryType::EntryNormal, data);
    }

    /// Answers a VALIDATE once the read barrier passed.
    pub(super) fn answer_downgrade_validate(&mut self, ticket: Ticket, target: &str) {
        let checked = downgrade::parse_target(target).and_then(|target| {
            downgrade::validate(
                self.versions.cluster(),
                self.versions.downgrade_target(),
                target,
            )
        });
        let result = checked.map(|()| Response::Downgrade(self.downgrade_response(self.header())));
        self.answer(ticket, result);
    }

    /// etcd's answer: the cluster version, `major.minor`.
    fn downgrade_response(&self, header: ResponseHeader) -> DowngradeResponse {
        DowngradeResponse {
            header: Some(header),
            version: self
                .versions
                .cluster()
                .map(Version::major_minor_string)
                .unwrap_or_default(),
        }
    }

    /// Applies the leader's cluster version, and the storage migration it
    /// brings in the same transaction `txn` (the membership, which records
    /// the storage version, is saved with it).
    pub(super) fn apply_cluster_version(
        &mut self,
        set: &ClusterVersionSet,
        txn: &mut K::Write,
    ) -> Result<(), StorageError> {
        let Ok(version) = set.version.parse::<Version>() else {
            tracing::warn!(version = %set.version, "ignoring a malformed cluster version");
            return Ok(());
        };
        if let Some(plan) = self.versions.apply_cluster_version(version) {
            txn.migrate(&plan.steps)?;
            info!(
                from = ?plan.from.map(|v| v.to_string()),
                to = %plan.to,
                steps = plan.steps.len(),
                plan = ?plan.steps,
                "migrated the storage version"
            );
        }
        Ok(())
    }

    /// Applies a downgrade job change, checked again in log order.
    pub(super) fn apply_downgrade(
        &mut self,
        set: &DowngradeInfoSet,
        header: ResponseHeader,
    ) -> Result<Response, Error> {
        self.versions.apply_downgrade(set)?;
        self.version_monitor.check_at = None;
        Ok(Response::Downgrade(self.downgrade_response(header)))
    }
}
