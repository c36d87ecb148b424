//! The dialing side: one task per peer that keeps a messages stream up and
//! writes the peer's queue into it, and the dial and handshake shared with
//! snapshot streams. A dial to an `https://` URL passes through
//! [`tls::connect`] before the handshake.

use std::fmt;
use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use hyper::rt::Write as _;
use protobuf::Message as _;
use tracing::{debug, info, warn};

use super::stream::{poll_read_some, read_exact, write_all};
use super::tls::{self, PeerIo};
use super::wire::{
    self, Answer, FrameKind, Hello, Reject, StreamKind, ANSWER_BYTES, ANSWER_HEAD_BYTES,
    FRAME_HEADER_BYTES, PROTOCOL_VERSION,
};
use super::{
    lock, Id, Peer, PeerEvent, Shared, CONNECT_TIMEOUT, HANDSHAKE_TIMEOUT, RECONNECT_BACKOFF_MAX,
    RECONNECT_BACKOFF_MIN, STALL_TIMEOUT, WRITE_BATCH_MESSAGES_MAX,
};
use crate::dial::resolve;
use crate::runtime::{deadline_after, timeout, Runtime};

/// Keeps peer `peer`'s messages stream up until the peer is removed or the
/// transport stops.
pub(super) async fn run_peer<R: Runtime>(shared: Arc<Shared<R>>, peer: Arc<Peer>) {
    let mut backoff = Backoff::new(shared.config.rng_seed ^ peer.id);
    // The last failure logged, so a peer that stays down is logged once
    // per cause rather than once per attempt.
    let mut last_failure: Option<String> = None;
    let mut told_removed = false;
    while !peer.queue.is_closed() {
        let generation = peer.queue.redial_generation();
        let urls = lock(&peer.urls).clone();
        match dial(&shared, peer.id, &urls, StreamKind::Messages).await {
            Ok(io) => {
                backoff.reset();
                last_failure = None;
                told_removed = false;
                peer.connects.fetch_add(1, Ordering::Relaxed);
                peer.connected.store(true, Ordering::Release);
                peer.queue.set_connected(true);
                info!(peer = %Id(peer.id), "peer connected");
                let series = shared.metrics.get().map(|m| {
                    let remote = Id(peer.id).to_string();
                    let active = m
                        .active_peers
                        .with_label_values(&[m.local.as_str(), &remote]);
                    active.inc();
                    (active, m.sent_bytes.with_label_values(&[remote.as_str()]))
                });
                let sent_bytes = series.as_ref().map(|(_, sent)| sent);
                let end = pump(&shared, &peer, io, generation, sent_bytes).await;
                if let Some((active, _)) = &series {
                    active.dec();
                }
                peer.connected.store(false, Ordering::Release);
                let lost = peer.queue.set_connected(false);
                peer.dropped.fetch_add(lost as u64, Ordering::Relaxed);
                match end {
                    PumpEnd::Closed => return,
                    PumpEnd::Redial => {
                        info!(peer = %Id(peer.id), "peer URLs changed; redialing");
                        continue;
                    }
                    PumpEnd::Lost(reason) => {
                        info!(peer = %Id(peer.id), reason = %reason, "peer connection lost");
                        shared.deliver(PeerEvent::Unreachable { to: peer.id });
                    }
                }
            }
            Err(e) => {
                if matches!(e, DialError::Rejected(Reject::Removed)) && !told_removed {
                    told_removed = true;
                    shared.deliver(PeerEvent::RemovedFromCluster { by: peer.id });
                }
                let failure = e.to_string();
                if last_failure.as_deref() != Some(failure.as_str()) {
                    if let DialError::Rejected(reason) = e {
                        warn!(
                            peer = %Id(peer.id),
                            urls = ?urls,
                            reason = %reason,
                            hint = e.hint(),
                            "peer refused our connection"
                        );
                    } else if let DialError::Tls(why) = &e {
                        warn!(
                            peer = %Id(peer.id),
                            urls = ?urls,
                            error = %why,
                            hint = e.hint(),
                            "cannot reach peer over TLS"
                        );
                    } else {
                        warn!(peer = %Id(peer.id), urls = ?urls, error = %failure, "cannot reach peer");
                    }
                    last_failure = Some(failure);
                } else {
                    debug!(peer = %Id(peer.id), error = %failure, "cannot reach peer");
                }
            }
        }
        let delay = backoff.next_delay();
        wait_or_wake(&shared.runtime, &peer, generation, delay).await;
    }
}

