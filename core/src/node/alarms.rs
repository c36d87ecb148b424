//! The node's side of alarms and the backend quota.
//!
//! Design. At admission a write is refused when an active alarm forbids
//! it, or when its estimated cost would take the bytes in use to the quota
//! ([`crate::alarm::Quota`]); in the second case this member raises NOSPACE
//! for itself through the log, as etcd's quota check does, once per
//! alarm (not again while its own is active or on its way). At apply the
//! same alarm check runs again on every member alike, so a write admitted
//! just before an alarm was applied fails everywhere the same way. Alarm
//! requests themselves are applied here and stored with the applied index.
//!
//! This module never touches storage except through the apply step's
//! transaction.

use oxetcd_proto::etcdserverpb::alarm_request::AlarmAction;
use oxetcd_proto::etcdserverpb::{AlarmRequest, AlarmType, ResponseHeader};

use super::{Node, Origin};
use crate::alarm::{self, AlarmSet};
use crate::auth::AuthInfo;
use crate::error::Error;
use crate::storage::{KvRead, KvStore, KvWrite, LogStore, StorageError};
use crate::{Request, Response, Write};

/// What the node keeps about alarms and the quota.
#[derive(Debug)]
pub(super) struct AlarmState {
    /// The active alarms, as applied.
    pub(super) set: AlarmSet,
    /// The backend's bytes in use as of the last apply.
    pub(super) used_bytes: u64,
    /// The applied index when this member last proposed its NOSPACE alarm.
    nospace_proposed_at: Option<u64>,
}

impl AlarmState {
    /// The alarms and bytes in use `view` holds.
    pub(super) fn recover(view: &impl KvRead) -> Result<Self, StorageError> {
        Ok(Self {
            set: AlarmSet::recover(view.alarms()?),
            used_bytes: view.used_bytes()?,
            nospace_proposed_at: None,
        })
    }
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Refuses a write the active alarms or the quota do not allow; a
    /// write over the quota raises NOSPACE for this member.
    pub(super) fn check_alarms_and_quota(&mut self, write: &Write) -> Result<(), Error> {
        if let Some(refusal) = self.alarms.set.refusal(write) {
            return Err(refusal);
        }
        let cost = alarm::cost(write);
        if self.config.quota.admits(self.alarms.used_bytes, cost) {
            return Ok(());
        }
        self.raise_nospace();
        Err(Error::NoSpace)
    }

    /// Proposes NOSPACE for this member unless it is active or proposed
    /// already; nobody waits for the answer.
    fn raise_nospace(&mut self) {
        let member_id = self.config.member_id;
        if self.alarms.set.has_for(member_id, AlarmType::Nospace)
            || self.alarms.nospace_proposed_at == Some(self.meta.applied_index)
        {
            return;
        }
        // Proposed at most once per applied index: a burst of refused
        // writes proposes one alarm, and a proposal lost to a leader change
        // is made again by the next refused write once something applied.
        self.alarms.nospace_proposed_at = Some(self.meta.applied_index);
        tracing::warn!(
            member_id = %format_args!("{member_id:x}"),
            used_bytes = self.alarms.used_bytes,
            quota_bytes = self.config.quota.limit_bytes,
            "backend quota exceeded; raising the NOSPACE alarm"
        );
        let request = Request::Alarm(AlarmRequest {
            action: AlarmAction::Activate as i32,
            member_id,
            alarm: AlarmType::Nospace as i32,
        });
        let ticket = self.admit_origin(Origin::Internal);
        self.dispatch(ticket, request, AuthInfo::default());
    }

    /// Applies an alarm request and stores the alarms if they changed.
    pub(super) fn apply_alarm(
        &mut self,
        txn: &mut K::Write,
        request: &AlarmRequest,
        header: ResponseHeader,
    ) -> Result<Result<Response, Error>, StorageError> {
        let (mut response, changed) = self.alarms.set.apply(request);
        if changed {
            txn.set_alarms(self.alarms.set.list())?;
            let alarm = AlarmType::try_from(request.alarm).unwrap_or(AlarmType::None);
            tracing::warn!(
                member_id = %format_args!("{:x}", request.member_id),
                alarm = alarm.as_str_name(),
                action = request.action,
                "alarm changed"
            );
        }
        response.header = Some(header);
        Ok(Ok(Response::Alarm(response)))
    }

    /// Status's `errors`, as etcd's: no leader, then each active alarm in
    /// Go's compact text form (`memberID:<decimal> alarm:NOSPACE `).
    pub(super) fn status_errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.raft.leader().is_none() {
            errors.push(Error::NoLeader.message());
        }
        for alarm in self.alarms.set.list() {
            let mut text = String::new();
            if alarm.member_id != 0 {
                text.push_str(&format!("memberID:{} ", alarm.member_id));
            }
            if let Some(name) = AlarmType::try_from(alarm.alarm)
                .ok()
                .filter(|t| *t != AlarmType::None)
            {
                text.push_str(&format!("alarm:{} ", name.as_str_name()));
            }
            errors.push(text);
        }
        errors
    }

    /// The active alarms as this member applied them.
    pub fn alarms(&self) -> Vec<oxetcd_proto::etcdserverpb::AlarmMember> {
        self.alarms.set.list().to_vec()
    }

    /// The bytes in use in the backend as of the last apply (what the
    /// quota is judged on).
    pub fn used_bytes(&self) -> u64 {
        self.alarms.used_bytes
    }
}
