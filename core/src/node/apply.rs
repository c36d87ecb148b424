//! Applying one committed proposal to the backend: key-space writes, lease
//! grants, revokes and checkpoints, auth changes. Membership entries and empty entries
//! never reach this module (the node records membership itself, and an
//! empty entry changes nothing).
//!
//! This module writes storage only through the [`KvWrite`] it is handed.

use oxetcd_proto::eraftpb::{Entry, EntryType};
use oxetcd_proto::etcdserverpb::{
    request_op, DeleteRangeRequest, LeaseGrantResponse, LeaseKeepAliveResponse,
    LeaseRevokeResponse, MemberUpdateResponse, RequestOp, ResponseHeader, TxnRequest,
};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};
use prost::Message as _;

use super::access::check_at_apply;
use super::metrics::Counters;
use super::{Node, Ticket};
use crate::auth::{AuthInfo, AuthStore};
use crate::error::Error;
use crate::lease::{self, Lessor};
use crate::storage::{KvMeta, KvRead, KvStore, KvWrite, LogStore, Membership, StorageError};
use crate::version::capability::Capability;
use crate::version::Version;
use crate::watch::WatchRegistry;
use crate::{mvcc, Instant, Response, Write};

/// What applying one entry needs besides the transaction, borrowed from
/// the node's fields.
pub(super) struct ApplyContext<'a> {
    pub(super) lessor: &'a mut Lessor,
    pub(super) watches: &'a mut WatchRegistry,
    pub(super) now: Instant,
    pub(super) cluster_id: u64,
    pub(super) identity: ResponseHeader,
    /// Leases revoked in the batch (parked keep-alives are answered).
    pub(super) revoked: &'a mut Vec<i64>,
    /// Users, roles and permissions.
    pub(super) auth: &'a mut AuthStore,
    /// The node's metrics counts (live keys move with every change).
    pub(super) counters: &'a mut Counters,
    /// Lease checkpoints reach the backend (the gate, or the cluster
    /// version's capability).
    pub(super) persist_checkpoints: bool,
}

/// Applies one proposal at `index`. The outer error is a storage failure
/// (fatal); the inner one is the client's answer.
pub(super) fn apply_proposal(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    index: u64,
    request: proposal::Request,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    match request {
        write @ (Write::Put(_) | Write::DeleteRange(_) | Write::Txn(_) | Write::Compaction(_)) => {
            apply_kv(txn, meta, write, cx)
        }
        proposal::Request::LeaseGrant(grant) => {
            let id = if grant.id == 0 {
                let lessor = &*cx.lessor;
                lease::choose_id(cx.cluster_id, index, |id| lessor.contains(id))
            } else {
                grant.id
            };
            let granted = cx.lessor.grant(txn, id, grant.ttl, cx.now)?;
            Ok(granted.map(|ttl| {
                Response::LeaseGrant(LeaseGrantResponse {
                    header: Some(ResponseHeader {
                        revision: meta.revision,
                        ..cx.identity
                    }),
                    id,
                    ttl,
                    error: String::new(),
                })
            }))
        }
        proposal::Request::LeaseRevoke(revoke) => apply_revoke(txn, meta, revoke.id, cx),
        proposal::Request::LeaseCheckpoint(request) => {
            for checkpoint in &request.checkpoints {
                cx.lessor
                    .checkpoint(txn, checkpoint, cx.now, cx.persist_checkpoints)?;
            }
            Ok(Err(Error::Stopped))
        }
        proposal::Request::Auth(change) => {
            let Some(change) = change.change else {
                return Ok(Err(Error::Stopped));
            };
            let applied = cx.auth.apply(change, cx.now);
            if applied.is_ok() {
                txn.set_auth(&cx.auth.state())?;
            }
            let header = ResponseHeader {
                revision: meta.revision,
                ..cx.identity
            };
            Ok(applied.map(|r| Response::Auth(r.with_header(header))))
        }
        proposal::Request::MemberUpdate(_)
        | proposal::Request::MemberAttributes(_)
        | proposal::Request::Alarm(_)
        | proposal::Request::ClusterVersionSet(_)
        | proposal::Request::DowngradeInfoSet(_) => {
            // Recorded by the node with the membership or the alarms, never here.
            Ok(Err(Error::Stopped))
        }
    }
}

