//! The node: one member's consensus, apply and request bookkeeping.
//!
//! Design. A client write becomes a [`Proposal`] in a log entry appended to
//! the in-memory log; entries leave as one `Output::Persist` at a time, so
//! every write that arrives while an fsync is in flight rides the next one
//! (group commit). When the runtime answers `Input::Persisted`, the entries
//! count toward the commit quorum; committed entries are applied to the
//! backend in one transaction that also records the applied index, and only
//! then are the waiting clients answered. A range waits until everything
//! committed when it arrived is applied (the read index), then is handed
//! back to the runtime to run on a read snapshot, so reads never queue behind
//! the apply step.
//!
//! Consensus is the single-voter case of Raft: on start the member begins a
//! new term and appends an empty entry, whose commit also commits whatever
//! the log held before the restart. This module never reads the clock and
//! never touches storage except through the traits in [`crate::storage`].

use std::collections::VecDeque;

use bytes::Bytes;
use hashbrown::HashMap;
use prost::Message;
use tracing::{debug, info};

use oxetcd_proto::eraftpb::{Entry, EntryType, HardState};
use oxetcd_proto::etcdserverpb::{RangeRequest, ResponseHeader, StatusResponse};
use oxetcd_proto::oxetcdpb::{proposal, Proposal};

use crate::error::Error;
use crate::mvcc;
use crate::storage::{KvMeta, KvRead, KvStore, KvWrite, LogStore, StorageError};
use crate::{Instant, Request, Response};

/// Identifies a client request; chosen by the runtime, echoed in `Respond`.
pub type RequestId = u64;

/// Proposals allowed between the applied index and the last index before
/// new writes are refused with `etcdserver: too many requests`: etcd's gap
/// between commit and apply.
const UNAPPLIED_ENTRIES_MAX: u64 = 5_000;

/// Entries applied in one backend transaction at most, so one apply step
/// stays short and responses flow while a long backlog replays.
const APPLY_BATCH_MAX: usize = 1_024;

/// Static configuration of a node.
#[derive(Clone, Debug)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID.
    pub cluster_id: u64,
    /// Proposals larger than this (encoded) are refused (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// Limits on request shape.
    pub limits: crate::mvcc::Limits,
    /// Seed of the node's RNG (election jitter); same seed, same behaviour.
    pub rng_seed: u64,
}

impl Config {
    /// A single-member node named `name` with etcd's default peer URL and
    /// cluster token, so its IDs match a default etcd's.
    pub fn single(name: &str) -> Self {
        let member_id = crate::ids::member_id(
            &["http://localhost:2380"],
            crate::ids::DEFAULT_CLUSTER_TOKEN,
        );
        Self {
            name: name.to_owned(),
            member_id,
            cluster_id: crate::ids::cluster_id(&[member_id]),
            max_request_bytes: 1_572_864,
            limits: crate::mvcc::Limits::default(),
            rng_seed: member_id,
        }
    }
}

/// An event fed to the node.
#[derive(Clone, Debug)]
pub enum Input {
    /// A client request. Every request is answered exactly once, by
    /// `Output::Respond` or (for a range) `Output::Read`.
    Client(RequestId, Request),
    /// The runtime finished the oldest outstanding `Output::Persist`; `index`
    /// is the index of its last entry (0 if it had none). Each `Persist` is
    /// answered once, in order.
    Persisted {
        /// Last entry index of the persisted batch.
        index: u64,
    },
}

/// Something the node wants done.
#[derive(Clone, Debug)]
pub enum Output {
    /// Make these entries and this hard state durable, then answer
    /// `Input::Persisted`.
    Persist {
        /// Entries to append, in index order.
        entries: Vec<Entry>,
        /// Hard state to store, if it changed.
        hard_state: Option<HardState>,
    },
    /// The answer to a client request.
    Respond(RequestId, Result<Response, Error>),
    /// A range may now run: everything it must observe is applied. The
    /// runtime runs [`crate::mvcc::range`] on a fresh read snapshot and sets
    /// `header.revision` to the snapshot's revision.
    Read {
        /// The request being answered.
        id: RequestId,
        /// The range to run.
        request: RangeRequest,
        /// Header for the answer, revision to be filled in.
        header: ResponseHeader,
    },
    /// Storage failed. The node is poisoned and answers nothing more; the
    /// runtime must stop the process (a failed fsync is never retried).
    Fatal(StorageError),
}

