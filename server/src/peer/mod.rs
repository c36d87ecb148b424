//! The peer transport: raft messages and snapshots between members, over
//! TCP or TLS over TCP, on any [`Runtime`].
//!
//! Design:
//! - Each known peer has one outbound connection carrying a *messages
//!   stream*, written by one task from a bounded [`SendQueue`]. The driver
//!   pushes with [`PeerTransport::send`], which never blocks: when the queue
//!   is full or the peer is not connected, the message is dropped, counted,
//!   and the error tells the driver to call `report_unreachable` (raft
//!   resends whatever matters). The task dials with exponential backoff
//!   and seeded jitter, and redials when the connection fails, stalls, or
//!   the peer's URLs change.
//! - A snapshot travels on a connection of its own (a *snapshot stream*),
//!   so heartbeats and appends keep flowing while it streams; its outcome
//!   comes back as [`PeerEvent::SnapshotSent`] for `report_snapshot`.
//! - The listener (`--listen-peer-urls`) accepts connections, checks each
//!   handshake (magic, version, cluster ID, receiver ID, removed senders),
//!   and hands every decoded message to the driver as a [`PeerEvent`]. It
//!   serves nothing else: anything that is not our handshake is closed.
//! - `https://` peer URLs mean TLS: a listener started with
//!   [`PeerTransport::listen_tls`] completes a TLS handshake on each
//!   connection before ours, and a dial to an `https://` URL does the same
//!   as a client (see `tls.rs`). That is the only difference;
//!   the handshake and frames above it are the same.
//! - A malformed, oversized or truncated frame, or a message that claims
//!   another sender, closes that one connection and is logged; nothing a
//!   peer sends reaches an assertion or an `unwrap`.
//!
//! The wire format is in [`wire`](self::wire) (private; documented there).
//! This module never blocks a runtime thread: file writes for incoming
//! snapshots and pulls from a snapshot's chunk iterator run as blocking work.

mod admission;
#[cfg(test)]
mod fuzz_tests;
mod hash_kv;
mod inbound;
mod members;
mod outbound;
mod queue;
mod snapshot;
mod stream;
pub(crate) mod tls;
mod wire;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_channel::oneshot;
use oxetcd_proto::eraftpb::{Message, MessageType};
use tracing::warn;

use crate::runtime::Runtime;
use crate::socket::{BoundSocket, SocketAddress};
use queue::{PushError, SendQueue};

pub use admission::HANDSHAKES_MAX;
pub use hash_kv::{HashKvService, PeerHashError};
pub use members::{ClusterFacts, MembersService};
pub use snapshot::ReceivedSnapshot;
pub use tls::TransportTls;

/// Largest frame body accepted or sent by default: a raft append carries up
/// to 1 MiB of entries plus at least one entry, which may be as large as a
/// client request (`--max-request-bytes`, 1.5 MiB by default); the rest is
/// margin for the message's own fields. Raise it with
/// [`PeerTransportConfig::for_request_bytes`] when requests may be larger.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 4 * 1024 * 1024;

/// Messages queued for one peer at most. At etcd's default pacing (a
/// heartbeat per 100 ms, appends batched per fsync) a healthy peer drains a
/// handful per round trip; this absorbs a burst of proposals while the
/// socket is momentarily full, and beyond it the peer is treated as
/// unreachable rather than buffering without bound.
pub const SEND_QUEUE_MESSAGES_MAX: usize = 4096;

/// Largest snapshot accepted by default, in bytes: etcd's largest
/// recommended backend quota (8 GiB). Snapshots go to a file, not memory.
pub const SNAPSHOT_BYTES_MAX_DEFAULT: u64 = 8 * 1024 * 1024 * 1024;

/// Data bytes per snapshot frame at most; larger chunks from the caller are
/// split. Small enough that one frame is written well within
/// [`STALL_TIMEOUT`] on a slow link, large enough to keep syscalls few.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