/// Applies a key-space write, then moves keys between leases and tells the
/// watchers.
fn apply_kv(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    request: Write,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let mut changes = Vec::new();
    let result = mvcc::apply_recording(txn, meta, request, &*cx.lessor, &mut changes);
    if let Err(Error::Storage(e)) = result {
        return Err(e);
    }
    if !changes.is_empty() {
        cx.counters.count_changes(&changes);
        cx.lessor.on_changes(&changes);
        cx.watches
            .on_revision(meta.revision, &changes, &*txn, cx.identity)?;
    }
    Ok(result)
}

/// A revoke: the lease goes, and its keys are deleted in one revision.
fn apply_revoke(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    id: i64,
    cx: &mut ApplyContext<'_>,
) -> Result<Result<Response, Error>, StorageError> {
    let Some(mut keys) = cx.lessor.revoke(txn, id)? else {
        return Ok(Err(Error::LeaseNotFound));
    };
    cx.revoked.push(id);
    if crate::canary::on(crate::canary::Canary::RevokeLeavesKeyBehind) && keys.len() >= 2 {
        // The last key goes at the next revision, on its own.
        let last = keys.pop().into_iter().collect();
        apply_revoke_deletes(txn, meta, id, keys, cx)?;
        keys = last;
    }
    apply_revoke_deletes(txn, meta, id, keys, cx)?;
    Ok(Ok(Response::LeaseRevoke(LeaseRevokeResponse {
        header: Some(ResponseHeader {
            revision: meta.revision,
            ..cx.identity
        }),
    })))
}

/// Deletes `keys`, the keys of revoked lease `id`, in one revision.
fn apply_revoke_deletes(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    id: i64,
    keys: Vec<Vec<u8>>,
    cx: &mut ApplyContext<'_>,
) -> Result<(), StorageError> {
    if !keys.is_empty() {
        let deletes = keys
            .into_iter()
            .map(|key| RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key,
                        ..Default::default()
                    },
                )),
            })
            .collect();
        let txn_request = Write::Txn(TxnRequest {
            compare: Vec::new(),
            success: deletes,
            failure: Vec::new(),
        });
        if let Err(e) = apply_kv(txn, meta, txn_request, cx)? {
            return Err(StorageError::invariant(format_args!(
                "deleting the keys of lease {id:x}: {e}"
            )));
        }
    }
    Ok(())
}

