//! The driver: runs the node on its own OS thread and connects it to the
//! async world.
//!
//! Design:
//! - The [`Node`] lives on one dedicated thread, because applying entries
//!   writes the backend with blocking calls that must not stall an async
//!   executor. The thread waits on a `std::sync::mpsc` channel until the next
//!   command or the node's `poll_timeout`, feeds every command already queued
//!   (up to [`INPUT_BATCH_MAX`]) with `now` from a monotonic clock, then
//!   drains `poll_output` until `None`. Feeding a burst before draining is how
//!   many client requests end up in one proposal batch.
//! - `Output::Persist` goes to a second thread that owns the log writes: it
//!   calls [`LogStore::append`] (fsync) and answers `Input::Persisted` with
//!   the persist's ID through the driver's channel, once per `Persist` and
//!   in order. The node asks for the next write only after the previous one
//!   is acknowledged, so writes that arrive during an fsync share the next
//!   one (group commit). Log compactions (`Output::CompactLog`) go to the
//!   same thread, after a sync of the backend.
//! - Peers are reached through a [`PeerLink`] (the TCP transport in
//!   [`crate::peer`]). Raft messages go out with `send`; a refused send is
//!   reported back as `Input::Unreachable`. The transport's events arrive on
//!   the driver's channel (see [`Mailbox::deliver`]). After every drain the
//!   driver compares the node's member list with the peers it gave the
//!   link, and adds, updates or removes peers to match.
//! - Snapshots: for `Output::SendSnapshot` the driver takes a backend read
//!   view at once (it holds exactly the state at the snapshot index) and
//!   hands the link an [`SnapshotExport`] of it, pulled on a blocking
//!   thread. A received snapshot's file is kept by its index until the
//!   node's `Persist` installs it: the log writer imports it into the
//!   backend in one write transaction (replacing everything), syncs, then
//!   calls [`LogStore::install_snapshot`].
//! - Clients hold a cloneable [`Handle`]. Each request waits on a oneshot kept
//!   in a [`Slab`] owned by the driver thread; its slot key is the
//!   [`RequestId`]. `Output::Read` only says "ready": the requesting task then
//!   runs the range on a fresh backend snapshot on a blocking thread, so reads
//!   run concurrently with writes and with each other.
//! - Watch streams register an unbounded channel with the driver thread;
//!   the node's watch outputs are routed into it through the stream's gate
//!   (see [`crate::watch_routes`]), and the stream's task runs catch-ups on
//!   a snapshot on a blocking thread, reporting back with
//!   `Input::WatchCaughtUp`.
//! - Stopping: a leader first hands leadership to its most caught-up voter
//!   and keeps running until another member leads, at most an election
//!   timeout ([`Handle::stop`]), so the cluster does not wait out an
//!   election. A member removed from the cluster (it applied its own
//!   removal, or a peer refused it as removed) stops by itself and says so
//!   through [`Mailbox::removal`].
//! - A storage error is final: it is logged and the process exits non-zero.
//!   A panic on the driver thread (a bug) is treated the same way, because a
//!   server whose node is gone cannot answer anything.

use std::collections::{BTreeMap, HashMap};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;

use futures_channel::{mpsc as async_mpsc, oneshot};
use oxetcd_core::raft::{Persist, PersistId};
use oxetcd_core::storage::{KvMeta, KvRead, KvStore, KvWrite, LogStore, StorageError};
use oxetcd_core::watch::{self, CatchUp, CatchUpOutcome, StreamId};
use oxetcd_core::{
    mvcc, Config, Error, Input, Instant, Node, Output, Request, RequestId, Response,
};
use oxetcd_proto::eraftpb::Message;
use oxetcd_proto::etcdserverpb::{
    Member, RangeRequest, RangeResponse, ResponseHeader, WatchRequest,
};
use oxetcd_storage::bolt::hash::{hash_kv, KvHash};
use oxetcd_storage::snapshot::{self as backend_snapshot, SnapshotExport, CHUNK_BYTES_DEFAULT};
use oxetcd_storage::snapshot_file::FileExport;
use slab::Slab;
use tracing::{debug, error, info, warn};

use crate::peer::{PeerEvent, PeerTransport, ReceivedSnapshot, SendError};
use crate::runtime::Runtime;
use crate::watch_routes::{StreamItem, WatchRoutes};

/// A snapshot stream's chunks, pulled on a blocking thread.
pub type SnapshotChunks = Box<dyn Iterator<Item = std::io::Result<bytes::Bytes>> + Send>;

/// A snapshot file's chunks (see [`Handle::snapshot_file`]).
pub type FileChunks = Box<dyn Iterator<Item = std::io::Result<Vec<u8>>> + Send>;