/// Connections on the peer port at once, at most; more are closed on
/// accept. A cluster has a few members with two kinds of stream each; the
/// rest is headroom for reconnects racing the close of their predecessors.
pub const INBOUND_CONNECTIONS_MAX: usize = 256;

/// Snapshots received at once, at most; more are refused as busy and the
/// leader retries later. Each holds a file and a connection.
pub const INBOUND_SNAPSHOTS_MAX: usize = 2;

/// A dial that has not connected by then is abandoned (a black-holed
/// address otherwise hangs for minutes in the kernel).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Time allowed for a handshake, each way.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A write that makes no progress for this long means the peer or the path
/// is gone without a reset (a partition): the connection is dropped and
/// redialed. etcd's rafthttp uses the same figure for its write deadline.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a snapshot sender waits for the receiver's acknowledgement
/// after the last frame: the receiver syncs the whole file first.
pub const SNAPSHOT_ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// First redial delay after a failure; doubles per failure.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(50);

/// Longest redial delay. Kept at an election timeout (etcd's default) so a
/// restarted member is heard from before the others would elect without it.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Messages encoded per write at most, so one burst cannot starve the
/// close and stall checks between writes.
const WRITE_BATCH_MESSAGES_MAX: usize = 256;

/// What the transport needs to know about its member and its limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTransportConfig {
    /// The cluster this member belongs to; connections from other clusters
    /// are refused. 0: a member joining an existing cluster, which learns
    /// the ID from its peers (see [`PeerEvent::ClusterId`] and `wire.rs`).
    pub cluster_id: u64,
    /// This member's ID; connections meant for another member are refused.
    pub member_id: u64,
    /// Largest frame body sent or accepted, in bytes.
    pub frame_bytes_max: usize,
    /// Messages queued per peer at most.
    pub send_queue_messages_max: usize,
    /// Where incoming snapshots are written (created if missing). Files
    /// here named `*.snap.part` are the transport's.
    pub snapshot_dir: PathBuf,
    /// Largest incoming snapshot accepted, in bytes.
    pub snapshot_bytes_max: u64,
    /// Seeds the reconnect jitter.
    pub rng_seed: u64,
    /// TLS of the `https://` peer links, both ways; `None`: none can be
    /// served or dialed.
    pub tls: Option<TransportTls>,
}

impl PeerTransportConfig {
    /// The defaults for member `member_id` of cluster `cluster_id`.
    pub fn new(cluster_id: u64, member_id: u64, snapshot_dir: PathBuf) -> Self {
        Self {
            cluster_id,
            member_id,
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            send_queue_messages_max: SEND_QUEUE_MESSAGES_MAX,
            snapshot_dir,
            snapshot_bytes_max: SNAPSHOT_BYTES_MAX_DEFAULT,
            rng_seed: member_id,
            tls: None,
        }
    }

    /// Raises the frame limit so an append carrying a request of
    /// `max_request_bytes` (plus a full batch of others) still fits.
    pub fn for_request_bytes(mut self, max_request_bytes: usize) -> Self {
        /// raft's default bytes of entries per append, plus field overhead.
        const APPEND_BATCH_AND_MARGIN_BYTES: usize = 1024 * 1024 + 512 * 1024;
        self.frame_bytes_max = self
            .frame_bytes_max
            .max(max_request_bytes.saturating_add(APPEND_BATCH_AND_MARGIN_BYTES));
        self
    }
}