/// Stamps the member's identity and term on an answer's header. mvcc sets
/// the revision each answer must report (its own write's, not the batch's).
pub(super) fn stamp(response: &mut Response, identity: &ResponseHeader) {
    let header = match response {
        Response::Put(r) => &mut r.header,
        Response::DeleteRange(r) => &mut r.header,
        Response::Txn(r) => &mut r.header,
        Response::Compact(r) => &mut r.header,
        Response::Range(r) => &mut r.header,
        Response::Status(r) => &mut r.header,
        Response::LeaseGrant(r) => &mut r.header,
        Response::LeaseRevoke(r) => &mut r.header,
        Response::LeaseKeepAlive(r) => &mut r.header,
        Response::LeaseTimeToLive(r) => &mut r.header,
        Response::LeaseLeases(r) => &mut r.header,
        Response::MemberAdd(r) => &mut r.header,
        Response::MemberRemove(r) => &mut r.header,
        Response::MemberUpdate(r) => &mut r.header,
        Response::MemberPromote(r) => &mut r.header,
        Response::MemberList(r) => &mut r.header,
        Response::MoveLeader(r) => &mut r.header,
        Response::Auth(r) => r.header_mut(),
        Response::Alarm(r) => &mut r.header,
        Response::Downgrade(r) => &mut r.header,
    };
    let header = header.get_or_insert(ResponseHeader {
        revision: identity.revision,
        ..Default::default()
    });
    header.cluster_id = identity.cluster_id;
    header.member_id = identity.member_id;
    header.raft_term = identity.raft_term;
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Applies a batch of committed entries in one backend transaction with
    /// its applied index (and the membership, if it changed), then answers
    /// the clients whose entries they are and releases the reads they
    /// satisfy.
    pub(super) fn apply(&mut self, entries: Vec<Entry>) -> Result<(), StorageError> {
        let Some(last) = entries.last() else {
            return Ok(());
        };
        let last_index = last.index;
        let mut txn = self.kv.write()?;
        let mut meta = self.meta;
        let identity = self.header();
        let mut answers: Vec<(Ticket, Result<Response, Error>)> = Vec::new();
        let mut revoked = Vec::new();
        let mut membership_changed = self.membership_unsaved;
        for entry in &entries {
            assert_eq!(
                entry.index,
                meta.applied_index + 1,
                "entries out of order at {}",
                meta.applied_index + 1
            );
            let (proposal_id, result) = match entry.entry_type {
                EntryType::EntryConfChange => {
                    membership_changed = true;
                    self.apply_conf_change(entry, &meta)
                }
                EntryType::EntryNormal if !entry.data.is_empty() => {
                    // A client's write this member appended is applied as
                    // it was proposed; any other entry is decoded from its
                    // own buffer.
                    let proposal = match self.proposals.take_decoded(entry.index, &entry.data) {
                        Some(proposal) => proposal,
                        None => Proposal::decode(entry.data.clone()).map_err(|e| {
                            StorageError::corrupt(format_args!("log entry {}", entry.index), e)
                        })?,
                    };
                    // Entries the leader proposes itself carry no ID and
                    // no user, and are not checked.
                    let checked = match &proposal.request {
                        Some(request) if proposal.id != 0 => {
                            let who = AuthInfo {
                                user: proposal.user,
                                revision: proposal.auth_revision,
                            };
                            check_at_apply(&self.auth, &self.lessor, request, &who)
                        }
                        _ => Ok(()),
                    };
                    let result = match (checked, proposal.request) {
                        (Err(e), _) => Err(e),
                        (Ok(()), Some(request)) => {
                            membership_changed |= matches!(
                                request,
                                proposal::Request::MemberUpdate(_)
                                    | proposal::Request::MemberAttributes(_)
                                    | proposal::Request::ClusterVersionSet(_)
                                    | proposal::Request::DowngradeInfoSet(_)
                            );
                            self.apply_request(
                                &mut txn,
                                &mut meta,
                                entry.index,
                                request,
                                &mut revoked,
                            )?
                        }
                        (Ok(()), None) => Err(Error::Stopped),
                    };
                    (proposal.id, result)
                }
                // Empty entries (a new leader's first) and unsupported
                // kinds change nothing.
                _ => (0, Err(Error::Stopped)),
            };
            meta.applied_index = entry.index;
            meta.applied_term = entry.term;
            if let Ok(response) = &result {
                self.counters.count_applied(response);
            }
            let result = result.map(|mut response| {
                stamp(
                    &mut response,
                    &ResponseHeader {
                        revision: meta.revision,
                        ..identity
                    },
                );
                response
            });
            self.settle_proposal(entry, proposal_id, result, &mut answers);
        }
        if membership_changed {
            self.save_membership(&mut txn)?;
        }
        txn.set_meta(&meta)?;
        self.alarms.used_bytes = txn.used_bytes()?;
        txn.commit()?;
        self.meta = meta;
        for (ticket, result) in answers {
            self.answer(ticket, result);
        }
        self.watches.flush_events(&mut self.outputs);
        self.answer_parked_renewals(revoked);
        debug_assert_eq!(self.meta.applied_index, last_index);
        self.release_reads();
        self.maybe_compact();
        Ok(())
    }

    /// Writes the membership with the batch being applied.
    fn save_membership(&mut self, txn: &mut K::Write) -> Result<(), StorageError> {
        let membership = Membership {
            conf_state: self.raft.conf_state(),
            members: self.members.list(),
            versions: self.versions.record(),
        };
        txn.set_membership(&membership)?;
        self.membership_unsaved = false;
        self.update_sole_voter();
        Ok(())
    }

    /// Applies one decoded request of a normal entry at `index`.
    fn apply_request(
        &mut self,
        txn: &mut K::Write,
        meta: &mut KvMeta,
        index: u64,
        request: proposal::Request,
        revoked: &mut Vec<i64>,
    ) -> Result<Result<Response, Error>, StorageError> {
        let identity = self.header();
        // Every member refuses alike what the alarms applied so far forbid.
        if let Some(refusal) = self.alarms.set.refusal(&request) {
            return Ok(Err(refusal));
        }
        Ok(match request {
            proposal::Request::Alarm(alarm) => {
                let header = ResponseHeader {
                    revision: meta.revision,
                    ..identity
                };
                return self.apply_alarm(txn, &alarm, header);
            }
            proposal::Request::MemberUpdate(update) => {
                self.members.apply_update(&update);
                Ok(Response::MemberUpdate(MemberUpdateResponse {
                    header: Some(ResponseHeader {
                        revision: meta.revision,
                        ..identity
                    }),
                    members: self.members.list(),
                }))
            }
            proposal::Request::MemberAttributes(attributes) => {
                if self.members.get(attributes.id).is_some() {
                    let version = Version::parse_stored(&attributes.server_version);
                    self.versions.record_member(attributes.id, version);
                }
                self.members.apply_attributes(&attributes);
                Err(Error::Stopped)
            }
            proposal::Request::ClusterVersionSet(set) => {
                self.apply_cluster_version(&set, txn)?;
                Err(Error::Stopped)
            }
            proposal::Request::DowngradeInfoSet(set) => {
                let header = ResponseHeader {
                    revision: meta.revision,
                    ..identity
                };
                self.apply_downgrade(&set, header)
            }
            request => {
                let mut cx = ApplyContext {
                    lessor: &mut self.lessor,
                    watches: &mut self.watches,
                    now: self.now,
                    cluster_id: self.config.cluster_id,
                    identity,
                    revoked,
                    auth: &mut self.auth,
                    counters: &mut self.counters,
                    persist_checkpoints: self.config.lease.checkpoint_persist
                        || self.versions.capable(Capability::LeaseCheckpointPersist),
                };
                apply_proposal(txn, meta, index, request, &mut cx)?
            }
        })
    }

    /// Keep-alives parked on leases the batch revoked learn they are gone.
    fn answer_parked_renewals(&mut self, revoked: Vec<i64>) {
        for lease_id in revoked {
            let header = Some(self.header());
            for ticket in self.parked_renewals.remove(&lease_id).unwrap_or_default() {
                let response = LeaseKeepAliveResponse {
                    header,
                    id: lease_id,
                    ttl: 0,
                };
                self.answer(ticket, Ok(Response::LeaseKeepAlive(response)));
            }
        }
    }

    /// Matches an applied entry to the proposal waiting for it. A proposal
    /// this member appended at this index that is not this entry was lost
    /// to a leader change.
    pub(super) fn settle_proposal(
        &mut self,
        entry: &Entry,
        proposal_id: u64,
        result: Result<Response, Error>,
        answers: &mut Vec<(Ticket, Result<Response, Error>)>,
    ) {
        let settled = self.proposals.settle(entry.index, &entry.data, proposal_id);
        answers.extend(
            settled
                .lost
                .into_iter()
                .map(|ticket| (ticket, Err(Error::LeaderChanged))),
        );
        if let Some(ticket) = settled.ours {
            answers.push((ticket, result));
        }
    }
}
