//! The listening side: the accept loop, handshake checks, and inbound
//! messages streams. A TLS listener's connections pass through
//! [`tls::accept`] first and are served the same way after it.

use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_channel::oneshot;
use futures_util::future::{select, Either};
use oxetcd_proto::eraftpb::{Message, MessageType};
use oxetcd_tls::rustls::ServerConfig;
use protobuf::Message as _;
use tracing::{debug, info, warn};

use super::admission::HANDSHAKES_MAX;
use super::stream::{read_exact, write_all, FrameReader, ReadFrameError};
use super::tls::PeerIo;
use super::wire::{Answer, FrameKind, Hello, Reject, StreamKind, HELLO_BYTES, PROTOCOL_VERSION};
use super::{
    hash_kv, lock, members, snapshot, Id, PeerEvent, Shared, HANDSHAKE_TIMEOUT,
    INBOUND_CONNECTIONS_MAX, INBOUND_SNAPSHOTS_MAX,
};
use crate::runtime::{deadline_after, timeout, Runtime};

/// Pause after a failed accept (out of file descriptors, typically), so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Accepts peer connections until `stop` fires (or its sender is dropped).
pub(super) async fn accept_loop<R: Runtime>(
    shared: Arc<Shared<R>>,
    listener: R::Listener,
    mut stop: oneshot::Receiver<()>,
    tls: Option<Arc<ServerConfig>>,
) {
    loop {
        let accepted = {
            let accept = pin!(shared.runtime.accept(&listener));
            match select(accept, &mut stop).await {
                Either::Left((accepted, _)) => accepted,
                Either::Right(_) => return,
            }
        };
        match accepted {
            Ok((io, remote)) => {
                shared
                    .runtime
                    .spawn(serve(shared.clone(), io, remote, tls.clone()));
            }
            Err(e) => {
                warn!(error = %e, "accepting a peer connection failed");
                shared
                    .runtime
                    .sleep_until(deadline_after(ACCEPT_ERROR_BACKOFF))
                    .await;
            }
        }
    }
}

/// Counts an inbound connection while it lives.
struct ConnectionSlot<R> {
    shared: Arc<Shared<R>>,
}

impl<R> ConnectionSlot<R> {
    fn take(shared: &Arc<Shared<R>>) -> Option<Self> {
        shared
            .inbound_connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < INBOUND_CONNECTIONS_MAX).then_some(n + 1)
            })
            .ok()?;
        Some(Self {
            shared: shared.clone(),
        })
    }
}

impl<R> Drop for ConnectionSlot<R> {
    fn drop(&mut self) {
        self.shared
            .inbound_connections
            .fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts an inbound snapshot while it streams.
pub(super) struct SnapshotSlot<R> {
    shared: Arc<Shared<R>>,
}

impl<R> SnapshotSlot<R> {
    fn take(shared: &Arc<Shared<R>>) -> Option<Self> {
        shared
            .inbound_snapshots
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < INBOUND_SNAPSHOTS_MAX).then_some(n + 1)
            })
            .ok()?;
        Some(Self {
            shared: shared.clone(),
        })
    }
}