/// What the transport hands to the driver.
#[derive(Debug)]
pub enum PeerEvent {
    /// A raft message from a peer: feed it to `step`. Its `from` is the
    /// authenticated sender of its connection and its `to` is this member.
    Message(Message),
    /// A whole snapshot from the leader: install `data` if raft accepts
    /// `message` (a `MsgSnapshot`). The file is deleted when `data` is
    /// dropped unless the driver takes it with [`ReceivedSnapshot::keep`].
    Snapshot {
        /// The `MsgSnapshot` that ended the stream.
        message: Message,
        /// The snapshot's data, durably written.
        data: ReceivedSnapshot,
    },
    /// Messages to `to` were lost with a broken connection: call
    /// `report_unreachable(to)`.
    Unreachable {
        /// The peer.
        to: u64,
    },
    /// A [`PeerTransport::send_snapshot`] finished: call
    /// `report_snapshot(to, delivered)`.
    SnapshotSent {
        /// The peer.
        to: u64,
        /// The peer acknowledged the whole snapshot.
        delivered: bool,
    },
    /// This member joined without a cluster ID and learned it from a peer:
    /// hand it to the node and store it. Delivered before any message of
    /// the connection that taught it, and at most once.
    ClusterId {
        /// The cluster's ID (never 0).
        id: u64,
    },
    /// Peer `by` refused us because this member was removed from the
    /// cluster; etcd stops such a member.
    RemovedFromCluster {
        /// The peer that said so.
        by: u64,
    },
}

/// Receives the transport's events. Called from runtime tasks, so it must
/// not block: forward into the driver's channel and return. It may drop
/// messages under pressure (raft tolerates loss) but should keep
/// [`PeerEvent::SnapshotSent`], which raft waits for, and
/// [`PeerEvent::ClusterId`].
pub type Deliver = Arc<dyn Fn(PeerEvent) + Send + Sync>;

/// Why [`PeerTransport::send`] dropped a message. For every variant the
/// driver should call `report_unreachable(to)`; the message is counted as
/// dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// No such peer (never added, or removed).
    UnknownPeer,
    /// The peer is not connected (dialing or backing off).
    Disconnected,
    /// The peer's send queue is full.
    QueueFull,
    /// `MsgSnapshot` travels with [`PeerTransport::send_snapshot`].
    SnapshotMessage,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownPeer => "unknown peer",
            Self::Disconnected => "peer not connected",
            Self::QueueFull => "peer send queue full",
            Self::SnapshotMessage => "snapshots must be sent with send_snapshot",
        })
    }
}

impl std::error::Error for SendError {}

/// Counters of one peer, for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// The messages stream is up.
    pub connected: bool,
    /// Messages written to the socket.
    pub sent_messages: u64,
    /// Messages dropped (queue full, not connected, lost with a
    /// connection, too large).
    pub dropped_messages: u64,
    /// Successful dials of the messages stream.
    pub connects: u64,
}

/// The peer transport of one member. Cheap to clone; all clones share it.
pub struct PeerTransport<R: Runtime> {
    shared: Arc<Shared<R>>,
}

impl<R: Runtime> Clone for PeerTransport<R> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// What every task of the transport shares.
struct Shared<R> {
    runtime: R,
    config: PeerTransportConfig,
    /// The cluster ID in use: the configured one, or, if that was 0, the
    /// one learned from a peer. Changed under its lock together with the
    /// delivery of [`PeerEvent::ClusterId`], so no connection accepted on
    /// the learned ID delivers a message before it.
    cluster_id: Mutex<u64>,
    deliver: Deliver,
    peers: Mutex<HashMap<u64, Arc<Peer>>>,
    /// Members removed from the cluster: their connections are refused.
    removed: Mutex<HashSet<u64>>,
    /// The live inbound messages stream of each sender, by connection
    /// number; dropping the sender half ends the stream (replaced or
    /// removed).
    inbound_streams: Mutex<HashMap<u64, (u64, oneshot::Sender<()>)>>,
    /// Dropping these stops the accept loops.
    listeners: Mutex<Vec<oneshot::Sender<()>>>,
    inbound_connections: AtomicUsize,
    /// Inbound connections whose handshake is not done yet.
    handshakes: admission::Handshakes,
    inbound_snapshots: AtomicUsize,
    next_connection: AtomicU64,
    stopped: AtomicBool,
    /// How this member answers a peer's `HashKV` question, once its node
    /// runs.
    hash_kv: OnceLock<HashKvService>,
    /// How this member tells a joining peer the membership, once its node
    /// runs.
    members: OnceLock<MembersService>,
    /// Where bytes, connections and heartbeat round trips are recorded,
    /// once set.
    metrics: OnceLock<crate::metrics::PeerMetrics>,
    /// The origin of the heartbeat send times below.
    started: std::time::Instant,
}

