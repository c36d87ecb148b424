//! Snapshot streams: sending one in chunks on its own connection, and
//! receiving one into a file.
//!
//! A snapshot stream is `SnapshotChunk` frames (data, in order), then one
//! `SnapshotEnd` frame holding the `MsgSnapshot`, then the receiver's
//! acknowledgement byte once the file is synced and handed to its driver.
//! Anything else — a message frame, a chunk past the size limit, end of
//! stream before the end frame — closes the connection and deletes the
//! partial file.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use oxetcd_proto::eraftpb::{Message, MessageType};
use protobuf::Message as _;
use tracing::{debug, info, warn};

use super::inbound::SnapshotSlot;
use super::outbound::dial;
use super::stream::{read_exact, read_frame, write_all, ReadFrameError};
use super::tls::PeerIo;
use super::wire::{self, FrameKind, StreamKind, SNAPSHOT_ACK};
use super::{
    lock, Id, Peer, PeerEvent, Shared, SNAPSHOT_ACK_TIMEOUT, SNAPSHOT_CHUNK_BYTES, STALL_TIMEOUT,
};
use crate::runtime::{blocking, timeout, Runtime};

/// A snapshot received in full and synced to a file. The file is deleted
/// when this is dropped, unless [`ReceivedSnapshot::keep`] takes it.
#[derive(Debug)]
pub struct ReceivedSnapshot {
    path: Option<PathBuf>,
    bytes: u64,
}

impl ReceivedSnapshot {
    /// Where the data is.
    pub fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    /// Its size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.bytes
    }

    /// Takes ownership of the file (rename or delete it when done).
    pub fn keep(mut self) -> PathBuf {
        self.path.take().unwrap_or_default()
    }
}

impl Drop for ReceivedSnapshot {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            // A leftover is harmless (the name marks it as ours); a runtime
            // restart sweeps none, so log it.
            if let Err(e) = std::fs::remove_file(&path) {
                debug!(path = %path.display(), error = %e, "cannot delete a received snapshot");
            }
        }
    }
}

/// Streams one snapshot and reports the outcome as exactly one
/// [`PeerEvent::SnapshotSent`].
pub(super) async fn send<R: Runtime>(
    shared: Arc<Shared<R>>,
    peer: Option<Arc<Peer>>,
    message: Message,
    chunks: Box<dyn Iterator<Item = io::Result<Bytes>> + Send>,
) {
    let to = message.to;
    let Some(peer) = peer else {
        warn!(to = %Id(to), "snapshot for an unknown peer; not sent");
        shared.deliver(PeerEvent::SnapshotSent {
            to,
            delivered: false,
        });
        return;
    };
    if peer.snapshot_in_flight.swap(true, Ordering::AcqRel) {
        warn!(to = %Id(to), "a snapshot is already streaming to this peer; not sent");
        shared.deliver(PeerEvent::SnapshotSent {
            to,
            delivered: false,
        });
        return;
    }
    let started = std::time::Instant::now();
    let result = stream_snapshot(&shared, &peer, message, chunks).await;
    peer.snapshot_in_flight.store(false, Ordering::Release);
    let delivered = match result {
        Ok(bytes) => {
            info!(
                to = %Id(to),
                bytes,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "snapshot delivered"
            );
            true
        }
        Err(e) => {
            warn!(to = %Id(to), error = %e, "snapshot not delivered");
            false
        }
    };
    shared.deliver(PeerEvent::SnapshotSent { to, delivered });
}

