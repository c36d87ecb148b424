//! A model of etcd's MVCC key space: every version of every key by
//! revision, so that the state at any revision can be read back, and the
//! events each revision made, as a watch reports them.
//!
//! Design. Writes are applied one revision at a time, as etcd applies
//! them: a put always makes a new revision; a delete that found nothing
//! and a transaction whose chosen branch changed nothing do not. Within a
//! transaction the operations run in order at the same revision and later
//! ones see earlier ones, and the compares are decided on the state before
//! it. What a write answers is computed beside it ([`Applied`]) so the
//! checker can compare it with what the server answered.
//!
//! A compaction changes no key and makes no revision; it only moves the
//! compacted revision, below which etcd refuses reads (and at or below
//! which it refuses further compactions) with "required revision has been
//! compacted" ([`Model::refusal`]).
//!
//! Leases. A grant makes no revision; it only makes the lease exist. A put
//! naming a lease that does not exist changes nothing (etcd refuses it
//! with "etcdserver: requested lease not found"); one naming a lease that
//! does attaches the key to it, and any later write of the key without it
//! detaches it. A revoke deletes every key still attached to the lease in
//! one revision, the revoke's own, or makes none when no key is attached;
//! the lease is gone either way. An expiry is a revoke the leader proposes
//! for itself: the recorder writes it as a revoke nobody answered (see
//! [`crate::traffic::lease_expiry`]). Puts naming a lease inside a txn are
//! not modelled.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use oxetcd_proto::etcdserverpb::{
    compare, request_op, response_op, CompactionRequest, CompactionResponse, Compare,
    DeleteRangeRequest, DeleteRangeResponse, LeaseGrantRequest, LeaseGrantResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    RequestOp, ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use oxetcd_proto::mvccpb::{event::EventType, Event, KeyValue};

/// A write or read the model runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    Compaction(CompactionRequest),
    LeaseGrant(LeaseGrantRequest),
    LeaseRevoke(LeaseRevokeRequest),
}

/// What a request answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compaction(CompactionResponse),
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
}

/// Why etcd refuses a request outright, whatever the key space holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// "etcdserver: mvcc: required revision has been compacted".
    Compacted,
    /// "etcdserver: mvcc: required revision is a future revision".
    FutureRevision,
    /// "etcdserver: requested lease not found".
    LeaseNotFound,
}

impl Response {
    /// The header's revision (0 without a header).
    pub fn revision(&self) -> i64 {
        let header = match self {
            Self::Range(r) => r.header.as_ref(),
            Self::Put(r) => r.header.as_ref(),
            Self::DeleteRange(r) => r.header.as_ref(),
            Self::Txn(r) => r.header.as_ref(),
            Self::Compaction(r) => r.header.as_ref(),
            Self::LeaseGrant(r) => r.header.as_ref(),
            Self::LeaseRevoke(r) => r.header.as_ref(),
        };
        header.map_or(0, |h| h.revision)
    }

    /// Whether the server's answer shows that the write changed the key
    /// space, so made a revision of its own. A revoke's answer does not
    /// show whether it deleted keys: the checker decides that by replay.
    pub fn changed(&self) -> bool {
        match self {
            Self::Range(_) | Self::Compaction(_) | Self::LeaseGrant(_) | Self::LeaseRevoke(_) => {
                false
            }
            Self::Put(_) => true,
            Self::DeleteRange(r) => r.deleted > 0,
            Self::Txn(r) => ops_changed(&r.responses),
        }
    }
}

fn ops_changed(ops: &[ResponseOp]) -> bool {
    ops.iter().any(|op| match &op.response {
        Some(response_op::Response::ResponsePut(_)) => true,
        Some(response_op::Response::ResponseDeleteRange(r)) => r.deleted > 0,
        Some(response_op::Response::ResponseTxn(t)) => ops_changed(&t.responses),
        _ => false,
    })
}

/// One stored version: the key's value from `revision` on, or its
/// deletion.
#[derive(Clone, Debug, PartialEq)]
struct Version {
    revision: i64,
    kv: Option<KeyValue>,
}