/// One peer as the sending side sees it.
struct Peer {
    id: u64,
    urls: Mutex<Vec<String>>,
    queue: SendQueue,
    sent: AtomicU64,
    dropped: AtomicU64,
    connects: AtomicU64,
    connected: AtomicBool,
    snapshot_in_flight: AtomicBool,
    /// When the last heartbeat to this peer was queued (nanoseconds since
    /// the transport started; 0: answered or none), for the round trip.
    heartbeat_queued_nanos: AtomicU64,
}

impl<R: Runtime> PeerTransport<R> {
    /// A transport with no peers and no listener yet.
    pub fn new(runtime: R, mut config: PeerTransportConfig, deliver: Deliver) -> Self {
        // A frame's length field is 32 bits.
        config.frame_bytes_max = config.frame_bytes_max.min(u32::MAX as usize);
        Self {
            shared: Arc::new(Shared {
                runtime,
                cluster_id: Mutex::new(config.cluster_id),
                config,
                deliver,
                peers: Mutex::new(HashMap::new()),
                removed: Mutex::new(HashSet::new()),
                inbound_streams: Mutex::new(HashMap::new()),
                listeners: Mutex::new(Vec::new()),
                inbound_connections: AtomicUsize::new(0),
                handshakes: admission::Handshakes::default(),
                inbound_snapshots: AtomicUsize::new(0),
                next_connection: AtomicU64::new(1),
                stopped: AtomicBool::new(false),
                hash_kv: OnceLock::new(),
                members: OnceLock::new(),
                metrics: OnceLock::new(),
                started: std::time::Instant::now(),
            }),
        }
    }

    /// This member's ID.
    pub fn member_id(&self) -> u64 {
        self.shared.config.member_id
    }

    /// Records bytes, connections and heartbeat round trips into
    /// `metrics` from now on (connections already up are counted from
    /// their next redial). Only the first call counts.
    pub fn set_metrics(&self, metrics: crate::metrics::PeerMetrics) {
        let _ = self.shared.metrics.set(metrics);
    }

    /// Serves peers on `listener` (bound by the caller, so a busy port
    /// fails before anything starts). Returns the bound address.
    pub fn listen(&self, listener: impl Into<BoundSocket>) -> io::Result<SocketAddress> {
        self.serve_on(listener.into(), None)
    }

