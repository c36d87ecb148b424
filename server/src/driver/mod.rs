//! The driver: runs the node on its own OS thread and connects it to the
//! async world.
//!
//! Design:
//! - The [`Node`] lives on one dedicated thread, because applying entries
//!   writes the backend with blocking calls that must not stall an async
//!   executor. The thread waits on a `std::sync::mpsc` channel until the next
//!   command or the node's `poll_timeout` (polling it a while before it
//!   blocks, while commands come soon: see [`spin`]), feeds every command already queued
//!   (up to [`INPUT_BATCH_MAX`]) with `now` from a monotonic clock, then
//!   drains `poll_output` until `None`. Feeding a burst before draining is how
//!   many client requests end up in one proposal batch.
//! - `Output::Persist` goes to a second thread that owns the log writes: it
//!   calls [`LogStore::append`] (fsync) and answers `Input::Persisted` with
//!   the persist's ID through the driver's channel, once per `Persist` and
//!   in order. The node asks for the next write only after the previous one
//!   is acknowledged, so writes that arrive during an fsync share the next
//!   one (group commit). When the log writer has nothing queued, the driver
//!   makes the append itself once the round's other outputs are out, and
//!   feeds `Input::Persisted` at once: with the log's fsync near the
//!   disk's floor (tens of microseconds), the two thread wake-ups of the
//!   hand-off are a large share of a single client's put. Log compactions (`Output::CompactLog`) go to the
//!   same thread, after a sync of the backend, and so does a cluster ID
//!   learned from the peers (`Output::StoreClusterId`), stored in the log
//!   before any entry from that cluster.
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
//!   run concurrently with writes and with each other. A serializable range
//!   the node says may skip it (auth off, no token: see [`direct`]) does
//!   not cross to the driver thread at all.
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
//! - A full disk met by a log append is not final: the append is retried
//!   until space returns and writes are refused meanwhile (see
//!   [`disk_full`]). Any other storage error is final: it is logged and the
//!   process exits non-zero.
//!   A panic on the driver thread (a bug) is treated the same way, because a
//!   server whose node is gone cannot answer anything.

use self::run::drive;
use self::run::Signals;

mod awaited;
mod direct;
mod disk_full;
mod execute;
mod handle;
mod links;
mod log_writer;
mod run;
mod spin;

pub use handle::Handle;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;

use futures_channel::{mpsc as async_mpsc, oneshot};
use oxetcd_core::auth::Credentials;
use oxetcd_core::raft::{Persist, PersistId};
use oxetcd_core::storage::{Cause, KvStore, LogStore, StorageError};
use oxetcd_core::watch::StreamId;
use oxetcd_core::{Config, Error, Input, Request, Response};
use oxetcd_proto::eraftpb::Message;
use oxetcd_proto::etcdserverpb::{RangeRequest, ResponseHeader};
use tracing::error;

use crate::metrics::{Metrics, MetricsSettings};
use crate::peer::{PeerEvent, PeerTransport, ReceivedSnapshot, SendError};
use crate::runtime::Runtime;
use crate::slow_requests::SlowRequests;
use crate::watch_routes::StreamItem;

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
    /// Stops dialing a peer the membership does not list, still serving
    /// its connections (see [`PeerTransport::forget_peer`]).
    fn forget_peer(&self, id: u64);
    /// The peers dialed, by ID.
    fn peers(&self) -> Vec<u64>;
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

    fn forget_peer(&self, id: u64) {
        PeerTransport::forget_peer(self, id);
    }

    fn peers(&self) -> Vec<u64> {
        PeerTransport::peers(self)
    }
}

/// The driver's command channel, made before the driver starts so that the
/// peer transport can be built to deliver into it.
pub struct Mailbox {
    commands: Sender<Command>,
    inbox: Receiver<Command>,
    removed: Option<oneshot::Sender<()>>,
    ready: Option<oneshot::Sender<u64>>,
    slow: SlowRequests,
}

impl Default for Mailbox {
    fn default() -> Self {
        let (commands, inbox) = mpsc::channel();
        Self {
            commands,
            inbox,
            removed: None,
            ready: None,
            slow: SlowRequests::default(),
        }
    }
}