/// Dials a snapshot stream, writes it, and waits for the acknowledgement;
/// the data bytes sent.
async fn stream_snapshot<R: Runtime>(
    shared: &Shared<R>,
    peer: &Peer,
    message: Message,
    mut chunks: Box<dyn Iterator<Item = io::Result<Bytes>> + Send>,
) -> Result<u64, String> {
    if message.msg_type != MessageType::MsgSnapshot {
        return Err(format!("expected MsgSnapshot, got {:?}", message.msg_type));
    }
    let end = message
        .write_to_bytes()
        .map_err(|e| format!("cannot encode the snapshot message: {e}"))?;
    if end.len() > shared.config.frame_bytes_max {
        return Err(format!(
            "snapshot message of {} bytes exceeds a frame",
            end.len()
        ));
    }
    let urls = lock(&peer.urls).clone();
    let mut io = dial(shared, peer.id, &urls, StreamKind::Snapshot)
        .await
        .map_err(|e| e.to_string())?;
    let piece_max = SNAPSHOT_CHUNK_BYTES
        .min(shared.config.frame_bytes_max)
        .max(1);
    let mut sent = 0u64;
    loop {
        // The iterator may read storage, so it is pulled on a blocking
        // thread and handed back with each chunk.
        let (rest, next) = blocking(&shared.runtime, move || {
            let next = chunks.next();
            (chunks, next)
        })
        .await
        .map_err(|e| e.to_string())?;
        chunks = rest;
        let mut chunk = match next {
            None => break,
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return Err(format!("reading the snapshot failed: {e}")),
        };
        while !chunk.is_empty() {
            let piece = chunk.split_to(chunk.len().min(piece_max));
            write_frame(shared, &mut io, FrameKind::SnapshotChunk, &piece).await?;
            sent += piece.len() as u64;
        }
    }
    write_frame(shared, &mut io, FrameKind::SnapshotEnd, &end).await?;
    let mut ack = [0u8; 1];
    match timeout(
        &shared.runtime,
        SNAPSHOT_ACK_TIMEOUT,
        read_exact(&mut io, &mut ack),
    )
    .await
    {
        Some(Ok(())) if ack[0] == SNAPSHOT_ACK => Ok(sent),
        Some(Ok(())) => Err(format!("unexpected acknowledgement byte {}", ack[0])),
        Some(Err(e)) => Err(format!("no acknowledgement: {e}")),
        None => Err("no acknowledgement in time".to_owned()),
    }
}