/// What the driver needs from a peer transport. [`PeerTransport`] is the
/// real one; a member with no peers runs with none at all.
pub trait PeerLink: Send + Sync + 'static {
    /// Queues a raft message without blocking.
    fn send(&self, message: Message) -> Result<(), SendError>;
    /// Streams a snapshot, then `message`; the outcome comes back as
    /// [`PeerEvent::SnapshotSent`].
    fn send_snapshot(&self, message: Message, chunks: SnapshotChunks);
    /// Adds a peer, or updates its URLs.
    fn add_peer(&self, id: u64, urls: Vec<String>);
    /// Forgets a removed member.
    fn remove_peer(&self, id: u64);
}

impl<R: Runtime> PeerLink for PeerTransport<R> {
    fn send(&self, message: Message) -> Result<(), SendError> {
        PeerTransport::send(self, message)
    }

    fn send_snapshot(&self, message: Message, chunks: SnapshotChunks) {
        PeerTransport::send_snapshot(self, message, chunks);
    }

    fn add_peer(&self, id: u64, urls: Vec<String>) {
        PeerTransport::add_peer(self, id, urls);
    }

    fn remove_peer(&self, id: u64) {
        PeerTransport::remove_peer(self, id);
    }
}

/// The driver's command channel, made before the driver starts so that the
/// peer transport can be built to deliver into it.
pub struct Mailbox {
    commands: Sender<Command>,
    inbox: Receiver<Command>,
    removed: Option<oneshot::Sender<()>>,
    ready: Option<oneshot::Sender<u64>>,
}

impl Default for Mailbox {
    fn default() -> Self {
        let (commands, inbox) = mpsc::channel();
        Self {
            commands,
            inbox,
            removed: None,
            ready: None,
        }
    }
}

impl Mailbox {
    /// Resolves once the node stopped because this member was removed from
    /// the cluster (its backend is synced by then). Never resolves if the
    /// node stops otherwise; a dropped sender means that.
    pub fn removal(&mut self) -> oneshot::Receiver<()> {
        let (removed, removal) = oneshot::channel();
        self.removed = Some(removed);
        removal
    }

    /// Resolves with the cluster ID once the member is ready to serve
    /// (`Node::is_ready`: a leader, an applied entry of its term, and the
    /// member's own attributes published). A dropped sender: the node
    /// stopped first.
    pub fn readiness(&mut self) -> oneshot::Receiver<u64> {
        let (ready, readiness) = oneshot::channel();
        self.ready = Some(ready);
        readiness
    }

    /// Where the peer transport delivers its events. The channel is
    /// unbounded, but what arrives on it is bounded upstream: each peer
    /// connection reads one frame at a time and the node drains the channel
    /// in batches of [`INPUT_BATCH_MAX`].
    pub fn deliver(&self) -> crate::peer::Deliver {
        let commands = self.commands.clone();
        Arc::new(move |event| {
            let _ = commands.send(Command::Peer(event));
        })
    }
}

/// Client requests admitted but not yet answered, across all connections.
/// Beyond it new requests are refused with `etcdserver: too many requests`
/// instead of queueing without bound: each one holds its decoded request
/// (up to `--max-request-bytes`) and a slot in the driver. Sized well above
/// what a node applies in one round trip of a busy cluster.
pub const IN_FLIGHT_REQUESTS_MAX: usize = 8192;

/// Commands fed to the node before its outputs are drained. Large enough to
/// batch a burst of proposals into one log write, small enough that the log
/// writer is never left idle behind a long queue of inputs.
const INPUT_BATCH_MAX: usize = 1024;

/// Runs blocking work on the runtime's blocking threads.
pub type Blocking = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// A handle to the running node, cloned into every service.
pub struct Handle<K> {
    commands: Sender<Command>,
    in_flight: Arc<AtomicUsize>,
    kv: K,
    blocking: Blocking,
    /// Numbers watch streams.
    next_stream: Arc<AtomicU64>,
}

impl<K: Clone> Clone for Handle<K> {
    fn clone(&self) -> Self {
        Self {
            commands: self.commands.clone(),
            in_flight: self.in_flight.clone(),
            kv: self.kv.clone(),
            blocking: self.blocking.clone(),
            next_stream: self.next_stream.clone(),
        }
    }
}

/// The receiving end of one watch stream, from [`Handle::open_watch`].
pub(crate) struct WatchStreamParts {
    pub(crate) stream: StreamId,
    pub(crate) items: async_mpsc::UnboundedReceiver<StreamItem>,
    pub(crate) queued: Arc<AtomicUsize>,
}