/// The key space through every revision.
#[derive(Clone, Debug, Default)]
pub struct Model {
    revision: i64,
    keys: BTreeMap<Vec<u8>, Vec<Version>>,
    /// The events of each revision, in the order the writes made them.
    events: BTreeMap<i64, Vec<Event>>,
    /// The revision of the last compaction, if any.
    compacted: Option<i64>,
    /// Revisions a compaction was made at, or may have been (asked,
    /// never answered): a watch event at one of them may lack `prev_kv`.
    compactions: BTreeSet<i64>,
    /// The leases that exist (or, granted without an answer, may).
    leases: BTreeSet<i64>,
}

/// What applying a write did: the answer etcd would give, and whether it
/// made a revision.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    pub response: Response,
    pub changed: bool,
}

impl Model {
    /// An empty key space at `revision` (a fresh etcd is at 1).
    pub fn new(revision: i64) -> Self {
        Self {
            revision,
            ..Self::default()
        }
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The revision of the last compaction, if any.
    pub fn compacted(&self) -> Option<i64> {
        self.compacted
    }

    /// Whether a compaction was made at `revision`, or may have been.
    /// etcd reads a watch event's `prev_kv` at the revision before the
    /// event, refused below the compaction: an event at the compaction
    /// revision itself may come without it.
    pub fn may_have_compacted_at(&self, revision: i64) -> bool {
        self.compactions.contains(&revision)
    }

    /// Notes a compaction at `revision` that may have been made (asked,
    /// never answered); it changes nothing else.
    pub fn note_possible_compaction(&mut self, revision: i64) {
        self.compactions.insert(revision);
    }

    /// Notes a lease that may have been granted (asked, never answered):
    /// it exists from the start, so that whatever was attached to it is
    /// explained; a revoke of it changes nothing unless keys are attached.
    pub fn note_possible_lease(&mut self, id: i64) {
        self.leases.insert(id);
    }

    /// Whether lease `id` exists now.
    pub fn lease_exists(&self, id: i64) -> bool {
        self.leases.contains(&id)
    }

    /// The keys attached to lease `id` at `revision`, in key order.
    pub fn lease_keys(&self, id: i64, revision: i64) -> Vec<Vec<u8>> {
        self.keys
            .keys()
            .filter(|key| self.get_at(key, revision).is_some_and(|kv| kv.lease == id))
            .cloned()
            .collect()
    }

    /// Why etcd refuses `request` now, if it does: a read at a revision
    /// below the last compaction or above the current revision, a
    /// compaction at or below the last one or above the current revision,
    /// a revoke of a lease that does not exist, a put naming one.
    /// (Reads inside a txn are not modelled here.)
    pub fn refusal(&self, request: &Request) -> Option<Refusal> {
        let compacted = self.compacted;
        match request {
            Request::LeaseRevoke(r) if !self.leases.contains(&r.id) => Some(Refusal::LeaseNotFound),
            Request::Put(r) if r.lease != 0 && !self.leases.contains(&r.lease) => {
                Some(Refusal::LeaseNotFound)
            }
            Request::Range(r) if r.revision > self.revision => Some(Refusal::FutureRevision),
            Request::Range(r) if r.revision > 0 && compacted.is_some_and(|c| r.revision < c) => {
                Some(Refusal::Compacted)
            }
            Request::Compaction(r) => self.compaction_refusal(r.revision),
            _ => None,
        }
    }

    fn compaction_refusal(&self, revision: i64) -> Option<Refusal> {
        if self.compacted.is_some_and(|c| revision <= c) {
            Some(Refusal::Compacted)
        } else if revision > self.revision {
            Some(Refusal::FutureRevision)
        } else {
            None
        }
    }

    /// A digest of every version of every key and the revision: equal
    /// key spaces through all revisions give equal digests.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.revision.hash(&mut hasher);
        self.compacted.hash(&mut hasher);
        self.leases.hash(&mut hasher);
        for (key, versions) in &self.keys {
            key.hash(&mut hasher);
            for version in versions {
                version.revision.hash(&mut hasher);
                match &version.kv {
                    Some(kv) => {
                        (kv.create_revision, kv.mod_revision, kv.version, kv.lease)
                            .hash(&mut hasher);
                        kv.value.hash(&mut hasher);
                    }
                    None => 0u8.hash(&mut hasher),
                }
            }
        }
        hasher.finish()
    }