/// A range waiting for the apply step to reach its read index.
#[derive(Debug)]
struct PendingRead {
    read_index: u64,
    id: RequestId,
    request: RangeRequest,
}

/// One member of an oxetcd cluster, as a state machine.
pub struct Node<L: LogStore, K: KvStore> {
    config: Config,
    kv: K,
    _log: std::marker::PhantomData<L>,
    /// Term, vote and commit as last handed out for persisting.
    hard_state: HardState,
    /// The hard state changed since the last `Persist`.
    hard_state_dirty: bool,
    /// Entries after the applied index, in index order.
    entries: VecDeque<Entry>,
    /// Index of the last entry handed out in a `Persist`.
    persist_sent: u64,
    /// Index of the last entry known durable.
    persisted: u64,
    /// Last-entry indexes of the outstanding `Persist`s, oldest first.
    persist_inflight: VecDeque<u64>,
    /// Index of the empty entry this leader appended when its term began:
    /// until it is applied, the leader does not know everything committed
    /// before it, so linearizable reads wait for it.
    term_start_index: u64,
    /// The backend's meta as of the last apply.
    meta: KvMeta,
    /// Client requests waiting for their entry to apply, by entry index.
    proposals: HashMap<u64, RequestId>,
    /// Ranges waiting for their read index, in arrival order (so read
    /// indexes are non-decreasing).
    reads: VecDeque<PendingRead>,
    outputs: VecDeque<Output>,
    /// Set after a storage error: nothing more is done.
    poisoned: bool,
}

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// Starts a node on what `log` and `kv` hold, replaying log entries the
    /// backend has not applied yet.
    pub fn new(config: Config, log: L, kv: K, now: Instant) -> Result<Self, Error> {
        let _ = now;
        let state = log.state()?;
        let meta = kv.read()?.meta()?;
        let meta = KvMeta {
            revision: meta.revision.max(1),
            ..meta
        };
        if meta.applied_index > state.last_index {
            return Err(Error::Storage(StorageError::new(format!(
                "backend applied index {} is past the last log index {}",
                meta.applied_index, state.last_index
            ))));
        }
        if state.first_index > meta.applied_index + 1 {
            return Err(Error::Storage(StorageError::new(format!(
                "log starts at {} but the backend has applied only up to {}",
                state.first_index, meta.applied_index
            ))));
        }
        let replay = log.entries(meta.applied_index + 1, state.last_index + 1)?;
        let mut hard_state = state.hard_state.clone();
        hard_state.commit = hard_state.commit.max(meta.applied_index);
        let mut node = Self {
            config,
            kv,
            _log: std::marker::PhantomData,
            hard_state,
            hard_state_dirty: false,
            entries: replay.into(),
            persist_sent: state.last_index,
            persisted: state.last_index,
            persist_inflight: VecDeque::new(),
            term_start_index: 0,
            meta,
            proposals: HashMap::new(),
            reads: VecDeque::new(),
            outputs: VecDeque::new(),
            poisoned: false,
        };
        node.campaign();
        Ok(node)
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        let _ = now;
        if self.poisoned {
            if let Input::Client(id, _) = input {
                self.outputs
                    .push_back(Output::Respond(id, Err(Error::Stopped)));
            }
            return;
        }
        match input {
            Input::Client(id, request) => self.handle_client(id, request),
            Input::Persisted { index } => self.handle_persisted(index),
        }
    }

    /// The next thing to do, if any. Drain until `None` after every input.
    pub fn poll_output(&mut self) -> Option<Output> {
        if let Some(output) = self.outputs.pop_front() {
            return Some(output);
        }
        self.poll_persist()
    }

    /// When the node next needs [`Node::handle_timeout`], if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Lets timers fire whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// This member's ID.
    pub fn member_id(&self) -> u64 {
        self.config.member_id
    }

    /// The cluster's ID.
    pub fn cluster_id(&self) -> u64 {
        self.config.cluster_id
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        self.meta.applied_index
    }

    fn last_index(&self) -> u64 {
        self.entries
            .back()
            .map_or(self.meta.applied_index, |e| e.index)
    }

    /// Starts a new term as the only voter and appends its empty entry.
    fn campaign(&mut self) {
        self.hard_state.term += 1;
        self.hard_state.vote = self.config.member_id;
        self.hard_state_dirty = true;
        let term = self.hard_state.term;
        self.term_start_index = self.append(EntryType::EntryNormal, Bytes::new());
        info!(
            member_id = %format_args!("{:x}", self.config.member_id),
            term,
            "became leader"
        );
    }

    fn append(&mut self, entry_type: EntryType, data: Bytes) -> u64 {
        let index = self.last_index() + 1;
        let entry = Entry {
            entry_type,
            term: self.hard_state.term,
            index,
            data,
            ..Default::default()
        };
        self.entries.push_back(entry);
        index
    }

    fn header(&self) -> ResponseHeader {
        ResponseHeader {
            cluster_id: self.config.cluster_id,
            member_id: self.config.member_id,
            revision: self.meta.revision,
            raft_term: self.hard_state.term,
        }
    }

    fn handle_client(&mut self, id: RequestId, request: Request) {
        if let Err(e) = mvcc::validate(&request, &self.config.limits) {
            self.outputs.push_back(Output::Respond(id, Err(e)));
            return;
        }
        let write = match request {
            Request::Range(request) => return self.handle_range(id, request),
            Request::Status => {
                let status = self.status();
                self.outputs
                    .push_back(Output::Respond(id, Ok(Response::Status(status))));
                return;
            }
            Request::Put(r) => proposal::Request::Put(r),
            Request::DeleteRange(r) => proposal::Request::DeleteRange(r),
            Request::Txn(r) => proposal::Request::Txn(r),
            Request::Compact(r) => proposal::Request::Compaction(r),
        };
        if self.last_index() - self.meta.applied_index >= UNAPPLIED_ENTRIES_MAX {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::TooManyRequests)));
            return;
        }
        let proposal = Proposal {
            id,
            request: Some(write),
        };
        let data = proposal.encode_to_vec();
        if data.len() > self.config.max_request_bytes {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::RequestTooLarge)));
            return;
        }
        let index = self.append(EntryType::EntryNormal, Bytes::from(data));
        self.proposals.insert(index, id);
    }

    fn handle_range(&mut self, id: RequestId, request: RangeRequest) {
        // A serializable read may see any applied state; a linearizable one
        // must see everything committed before it arrived, which a new
        // leader knows only once its term's first entry is applied. With one
        // voter the leader needs no heartbeat round to confirm leadership.
        let read_index = if request.serializable {
            0
        } else {
            self.hard_state.commit.max(self.term_start_index)
        };
        if read_index <= self.meta.applied_index && self.reads.is_empty() {
            let header = self.header();
            self.outputs.push_back(Output::Read {
                id,
                request,
                header,
            });
        } else {
            self.reads.push_back(PendingRead {
                read_index,
                id,
                request,
            });
        }
    }

    fn status(&self) -> StatusResponse {
        StatusResponse {
            header: Some(self.header()),
            leader: self.config.member_id,
            raft_index: self.hard_state.commit,
            raft_term: self.hard_state.term,
            raft_applied_index: self.meta.applied_index,
            ..Default::default()
        }
    }

    /// Hands out the unpersisted tail of the log, unless a `Persist` is
    /// still outstanding: the wait is what batches writes into one fsync.
    fn poll_persist(&mut self) -> Option<Output> {
        if self.poisoned || !self.persist_inflight.is_empty() {
            return None;
        }
        let last = self.last_index();
        if last == self.persist_sent && !self.hard_state_dirty {
            return None;
        }
        let first = self.meta.applied_index + 1;
        let from = (self.persist_sent + 1).max(first);
        let entries: Vec<Entry> = self
            .entries
            .iter()
            .skip((from - first) as usize)
            .cloned()
            .collect();
        let hard_state = self.hard_state_dirty.then(|| self.hard_state.clone());
        self.hard_state_dirty = false;
        self.persist_sent = last;
        let index = entries.last().map_or(0, |e| e.index);
        self.persist_inflight.push_back(index);
        Some(Output::Persist {
            entries,
            hard_state,
        })
    }

    fn handle_persisted(&mut self, index: u64) {
        let Some(expected) = self.persist_inflight.pop_front() else {
            debug!(index, "persisted with nothing outstanding");
            return;
        };
        debug_assert_eq!(index, expected, "persist acknowledgements out of order");
        if expected != 0 {
            self.persisted = self.persisted.max(expected);
        }
        // One voter: durable on this member is durable on a quorum. Only
        // entries of the current term commit by counting; earlier ones
        // commit with them.
        let commit = self.persisted;
        let current_term_durable = self
            .entries
            .iter()
            .rev()
            .find(|e| e.index <= commit)
            .is_some_and(|e| e.term == self.hard_state.term);
        if commit > self.hard_state.commit && current_term_durable {
            self.hard_state.commit = commit;
        }
        self.apply_committed();
    }

    /// Applies committed entries in batches, each batch in one backend
    /// transaction with its applied index, then answers their clients and
    /// releases the reads they satisfy.
    fn apply_committed(&mut self) {
        while self.meta.applied_index < self.hard_state.commit && !self.poisoned {
            if let Err(e) = self.apply_batch() {
                self.poison(e);
                return;
            }
            self.release_reads();
        }
        self.release_reads();
    }

    fn apply_batch(&mut self) -> Result<(), StorageError> {
        let mut txn = self.kv.write()?;
        let mut meta = self.meta;
        let identity = self.header();
        let mut responses = Vec::new();
        let mut applied = 0;
        while meta.applied_index < self.hard_state.commit && applied < APPLY_BATCH_MAX {
            let Some(entry) = self.entries.get(applied) else {
                return Err(StorageError::new(format!(
                    "committed entry {} is missing from memory",
                    meta.applied_index + 1
                )));
            };
            assert_eq!(
                entry.index,
                meta.applied_index + 1,
                "entries out of order at {}",
                meta.applied_index + 1
            );
            let result = apply_entry(&mut txn, &mut meta, entry).map(|answer| {
                answer.map(|mut response| {
                    stamp(
                        &mut response,
                        &ResponseHeader {
                            revision: meta.revision,
                            ..identity
                        },
                    );
                    response
                })
            });
            meta.applied_index = entry.index;
            meta.applied_term = entry.term;
            if let Some(id) = self.proposals.remove(&entry.index) {
                responses.push((id, result?));
            } else {
                // Replayed or not ours: nobody waits for the answer, but
                // storage errors still stop the node.
                let _answer = result?;
            }
            applied += 1;
        }
        txn.set_meta(&meta)?;
        txn.commit()?;
        self.entries.drain(..applied);
        self.meta = meta;
        for (id, result) in responses {
            self.outputs.push_back(Output::Respond(id, result));
        }
        Ok(())
    }

    fn release_reads(&mut self) {
        while self
            .reads
            .front()
            .is_some_and(|r| r.read_index <= self.meta.applied_index)
        {
            let Some(read) = self.reads.pop_front() else {
                break;
            };
            let header = self.header();
            self.outputs.push_back(Output::Read {
                id: read.id,
                request: read.request,
                header,
            });
        }
    }

    fn poison(&mut self, error: StorageError) {
        self.poisoned = true;
        self.outputs.push_back(Output::Fatal(error));
        for (_, id) in self.proposals.drain() {
            self.outputs
                .push_back(Output::Respond(id, Err(Error::Stopped)));
        }
        for read in self.reads.drain(..) {
            self.outputs
                .push_back(Output::Respond(read.id, Err(Error::Stopped)));
        }
    }
}