pub(super) async fn write_frame<R: Runtime>(
    shared: &Shared<R>,
    io: &mut PeerIo<R::Io>,
    kind: FrameKind,
    body: &[u8],
) -> Result<(), String> {
    let mut header = Vec::with_capacity(wire::FRAME_HEADER_BYTES);
    wire::put_frame_header(&mut header, kind, body.len());
    let write = async {
        write_all(io, &header).await?;
        write_all(io, body).await
    };
    match timeout(&shared.runtime, STALL_TIMEOUT, write).await {
        Some(Ok(())) => Ok(()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err(format!(
            "a frame took longer than {STALL_TIMEOUT:?} to write"
        )),
    }
}

/// Receives one snapshot from `from` into a file, hands it to the driver,
/// and acknowledges it. Any failure drops the stream and the partial file.
pub(super) async fn receive<R: Runtime>(
    shared: Arc<Shared<R>>,
    mut io: PeerIo<R::Io>,
    from: u64,
    _slot: SnapshotSlot<R>,
) {
    let Some((file, mut received)) = create_file(&shared, from).await else {
        return;
    };
    let Some((file, message)) = read_stream(&shared, &mut io, from, file, &mut received).await
    else {
        return;
    };
    match blocking(&shared.runtime, move || file.sync_all())
        .await
        .and_then(|r| r)
    {
        Ok(()) => {}
        Err(e) => {
            warn!(from = %Id(from), error = %e, "cannot sync an incoming snapshot");
            return;
        }
    }
    info!(from = %Id(from), bytes = received.bytes, "snapshot received");
    shared.deliver(PeerEvent::Snapshot {
        message,
        data: received,
    });
    let ack = timeout(
        &shared.runtime,
        STALL_TIMEOUT,
        write_all(&mut io, &[SNAPSHOT_ACK]),
    )
    .await;
    match ack {
        Some(Ok(())) => {}
        Some(Err(e)) => debug!(from = %Id(from), error = %e, "cannot acknowledge a snapshot"),
        None => debug!(from = %Id(from), "acknowledging a snapshot timed out"),
    }
}

/// Creates the file an incoming snapshot from `from` is written to, and
/// the [`ReceivedSnapshot`] that owns it from here (dropped on any
/// failure, which deletes the file).
async fn create_file<R: Runtime>(
    shared: &Shared<R>,
    from: u64,
) -> Option<(File, ReceivedSnapshot)> {
    let dir = shared.config.snapshot_dir.clone();
    let path = dir.join(format!(
        "incoming-{from:016x}-{}.snap.part",
        shared.next_connection()
    ));
    let received = ReceivedSnapshot {
        path: Some(path.clone()),
        bytes: 0,
    };
    let created = blocking(&shared.runtime, move || {
        std::fs::create_dir_all(&dir)?;
        File::create(&path)
    })
    .await
    .and_then(|r| r);
    match created {
        Ok(file) => Some((file, received)),
        Err(e) => {
            warn!(from = %Id(from), error = %e, "cannot create a file for an incoming snapshot");
            None
        }
    }
}

/// Reads the stream's chunks into `file` until its end frame, counting
/// them in `received` against the size limit; the file and the end
/// frame's `MsgSnapshot`, or `None` (logged) when the stream fails.
async fn read_stream<R: Runtime>(
    shared: &Shared<R>,
    io: &mut PeerIo<R::Io>,
    from: u64,
    mut file: File,
    received: &mut ReceivedSnapshot,
) -> Option<(File, Message)> {
    let frame_max = shared.config.frame_bytes_max;
    let bytes_max = shared.config.snapshot_bytes_max;
    let mut body = Vec::new();
    loop {
        let frame = timeout(
            &shared.runtime,
            STALL_TIMEOUT,
            read_frame(io, frame_max, &mut body),
        )
        .await;
        let kind = match frame {
            Some(Ok(kind)) => kind,
            None => {
                warn!(from = %Id(from), "incoming snapshot stalled; dropped");
                return None;
            }
            Some(Err(ReadFrameError::Closed)) => {
                info!(from = %Id(from), "incoming snapshot ended early; dropped");
                return None;
            }
            Some(Err(e)) => {
                warn!(from = %Id(from), error = %e, "incoming snapshot failed; dropped");
                return None;
            }
        };
        match kind {
            FrameKind::SnapshotChunk => {
                received.bytes += body.len() as u64;
                if received.bytes > bytes_max {
                    warn!(
                        from = %Id(from),
                        snapshot_bytes_max = bytes_max,
                        "incoming snapshot exceeds the size limit; dropped"
                    );
                    return None;
                }
                (file, body) = write_chunk(shared, from, file, body).await?;
            }
            FrameKind::SnapshotEnd => {
                return match decode_end(&body, from, shared.config.member_id) {
                    Ok(message) => Some((file, message)),
                    Err(problem) => {
                        warn!(from = %Id(from), problem, "bad snapshot message; dropped");
                        None
                    }
                };
            }
            FrameKind::Message
            | FrameKind::HashKvAsk
            | FrameKind::HashKvAnswer
            | FrameKind::MembersAsk
            | FrameKind::MembersAnswer => {
                warn!(from = %Id(from), ?kind, "unexpected frame on a snapshot stream; closing it");
                return None;
            }
        }
    }
}

/// Appends `chunk` to `file` on a blocking thread; hands both back (the
/// buffer to be reused for the next frame), or `None` (logged).
async fn write_chunk<R: Runtime>(
    shared: &Shared<R>,
    from: u64,
    mut file: File,
    chunk: Vec<u8>,
) -> Option<(File, Vec<u8>)> {
    let written = blocking(&shared.runtime, move || {
        let result = file.write_all(&chunk);
        (file, chunk, result)
    })
    .await;
    match written {
        Ok((file, chunk, Ok(()))) => Some((file, chunk)),
        Ok((_, _, Err(e))) | Err(e) => {
            warn!(from = %Id(from), error = %e, "cannot write an incoming snapshot");
            None
        }
    }
}

/// Decodes the end frame: a `MsgSnapshot` from the stream's sender to us.
fn decode_end(body: &[u8], from: u64, me: u64) -> Result<Message, &'static str> {
    let message = Message::parse_from_bytes(body).map_err(|_| "end frame is not a raft message")?;
    if message.msg_type != MessageType::MsgSnapshot {
        return Err("end frame is not a snapshot message");
    }
    if message.from != from || message.to != me {
        return Err("snapshot message names other members than its connection");
    }
    Ok(message)
}