    /// Serves peers on `listener` over TLS (an `https://` listen peer URL),
    /// with the server side of [`PeerTransportConfig::tls`]; an error when
    /// that is not set.
    pub fn listen_tls(&self, listener: impl Into<BoundSocket>) -> io::Result<SocketAddress> {
        let Some(tls) = &self.shared.config.tls else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no peer TLS configuration for an https:// peer URL",
            ));
        };
        self.serve_on(listener.into(), Some(tls.server.clone()))
    }

    fn serve_on(
        &self,
        socket: BoundSocket,
        tls: Option<Arc<oxetcd_tls::rustls::ServerConfig>>,
    ) -> io::Result<SocketAddress> {
        socket.set_nonblocking()?;
        let addr = socket.local_address()?;
        let listener = self.shared.runtime.listener(socket)?;
        let (stop, stopped) = oneshot::channel();
        lock(&self.shared.listeners).push(stop);
        tracing::info!(address = %addr, tls = tls.is_some(), "serving peer traffic");
        self.shared.runtime.spawn(inbound::accept_loop(
            self.shared.clone(),
            listener,
            stopped,
            tls,
        ));
        Ok(addr)
    }

    /// Adds peer `id` reachable at `urls` (`http://host:port`, or
    /// `https://host:port` for TLS), or updates its URLs if it is known.
    /// Dialing starts at once.
    pub fn add_peer(&self, id: u64, urls: Vec<String>) {
        if id == self.shared.config.member_id || id == 0 {
            warn!(peer = %Id(id), "not adding this member (or ID 0) as its own peer");
            return;
        }
        lock(&self.shared.removed).remove(&id);
        let mut peers = lock(&self.shared.peers);
        if let Some(peer) = peers.get(&id) {
            let peer = peer.clone();
            drop(peers);
            Self::set_urls(&peer, urls);
            return;
        }
        let peer = Arc::new(Peer {
            id,
            urls: Mutex::new(urls),
            queue: SendQueue::new(self.shared.config.send_queue_messages_max),
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            snapshot_in_flight: AtomicBool::new(false),
            heartbeat_queued_nanos: AtomicU64::new(0),
        });
        peers.insert(id, peer.clone());
        drop(peers);
        if self.shared.stopped.load(Ordering::Acquire) {
            peer.queue.close();
            return;
        }
        self.shared
            .runtime
            .spawn(outbound::run_peer(self.shared.clone(), peer));
    }

    /// Changes the URLs of peer `id` (etcd's `member update`); its
    /// connection is redialed. Unknown peers are ignored.
    pub fn update_peer(&self, id: u64, urls: Vec<String>) {
        let peer = lock(&self.shared.peers).get(&id).cloned();
        if let Some(peer) = peer {
            Self::set_urls(&peer, urls);
        }
    }

    fn set_urls(peer: &Peer, urls: Vec<String>) {
        let mut current = lock(&peer.urls);
        if *current != urls {
            *current = urls;
            drop(current);
            peer.queue.request_redial();
        }
    }

    /// Forgets peer `id`: its queue and connections close, and from now on
    /// its connections are refused as removed.
    pub fn remove_peer(&self, id: u64) {
        lock(&self.shared.removed).insert(id);
        if let Some(peer) = lock(&self.shared.peers).remove(&id) {
            peer.queue.close();
        }
        // Dropping the stop sender ends its inbound stream.
        lock(&self.shared.inbound_streams).remove(&id);
    }

    /// Stops dialing peer `id` and drops what is queued for it. Unlike
    /// [`Self::remove_peer`], its connections are still served: it is not
    /// known as removed, only not (or no longer) a member this one dials,
    /// such as an ID `--initial-cluster` derived that the cluster does not
    /// use.
    pub fn forget_peer(&self, id: u64) {
        if let Some(peer) = lock(&self.shared.peers).remove(&id) {
            peer.queue.close();
        }
    }

    /// The peers known, by ID.
    pub fn peers(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = lock(&self.shared.peers).keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Counters of peer `id`.
    pub fn stats(&self, id: u64) -> Option<PeerStats> {
        let peer = lock(&self.shared.peers).get(&id).cloned()?;
        Some(PeerStats {
            connected: peer.connected.load(Ordering::Acquire),
            sent_messages: peer.sent.load(Ordering::Relaxed),
            dropped_messages: peer.dropped.load(Ordering::Relaxed),
            connects: peer.connects.load(Ordering::Relaxed),
        })
    }

    /// Queues `message` for `message.to` without blocking. On an error the
    /// message is dropped (and counted); the driver should then call
    /// `report_unreachable(message.to)`.
    pub fn send(&self, message: Message) -> Result<(), SendError> {
        if message.msg_type == MessageType::MsgSnapshot {
            return Err(SendError::SnapshotMessage);
        }
        let peer = lock(&self.shared.peers)
            .get(&message.to)
            .cloned()
            .ok_or(SendError::UnknownPeer)?;
        if message.msg_type == MessageType::MsgHeartbeat && self.shared.metrics.get().is_some() {
            let nanos = self.shared.started.elapsed().as_nanos();
            let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).max(1);
            peer.heartbeat_queued_nanos.store(nanos, Ordering::Relaxed);
        }
        peer.queue.push(message).map_err(|e| {
            peer.dropped.fetch_add(1, Ordering::Relaxed);
            match e {
                PushError::Full => SendError::QueueFull,
                PushError::Disconnected => SendError::Disconnected,
                PushError::Closed => SendError::UnknownPeer,
            }
        })
    }

    /// Streams a snapshot to `message.to` on a connection of its own:
    /// `chunks` (pulled on a blocking thread, so it may read storage), then
    /// `message`, the `MsgSnapshot` built by raft's `snapshot_message`. The
    /// outcome arrives as exactly one [`PeerEvent::SnapshotSent`]. One
    /// snapshot per peer at a time; a second while one streams fails.
    pub fn send_snapshot<I>(&self, message: Message, chunks: I)
    where
        I: Iterator<Item = io::Result<Bytes>> + Send + 'static,
    {
        let peer = lock(&self.shared.peers).get(&message.to).cloned();
        self.shared.runtime.spawn(snapshot::send(
            self.shared.clone(),
            peer,
            message,
            Box::new(chunks),
        ));
    }

    /// Answers peers' `HashKV` questions with `service` from now on
    /// (until then they hear that this member cannot hash yet). Set once;
    /// a second call changes nothing.
    pub fn serve_hash_kv(&self, service: HashKvService) {
        let _ = self.shared.hash_kv.set(service);
    }

    /// Asks member `to`, at `urls`, for its `HashKV` at `revision` on a
    /// connection of its own, giving up after `limit`.
    pub async fn hash_kv(
        &self,
        to: u64,
        urls: &[String],
        revision: i64,
        limit: Duration,
    ) -> Result<oxetcd_storage::bolt::hash::KvHash, PeerHashError> {
        hash_kv::ask(&self.shared, to, urls, revision, limit).await
    }

    /// Tells joining peers the membership with `service` from now on
    /// (until then they hear that this member cannot yet). Set once.
    pub fn serve_members(&self, service: MembersService) {
        let _ = self.shared.members.set(service);
    }

    /// Asks the member at `urls`, whatever its ID, for the cluster's
    /// membership, giving up after `limit`.
    pub async fn members(&self, urls: &[String], limit: Duration) -> Result<ClusterFacts, String> {
        members::ask(&self.shared, urls, limit).await
    }

    /// Stops everything: listeners, queues, inbound streams. Snapshot
    /// streams in progress end on their own.
    pub fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        lock(&self.shared.listeners).clear();
        for peer in lock(&self.shared.peers).values() {
            peer.queue.close();
        }
        lock(&self.shared.inbound_streams).clear();
    }
}

