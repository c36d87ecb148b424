//! `HashKV` between members, for the corruption checks: one question and
//! one answer on a connection of their own (a *hash-kv stream*).
//!
//! Design. etcd 3.4 asks a peer's `/members/hashkv` over HTTP on the peer
//! port. Our peer port speaks only its own framed protocol, so the
//! question rides it as a third stream kind rather than going to the
//! peers' client URLs over gRPC: the peer port already has everything
//! the question needs — the peer TLS both ways (the client port may ask
//! for client certificates a member does not hold), the cluster and
//! member checks of the handshake, and no auth (a member's question is
//! not a client's). The dialer sends one `HashKvAsk` frame, the listener
//! one `HashKvAnswer` frame, and the connection closes.
//!
//! ```text
//! HashKvAsk    (8 bytes):  revision i64 (0: the listener's current one)
//! HashKvAnswer (1 byte):   status u8 (1 compacted, 2 future revision,
//!                          3 unavailable)
//!              (21 bytes): status 0 | hash u32 | compact revision i64
//!                          | revision i64
//! ```
//!
//! The listener computes the hash with the [`HashKvService`] the server
//! installs once its node runs; until then it answers unavailable. A frame
//! of another kind or size closes the connection; nothing here trusts
//! the peer's bytes beyond their checked length.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oxetcd_core::Error;
use oxetcd_storage::bolt::hash::KvHash;
use tracing::{debug, warn};

use super::outbound::dial;
use super::snapshot::write_frame;
use super::stream::{read_frame, ReadFrameError};
use super::tls::PeerIo;
use super::wire::{FrameKind, StreamKind};
use super::{Id, Shared, HANDSHAKE_TIMEOUT};
use crate::runtime::{timeout, Runtime};

/// How a member computes `HashKV` of its own backend at a revision.
pub type HashKvService =
    Arc<dyn Fn(i64) -> Pin<Box<dyn Future<Output = Result<KvHash, Error>> + Send>> + Send + Sync>;

/// Bytes of an ask frame.
const ASK_BYTES: usize = 8;

/// Bytes of an answer frame that carries a hash.
const ANSWER_BYTES: usize = 21;

/// The largest frame either side reads on a hash-kv stream.
const FRAME_BYTES_MAX: usize = ANSWER_BYTES;

/// Why a peer's hash could not be had.
#[derive(Debug)]
pub enum PeerHashError {
    /// The peer compacted past the revision asked for.
    Compacted,
    /// The peer has not reached the revision asked for.
    FutureRevision,
    /// The peer could not hash now (not running yet, or its storage
    /// failed).
    Unavailable,
    /// The peer could not be reached, or did not answer in time.
    Unreachable(String),
}

impl std::fmt::Display for PeerHashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Compacted => f.write_str(&Error::Compacted.message()),
            Self::FutureRevision => f.write_str(&Error::FutureRevision.message()),
            Self::Unavailable => f.write_str("the peer cannot compute its hash now"),
            Self::Unreachable(why) => f.write_str(why),
        }
    }
}

/// Asks member `to` at `urls` for its hash at `revision`, within `limit`.
pub(super) async fn ask<R: Runtime>(
    shared: &Shared<R>,
    to: u64,
    urls: &[String],
    revision: i64,
    limit: Duration,
) -> Result<KvHash, PeerHashError> {
    let exchange = async {
        let mut io = dial(shared, to, urls, StreamKind::HashKv)
            .await
            .map_err(|e| PeerHashError::Unreachable(e.to_string()))?;
        write_frame(
            shared,
            &mut io,
            FrameKind::HashKvAsk,
            &revision.to_be_bytes(),
        )
        .await
        .map_err(PeerHashError::Unreachable)?;
        let mut body = Vec::new();
        match read_frame(&mut io, FRAME_BYTES_MAX, &mut body).await {
            Ok(FrameKind::HashKvAnswer) => decode_answer(&body),
            Ok(kind) => Err(PeerHashError::Unreachable(format!(
                "unexpected {kind:?} frame"
            ))),
            Err(e) => Err(PeerHashError::Unreachable(e.to_string())),
        }
    };
    match timeout(&shared.runtime, limit, exchange).await {
        Some(result) => result,
        None => Err(PeerHashError::Unreachable(format!(
            "no answer within {limit:?}"
        ))),
    }
}