/// What the driver thread receives.
enum Command {
    Client(Request, oneshot::Sender<Reply>),
    Persisted(PersistId),
    Stop(oneshot::Sender<()>),
    /// An event of the peer transport.
    Peer(PeerEvent),
    WatchOpen {
        stream: StreamId,
        items: async_mpsc::UnboundedSender<StreamItem>,
        queued: Arc<AtomicUsize>,
    },
    WatchClosed(StreamId),
    /// An input about watches, fed as is.
    Watch(Input),
}

/// The driver's answer to one client request.
enum Reply {
    Done(Result<Response, Error>),
    /// The range may run now, on a fresh snapshot.
    Read {
        request: RangeRequest,
        header: ResponseHeader,
    },
}

/// Work for the log-writer thread, done in order.
enum LogJob {
    /// One batch of log writes, acknowledged with its ID, with the data of
    /// the snapshot it installs, if any.
    Persist(Persist, Option<ReceivedSnapshot>),
    /// Drop the log up to and including this index, once the backend that
    /// holds it is durable.
    Compact(u64),
}

/// Starts the node on `log` and `kv` on its own thread; returns once the
/// node has been built (it may replay log entries first).
pub async fn start<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    blocking: Blocking,
) -> Result<Handle<K>, Error> {
    start_with_peers(config, log, kv, blocking, Mailbox::default(), None).await
}