/// Applies one entry. The outer error is a storage failure (fatal); the
/// inner one is the client's answer.
fn apply_entry(
    txn: &mut impl KvWrite,
    meta: &mut KvMeta,
    entry: &Entry,
) -> Result<Result<Response, Error>, StorageError> {
    if entry.entry_type != EntryType::EntryNormal || entry.data.is_empty() {
        return Ok(Err(Error::Stopped));
    }
    let proposal = match Proposal::decode(entry.data.as_ref()) {
        Ok(p) => p,
        Err(e) => {
            return Err(StorageError::new(format!(
                "entry {} does not decode: {e}",
                entry.index
            )))
        }
    };
    let request = match proposal.request {
        Some(proposal::Request::Put(r)) => Request::Put(r),
        Some(proposal::Request::DeleteRange(r)) => Request::DeleteRange(r),
        Some(proposal::Request::Txn(r)) => Request::Txn(r),
        Some(proposal::Request::Compaction(r)) => Request::Compact(r),
        None => return Ok(Err(Error::Stopped)),
    };
    match mvcc::apply(txn, meta, &request) {
        Err(Error::Storage(e)) => Err(e),
        result => Ok(result),
    }
}

/// Stamps the member's identity and term on an answer's header. mvcc sets
/// the revision each answer must report (its own write's, not the batch's).
fn stamp(response: &mut Response, identity: &ResponseHeader) {
    let header = match response {
        Response::Put(r) => &mut r.header,
        Response::DeleteRange(r) => &mut r.header,
        Response::Txn(r) => &mut r.header,
        Response::Compact(r) => &mut r.header,
        Response::Range(r) => &mut r.header,
        Response::Status(r) => &mut r.header,
    };
    let header = header.get_or_insert(ResponseHeader {
        revision: identity.revision,
        ..Default::default()
    });
    header.cluster_id = identity.cluster_id;
    header.member_id = identity.member_id;
    header.raft_term = identity.raft_term;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryKv, MemoryLog};
    use oxetcd_proto::etcdserverpb::{PutRequest, RangeResponse};

    struct Harness {
        node: Node<MemoryLog, MemoryKv>,
        log: MemoryLog,
        kv: MemoryKv,
        /// Persist outputs not yet acknowledged, oldest first.
        unpersisted: VecDeque<Output>,
        answers: Vec<(RequestId, Result<Response, Error>)>,
    }

    impl Harness {
        fn new(log: MemoryLog, kv: MemoryKv) -> Self {
            let node = Node::new(
                Config::single("test"),
                log.clone(),
                kv.clone(),
                Instant::ZERO,
            )
            .unwrap();
            let mut h = Self {
                node,
                log,
                kv,
                unpersisted: VecDeque::new(),
                answers: Vec::new(),
            };
            h.settle();
            h
        }

        /// Drains outputs without acknowledging persists.
        fn drain(&mut self) {
            while let Some(output) = self.node.poll_output() {
                match output {
                    Output::Persist { .. } => self.unpersisted.push_back(output),
                    Output::Respond(id, result) => self.answers.push((id, result)),
                    Output::Read {
                        id,
                        request,
                        mut header,
                    } => {
                        let view = self.kv.read().unwrap();
                        header.revision = view.meta().unwrap().revision.max(1);
                        let result = mvcc::range(&view, &request).map(|mut r| {
                            r.header = Some(header);
                            Response::Range(r)
                        });
                        self.answers.push((id, result));
                    }
                    Output::Fatal(e) => panic!("fatal: {e}"),
                }
            }
        }

        /// Persists the oldest outstanding batch; returns its entry count.
        fn persist_one(&mut self) -> usize {
            let Some(Output::Persist {
                entries,
                hard_state,
            }) = self.unpersisted.pop_front()
            else {
                return 0;
            };
            self.log.append(&entries, hard_state.as_ref()).unwrap();
            let index = entries.last().map_or(0, |e| e.index);
            self.node.handle(Instant::ZERO, Input::Persisted { index });
            self.drain();
            entries.len()
        }

        fn settle(&mut self) {
            self.drain();
            for _ in 0..1_000 {
                if self.persist_one() == 0 && self.unpersisted.is_empty() {
                    break;
                }
            }
        }

        fn put(&mut self, id: RequestId, key: &str, value: &str) {
            let put = PutRequest {
                key: key.as_bytes().to_vec(),
                value: value.as_bytes().to_vec(),
                ..Default::default()
            };
            self.node
                .handle(Instant::ZERO, Input::Client(id, Request::Put(put)));
            self.drain();
        }

        fn get(&mut self, id: RequestId, key: &str) {
            let range = RangeRequest {
                key: key.as_bytes().to_vec(),
                ..Default::default()
            };
            self.node
                .handle(Instant::ZERO, Input::Client(id, Request::Range(range)));
            self.drain();
        }

        fn answer(&mut self, id: RequestId) -> Option<Result<Response, Error>> {
            let at = self.answers.iter().position(|(i, _)| *i == id)?;
            Some(self.answers.remove(at).1)
        }

        fn range_answer(&mut self, id: RequestId) -> RangeResponse {
            match self.answer(id) {
                Some(Ok(Response::Range(r))) => r,
                other => panic!("expected a range answer, got {other:?}"),
            }
        }
    }

    #[test]
    fn put_is_answered_after_persist_and_apply() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "foo", "bar");
        assert!(
            h.answer(1).is_none(),
            "answered before the entry was durable"
        );
        h.settle();
        let Some(Ok(Response::Put(put))) = h.answer(1) else {
            panic!("no put answer");
        };
        let header = put.header.unwrap();
        assert_eq!(header.revision, 2);
        assert_eq!(header.member_id, h.node.member_id());
        assert_eq!(header.raft_term, 1);
        h.get(2, "foo");
        let range = h.range_answer(2);
        assert_eq!(range.kvs.len(), 1);
        assert_eq!(range.kvs[0].value, b"bar");
        assert_eq!(range.header.unwrap().revision, 2);
    }

    #[test]
    fn writes_during_an_fsync_share_the_next_one() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "a", "1");
        assert_eq!(h.unpersisted.len(), 1, "first write goes out at once");
        for id in 2..=100 {
            h.put(id, "a", "x");
        }
        assert_eq!(
            h.unpersisted.len(),
            1,
            "no second persist while one is in flight"
        );
        assert_eq!(h.persist_one(), 1);
        assert_eq!(
            h.persist_one(),
            99,
            "the 99 waiting writes ride one persist"
        );
        for id in 1..=100 {
            let Some(Ok(Response::Put(put))) = h.answer(id) else {
                panic!("put {id} not answered");
            };
            // Each write reports its own revision, not its batch's.
            assert_eq!(put.header.unwrap().revision, 1 + id as i64);
        }
    }

    #[test]
    fn linearizable_read_waits_for_pending_apply() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "k", "v1");
        h.settle();
        h.put(2, "k", "v2");
        // The second put is not committed yet: a read may answer at once
        // with the committed state.
        h.get(3, "k");
        assert_eq!(h.range_answer(3).kvs[0].value, b"v1");
        h.settle();
        h.get(4, "k");
        assert_eq!(h.range_answer(4).kvs[0].value, b"v2");
    }

    #[test]
    fn oversized_proposal_is_refused_and_nothing_is_lost() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "k", "small");
        h.settle();
        let big = "x".repeat(1_572_864);
        h.put(2, "k", &big);
        assert_eq!(h.answer(2), Some(Err(Error::RequestTooLarge)));
        h.get(3, "k");
        assert_eq!(h.range_answer(3).kvs[0].value, b"small");
    }

    #[test]
    fn empty_key_is_refused() {
        let mut h = Harness::new(MemoryLog::default(), MemoryKv::default());
        h.put(1, "", "v");
        assert_eq!(h.answer(1), Some(Err(Error::EmptyKey)));
    }

    #[test]
    fn restart_replays_unapplied_entries_once() {
        let log = MemoryLog::default();
        let kv = MemoryKv::default();
        let mut h = Harness::new(log.clone(), kv.clone());
        for id in 1..=10 {
            h.put(id, &format!("k{id}"), "v");
        }
        h.settle();
        drop(h);
        // Restart on a backend that applied only part of the log: a read
        // that arrives before the new term's first entry commits waits for
        // the replay instead of answering from the old state.
        let lagging = MemoryKv::default();
        let node = Node::new(
            Config::single("test"),
            log.clone(),
            lagging.clone(),
            Instant::ZERO,
        );
        let mut h = Harness {
            node: node.unwrap(),
            log: log.clone(),
            kv: lagging,
            unpersisted: VecDeque::new(),
            answers: Vec::new(),
        };
        h.get(1, "k10");
        assert!(h.answer(1).is_none(), "read answered before the replay");
        h.settle();
        assert_eq!(h.range_answer(1).kvs.len(), 1);
        drop(h);
        // Same backend: nothing is applied twice.
        let mut h = Harness::new(log.clone(), kv.clone());
        h.get(1, "k1");
        let range = h.range_answer(1);
        assert_eq!(range.header.unwrap().revision, 11);
        assert_eq!(range.kvs[0].version, 1);
        drop(h);
        // A backend that lost everything (never made durable): the log
        // replays into the same revisions.
        let mut h = Harness::new(log, MemoryKv::default());
        h.get(2, "k10");
        let range = h.range_answer(2);
        assert_eq!(range.header.unwrap().revision, 11);
        assert_eq!(range.kvs[0].mod_revision, 11);
        assert_eq!(h.node.applied_index(), h.log.state().unwrap().last_index);
    }
}
