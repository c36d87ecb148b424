//! The `v3electionpb.Election` service: etcd's leader election, served
//! with etcd 3.4's semantics (`etcdserver/api/v3election`).
//!
//! Design. Each candidate's key is `name/<lease in hex>` under the
//! caller's lease, created by a txn that only succeeds while the key does
//! not exist; the oldest key under `name/` is the leader
//! ([`super::key_queue`]). `Campaign` answers once its key is the oldest;
//! `Proclaim` and `Resign` act only while the key still has the create
//! revision the `LeaderKey` names; `Observe` streams the leader's key each
//! time it changes, following one key at a time with a watch. Every step
//! is a KV call made as the caller ([`Caller`]), so auth checks them as
//! the client's own, and errors read as etcd's (`Unknown`, with etcd's
//! text).

use std::collections::VecDeque;

use futures_util::stream;
use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::{
    request_op, response_op, DeleteRangeRequest, PutRequest, RangeRequest, ResponseHeader,
    TxnRequest, WatchCreateRequest,
};
use oxetcd_proto::mvccpb::event::EventType;
use oxetcd_proto::mvccpb::KeyValue;
use oxetcd_proto::v3electionpb::election_server::Election;
use oxetcd_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use tonic::codegen::BoxStream;
use tonic::Status;

use super::caller::{recipe_error, Caller};
use super::credentials::Gate;
use super::key_queue::{created_at, op, owner_range, prefix_end, queue_key, wait_deletes, Abandon};
use super::key_watch::KeyWatch;
use crate::driver::Handle;

/// etcd's answer to `Proclaim` or `Resign` without a `leader`.
const MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";
/// etcd's answer to `Proclaim` from a key that no longer leads.
const NOT_LEADER: &str = "election: not leader";
/// etcd's answer to `Leader` when no candidate is left.
const NO_LEADER: &str = "election: no leader";

/// Serves `v3electionpb.Election` through the node.
pub struct ElectionService<K: KvStore> {
    handle: Handle<K>,
    gate: Gate,
}

impl<K: KvStore> ElectionService<K> {
    /// A service sending its requests to `handle`.
    pub fn new(handle: Handle<K>, gate: Gate) -> Self {
        Self { handle, gate }
    }

    fn caller<T>(&self, request: &tonic::Request<T>) -> Caller<K> {
        Caller::new(self.handle.clone(), self.gate.credentials(request))
    }
}

#[tonic::async_trait]
impl<K: KvStore> Election for ElectionService<K> {
    type ObserveStream = BoxStream<LeaderResponse>;

    async fn campaign(
        &self,
        request: tonic::Request<CampaignRequest>,
    ) -> Result<tonic::Response<CampaignResponse>, Status> {
        let caller = self.caller(&request);
        let CampaignRequest { name, lease, value } = request.into_inner();
        let lease = caller.session_lease(lease).await?;
        let prefix = election_prefix(&name);
        let key = queue_key(&prefix, lease);
        let created = caller
            .txn(TxnRequest {
                compare: vec![created_at(&key, 0)],
                success: vec![op(request_op::Request::RequestPut(PutRequest {
                    key: key.clone(),
                    value: value.clone(),
                    lease,
                    ..Default::default()
                }))],
                failure: vec![op(request_op::Request::RequestRange(RangeRequest {
                    key: key.clone(),
                    ..Default::default()
                }))],
            })
            .await?;
        let header = created.header;
        let mut rev = header.as_ref().map_or(0, |h| h.revision);
        if !created.succeeded {
            // The lease already campaigns here: take its key over, with
            // the new value.
            let existing = first_range_kv(created.responses.first())
                .ok_or_else(|| recipe_error(NOT_LEADER))?;
            rev = existing.create_revision;
            if existing.value != value {
                if let Err(e) = proclaim(&caller, &key, rev, lease, value).await {
                    let _ = resign(&caller, &key, rev).await;
                    return Err(e);
                }
            }
        }
        let mut abandon = Abandon::new(&caller, key.clone(), Some(rev));
        let waited = wait_deletes(&caller, &prefix, rev - 1).await;
        // Only a call dropped while waiting gives its key up; an error
        // leaves it, as etcd's does.
        abandon.disarm();
        waited?;
        Ok(tonic::Response::new(CampaignResponse {
            header,
            leader: Some(LeaderKey {
                name,
                key,
                rev,
                lease,
            }),
        }))
    }

    async fn proclaim(
        &self,
        request: tonic::Request<ProclaimRequest>,
    ) -> Result<tonic::Response<ProclaimResponse>, Status> {
        let caller = self.caller(&request);
        let ProclaimRequest { leader, value } = request.into_inner();
        let leader = leader.ok_or_else(|| recipe_error(MISSING_LEADER_KEY))?;
        let lease = caller.session_lease(leader.lease).await?;
        let header = proclaim(&caller, &leader.key, leader.rev, lease, value).await?;
        Ok(tonic::Response::new(ProclaimResponse { header }))
    }

    async fn leader(
        &self,
        request: tonic::Request<LeaderRequest>,
    ) -> Result<tonic::Response<LeaderResponse>, Status> {
        let caller = self.caller(&request);
        let prefix = election_prefix(&request.into_inner().name);
        let owner = caller.range(owner_range(&prefix)).await?;
        let kv = owner.kvs.into_iter().next();
        if kv.is_none() {
            return Err(recipe_error(NO_LEADER));
        }
        Ok(tonic::Response::new(LeaderResponse {
            header: owner.header,
            kv,
        }))
    }