/// Starts the node as [`start`] does, on `mailbox`, reaching its peers
/// through `peers`.
pub async fn start_with_peers<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    blocking: Blocking,
    mailbox: Mailbox,
    peers: Option<Arc<dyn PeerLink>>,
) -> Result<Handle<K>, Error> {
    let Mailbox {
        commands,
        inbox,
        removed,
        ready,
    } = mailbox;
    let (started, on_start) = oneshot::channel();
    let node_kv = kv.clone();
    let persisted = commands.clone();
    thread::Builder::new()
        .name("oxetcd-node".into())
        .spawn(move || {
            let run = AssertUnwindSafe(move || {
                drive(
                    config,
                    log,
                    node_kv,
                    inbox,
                    persisted,
                    started,
                    peers,
                    Signals { removed, ready },
                )
            });
            if panic::catch_unwind(run).is_err() {
                error!("the node thread panicked; stopping");
                std::process::exit(1);
            }
        })
        .map_err(|e| Error::Storage(StorageError::new(format!("spawning the node thread: {e}"))))?;
    match on_start.await {
        Ok(Ok(())) => Ok(Handle {
            commands,
            in_flight: Arc::new(AtomicUsize::new(0)),
            kv,
            blocking,
            next_stream: Arc::new(AtomicU64::new(1)),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Stopped),
    }
}

impl<K: KvStore> Handle<K> {
    /// Sends one request through the node and waits for its answer. A range
    /// is answered by reading a backend snapshot once the node allows it.
    pub async fn request(&self, request: Request) -> Result<Response, Error> {
        let _slot = self.admit()?;
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Client(request, reply))
            .map_err(|_| Error::Stopped)?;
        match answer.await.map_err(|_| Error::Stopped)? {
            Reply::Done(result) => result,
            Reply::Read { request, header } => {
                self.read(request, header).await.map(Response::Range)
            }
        }
    }

    /// The backend's meta record (revision, applied index), read on a
    /// blocking thread.
    pub async fn meta(&self) -> Result<KvMeta, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let meta = kv.read().and_then(|view| view.meta());
            meta.map_err(fatal_storage)
        })
        .await
    }

    /// etcd's `HashKV` of this member's applied key space up to `revision`
    /// (0: the current one), computed on a read view on a blocking thread.
    pub async fn hash_kv(&self, revision: i64) -> Result<KvHash, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            hash_kv(&view, revision)
        })
        .await
    }

    /// The backend as a snapshot file (an etcd bolt database and its
    /// checksum, see [`FileExport`]) of a read view taken now, naming
    /// `cluster_version` as the cluster's, for the Maintenance `Snapshot`
    /// call; [`Handle::next_file_chunk`] pulls its chunks.
    pub async fn snapshot_file(&self, cluster_version: String) -> Result<FileChunks, Error> {
        let kv = self.kv.clone();
        self.run_blocking(move || {
            let view = kv.read().map_err(fatal_storage)?;
            match FileExport::new(view, &cluster_version, CHUNK_BYTES_DEFAULT) {
                Ok(export) => Ok(Box::new(export) as FileChunks),
                Err(e) => fatal("exporting a snapshot", &e),
            }
        })
        .await
    }

    /// The next chunk of a snapshot file, read on a blocking thread (it
    /// walks the backend), with the rest of the file; `None` at its end.
    pub async fn next_file_chunk(
        &self,
        mut chunks: FileChunks,
    ) -> Result<Option<(Vec<u8>, FileChunks)>, Error> {
        self.run_blocking(move || match chunks.next() {
            None => Ok(None),
            Some(Ok(chunk)) => Ok(Some((chunk, chunks))),
            Some(Err(e)) => fatal("exporting a snapshot", &e),
        })
        .await
    }

    /// Stops the node: a leader first hands leadership over (bounded by an
    /// election timeout), then pending requests are answered `etcdserver:
    /// server stopped`, outstanding log writes finish, and the backend is
    /// synced.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.commands.send(Command::Stop(done)).is_ok() {
            let _ = stopped.await;
        }
    }

    /// Opens a watch stream: the driver routes its responses to the
    /// returned receiver from now on.
    pub(crate) fn open_watch(&self) -> Result<WatchStreamParts, Error> {
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (items, receiver) = async_mpsc::unbounded();
        let queued = Arc::new(AtomicUsize::new(0));
        self.commands
            .send(Command::WatchOpen {
                stream,
                items,
                queued: queued.clone(),
            })
            .map_err(|_| Error::Stopped)?;
        Ok(WatchStreamParts {
            stream,
            items: receiver,
            queued,
        })
    }

    /// Passes a client's watch request to the node.
    pub(crate) fn watch_request(&self, stream: StreamId, request: WatchRequest) {
        let _ = self
            .commands
            .send(Command::Watch(Input::Watch { stream, request }));
    }

    /// The stream's client is gone.
    pub(crate) fn close_watch(&self, stream: StreamId) {
        let _ = self.commands.send(Command::WatchClosed(stream));
    }

    /// Reads a catch-up on a fresh snapshot, on a blocking thread; the
    /// stream reports it with [`Handle::caught_up`] once it queued the
    /// response.
    pub(crate) async fn catch_up(&self, job: CatchUp) -> Result<CatchUpOutcome, Error> {
        let kv = self.kv.clone();
        let outcome = self
            .run_blocking(move || {
                let view = kv.read().map_err(fatal_storage)?;
                watch::catch_up(&view, &job).map_err(fatal_storage)
            })
            .await?;
        Ok(outcome)
    }

    /// Tells the node a catch-up was delivered.
    pub(crate) fn caught_up(&self, input: Input) {
        let _ = self.commands.send(Command::Watch(input));
    }

    /// Runs an admitted range on a fresh snapshot. A point read touches one
    /// key, a few microseconds of work, so it runs right here: handing it to
    /// a blocking thread would cost more than the read. Anything that may
    /// walk many keys goes to a blocking thread so it never stalls the
    /// executor.
    async fn read(
        &self,
        request: RangeRequest,
        header: ResponseHeader,
    ) -> Result<RangeResponse, Error> {
        if request.range_end.is_empty() {
            return range_on_snapshot(&self.kv, &request, header);
        }
        let kv = self.kv.clone();
        self.run_blocking(move || range_on_snapshot(&kv, &request, header))
            .await
    }

    async fn run_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        (self.blocking)(Box::new(move || {
            // A panic here is a bug in the read path; the caller gets an
            // error instead of a runtime thread dying with it.
            match panic::catch_unwind(AssertUnwindSafe(work)) {
                Ok(result) => {
                    let _ = tx.send(result);
                }
                Err(_) => error!("a read panicked"),
            }
        }));
        rx.await.map_err(|_| Error::Stopped)?
    }

    fn admit(&self) -> Result<InFlight<'_>, Error> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = InFlight(&self.in_flight);
        if before >= IN_FLIGHT_REQUESTS_MAX {
            return Err(Error::TooManyRequests);
        }
        Ok(slot)
    }
}

/// One admitted request; gives its slot back when dropped (answered, or the
/// client went away).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn range_on_snapshot<K: KvStore>(
    kv: &K,
    request: &RangeRequest,
    mut header: ResponseHeader,
) -> Result<RangeResponse, Error> {
    let view = kv.read().map_err(fatal_storage)?;
    let meta = view.meta().map_err(fatal_storage)?;
    let mut response = match mvcc::range(&view, request) {
        Err(Error::Storage(e)) => return Err(fatal_storage(e)),
        other => other?,
    };
    header.revision = meta.revision;
    response.header = Some(header);
    Ok(response)
}

/// Why the driver loop ended.
enum Ending {
    /// Asked to stop; answer here once stopped.
    Stop(oneshot::Sender<()>),
    /// This member was removed from the cluster.
    Removed,
    /// Every handle is gone.
    Abandoned,
}

