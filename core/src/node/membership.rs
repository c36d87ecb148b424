//! The cluster's members as this node knows them: names and URLs of every
//! voter and learner, the validation etcd applies to member requests, and
//! how a committed membership entry changes the list.
//!
//! Every member holds the same list at the same applied index: it changes
//! only when log entries apply, and is stored in the backend with the
//! applied index ([`crate::storage::Membership`]). The raft configuration
//! (who votes) is the raft's own; this list adds what clients see.
//!
//! This module never reads the clock or touches storage.

use std::collections::BTreeMap;

use oxetcd_proto::eraftpb::{ConfChange, ConfChangeType};
use oxetcd_proto::etcdserverpb::{Member, MemberAddRequest, MemberUpdateRequest};
use oxetcd_proto::oxetcdpb::MemberAttributes;
use prost::Message as _;
use tracing::{info, warn};

use super::InitialMember;
use crate::error::Error;

/// Every member of the cluster, by ID.
#[derive(Clone, Debug, Default)]
pub(super) struct Members {
    by_id: BTreeMap<u64, Member>,
}

impl Members {
    /// The list as the backend stored it.
    pub(super) fn from_list(list: Vec<Member>) -> Self {
        Self {
            by_id: list.into_iter().map(|m| (m.id, m)).collect(),
        }
    }

    /// The configured initial members, all voters: the membership of a data
    /// directory written before membership was stored.
    pub(super) fn from_initial(initial: &[InitialMember]) -> Self {
        Self {
            by_id: initial
                .iter()
                .map(|m| (m.id, initial_record(m, false)))
                .collect(),
        }
    }

    /// Every member, in ID order.
    pub(super) fn list(&self) -> Vec<Member> {
        self.by_id.values().cloned().collect()
    }

    /// Every member's ID, in order, without copying the records.
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_id.keys().copied()
    }

    pub(super) fn get(&self, id: u64) -> Option<&Member> {
        self.by_id.get(&id)
    }

    pub(super) fn is_learner(&self, id: u64) -> bool {
        self.by_id.get(&id).is_some_and(|m| m.is_learner)
    }

    fn learners(&self) -> usize {
        self.by_id.values().filter(|m| m.is_learner).count()
    }

    /// etcd's checks of a member add that need only the list.
    pub(super) fn check_add(
        &self,
        request: &MemberAddRequest,
        max_learners: usize,
    ) -> Result<(), Error> {
        check_urls(&request.peer_ur_ls)?;
        self.check_urls_free(&request.peer_ur_ls, None)?;
        if request.is_learner && self.learners() >= max_learners {
            return Err(Error::TooManyLearners);
        }
        Ok(())
    }

    /// etcd's checks of a member update that need only the list.
    pub(super) fn check_update(&self, request: &MemberUpdateRequest) -> Result<(), Error> {
        if !self.by_id.contains_key(&request.id) {
            return Err(Error::MemberNotFound);
        }
        check_urls(&request.peer_ur_ls)?;
        self.check_urls_free(&request.peer_ur_ls, Some(request.id))
    }

    /// etcd's checks of a remove that need only the list.
    pub(super) fn check_remove(&self, id: u64) -> Result<(), Error> {
        if self.by_id.contains_key(&id) {
            Ok(())
        } else {
            Err(Error::MemberNotFound)
        }
    }

    /// etcd's checks of a promote that need only the list.
    pub(super) fn check_promote(&self, id: u64) -> Result<(), Error> {
        match self.by_id.get(&id) {
            None => Err(Error::MemberNotFound),
            Some(m) if !m.is_learner => Err(Error::MemberNotLearner),
            Some(_) => Ok(()),
        }
    }

    fn check_urls_free(&self, urls: &[String], except: Option<u64>) -> Result<(), Error> {
        let taken = self
            .by_id
            .values()
            .filter(|m| Some(m.id) != except)
            .any(|m| m.peer_ur_ls.iter().any(|u| urls.contains(u)));
        if taken {
            Err(Error::PeerUrlExists)
        } else {
            Ok(())
        }
    }

    /// Records a committed membership change. Bootstrap entries written
    /// before they carried member records have none: the configured
    /// initial member of that ID stands in.
    /// Returns the member added or changed.
    pub(super) fn apply_conf_change(
        &mut self,
        cc: &ConfChange,
        initial: &[InitialMember],
    ) -> Option<Member> {
        let id = cc.node_id;
        let learner = cc.change_type == ConfChangeType::AddLearnerNode;
        match cc.change_type {
            ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                if let Some(existing) = self.by_id.get_mut(&id) {
                    // A promotion (or a bootstrap entry applied again).
                    existing.is_learner &= learner;
                    return Some(existing.clone());
                }
                let record = if cc.context.is_empty() {
                    initial
                        .iter()
                        .find(|m| m.id == id)
                        .map(|m| initial_record(m, learner))
                } else {
                    Member::decode(cc.context.as_ref()).ok()
                };
                let mut record = record.unwrap_or_else(|| {
                    warn!(member_id = %format_args!("{id:x}"), "membership entry without a member record");
                    Member {
                        id,
                        ..Default::default()
                    }
                });
                record.id = id;
                record.is_learner = learner;
                self.by_id.insert(id, record.clone());
                Some(record)
            }
            ConfChangeType::RemoveNode => self.by_id.remove(&id),
        }
    }

    /// Records a committed peer URL update.
    pub(super) fn apply_update(&mut self, request: &MemberUpdateRequest) -> Option<Member> {
        let member = self.by_id.get_mut(&request.id)?;
        member.peer_ur_ls = request.peer_ur_ls.clone();
        Some(member.clone())
    }
}