/// Answers one question on an accepted hash-kv stream from `from`.
pub(super) async fn answer<R: Runtime>(shared: &Shared<R>, mut io: PeerIo<R::Io>, from: u64) {
    let mut body = Vec::new();
    let read = timeout(
        &shared.runtime,
        HANDSHAKE_TIMEOUT,
        read_frame(&mut io, FRAME_BYTES_MAX, &mut body),
    )
    .await;
    let revision = match read {
        Some(Ok(FrameKind::HashKvAsk)) if body.len() == ASK_BYTES => {
            let mut bytes = [0u8; ASK_BYTES];
            bytes.copy_from_slice(&body);
            i64::from_be_bytes(bytes)
        }
        Some(Ok(kind)) => {
            warn!(from = %Id(from), ?kind, len = body.len(), "bad hash-kv question; closing it");
            return;
        }
        Some(Err(ReadFrameError::Closed)) | None => return,
        Some(Err(e)) => {
            debug!(from = %Id(from), error = %e, "hash-kv question not read");
            return;
        }
    };
    let result = match shared.hash_kv.get() {
        Some(service) => service(revision).await,
        None => Err(Error::Stopped),
    };
    let reply = encode_answer(&result);
    if let Err(e) = write_frame(shared, &mut io, FrameKind::HashKvAnswer, &reply).await {
        debug!(from = %Id(from), error = %e, "hash-kv answer not written");
    }
}

fn encode_answer(result: &Result<KvHash, Error>) -> Vec<u8> {
    match result {
        Ok(hash) => {
            let mut out = Vec::with_capacity(ANSWER_BYTES);
            out.push(0);
            out.extend_from_slice(&hash.hash.to_be_bytes());
            out.extend_from_slice(&hash.compact_revision.to_be_bytes());
            out.extend_from_slice(&hash.revision.to_be_bytes());
            out
        }
        Err(Error::Compacted) => vec![1],
        Err(Error::FutureRevision) => vec![2],
        Err(_) => vec![3],
    }
}

fn decode_answer(body: &[u8]) -> Result<KvHash, PeerHashError> {
    match body {
        [1] => Err(PeerHashError::Compacted),
        [2] => Err(PeerHashError::FutureRevision),
        [3] => Err(PeerHashError::Unavailable),
        [0, rest @ ..] if rest.len() == ANSWER_BYTES - 1 => {
            let u32_at =
                |i: usize| u32::from_be_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
            let i64_at = |i: usize| {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&rest[i..i + 8]);
                i64::from_be_bytes(bytes)
            };
            Ok(KvHash {
                hash: u32_at(0),
                compact_revision: i64_at(4),
                revision: i64_at(12),
            })
        }
        _ => Err(PeerHashError::Unreachable(
            io::Error::new(io::ErrorKind::InvalidData, "malformed hash-kv answer").to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_bad_ones_are_refused() {
        let hash = KvHash {
            hash: 0xdead_beef,
            compact_revision: 7,
            revision: i64::MAX,
        };
        let body = encode_answer(&Ok(hash));
        assert_eq!(body.len(), ANSWER_BYTES);
        let back = decode_answer(&body).expect("decodes");
        assert_eq!(
            (back.hash, back.compact_revision, back.revision),
            (hash.hash, hash.compact_revision, hash.revision)
        );
        assert!(matches!(
            decode_answer(&encode_answer(&Err(Error::Compacted))),
            Err(PeerHashError::Compacted)
        ));
        assert!(matches!(
            decode_answer(&encode_answer(&Err(Error::FutureRevision))),
            Err(PeerHashError::FutureRevision)
        ));
        assert!(matches!(
            decode_answer(&encode_answer(&Err(Error::Stopped))),
            Err(PeerHashError::Unavailable)
        ));
        for bad in [&[][..], &[0, 1, 2][..], &[9][..], &body[..ANSWER_BYTES - 1]] {
            assert!(
                matches!(decode_answer(bad), Err(PeerHashError::Unreachable(_))),
                "{bad:?}"
            );
        }
    }
}