/// A stop that waits for leadership to move first.
struct HandOver {
    done: oneshot::Sender<()>,
    /// Stop anyway at this time.
    deadline: Instant,
}

/// The driver thread's body.
#[allow(clippy::too_many_arguments)]
/// What the driver tells the runtime besides answers: the member stopped
/// because it was removed, and the member became ready to serve.
struct Signals {
    removed: Option<oneshot::Sender<()>>,
    ready: Option<oneshot::Sender<u64>>,
}

fn drive<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    inbox: Receiver<Command>,
    commands: Sender<Command>,
    started: oneshot::Sender<Result<(), Error>>,
    peers: Option<Arc<dyn PeerLink>>,
    signals: Signals,
) {
    let Signals { removed, mut ready } = signals;
    let clock = Clock::new();
    // etcd waits about this long for a leadership transfer on stop.
    let hand_over_time = config.election_timeout;
    let mut node = match Node::new(config, log.clone(), kv.clone(), clock.now()) {
        Ok(node) => node,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let (persist, jobs) = mpsc::channel();
    let writer_kv = kv.clone();
    let writer = match thread::Builder::new()
        .name("oxetcd-log".into())
        .spawn(move || write_log(log, writer_kv, jobs, commands))
    {
        Ok(writer) => writer,
        Err(e) => {
            let message = format!("spawning the log writer: {e}");
            let _ = started.send(Err(Error::Storage(StorageError::new(message))));
            return;
        }
    };
    let _ = started.send(Ok(()));

    let mut pending: Slab<oneshot::Sender<Reply>> = Slab::new();
    let mut routes = WatchRoutes::default();
    let mut feedback: Vec<Input> = Vec::new();
    let mut cluster = ClusterLinks {
        kv: kv.clone(),
        peers,
        received: BTreeMap::new(),
        known: HashMap::new(),
        member_id: node.member_id(),
        refused_as_removed: false,
    };
    cluster.sync_members(&node.members());
    let mut synced_at = node.applied_index();
    let mut hand_over: Option<HandOver> = None;
    // The first round drains what the node has to do at once (a sole
    // voter campaigns at start) before waiting for anything.
    let mut first_round = true;
    let ending = loop {
        let wake_at = [node.poll_timeout(), hand_over.as_ref().map(|h| h.deadline)]
            .into_iter()
            .flatten()
            .min();
        let first = match wake_at {
            _ if std::mem::take(&mut first_round) => None,
            Some(deadline) => match inbox.recv_timeout(deadline.saturating_since(clock.now())) {
                Ok(command) => Some(command),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break Ending::Abandoned,
            },
            None => match inbox.recv() {
                Ok(command) => Some(command),
                Err(_) => break Ending::Abandoned,
            },
        };
        let now = clock.now();
        let mut stop = None;
        let mut next = first;
        let mut fed = 0;
        while let Some(command) = next {
            match command {
                Command::Client(request, reply) => {
                    let slot = pending.vacant_entry();
                    let id = slot.key() as RequestId;
                    slot.insert(reply);
                    node.handle(now, Input::Client(id, request));
                }
                Command::Persisted(id) => node.handle(now, Input::Persisted { id }),
                Command::Stop(done) => {
                    if hand_over.is_some() {
                        // Stopping already; this caller waits no longer.
                        let _ = done.send(());
                    } else if let Some(to) = node.transfer_leadership_for_shutdown(now) {
                        info!(to = %format_args!("{to:x}"), "stopping: handing leadership over first");
                        hand_over = Some(HandOver {
                            done,
                            deadline: now + hand_over_time,
                        });
                    } else {
                        stop = Some(done);
                        break;
                    }
                }
                Command::WatchOpen {
                    stream,
                    items,
                    queued,
                } => routes.open(stream, items, queued),
                Command::WatchClosed(stream) => {
                    routes.close(stream);
                    node.handle(now, Input::WatchClosed { stream });
                }
                Command::Watch(input) => node.handle(now, input),
                // Before any message of the connection that taught it.
                Command::Peer(PeerEvent::ClusterId { id }) => node.set_cluster_id(id),
                Command::Peer(event) => {
                    if let Some(input) = cluster.peer_event(event) {
                        node.handle(now, input);
                    }
                }
            }
            fed += 1;
            next = if fed < INPUT_BATCH_MAX {
                inbox.try_recv().ok()
            } else {
                None
            };
        }
        if node.poll_timeout().is_some_and(|deadline| deadline <= now) {
            node.handle_timeout(now);
        }
        loop {
            while let Some(output) = node.poll_output() {
                let output = match cluster.execute(output, &persist, &mut feedback) {
                    Some(output) => output,
                    None => continue,
                };
                execute(output, &mut pending, &persist, &mut routes, &mut feedback);
            }
            // Stalled watchers: the node moves them to catch-up.
            if feedback.is_empty() {
                break;
            }
            for input in feedback.drain(..) {
                node.handle(now, input);
            }
        }
        // Membership changes are applied entries (or an installed
        // snapshot); between them the member list cannot change.
        if node.applied_index() != synced_at {
            synced_at = node.applied_index();
            cluster.sync_members(&node.members());
        }
        if ready.is_some() && node.is_ready() {
            if let Some(ready) = ready.take() {
                let _ = ready.send(node.cluster_id());
            }
        }
        if let Some(done) = stop {
            break Ending::Stop(done);
        }
        if node.is_removed() || cluster.refused_as_removed {
            error!("the member has been permanently removed from the cluster; stopping");
            break Ending::Removed;
        }
        if let Some(h) = hand_over.take() {
            let leader = node.leader();
            if leader.is_some_and(|l| l != node.member_id()) {
                info!(leader = ?leader.map(|l| format!("{l:x}")), "leadership handed over; stopping");
                break Ending::Stop(h.done);
            }
            if clock.now() >= h.deadline {
                warn!("leadership was not handed over in time; stopping anyway");
                break Ending::Stop(h.done);
            }
            hand_over = Some(h);
        }
    };

    for reply in pending.drain() {
        let _ = reply.send(Reply::Done(Err(Error::Stopped)));
    }
    // Let the log writer finish what it was given, so nothing acknowledged to
    // the node is half written.
    drop(persist);
    let _ = writer.join();
    if let Err(e) = kv.sync() {
        fatal("syncing the backend", &e);
    }
    info!("node stopped");
    match ending {
        Ending::Stop(done) => {
            let _ = done.send(());
        }
        Ending::Removed => {
            if let Some(removed) = removed {
                let _ = removed.send(());
            }
        }
        Ending::Abandoned => {}
    }
}

fn execute(
    output: Output,
    pending: &mut Slab<oneshot::Sender<Reply>>,
    persist: &Sender<LogJob>,
    routes: &mut WatchRoutes,
    feedback: &mut Vec<Input>,
) {
    match output {
        Output::Persist(job) => {
            // The writer only stops after this thread drops `persist`.
            let _ = persist.send(LogJob::Persist(job, None));
        }
        Output::CompactLog { index } => {
            let _ = persist.send(LogJob::Compact(index));
        }
        Output::Send(message) => {
            debug!(to = message.to, msg_type = ?message.msg_type, "no peer transport; message dropped");
        }
        Output::SendSnapshot { to, .. } => {
            debug!(to, "no peer transport; snapshot not sent");
            feedback.push(Input::SnapshotSent {
                to,
                delivered: false,
            });
        }
        Output::Respond(id, result) => {
            if let Err(Error::Storage(e)) = &result {
                fatal("applying entries", e);
            }
            answer(pending, id, Reply::Done(result));
        }
        Output::Read {
            id,
            request,
            header,
        } => answer(pending, id, Reply::Read { request, header }),
        Output::Fatal(e) => fatal("the node's storage", &e),
        Output::Watch {
            stream,
            response,
            fragment,
        } => feedback.extend(routes.deliver(stream, response, fragment)),
        Output::WatchEvents { stream, deliveries } => {
            routes.deliver_events(stream, deliveries, feedback)
        }
        Output::WatchCatchUp(job) => routes.catch_up(job),
    }
}

/// The driver's side of the cluster: the peer link, snapshots received and
/// not yet installed, and the peers the link was given.
struct ClusterLinks<K> {
    kv: K,
    peers: Option<Arc<dyn PeerLink>>,
    /// Received snapshots by index, until a `Persist` installs one (older
    /// ones go with it).
    received: BTreeMap<u64, ReceivedSnapshot>,
    /// The peers handed to the link, with their URLs.
    known: HashMap<u64, Vec<String>>,
    member_id: u64,
    /// A peer refused this member as removed from the cluster.
    refused_as_removed: bool,
}

impl<K: KvStore> ClusterLinks<K> {
    /// Turns a transport event into the node's input, if it is one.
    fn peer_event(&mut self, event: PeerEvent) -> Option<Input> {
        match event {
            PeerEvent::Message(message) => Some(Input::Peer(message)),
            PeerEvent::Snapshot { message, data } => {
                let index = message.get_snapshot().get_metadata().index;
                info!(
                    from = message.from,
                    index,
                    bytes = data.len_bytes(),
                    "received a snapshot"
                );
                self.received.insert(index, data);
                Some(Input::SnapshotReceived { message })
            }
            PeerEvent::Unreachable { to } => Some(Input::Unreachable { to }),
            // The run loop hands it to the node itself.
            PeerEvent::ClusterId { .. } => None,
            PeerEvent::SnapshotSent { to, delivered } => {
                info!(to, delivered, "snapshot stream ended");
                Some(Input::SnapshotSent { to, delivered })
            }
            PeerEvent::RemovedFromCluster { by } => {
                warn!(
                    by = %format_args!("{by:x}"),
                    "this member was removed from the cluster"
                );
                self.refused_as_removed = true;
                None
            }
        }
    }

    /// Executes what concerns peers; hands every other output back.
    fn execute(
        &mut self,
        output: Output,
        persist: &Sender<LogJob>,
        feedback: &mut Vec<Input>,
    ) -> Option<Output> {
        let Some(peers) = &self.peers else {
            return Some(output);
        };
        match output {
            Output::Send(message) => {
                let to = message.to;
                if let Err(e) = peers.send(message) {
                    debug!(to, error = %e, "peer message dropped");
                    feedback.push(Input::Unreachable { to });
                }
                None
            }
            Output::SendSnapshot { to, message } => {
                // The view must be taken before the node applies anything
                // more: it is the state at the snapshot index.
                let view = match self.kv.read() {
                    Ok(view) => view,
                    Err(e) => fatal("reading the backend for a snapshot", &e),
                };
                let index = message.get_snapshot().get_metadata().index;
                info!(to, index, "streaming a snapshot");
                let chunks = SnapshotExport::new(view, CHUNK_BYTES_DEFAULT)
                    .map(|chunk| chunk.map(bytes::Bytes::from));
                peers.send_snapshot(message, Box::new(chunks));
                None
            }
            Output::Persist(job) if job.snapshot.is_some() => {
                let index = job.snapshot.as_ref().map_or(0, |m| m.index);
                let data = self.received.remove(&index);
                // Older snapshots are superseded; their files go.
                self.received = self.received.split_off(&index);
                let _ = persist.send(LogJob::Persist(job, data));
                None
            }
            other => Some(other),
        }
    }

    /// Gives the link the node's members (other than this one) and takes
    /// away those that are gone.
    fn sync_members(&mut self, members: &[Member]) {
        let Some(peers) = &self.peers else {
            return;
        };
        let mut seen = HashMap::new();
        for member in members {
            if member.id == self.member_id || member.id == 0 {
                continue;
            }
            if self.known.get(&member.id) != Some(&member.peer_ur_ls) {
                info!(
                    peer = %format_args!("{:x}", member.id),
                    urls = ?member.peer_ur_ls,
                    "peer added or updated"
                );
                peers.add_peer(member.id, member.peer_ur_ls.clone());
            }
            seen.insert(member.id, member.peer_ur_ls.clone());
        }
        for id in self.known.keys() {
            if !seen.contains_key(id) {
                info!(peer = %format_args!("{id:x}"), "peer removed");
                peers.remove_peer(*id);
            }
        }
        self.known = seen;
    }
}

fn answer(pending: &mut Slab<oneshot::Sender<Reply>>, id: RequestId, reply: Reply) {
    let waiter = usize::try_from(id)
        .ok()
        .and_then(|key| pending.try_remove(key));
    match waiter {
        // The client may have gone away; its answer is simply dropped.
        Some(waiter) => {
            let _ = waiter.send(reply);
        }
        None => debug!(request_id = id, "answer for an unknown request"),
    }
}

/// The log writer thread's body: one fsynced append per persist,
/// acknowledged in order; compactions after a backend sync.
fn write_log<L: LogStore, K: KvStore>(
    log: L,
    kv: K,
    jobs: Receiver<LogJob>,
    commands: Sender<Command>,
) {
    for job in jobs {
        match job {
            LogJob::Persist(persist, data) => {
                if let Some(snapshot) = &persist.snapshot {
                    let what = format!("installing snapshot {}", snapshot.index);
                    let Some(data) = data else {
                        fatal(&what, &"no snapshot data was received");
                    };
                    if let Err(e) = install_snapshot(&log, &kv, snapshot, &data) {
                        fatal(&what, &e);
                    }
                }
                if let Err(e) = log.append(&persist.entries, persist.hard_state.as_ref()) {
                    fatal("appending to the raft log", &e);
                }
                if commands.send(Command::Persisted(persist.id)).is_err() {
                    break;
                }
            }
            LogJob::Compact(index) => {
                // The log is the durable record of what the backend holds
                // only as far as the backend is durable.
                if let Err(e) = kv.sync() {
                    fatal("syncing the backend", &e);
                }
                if let Err(e) = log.compact(index + 1) {
                    fatal("compacting the raft log", &e);
                }
            }
        }
    }
}

/// Replaces the backend with a received snapshot, makes it durable, then
/// resets the log to start after it.
fn install_snapshot<L: LogStore, K: KvStore>(
    log: &L,
    kv: &K,
    snapshot: &oxetcd_proto::eraftpb::SnapshotMetadata,
    data: &ReceivedSnapshot,
) -> Result<(), String> {
    let file = std::fs::File::open(data.path())
        .map_err(|e| format!("opening {}: {e}", data.path().display()))?;
    let mut write = kv.write().map_err(|e| e.to_string())?;
    let meta = backend_snapshot::import(&mut write, std::io::BufReader::new(file))
        .map_err(|e| e.to_string())?;
    if meta.applied_index != snapshot.index {
        return Err(format!(
            "the data holds index {} but the snapshot is at {}",
            meta.applied_index, snapshot.index
        ));
    }
    write.commit().map_err(|e| e.to_string())?;
    kv.sync().map_err(|e| e.to_string())?;
    log.install_snapshot(snapshot.index, snapshot.term)
        .map_err(|e| e.to_string())?;
    info!(
        index = snapshot.index,
        revision = meta.revision,
        "installed a snapshot into the backend"
    );
    Ok(())
}

fn fatal_storage(e: StorageError) -> Error {
    fatal("reading the backend", &e)
}

/// Logs a storage failure and exits: storage errors are never retried.
fn fatal(what: &str, error: &dyn std::fmt::Display) -> ! {
    error!(error = %error, "{what} failed; stopping");
    std::process::exit(1)
}

/// The driver's monotonic clock, as the node's [`Instant`]: nanoseconds
/// since the driver started.
struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            origin: std::time::Instant::now(),
        }
    }

    fn now(&self) -> Instant {
        let nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Instant::from_nanos(nanos)
    }
}