impl<R> Drop for SnapshotSlot<R> {
    fn drop(&mut self) {
        self.shared.inbound_snapshots.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The log lines about evicted handshakes and refused connections.
static CROWDED: crate::log_budget::LogBudget = crate::log_budget::LogBudget::new();

/// One inbound connection: its handshake (TLS on a TLS listener, then our
/// hello) while it waits in the transport's [`Handshakes`] queue, then its
/// stream, holding a slot of the established limit.
async fn serve<R: Runtime>(
    shared: Arc<Shared<R>>,
    io: R::Io,
    remote: crate::socket::Remote,
    tls: Option<Arc<ServerConfig>>,
) {
    let (mut pending, evicted_older) = shared.handshakes.admit();
    if evicted_older {
        CROWDED.log(std::time::Instant::now(), |held_back| {
            warn!(
                limit = HANDSHAKES_MAX,
                held_back, "too many pending peer handshakes; closed the oldest"
            );
        });
    }
    let evicted = pending.evicted();
    let shaken = {
        let handshake = pin!(handshake(&shared, io, remote, tls));
        match select(handshake, evicted).await {
            Either::Left((shaken, _)) => shaken,
            Either::Right(_) => {
                debug!(%remote, "peer handshake pushed out by newer connections");
                return;
            }
        }
    };
    drop(pending);
    let Some(shaken) = shaken else {
        return;
    };
    match (shaken.hello.kind, shaken.snapshot_slot) {
        (StreamKind::Snapshot, Some(slot)) => {
            snapshot::receive(shared.clone(), shaken.io, shaken.hello.from, slot).await
        }
        (StreamKind::HashKv, _) => hash_kv::answer(&shared, shaken.io, shaken.hello.from).await,
        (StreamKind::Members, _) => members::answer(&shared, shaken.io).await,
        _ => read_messages(shared.clone(), shaken.io, shaken.hello.from).await,
    }
    drop(shaken.slot);
}

/// A connection whose hello was accepted.
struct Shaken<R: Runtime> {
    io: PeerIo<R::Io>,
    hello: Hello,
    snapshot_slot: Option<SnapshotSlot<R>>,
    /// Counts it against the established limit while it lives.
    slot: ConnectionSlot<R>,
}

/// TLS (on a TLS listener), then our hello and its answer. `None` when
/// the connection failed or was refused (and told why).
async fn handshake<R: Runtime>(
    shared: &Arc<Shared<R>>,
    io: R::Io,
    remote: crate::socket::Remote,
    tls: Option<Arc<ServerConfig>>,
) -> Option<Shaken<R>> {
    let mut io = match tls {
        None => PeerIo::Plain(io),
        Some(config) => {
            let port = crate::tls_accept::Port::Peer;
            let stream =
                crate::tls_accept::accept(&shared.runtime, io, remote, config, port).await?;
            PeerIo::Tls(Box::new(stream))
        }
    };
    let hello = read_hello(shared, &mut io).await?;
    let admitted = admit(shared, &hello);
    answer(shared, &mut io, &hello, admitted.reject()).await?;
    let Admitted::Yes {
        snapshot_slot,
        slot,
    } = admitted
    else {
        return None;
    };
    Some(Shaken {
        io,
        hello,
        snapshot_slot,
        slot,
    })
}

/// Reads and decodes the connection's hello; `None` (logged) when it does
/// not come in time or is not one.
async fn read_hello<R: Runtime>(shared: &Shared<R>, io: &mut PeerIo<R::Io>) -> Option<Hello> {
    let mut hello = [0u8; HELLO_BYTES];
    match timeout(
        &shared.runtime,
        HANDSHAKE_TIMEOUT,
        read_exact(io, &mut hello),
    )
    .await
    {
        None => {
            debug!("peer connection sent no handshake in time; closed");
            return None;
        }
        Some(Err(e)) => {
            debug!(error = %e, "peer connection ended before its handshake");
            return None;
        }
        Some(Ok(())) => {}
    }
    match Hello::decode(&hello) {
        Ok(hello) => Some(hello),
        Err(e) => {
            // Client requests land here too: the peer port serves none.
            warn!(error = %e, "closed a connection on the peer port");
            None
        }
    }
}

/// Whether a hello is admitted, and with the slots it holds if so.
enum Admitted<R> {
    Yes {
        snapshot_slot: Option<SnapshotSlot<R>>,
        slot: ConnectionSlot<R>,
    },
    No(Reject),
}

impl<R> Admitted<R> {
    fn reject(&self) -> Option<Reject> {
        match self {
            Admitted::Yes { .. } => None,
            Admitted::No(reason) => Some(*reason),
        }
    }
}

/// Checks `hello` ([`check`]), then takes a snapshot slot for a snapshot
/// stream and a slot of the established limit; refused as busy when
/// either is full.
fn admit<R>(shared: &Arc<Shared<R>>, hello: &Hello) -> Admitted<R> {
    if let Some(reason) = check(shared, hello) {
        return Admitted::No(reason);
    }
    let mut snapshot_slot = None;
    if hello.kind == StreamKind::Snapshot {
        snapshot_slot = SnapshotSlot::take(shared);
        if snapshot_slot.is_none() {
            return Admitted::No(Reject::Busy);
        }
    }
    let Some(slot) = ConnectionSlot::take(shared) else {
        CROWDED.log(std::time::Instant::now(), |held_back| {
            warn!(
                limit = INBOUND_CONNECTIONS_MAX,
                held_back, "too many peer connections; refused a new one"
            );
        });
        return Admitted::No(Reject::Busy);
    };
    Admitted::Yes {
        snapshot_slot,
        slot,
    }
}

/// Writes the answer to `hello`; `None` (logged) when it refuses the
/// connection or cannot be written.
async fn answer<R: Runtime>(
    shared: &Shared<R>,
    io: &mut PeerIo<R::Io>,
    hello: &Hello,
    reject: Option<Reject>,
) -> Option<()> {
    let answer = Answer {
        reject,
        version: PROTOCOL_VERSION,
        cluster_id: shared.cluster_id(),
    };
    let answered = timeout(
        &shared.runtime,
        HANDSHAKE_TIMEOUT,
        write_all(io, &answer.encode()),
    )
    .await;
    if let Some(reason) = reject {
        warn!(
            from = %Id(hello.from),
            to = %Id(hello.to),
            cluster_id = %Id(hello.cluster_id),
            version = hello.version,
            local_member_id = %Id(shared.config.member_id),
            local_cluster_id = %Id(shared.cluster_id()),
            reason = %reason,
            "refused a peer connection"
        );
        return None;
    }
    match answered {
        Some(Ok(())) => Some(()),
        Some(Err(e)) => {
            debug!(from = %Id(hello.from), error = %e, "peer connection failed during the handshake");
            None
        }
        None => {
            debug!(from = %Id(hello.from), "peer handshake answer timed out");
            None
        }
    }
}

/// Whether `hello` may open a stream here. A joining member's cluster ID
/// rules are in `wire.rs`; an ID this member learns here is adopted (and
/// delivered) before the answer is written.
fn check<R>(shared: &Shared<R>, hello: &Hello) -> Option<Reject> {
    if hello.version == PROTOCOL_VERSION && hello.kind == StreamKind::Members {
        return None;
    }
    let ours = shared.cluster_id();
    let cluster_ok = match (ours, hello.cluster_id) {
        (0, 0) => false,
        // The sender joins (ours != 0), or teaches us (ours == 0): either
        // way only a member we know as a peer.
        (0, _) | (_, 0) => shared.is_peer(hello.from),
        (ours, theirs) => ours == theirs,
    };
    if hello.version != PROTOCOL_VERSION {
        Some(Reject::Version)
    } else if !cluster_ok {
        Some(Reject::ClusterId)
    } else if hello.to != shared.config.member_id || hello.from == shared.config.member_id {
        Some(Reject::WrongMember)
    } else if shared.is_removed(hello.from) {
        Some(Reject::Removed)
    } else if ours == 0 && !shared.adopt_cluster_id(hello.cluster_id) {
        // Another peer taught another ID a moment ago.
        Some(Reject::ClusterId)
    } else {
        None
    }
}

/// Reads messages from `from` until the stream ends, fails, misbehaves, or
/// is replaced by a newer stream from the same sender. Senders not (yet)
/// known as peers are served: a member added a moment ago may dial before
/// this member applies its addition, and raft ignores non-members itself.
async fn read_messages<R: Runtime>(shared: Arc<Shared<R>>, mut io: PeerIo<R::Io>, from: u64) {
    let connection = shared.next_connection();
    let (replace, mut replaced) = oneshot::channel();
    if let Some((_, previous)) = lock(&shared.inbound_streams).insert(from, (connection, replace)) {
        drop(previous);
        debug!(from = %Id(from), "a new messages stream replaces the previous one");
    }
    info!(from = %Id(from), "peer messages stream opened");
    // This stream's series, resolved once: (bytes received, round trips).
    let series = shared.metrics.get().map(|m| {
        let from = Id(from).to_string();
        (
            m.received_bytes.with_label_values(&[from.as_str()]),
            m.round_trip.with_label_values(&[from.as_str()]),
        )
    });
    let frame_max = shared.config.frame_bytes_max;
    let mut reader = FrameReader::default();
    let reason = loop {
        let frame = {
            let read = pin!(reader.read(&mut io, frame_max));
            match select(read, &mut replaced).await {
                Either::Left((frame, _)) => frame,
                Either::Right(_) => break "replaced or removed".to_owned(),
            }
        };
        match frame {
            Ok((FrameKind::Message, body)) => {
                match decode_message(body, from, shared.config.member_id) {
                    Ok(message) => {
                        if let Some((received, round_trip)) = &series {
                            received.inc_by((body.len() + super::wire::FRAME_HEADER_BYTES) as u64);
                            if message.msg_type == MessageType::MsgHeartbeatResponse {
                                shared.heartbeat_answered(from, round_trip);
                            }
                        }
                        shared.deliver(PeerEvent::Message(message));
                    }
                    Err(problem) => {
                        warn!(from = %Id(from), problem, "bad peer message; closing its connection");
                        break problem.to_owned();
                    }
                }
            }
            Ok((kind, _)) => {
                warn!(from = %Id(from), ?kind, "unexpected frame on a messages stream; closing it");
                break format!("unexpected {kind:?} frame");
            }
            Err(ReadFrameError::Closed) => break "closed by the peer".to_owned(),
            Err(ReadFrameError::Io(e)) => break e.to_string(),
            Err(e @ ReadFrameError::Frame(_)) => {
                warn!(from = %Id(from), error = %e, "bad peer frame; closing its connection");
                break e.to_string();
            }
        }
    };
    info!(from = %Id(from), reason = %reason, "peer messages stream closed");
    let mut streams = lock(&shared.inbound_streams);
    if streams.get(&from).is_some_and(|(c, _)| *c == connection) {
        streams.remove(&from);
    }
}

/// Decodes a message frame and checks it against its connection.
pub(super) fn decode_message(body: &[u8], from: u64, me: u64) -> Result<Message, &'static str> {
    let message = Message::parse_from_bytes(body).map_err(|_| "frame is not a raft message")?;
    if message.from != from {
        return Err("message claims another sender than its connection");
    }
    if message.to != me {
        return Err("message is addressed to another member");
    }
    if message.msg_type == MessageType::MsgSnapshot {
        return Err("snapshot message outside a snapshot stream");
    }
    Ok(message)
}
