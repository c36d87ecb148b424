//! The reference driver: one member's [`Node`] on in-memory stores, its
//! outputs carried out synchronously in the calling thread.
//!
//! Design. Every rule of [`Output`] that does not concern the world outside
//! the member is executed here, once, the way a runtime must: a `Persist`
//! installs the snapshot received for its index, appends, stores the hard
//! state and is acknowledged (at once, or when the caller says, to test
//! group commit); a `Read` runs on a fresh view; a watch catch-up reads its
//! history and reports back; a log compaction syncs the backend first. What
//! leaves the member comes back to the caller as [`Effect`]s, in output
//! order: raft messages, snapshot streams (with the view taken before the
//! node is polled again), answers, and watch responses split as the
//! watcher asked. The core's unit tests, its in-process cluster tests and
//! the conformance `core` target drive nodes through it; the server's
//! driver is the one other executor of `Output`.

use std::collections::{BTreeMap, VecDeque};

use oxetcd_proto::eraftpb::Message;
use oxetcd_proto::etcdserverpb::WatchResponse;

use crate::memory::{MemoryKv, MemoryKvRead, MemoryLog};
use crate::raft::Persist;
use crate::storage::{KvStore, LogStore, StorageError};
use crate::watch::{self, StreamId};
use crate::{mvcc, Config, DirectReads, Error, Input, Instant, Node, Output, RequestId, Response};

/// Outputs drained in one [`Member::drain`] at most before it reports a
/// runaway node (a livelock guard).
const OUTPUTS_PER_DRAIN_MAX: usize = 1_000_000;

/// What leaves the member, for the caller to carry.
#[derive(Debug)]
pub enum Effect {
    /// A raft message for member `message.to`.
    Send(Message),
    /// A snapshot stream for member `to`: the backend as `view` holds it,
    /// then `message`. The caller answers [`Input::SnapshotSent`].
    SendSnapshot {
        /// The receiver.
        to: u64,
        /// The `MsgSnapshot` that ends the stream.
        message: Message,
        /// The sender's backend at the snapshot's index.
        view: MemoryKvRead,
    },
    /// The answer to a client request.
    Answer(RequestId, Result<Response, Error>),
    /// A response on a watch stream, already split if the watcher asked.
    Watch(StreamId, WatchResponse),
    /// Which serializable ranges a runtime may now answer without the
    /// node ([`Output::DirectReads`]); this driver answers none itself.
    DirectReads(DirectReads),
}

/// Why a member stopped being driven.
#[derive(Debug)]
pub enum Halt {
    /// Storage failed ([`Output::Fatal`], or a store call here).
    Storage(StorageError),
    /// The node produced more than [`OUTPUTS_PER_DRAIN_MAX`] outputs in a
    /// row without settling.
    Runaway,
    /// A `Persist` installs a snapshot that never arrived.
    SnapshotMissing(u64),
}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Storage(e) => write!(f, "storage failed: {e}"),
            Self::Runaway => write!(
                f,
                "the node produced more than {OUTPUTS_PER_DRAIN_MAX} outputs without settling"
            ),
            Self::SnapshotMissing(index) => {
                write!(f, "installing snapshot {index}, which never arrived")
            }
        }
    }
}

impl From<StorageError> for Halt {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

/// One member: its node, its stores, and what the driver holds for it.
pub struct Member {
    /// The node. Inputs from outside the member are fed to it directly.
    pub node: Node<MemoryLog, MemoryKv>,
    /// Its log store.
    pub log: MemoryLog,
    /// Its backend.
    pub kv: MemoryKv,
    /// `Persist`s not yet made durable, oldest first, when the caller
    /// acknowledges them itself ([`Member::hold_persists`]).
    held: Option<VecDeque<Persist>>,
    /// Snapshots received and not yet installed, by index.
    received: BTreeMap<u64, MemoryKvRead>,
    /// Where a fragmenting watcher's responses are split.
    fragment_bytes: usize,
}

impl Member {
    /// Starts a node on these stores at `now`.
    pub fn start(
        config: Config,
        log: MemoryLog,
        kv: MemoryKv,
        now: Instant,
    ) -> Result<Self, Error> {
        let fragment_bytes = config.watch_fragment_bytes();
        let node = Node::new(config, log.clone(), kv.clone(), now)?;
        Ok(Self {
            node,
            log,
            kv,
            held: None,
            received: BTreeMap::new(),
            fragment_bytes,
        })
    }

    /// The stores, for a restart: the node and what the driver held in
    /// memory (unacknowledged persists, received snapshots) are lost, as
    /// in a crash.
    pub fn crash(self) -> (MemoryLog, MemoryKv) {
        (self.log, self.kv)
    }