/// Sleeps for `delay`, or less if the peer is removed or its URLs change.
async fn wait_or_wake<R: Runtime>(runtime: &R, peer: &Peer, generation: u64, delay: Duration) {
    let mut sleep = Box::pin(runtime.sleep_until(deadline_after(delay)));
    poll_fn(|cx| {
        peer.queue.register(cx);
        if peer.queue.is_closed() || peer.queue.redial_generation() != generation {
            return Poll::Ready(());
        }
        sleep.as_mut().poll(cx).map(|_| ())
    })
    .await;
}

/// Why a messages stream ended.
enum PumpEnd {
    /// The peer was removed or the transport stopped.
    Closed,
    /// The peer's URLs changed.
    Redial,
    /// The connection failed.
    Lost(String),
}

/// Writes the queue into `io` until the connection fails or the peer is
/// closed. Also watches the read side: the listener never speaks after
/// its answer, so readable data is a protocol error and end of stream
/// means the peer went away (noticed before the next write fails).
async fn pump<R: Runtime>(
    shared: &Shared<R>,
    peer: &Peer,
    mut io: PeerIo<R::Io>,
    generation: u64,
    sent_bytes: Option<&prometheus::IntCounter>,
) -> PumpEnd {
    let frame_max = shared.config.frame_bytes_max;
    let mut batch = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut written = 0usize;
    let mut messages_in_out = 0u64;
    let mut flushing = false;
    let mut stall: Option<Pin<Box<R::Sleep>>> = None;
    let mut probe = [0u8; 1];
    poll_fn(|cx| loop {
        if peer.queue.redial_generation() != generation {
            return Poll::Ready(PumpEnd::Redial);
        }
        match poll_read_some(&mut io, cx, &mut probe) {
            Poll::Ready(Ok(0)) => return Poll::Ready(PumpEnd::Lost("closed by the peer".into())),
            Poll::Ready(Ok(_)) => {
                return Poll::Ready(PumpEnd::Lost("the peer wrote on a messages stream".into()))
            }
            Poll::Ready(Err(e)) => return Poll::Ready(PumpEnd::Lost(e.to_string())),
            Poll::Pending => {}
        }
        if written < out.len() || flushing {
            let progress = if written < out.len() {
                Pin::new(&mut io).poll_write(cx, &out[written..])
            } else {
                Pin::new(&mut io).poll_flush(cx).map_ok(|()| 0)
            };
            match progress {
                Poll::Ready(Ok(0)) if !flushing => {
                    return Poll::Ready(PumpEnd::Lost("wrote zero bytes".into()))
                }
                Poll::Ready(Ok(n)) => {
                    written += n;
                    stall = None;
                    if written == out.len() {
                        if flushing {
                            flushing = false;
                            peer.sent.fetch_add(messages_in_out, Ordering::Relaxed);
                            if let Some(sent_bytes) = sent_bytes {
                                sent_bytes.inc_by(out.len() as u64);
                            }
                            out.clear();
                            written = 0;
                            messages_in_out = 0;
                        } else {
                            flushing = true;
                        }
                    }
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(PumpEnd::Lost(e.to_string())),
                Poll::Pending => {
                    let sleep = stall.get_or_insert_with(|| {
                        Box::pin(shared.runtime.sleep_until(deadline_after(STALL_TIMEOUT)))
                    });
                    if sleep.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(PumpEnd::Lost(format!(
                            "no write progress for {STALL_TIMEOUT:?}"
                        )));
                    }
                    peer.queue.register(cx);
                    if peer.queue.is_closed() {
                        return Poll::Ready(PumpEnd::Closed);
                    }
                    return Poll::Pending;
                }
            }
        }
        match peer
            .queue
            .poll_drain(cx, &mut batch, WRITE_BATCH_MESSAGES_MAX)
        {
            Poll::Ready(false) => return Poll::Ready(PumpEnd::Closed),
            Poll::Pending => return Poll::Pending,
            Poll::Ready(true) => {
                for message in batch.drain(..) {
                    if encode_message(&mut out, &message, frame_max) {
                        messages_in_out += 1;
                    } else {
                        peer.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    })
    .await
}

/// Appends `message` as a frame; `false` (nothing appended) if it does not
/// encode within `frame_max` bytes.
fn encode_message(
    out: &mut Vec<u8>,
    message: &oxetcd_proto::eraftpb::Message,
    frame_max: usize,
) -> bool {
    let start = out.len();
    wire::put_frame_header(out, FrameKind::Message, 0);
    let body_start = out.len();
    let encoded = message.write_to_vec(out);
    let len = out.len() - body_start;
    if let Err(e) = encoded {
        out.truncate(start);
        warn!(to = %Id(message.to), error = %e, "cannot encode a raft message; dropped");
        return false;
    }
    if len > frame_max {
        out.truncate(start);
        warn!(
            to = %Id(message.to),
            bytes = len,
            frame_bytes_max = frame_max,
            "raft message larger than a peer frame; dropped"
        );
        return false;
    }
    let mut header = Vec::with_capacity(FRAME_HEADER_BYTES);
    wire::put_frame_header(&mut header, FrameKind::Message, len);
    out[start..body_start].copy_from_slice(&header);
    true
}

/// Why a dial failed.
#[derive(Debug)]
pub(super) enum DialError {
    /// No URL could be used or resolved.
    NoAddress(String),
    /// Every address failed; the last error.
    Io(io::Error),
    /// The listener refused the handshake.
    Rejected(Reject),
    /// The listener answered with something that is not an answer.
    Protocol(&'static str),
    /// TLS could not be set up: not configured here, or the handshake
    /// failed (a certificate either side refused).
    Tls(String),
}

impl DialError {
    /// What an operator should check.
    fn hint(&self) -> &'static str {
        match self {
            Self::Rejected(Reject::ClusterId) => {
                "check --initial-cluster and --initial-cluster-token on both members"
            }
            Self::Rejected(Reject::WrongMember) => {
                "the member at that URL has another ID; check the peer URLs in --initial-cluster"
            }
            Self::Rejected(Reject::Version) => "the members run incompatible versions",
            Self::Rejected(Reject::Removed) => "this member was removed from the cluster",
            Self::Tls(_) => {
                "check the --peer-* TLS flags of both members: each certificate must chain to \
                 the other's --peer-trusted-ca-file and be valid for its peer URL's host"
            }
            _ => "",
        }
    }
}

impl fmt::Display for DialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoAddress(why) => write!(f, "no usable address: {why}"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Rejected(reason) => write!(f, "refused: {reason}"),
            Self::Protocol(what) => write!(f, "bad handshake answer: {what}"),
            Self::Tls(why) => write!(f, "TLS: {why}"),
        }
    }
}

/// Connects to the first reachable address of `urls`, over TLS for an
/// `https://` URL, and completes the handshake for a `kind` stream to
/// member `to`.
pub(super) async fn dial<R: Runtime>(
    shared: &Shared<R>,
    to: u64,
    urls: &[String],
    kind: StreamKind,
) -> Result<PeerIo<R::Io>, DialError> {
    let targets = resolve(&shared.runtime, urls)
        .await
        .map_err(DialError::NoAddress)?;
    let mut last = None;
    for target in targets {
        let tls = match &target.tls {
            None => None,
            Some(name) => match &shared.config.tls {
                Some(tls) => Some((tls.client.clone(), name.clone())),
                None => {
                    last = Some(DialError::Tls(
                        "an https:// peer URL, but this member has no peer TLS \
                         (--peer-cert-file and --peer-key-file, or --peer-auto-tls)"
                            .to_owned(),
                    ));
                    continue;
                }
            },
        };
        let io = match timeout(
            &shared.runtime,
            CONNECT_TIMEOUT,
            shared.runtime.connect(target.addr.clone()),
        )
        .await
        {
            Some(Ok(io)) => io,
            Some(Err(e)) => {
                last = Some(DialError::Io(e));
                continue;
            }
            None => {
                last = Some(DialError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connect timed out",
                )));
                continue;
            }
        };
        let mut io = match tls {
            None => PeerIo::Plain(io),
            Some((config, name)) => tls::connect(&shared.runtime, io, config, name)
                .await
                .map_err(DialError::Tls)?,
        };
        handshake(shared, &mut io, to, kind).await?;
        return Ok(io);
    }
    Err(last
        .unwrap_or_else(|| DialError::Io(io::Error::new(io::ErrorKind::NotFound, "no addresses"))))
}