impl Mailbox {
    /// Requests slower than these are warned about (etcd's defaults
    /// otherwise).
    pub fn warn_slow_requests(&mut self, slow: SlowRequests) {
        self.slow = slow;
    }

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

/// What the driver thread receives.
enum Command {
    Client(Request, Credentials, oneshot::Sender<Reply>),
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
    /// The live keys of the backend the node started from.
    KeysCounted(u64),
    /// The log writer found the disk full (`true`), or wrote again after it
    /// was (`false`).
    DiskFull(bool),
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
    /// Store the cluster ID learned from the peers, before any later
    /// persist.
    ClusterId(u64),
}

/// Starts the node on `log` and `kv` on its own thread; returns once the
/// node has been built (it may replay log entries first).
pub async fn start<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    blocking: Blocking,
) -> Result<Handle<K>, Error> {
    let metrics = Arc::new(Metrics::new(&MetricsSettings::default()));
    start_with_peers(config, log, kv, blocking, Mailbox::default(), None, metrics).await
}

/// Starts the node as [`start`] does, on `mailbox`, reaching its peers
/// through `peers`, recording into `metrics`.
pub async fn start_with_peers<L: LogStore, K: KvStore>(
    config: Config,
    log: L,
    kv: K,
    blocking: Blocking,
    mailbox: Mailbox,
    peers: Option<Arc<dyn PeerLink>>,
    metrics: Arc<Metrics>,
) -> Result<Handle<K>, Error> {
    let Mailbox {
        commands,
        inbox,
        removed,
        ready,
        slow,
    } = mailbox;
    let (started, on_start) = oneshot::channel();
    let direct = Arc::new(direct::DirectGate::default());
    let driver_direct = direct.clone();
    let node_kv = kv.clone();
    let persisted = commands.clone();
    let driver_metrics = metrics.clone();
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
                    peers,
                    Signals {
                        started,
                        removed,
                        ready,
                        metrics: driver_metrics,
                        direct: driver_direct,
                    },
                    slow,
                )
            });
            if panic::catch_unwind(run).is_err() {
                error!("the node thread panicked; stopping");
                std::process::exit(1);
            }
        })
        .map_err(|e| {
            Error::Storage(StorageError::Io {
                during: "spawning the node thread".into(),
                source: Cause::new(e),
            })
        })?;
    match on_start.await {
        Ok(Ok(())) => Ok(Handle {
            commands,
            in_flight: Arc::new(AtomicUsize::new(0)),
            kv,
            blocking,
            next_stream: Arc::new(AtomicU64::new(1)),
            slow,
            metrics,
            direct,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::Stopped),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use oxetcd_core::memory::{MemoryKv, MemoryLog};
    use oxetcd_proto::etcdserverpb::PutRequest;

    use super::*;

    fn thread_blocking() -> Blocking {
        Arc::new(|work| {
            thread::spawn(work);
        })
    }

    /// A single member on in-memory stores, started.
    async fn started() -> Handle<MemoryKv> {
        let config = oxetcd_core::Config::single("test");
        start(
            config,
            MemoryLog::default(),
            MemoryKv::default(),
            thread_blocking(),
        )
        .await
        .unwrap()
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
            let handle = started().await;
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

    /// A raised CORRUPT alarm is applied and stored: writes fail with
    /// etcd's error, reads work, and the backend lists it for `/health`.
    #[test]
    fn a_raised_alarm_stops_writes() {
        use oxetcd_proto::etcdserverpb::AlarmType;
        futures_lite::future::block_on(async {
            let handle = started().await;
            assert!(handle.request(put("k", "v")).await.is_ok());
            handle.raise_alarm(7, AlarmType::Corrupt).await.unwrap();
            handle.raise_alarm(7, AlarmType::Corrupt).await.unwrap();
            assert_eq!(handle.request(put("k", "w")).await, Err(Error::Corrupt));
            let alarms = handle.local_alarms().await.unwrap();
            assert_eq!(alarms.len(), 1);
            assert_eq!((alarms[0].member_id, alarms[0].alarm), (7, 2));
            let range = Request::Range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            });
            assert!(handle.request(range).await.is_ok());
            handle.stop().await;
        });
    }

    #[test]
    fn in_flight_bound_refuses_beyond_the_limit() {
        futures_lite::future::block_on(async {
            let handle = started().await;
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