    /// From now on `Persist`s wait for [`Member::persist_next`].
    pub fn hold_persists(&mut self) {
        self.held.get_or_insert_with(VecDeque::new);
    }

    /// The `Persist`s waiting, oldest first (none unless held).
    pub fn held_persists(&self) -> usize {
        self.held.as_ref().map_or(0, VecDeque::len)
    }

    /// Makes the oldest held `Persist` durable and acknowledges it; returns
    /// its entry count, or `None` when none waits.
    pub fn persist_next(&mut self, now: Instant) -> Result<Option<usize>, Halt> {
        let Some(persist) = self.held.as_mut().and_then(VecDeque::pop_front) else {
            return Ok(None);
        };
        let entries = persist.entries.len();
        self.persist(now, persist)?;
        Ok(Some(entries))
    }

    /// A snapshot stream arrived whole: keep its data until a `Persist`
    /// installs it, and hand the node its final message.
    pub fn receive_snapshot(&mut self, now: Instant, message: Message, view: MemoryKvRead) {
        let index = message.get_snapshot().get_metadata().index;
        self.received.insert(index, view);
        self.node.handle(now, Input::SnapshotReceived { message });
    }

    /// Carries out every output the node has, and those its answers to
    /// them cause; returns what leaves the member, in order.
    pub fn drain(&mut self, now: Instant) -> Result<Vec<Effect>, Halt> {
        let mut effects = Vec::new();
        for _ in 0..OUTPUTS_PER_DRAIN_MAX {
            let Some(output) = self.node.poll_output() else {
                return Ok(effects);
            };
            self.execute(now, output, &mut effects)?;
        }
        Err(Halt::Runaway)
    }

    /// Carries out one output.
    fn execute(
        &mut self,
        now: Instant,
        output: Output,
        effects: &mut Vec<Effect>,
    ) -> Result<(), Halt> {
        match output {
            Output::Send(message) => effects.push(Effect::Send(message)),
            Output::SendSnapshot { to, message } => {
                // The view is taken before the node is polled again.
                let view = self.kv.read()?;
                effects.push(Effect::SendSnapshot { to, message, view });
            }
            Output::Persist(persist) => match &mut self.held {
                Some(held) => held.push_back(persist),
                None => self.persist(now, persist)?,
            },
            Output::StoreClusterId(id) => self.log.store_cluster_id(id)?,
            Output::CompactLog { index } => {
                self.kv.sync()?;
                self.log.compact(index + 1)?;
            }
            Output::Respond(id, result) => effects.push(Effect::Answer(id, result)),
            Output::DirectReads(reads) => effects.push(Effect::DirectReads(reads)),
            Output::Read {
                id,
                request,
                header,
            } => {
                let view = self.kv.read()?;
                let result = mvcc::read(&view, &request, header).map(Response::Range);
                effects.push(Effect::Answer(id, result));
            }
            Output::Fatal(e) => return Err(Halt::Storage(e)),
            Output::Watch {
                stream,
                response,
                fragment,
            } => self.watch_response(effects, stream, response, fragment),
            Output::WatchEvents { stream, deliveries } => {
                for delivery in &deliveries {
                    self.watch_response(effects, stream, delivery.response(), delivery.fragment);
                }
            }
            Output::WatchCatchUp(job) => {
                let view = self.kv.read()?;
                let outcome = watch::catch_up(&view, &job)?;
                let (response, input) = outcome.into_parts(&job);
                if let Some((response, fragment)) = response {
                    self.watch_response(effects, job.stream, response, fragment);
                }
                self.node.handle(now, input);
            }
        }
        Ok(())
    }

    /// Installs, appends and stores what `persist` asks, then acknowledges.
    fn persist(&mut self, now: Instant, persist: Persist) -> Result<(), Halt> {
        if let Some(meta) = &persist.snapshot {
            let Some(view) = self.received.remove(&meta.index) else {
                return Err(Halt::SnapshotMissing(meta.index));
            };
            self.kv.restore(&view);
            self.log.install_snapshot(meta.index, meta.term)?;
            // Older snapshots are superseded.
            self.received = self.received.split_off(&(meta.index + 1));
        }
        self.log
            .append(&persist.entries, persist.hard_state.as_ref())?;
        self.node.handle(now, Input::Persisted { id: persist.id });
        Ok(())
    }

    fn watch_response(
        &self,
        effects: &mut Vec<Effect>,
        stream: StreamId,
        response: WatchResponse,
        fragment: bool,
    ) {
        if fragment {
            let parts = watch::fragments(response, self.fragment_bytes);
            effects.extend(parts.into_iter().map(|r| Effect::Watch(stream, r)));
        } else {
            effects.push(Effect::Watch(stream, response));
        }
    }
}