    /// The events revision `revision` made (none for a revision the model
    /// has not reached).
    pub fn events_at(&self, revision: i64) -> &[Event] {
        self.events.get(&revision).map_or(&[], Vec::as_slice)
    }

    /// Events on keys in `[key, range_end)` (etcd's range rules) from
    /// `from` to `to`, inclusive, in order.
    pub fn events_in(&self, key: &[u8], range_end: &[u8], from: i64, to: i64) -> Vec<Event> {
        let mut out = Vec::new();
        for (_, events) in self.events.range(from.max(0)..=to) {
            for event in events {
                let event_key = event.kv.as_ref().map_or(&[][..], |kv| kv.key.as_slice());
                if in_range(event_key, key, range_end) {
                    out.push(event.clone());
                }
            }
        }
        out
    }

    /// The key's value at `revision`, `None` if it did not exist then.
    pub fn get_at(&self, key: &[u8], revision: i64) -> Option<&KeyValue> {
        let versions = self.keys.get(key)?;
        let at = versions.partition_point(|v| v.revision <= revision);
        versions[..at].last().and_then(|v| v.kv.as_ref())
    }

    /// Live keys in `[key, range_end)` at `revision`, in key order.
    pub fn range_at(&self, key: &[u8], range_end: &[u8], revision: i64) -> Vec<KeyValue> {
        let keys: Box<dyn Iterator<Item = &Vec<u8>>> = match range_end {
            [] => Box::new(self.keys.get_key_value(key).map(|(k, _)| k).into_iter()),
            [0] => Box::new(
                self.keys
                    .range::<[u8], _>((Bound::Included(key), Bound::Unbounded))
                    .map(|(k, _)| k),
            ),
            end => Box::new(
                self.keys
                    .range::<[u8], _>((Bound::Included(key), Bound::Excluded(end)))
                    .map(|(k, _)| k),
            ),
        };
        keys.filter_map(|k| self.get_at(k, revision).cloned())
            .collect()
    }

    /// What a range answers at `revision` (its own, or the request's):
    /// keys in order, limit, count, `more`, keys-only and count-only.
    /// Sorting and the revision filters are not modelled: such a request
    /// is answered with every match, and the checker compares sets.
    pub fn range(&self, request: &RangeRequest) -> RangeResponse {
        let at = if request.revision > 0 {
            request.revision
        } else {
            self.revision
        };
        let mut kvs = self.range_at(&request.key, &request.range_end, at);
        let count = kvs.len() as i64;
        if request.limit > 0 && kvs.len() as i64 > request.limit {
            kvs.truncate(request.limit as usize);
        }
        if request.count_only {
            kvs.clear();
        }
        if request.keys_only {
            for kv in &mut kvs {
                kv.value.clear();
            }
        }
        RangeResponse {
            header: Some(self.header()),
            more: !request.count_only && (kvs.len() as i64) < count,
            count,
            kvs,
        }
    }

    fn header(&self) -> ResponseHeader {
        ResponseHeader {
            revision: self.revision,
            ..Default::default()
        }
    }

    /// Applies a write (a range changes nothing and is answered as one; a
    /// compaction moves the compacted revision unless it is refused, see
    /// [`Model::refusal`]; so does a grant, which makes its lease exist; a
    /// put or revoke of a lease that does not exist changes nothing).
    pub fn apply(&mut self, request: &Request) -> Applied {
        let next = self.revision + 1;
        let mut write = Write {
            model: self,
            revision: next,
            changed: false,
        };
        let mut response = match request {
            Request::Range(r) => Response::Range(write.range(r)),
            Request::Put(r) => Response::Put(write.put(r)),
            Request::DeleteRange(r) => Response::DeleteRange(write.delete(r)),
            Request::Txn(r) => Response::Txn(write.txn(r)),
            Request::Compaction(r) => Response::Compaction(write.compact(r)),
            Request::LeaseGrant(r) => Response::LeaseGrant(write.grant(r)),
            Request::LeaseRevoke(r) => Response::LeaseRevoke(write.revoke(r)),
        };
        let changed = write.changed;
        if changed {
            self.revision = next;
        }
        stamp(&mut response, self.revision);
        Applied { response, changed }
    }

    /// Whether every compare of a txn holds at the current revision.
    pub fn compares_hold(&self, compares: &[Compare]) -> bool {
        compares
            .iter()
            .all(|c| self.compare_holds(c, self.revision))
    }