impl<R> Shared<R> {
    fn deliver(&self, event: PeerEvent) {
        (self.deliver)(event);
    }

    /// Peer `from` answered a heartbeat: the time since the last one was
    /// queued is a round trip (etcd's `peer_round_trip_time_seconds`).
    fn heartbeat_answered(&self, from: u64, round_trip: &prometheus::Histogram) {
        let Some(peer) = lock(&self.peers).get(&from).cloned() else {
            return;
        };
        let queued = peer.heartbeat_queued_nanos.swap(0, Ordering::Relaxed);
        if queued == 0 {
            return;
        }
        let now = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let seconds = Duration::from_nanos(now.saturating_sub(queued)).as_secs_f64();
        round_trip.observe(seconds);
    }

    fn next_connection(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    fn is_removed(&self, id: u64) -> bool {
        lock(&self.removed).contains(&id)
    }

    fn is_peer(&self, id: u64) -> bool {
        lock(&self.peers).contains_key(&id)
    }

    fn cluster_id(&self) -> u64 {
        *lock(&self.cluster_id)
    }

    /// Takes `id` as the cluster ID if this member has none yet. Whether
    /// the cluster ID is now `id`.
    fn adopt_cluster_id(&self, id: u64) -> bool {
        let mut current = lock(&self.cluster_id);
        if *current == 0 && id != 0 {
            *current = id;
            tracing::info!(cluster_id = %Id(id), "learned the cluster ID from a peer");
            self.deliver(PeerEvent::ClusterId { id });
        }
        *current == id
    }
}

/// A member ID as etcd prints it (lower-case hex).
#[derive(Clone, Copy)]
struct Id(u64);

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// The transport's maps are plain data, consistent between statements, so
/// a panic elsewhere while a lock was held leaves nothing to repair.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