async fn handshake<R: Runtime>(
    shared: &Shared<R>,
    io: &mut PeerIo<R::Io>,
    to: u64,
    kind: StreamKind,
) -> Result<(), DialError> {
    let ours = shared.cluster_id();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        kind,
        cluster_id: ours,
        from: shared.config.member_id,
        to,
    };
    let mut head = [0u8; ANSWER_HEAD_BYTES];
    let mut cluster_id = [0u8; ANSWER_BYTES - ANSWER_HEAD_BYTES];
    let exchange = async {
        write_all(io, &hello.encode()).await?;
        read_exact(io, &mut head).await?;
        let answer = Answer::decode_head(&head);
        // Older versions' answers end with the head.
        if answer.version == PROTOCOL_VERSION {
            read_exact(io, &mut cluster_id).await?;
        }
        Ok::<_, io::Error>(Answer {
            cluster_id: Answer::decode_cluster_id(&cluster_id),
            ..answer
        })
    };
    let answer = match timeout(&shared.runtime, HANDSHAKE_TIMEOUT, exchange).await {
        None => {
            return Err(DialError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                "handshake timed out",
            )))
        }
        Some(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(DialError::Protocol(
                "closed before answering (not an oxetcd peer port, or a TLS one dialed \
                 over http://?)",
            ))
        }
        // Under TLS 1.3 a listener refuses our certificate only after our
        // side of the handshake is done: its alert arrives here.
        Some(Err(e)) if oxetcd_tls::tls_cause(&e).is_some() => {
            return Err(DialError::Tls(crate::tls_accept::handshake_error(&e)))
        }
        Some(Err(e)) => return Err(DialError::Io(e)),
        Some(Ok(answer)) => answer,
    };
    match answer.reject {
        // A members stream is asked before any ID is known; its answer
        // names the cluster.
        None if answer.version == PROTOCOL_VERSION && kind == StreamKind::Members => Ok(()),
        // A joining member takes the ID of the first peer that accepts it
        // (see `wire.rs`); a known ID must match.
        None if answer.version == PROTOCOL_VERSION => {
            let agreed = if ours == 0 {
                shared.adopt_cluster_id(answer.cluster_id)
            } else {
                answer.cluster_id == ours
            };
            if agreed {
                Ok(())
            } else {
                Err(DialError::Rejected(Reject::ClusterId))
            }
        }
        None => Err(DialError::Protocol(
            "accepted with another protocol version",
        )),
        Some(reason) => Err(DialError::Rejected(reason)),
    }
}