    fn compare_holds(&self, c: &Compare, revision: i64) -> bool {
        let kvs = self.range_at(&c.key, &c.range_end, revision);
        let target = compare::CompareTarget::try_from(c.target).ok();
        if kvs.is_empty() {
            // etcd: a missing key never matches a value compare; the
            // numbers of a missing key are all 0.
            if target == Some(compare::CompareTarget::Value) {
                return false;
            }
            return compare_kv(c, &KeyValue::default());
        }
        kvs.iter().all(|kv| compare_kv(c, kv))
    }
}

/// Whether `event_key` is in etcd's range `[key, range_end)`.
pub fn in_range(event_key: &[u8], key: &[u8], range_end: &[u8]) -> bool {
    match range_end {
        [] => event_key == key,
        [0] => event_key >= key,
        end => event_key >= key && event_key < end,
    }
}

fn compare_kv(c: &Compare, kv: &KeyValue) -> bool {
    use std::cmp::Ordering;
    let ordering = match &c.target_union {
        Some(compare::TargetUnion::Version(v)) => kv.version.cmp(v),
        Some(compare::TargetUnion::CreateRevision(v)) => kv.create_revision.cmp(v),
        Some(compare::TargetUnion::ModRevision(v)) => kv.mod_revision.cmp(v),
        Some(compare::TargetUnion::Value(v)) => kv.value.as_slice().cmp(v.as_slice()),
        Some(compare::TargetUnion::Lease(v)) => kv.lease.cmp(v),
        None => kv.version.cmp(&0),
    };
    match compare::CompareResult::try_from(c.result) {
        Ok(compare::CompareResult::Equal) => ordering == Ordering::Equal,
        Ok(compare::CompareResult::Greater) => ordering == Ordering::Greater,
        Ok(compare::CompareResult::Less) => ordering == Ordering::Less,
        Ok(compare::CompareResult::NotEqual) => ordering != Ordering::Equal,
        Err(_) => false,
    }
}

/// Sets the header revision of an answer and of the answers nested in it.
fn stamp(response: &mut Response, revision: i64) {
    let header = Some(ResponseHeader {
        revision,
        ..Default::default()
    });
    match response {
        Response::Range(r) => r.header = header,
        Response::Put(r) => r.header = header,
        Response::DeleteRange(r) => r.header = header,
        Response::Txn(r) => {
            r.header = header;
            stamp_ops(&mut r.responses, revision);
        }
        Response::Compaction(r) => r.header = header,
        Response::LeaseGrant(r) => r.header = header,
        Response::LeaseRevoke(r) => r.header = header,
    }
}

fn stamp_ops(ops: &mut [ResponseOp], revision: i64) {
    let header = Some(ResponseHeader {
        revision,
        ..Default::default()
    });
    for op in ops {
        match &mut op.response {
            Some(response_op::Response::ResponseRange(r)) => r.header = header,
            Some(response_op::Response::ResponsePut(r)) => r.header = header,
            Some(response_op::Response::ResponseDeleteRange(r)) => r.header = header,
            Some(response_op::Response::ResponseTxn(r)) => {
                r.header = header;
                stamp_ops(&mut r.responses, revision);
            }
            None => {}
        }
    }
}

/// One write being applied at `revision`.
struct Write<'a> {
    model: &'a mut Model,
    revision: i64,
    changed: bool,
}