impl Members {
    /// Records a committed attribute update (a member published its name
    /// and client URLs). An update for a member removed meanwhile changes
    /// nothing.
    pub(super) fn apply_attributes(&mut self, attributes: &MemberAttributes) {
        if let Some(member) = self.by_id.get_mut(&attributes.id) {
            member.name = attributes.name.clone();
            member.client_ur_ls = attributes.client_urls.clone();
        }
    }

    /// True when member `id`'s record shows `name` and `client_urls`.
    pub(super) fn shows(&self, id: u64, name: &str, client_urls: &[String]) -> bool {
        self.by_id
            .get(&id)
            .is_some_and(|m| m.name == name && m.client_ur_ls == client_urls)
    }
}

/// Bootstraps a brand-new member of a new cluster: the initial members
/// become the first log entries, each with its record for context,
/// encoded as a membership entry's context is.
pub(super) fn bootstrap<S: crate::raft::LogSource>(
    raft: &mut crate::raft::Raft<S>,
    config: &super::Config,
) -> Result<(), crate::storage::StorageError> {
    let initial = &config.initial_members;
    let voters: Vec<u64> = initial.iter().map(|m| m.id).collect();
    raft.bootstrap(&voters, &[], |id| {
        initial
            .iter()
            .find(|m| m.id == id)
            .map(|m| initial_record(m, false).encode_to_vec().into())
            .unwrap_or_default()
    })
    .map_err(crate::storage::StorageError::invariant)?;
    info!(
        member_id = %format_args!("{:x}", config.member_id),
        members = voters.len(),
        "bootstrapped a new cluster"
    );
    Ok(())
}

fn initial_record(m: &InitialMember, learner: bool) -> Member {
    Member {
        id: m.id,
        name: m.name.clone(),
        peer_ur_ls: m.peer_urls.clone(),
        client_ur_ls: Vec::new(),
        is_learner: learner,
    }
}

/// Peer URLs as etcd accepts them: at least one, each `http(s)://host:port`
/// with nothing after the port.
fn check_urls(urls: &[String]) -> Result<(), Error> {
    if urls.is_empty() || !urls.iter().all(|u| valid_url(u)) {
        return Err(Error::MemberBadUrls);
    }
    Ok(())
}

fn valid_url(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = rest.rsplit_once(':') else {
        return false;
    };
    !host.is_empty()
        && !host.contains('/')
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
}

/// etcd's strict reconfiguration rule: after the change, the members
/// known to be running must still form a quorum of the voters.
pub(super) fn enough_started(voters_after: usize, started: usize) -> bool {
    // A majority: more than half.
    started > voters_after / 2
}

/// The membership a node starts with: the stored one; none on a member
/// that applied nothing yet (`unapplied`: fresh, or its backend lost all
/// it applied in a crash), which learns it from the log it replays; on a
/// store written before membership was stored, the configured initial
/// members as voters (to be saved with the next apply: the flag in the
/// answer). A member that applied nothing never takes its initial
/// members for its configuration: it may have joined as a learner, and
/// the list it was given may be out of date.
pub(super) fn stored_membership(
    stored: Option<crate::storage::Membership>,
    unapplied: bool,
    config: &super::Config,
    initial_voters: &[u64],
) -> (oxetcd_proto::eraftpb::ConfState, Members, bool) {
    match stored {
        Some(stored) => (stored.conf_state, Members::from_list(stored.members), false),
        None if unapplied => Default::default(),
        None => {
            let conf_state = oxetcd_proto::eraftpb::ConfState {
                voters: initial_voters.to_vec(),
                ..Default::default()
            };
            (
                conf_state,
                Members::from_initial(&config.initial_members),
                true,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_as_etcd_accepts_them() {
        assert!(valid_url("http://10.0.0.1:2380"));
        assert!(valid_url("https://node-1:2380/"));
        assert!(!valid_url("10.0.0.1:2380"));
        assert!(!valid_url("http://10.0.0.1"));
        assert!(!valid_url("http://:2380"));
        assert!(!valid_url("http://a:2380/path"));
    }

    #[test]
    fn quorum_of_started_members() {
        assert!(enough_started(3, 2));
        assert!(!enough_started(4, 2));
        assert!(enough_started(1, 1));
    }
}