    async fn observe(
        &self,
        request: tonic::Request<LeaderRequest>,
    ) -> Result<tonic::Response<Self::ObserveStream>, Status> {
        let caller = self.caller(&request);
        let prefix = election_prefix(&request.into_inner().name);
        let observer = Observer {
            caller,
            prefix,
            ready: VecDeque::new(),
            following: None,
        };
        let responses = stream::unfold(observer, |mut observer| async move {
            let next = observer.next().await?;
            Some((Ok(next), observer))
        });
        Ok(tonic::Response::new(Box::pin(responses)))
    }

    async fn resign(
        &self,
        request: tonic::Request<ResignRequest>,
    ) -> Result<tonic::Response<ResignResponse>, Status> {
        let caller = self.caller(&request);
        let leader = request
            .into_inner()
            .leader
            .ok_or_else(|| recipe_error(MISSING_LEADER_KEY))?;
        // etcd opens a session here too: a lease is granted for lease 0.
        caller.session_lease(leader.lease).await?;
        let header = resign(&caller, &leader.key, leader.rev).await?;
        Ok(tonic::Response::new(ResignResponse { header }))
    }
}

/// The prefix an election's candidates queue under.
fn election_prefix(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// The first key of a txn's range answer.
fn first_range_kv(response: Option<&oxetcd_proto::etcdserverpb::ResponseOp>) -> Option<KeyValue> {
    match response?.response.as_ref()? {
        response_op::Response::ResponseRange(range) => range.kvs.first().cloned(),
        _ => None,
    }
}

/// Puts `value` on `key` under `lease` if the key still has create
/// revision `rev`; `election: not leader` otherwise.
async fn proclaim<K: KvStore>(
    caller: &Caller<K>,
    key: &[u8],
    rev: i64,
    lease: i64,
    value: Vec<u8>,
) -> Result<Option<ResponseHeader>, Status> {
    let response = caller
        .txn(TxnRequest {
            compare: vec![created_at(key, rev)],
            success: vec![op(request_op::Request::RequestPut(PutRequest {
                key: key.to_vec(),
                value,
                lease,
                ..Default::default()
            }))],
            failure: Vec::new(),
        })
        .await?;
    if !response.succeeded {
        return Err(recipe_error(NOT_LEADER));
    }
    Ok(response.header)
}

/// Deletes `key` if it still has create revision `rev` (no error if not).
async fn resign<K: KvStore>(
    caller: &Caller<K>,
    key: &[u8],
    rev: i64,
) -> Result<Option<ResponseHeader>, Status> {
    let response = caller
        .txn(TxnRequest {
            compare: vec![created_at(key, rev)],
            success: vec![op(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: key.to_vec(),
                    ..Default::default()
                },
            ))],
            failure: Vec::new(),
        })
        .await?;
    Ok(response.header)
}

/// One `Observe` call: finds the leader, then follows its key until it is
/// deleted, then finds the next (etcd's `Election.Observe`). A failed
/// step ends the stream without an error, as etcd's does.
struct Observer<K: KvStore> {
    caller: Caller<K>,
    prefix: Vec<u8>,
    /// Answers taken from one watch response, not yet sent.
    ready: VecDeque<LeaderResponse>,
    /// The watch on the current leader's key, from just after the
    /// revision last sent.
    following: Option<KeyWatch<K>>,
}

impl<K: KvStore> Observer<K> {
    async fn next(&mut self) -> Option<LeaderResponse> {
        loop {
            if let Some(ready) = self.ready.pop_front() {
                return Some(ready);
            }
            let Some(watch) = self.following.as_mut() else {
                let (header, kv) = self.find_leader().await.ok()?;
                let watch = KeyWatch::open(
                    &self.caller,
                    WatchCreateRequest {
                        key: kv.key.clone(),
                        start_revision: header.revision + 1,
                        ..Default::default()
                    },
                )
                .ok()?;
                self.following = Some(watch);
                return Some(LeaderResponse {
                    header: Some(header),
                    kv: Some(kv),
                });
            };
            let response = watch.next().await.ok()?;
            for event in response.events {
                if event.r#type == EventType::Delete as i32 {
                    self.following = None;
                    break;
                }
                self.ready.push_back(LeaderResponse {
                    header: response.header,
                    kv: event.kv,
                });
            }
        }
    }

    /// The current leader, or the first candidate put after there was none
    /// (its header's revision is the put's).
    async fn find_leader(&self) -> Result<(ResponseHeader, KeyValue), Status> {
        let owner = self.caller.range(owner_range(&self.prefix)).await?;
        let header = owner.header.unwrap_or_default();
        if let Some(kv) = owner.kvs.into_iter().next() {
            return Ok((header, kv));
        }
        let mut watch = KeyWatch::open(
            &self.caller,
            WatchCreateRequest {
                key: self.prefix.clone(),
                range_end: prefix_end(&self.prefix),
                start_revision: header.revision,
                ..Default::default()
            },
        )?;
        loop {
            let response = watch.next().await?;
            let put = response
                .events
                .into_iter()
                .find(|e| e.r#type == EventType::Put as i32)
                .and_then(|e| e.kv);
            if let Some(kv) = put {
                let mut header = response.header.unwrap_or_default();
                header.revision = kv.mod_revision;
                return Ok((header, kv));
            }
        }
    }
}