impl Write<'_> {
    /// The state this write sees: its own earlier operations included.
    fn current(&self, key: &[u8]) -> Option<KeyValue> {
        self.model.get_at(key, self.revision).cloned()
    }

    fn record(&mut self, key: &[u8], kv: Option<KeyValue>, prev: Option<KeyValue>) {
        let versions = self.model.keys.entry(key.to_vec()).or_default();
        match versions.last_mut() {
            Some(last) if last.revision == self.revision => last.kv = kv.clone(),
            _ => versions.push(Version {
                revision: self.revision,
                kv: kv.clone(),
            }),
        }
        let event = match kv {
            Some(kv) => Event {
                r#type: EventType::Put as i32,
                kv: Some(kv),
                prev_kv: prev,
            },
            None => Event {
                r#type: EventType::Delete as i32,
                kv: Some(KeyValue {
                    key: key.to_vec(),
                    mod_revision: self.revision,
                    ..Default::default()
                }),
                prev_kv: prev,
            },
        };
        self.model
            .events
            .entry(self.revision)
            .or_default()
            .push(event);
        self.changed = true;
    }

    fn put(&mut self, r: &PutRequest) -> PutResponse {
        let prev = self.current(&r.key);
        if r.lease != 0 && !self.model.leases.contains(&r.lease) {
            // Refused: "requested lease not found".
            return PutResponse::default();
        }
        let kv = KeyValue {
            key: r.key.clone(),
            create_revision: prev.as_ref().map_or(self.revision, |p| p.create_revision),
            mod_revision: self.revision,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value: if r.ignore_value {
                prev.as_ref().map(|p| p.value.clone()).unwrap_or_default()
            } else {
                r.value.clone()
            },
            lease: if r.ignore_lease {
                prev.as_ref().map_or(0, |p| p.lease)
            } else {
                r.lease
            },
        };
        self.record(&r.key, Some(kv), prev.clone());
        PutResponse {
            header: None,
            prev_kv: if r.prev_kv { prev } else { None },
        }
    }

    fn delete(&mut self, r: &DeleteRangeRequest) -> DeleteRangeResponse {
        let gone = self.model.range_at(&r.key, &r.range_end, self.revision);
        for kv in &gone {
            self.record(&kv.key, None, Some(kv.clone()));
        }
        DeleteRangeResponse {
            header: None,
            deleted: gone.len() as i64,
            prev_kvs: if r.prev_kv { gone } else { Vec::new() },
        }
    }

    fn range(&self, r: &RangeRequest) -> RangeResponse {
        // Inside a txn a range reads the txn's own earlier writes.
        let mut at = r.clone();
        if at.revision == 0 {
            at.revision = self.revision;
        }
        self.model.range(&at)
    }

    /// A compaction moves the compacted revision, unless etcd refuses it.
    fn compact(&mut self, r: &CompactionRequest) -> CompactionResponse {
        if self.model.compaction_refusal(r.revision).is_none() {
            self.model.compacted = Some(r.revision);
            self.model.compactions.insert(r.revision);
        }
        CompactionResponse { header: None }
    }

    /// A grant makes its lease exist (etcd refuses an ID in use).
    fn grant(&mut self, r: &LeaseGrantRequest) -> LeaseGrantResponse {
        self.model.leases.insert(r.id);
        LeaseGrantResponse {
            id: r.id,
            ttl: r.ttl,
            ..Default::default()
        }
    }

    /// A revoke deletes every key attached to the lease at this one
    /// revision; the lease is gone.
    fn revoke(&mut self, r: &LeaseRevokeRequest) -> LeaseRevokeResponse {
        if self.model.leases.remove(&r.id) {
            for key in self.model.lease_keys(r.id, self.revision) {
                let prev = self.current(&key);
                self.record(&key, None, prev);
            }
        }
        LeaseRevokeResponse::default()
    }

    fn txn(&mut self, r: &TxnRequest) -> TxnResponse {
        // Every compare, a nested txn's too, is decided on the state
        // before the txn, as etcd decides them all before any operation.
        let before = self.revision - 1;
        let succeeded = r
            .compare
            .iter()
            .all(|c| self.model.compare_holds(c, before));
        let ops = if succeeded { &r.success } else { &r.failure };
        let responses = ops.iter().map(|op| self.op(op)).collect();
        TxnResponse {
            header: None,
            succeeded,
            responses,
        }
    }

    fn op(&mut self, op: &RequestOp) -> ResponseOp {
        let response = match &op.request {
            Some(request_op::Request::RequestRange(r)) => {
                Some(response_op::Response::ResponseRange(self.range(r)))
            }
            Some(request_op::Request::RequestPut(r)) => {
                Some(response_op::Response::ResponsePut(self.put(r)))
            }
            Some(request_op::Request::RequestDeleteRange(r)) => {
                Some(response_op::Response::ResponseDeleteRange(self.delete(r)))
            }
            Some(request_op::Request::RequestTxn(r)) => {
                Some(response_op::Response::ResponseTxn(self.txn(r)))
            }
            None => None,
        };
        ResponseOp { response }
    }
}