#[cfg(test)]
mod tests {
    use oxetcd_core::memory::{MemoryKv, MemoryLog};
    use oxetcd_proto::etcdserverpb::PutRequest;

    use super::*;

    fn thread_blocking() -> Blocking {
        Arc::new(|work| {
            thread::spawn(work);
        })
    }

    fn put(key: &str, value: &str) -> Request {
        Request::Put(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        })
    }

    /// Concurrent writes all land, a range sees them with the snapshot's
    /// revision, and stopping answers later requests with `Stopped`.
    #[test]
    fn writes_then_reads_then_stops() {
        futures_lite::future::block_on(async {
            let config = oxetcd_core::Config::single("test");
            let handle = start(
                config,
                MemoryLog::default(),
                MemoryKv::default(),
                thread_blocking(),
            )
            .await
            .unwrap();
            let writes = (0..64).map(|i| handle.request(put(&format!("k{i:02}"), "v")));
            for result in futures_util::future::join_all(writes).await {
                assert!(matches!(result, Ok(Response::Put(_))), "{result:?}");
            }
            let range = RangeRequest {
                key: b"k".to_vec(),
                range_end: b"l".to_vec(),
                ..Default::default()
            };
            let Ok(Response::Range(response)) = handle.request(Request::Range(range)).await else {
                panic!("range failed");
            };
            assert_eq!(response.count, 64);
            let header = response.header.unwrap();
            assert_eq!(header.revision, 65);
            assert_eq!(handle.meta().await.unwrap().revision, 65);

            handle.stop().await;
            assert_eq!(handle.request(put("late", "v")).await, Err(Error::Stopped));
        });
    }

    #[test]
    fn in_flight_bound_refuses_beyond_the_limit() {
        futures_lite::future::block_on(async {
            let config = oxetcd_core::Config::single("test");
            let handle = start(
                config,
                MemoryLog::default(),
                MemoryKv::default(),
                thread_blocking(),
            )
            .await
            .unwrap();
            handle
                .in_flight
                .store(IN_FLIGHT_REQUESTS_MAX, Ordering::Release);
            assert_eq!(
                handle.request(put("k", "v")).await,
                Err(Error::TooManyRequests)
            );
            handle.in_flight.store(0, Ordering::Release);
            assert!(handle.request(put("k", "v")).await.is_ok());
            assert_eq!(handle.in_flight.load(Ordering::Acquire), 0);
            handle.stop().await;
        });
    }
}