/// Exponential redial delays with jitter from a seeded generator, so two
/// members that lost each other do not redial in lockstep, and a test run
/// is reproducible from its seed.
struct Backoff {
    next: Duration,
    state: u64,
}

impl Backoff {
    fn new(seed: u64) -> Self {
        Self {
            next: RECONNECT_BACKOFF_MIN,
            state: seed,
        }
    }

    fn reset(&mut self) {
        self.next = RECONNECT_BACKOFF_MIN;
    }

    /// A delay in `[d/2, d]` for the current step `d`; then doubles `d` up
    /// to the maximum.
    fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(RECONNECT_BACKOFF_MAX);
        let half = step / 2;
        let span = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
        let jitter = if span == 0 {
            0
        } else {
            self.random() % (span + 1)
        };
        half + Duration::from_micros(jitter)
    }

    /// splitmix64.
    fn random(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::eraftpb::{Message, MessageType};

    #[test]
    fn backoff_grows_to_its_bound_with_jitter_and_resets() {
        let mut backoff = Backoff::new(7);
        let mut step = RECONNECT_BACKOFF_MIN;
        for _ in 0..10 {
            let delay = backoff.next_delay();
            assert!(
                delay >= step / 2 && delay <= step,
                "{delay:?} for step {step:?}"
            );
            step = (step * 2).min(RECONNECT_BACKOFF_MAX);
        }
        assert!(backoff.next_delay() <= RECONNECT_BACKOFF_MAX);
        backoff.reset();
        assert!(backoff.next_delay() <= RECONNECT_BACKOFF_MIN);
        // Same seed, same delays.
        let a: Vec<_> = (0..5).map(|_| Backoff::new(3).next_delay()).collect();
        let b: Vec<_> = (0..5).map(|_| Backoff::new(3).next_delay()).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn messages_encode_as_bounded_frames() {
        let message = Message {
            msg_type: MessageType::MsgHeartbeat,
            to: 2,
            from: 1,
            term: 5,
            ..Default::default()
        };
        let mut out = vec![9];
        assert!(encode_message(&mut out, &message, 1024));
        let header: [u8; FRAME_HEADER_BYTES] = out[1..6].try_into().unwrap();
        let (kind, len) = wire::parse_frame_header(&header, 1024).unwrap();
        assert_eq!(kind, FrameKind::Message);
        assert_eq!(len, out.len() - 6);
        assert_eq!(Message::parse_from_bytes(&out[6..]).unwrap(), message);
        // Too large: nothing appended.
        let before = out.clone();
        assert!(!encode_message(&mut out, &message, 2));
        assert_eq!(out, before);
    }
}
