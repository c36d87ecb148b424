//! The cluster's membership for a member that joins: one question and one
//! answer on a connection of their own (a *members stream*).
//!
//! Design. A member started with `--initial-cluster-state existing` on an
//! empty data directory does not know its own ID: `member add` chose it
//! (etcd salts it with the time; a cluster restored with another
//! `--initial-cluster-token` derives other IDs than the joiner would). As
//! etcd's joiner asks a peer's `/members`, ours asks the peers it knows by
//! URL for the membership and finds itself by its advertised peer URLs
//! (`identity.rs`). The question rides the peer port like `hash_kv.rs`,
//! with the peer TLS both ways; its hello carries IDs of 0 and the
//! listener answers whatever the IDs (`wire.rs`). The dialer sends one
//! empty `MembersAsk` frame, the listener one `MembersAnswer` frame, and
//! the connection closes.
//!
//! ```text
//! MembersAnswer: status u8 (1: the listener cannot answer yet)
//!                status 0 | u8 length | cluster version ("" unknown)
//!                | u8 length | downgrade target ("" none)
//!                | MemberListResponse (protobuf; its header names the
//!                cluster and the listener)
//! ```
//!
//! The versions let the joiner refuse itself before it starts, as etcd's
//! joiner checks its peers' versions, when the cluster does not admit its
//! own.
//!
//! The listener answers with the [`MembersService`] the server installs
//! once its node runs (its own view, as `MemberList` without
//! `linearizable`); until then it answers that it cannot. An answer is
//! read up to [`ANSWER_BYTES_MAX`]; nothing in it is trusted beyond its
//! decoding, and the joiner checks it against its own flags.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use oxetcd_core::version::Version;
use oxetcd_core::Error;
use oxetcd_proto::etcdserverpb::MemberListResponse;
use prost::Message as _;
use tracing::debug;

use super::outbound::dial;
use super::snapshot::write_frame;
use super::stream::{read_frame, ReadFrameError};
use super::tls::PeerIo;
use super::wire::{FrameKind, StreamKind};
use super::{Shared, HANDSHAKE_TIMEOUT};
use crate::runtime::{timeout, Runtime};

/// What a member tells a joining peer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterFacts {
    /// The membership, as `MemberList` answers it.
    pub members: MemberListResponse,
    /// The cluster version, once decided.
    pub cluster_version: Option<Version>,
    /// The target of the downgrade in progress.
    pub downgrade_target: Option<Version>,
}

/// How a member tells its membership to a joining peer.
pub type MembersService = Arc<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<ClusterFacts, Error>> + Send>> + Send + Sync,
>;

/// The largest answer read: a thousand members with long URLs fit.
pub(super) const ANSWER_BYTES_MAX: usize = 1024 * 1024;

/// Asks the member at `urls` (whatever its ID) for the membership, within
/// `limit`. The error says why in words, for the joiner's log.
pub(super) async fn ask<R: Runtime>(
    shared: &Shared<R>,
    urls: &[String],
    limit: Duration,
) -> Result<ClusterFacts, String> {
    let exchange = async {
        let mut io = dial(shared, 0, urls, StreamKind::Members)
            .await
            .map_err(|e| e.to_string())?;
        write_frame(shared, &mut io, FrameKind::MembersAsk, &[]).await?;
        let mut body = Vec::new();
        match read_frame(&mut io, ANSWER_BYTES_MAX, &mut body).await {
            Ok(FrameKind::MembersAnswer) => decode_answer(&body),
            Ok(kind) => Err(format!("unexpected {kind:?} frame")),
            Err(e) => Err(e.to_string()),
        }
    };
    timeout(&shared.runtime, limit, exchange)
        .await
        .unwrap_or_else(|| Err(format!("no answer within {limit:?}")))
}

/// Answers one question on an accepted members stream.
pub(super) async fn answer<R: Runtime>(shared: &Shared<R>, mut io: PeerIo<R::Io>) {
    let mut body = Vec::new();
    let read = timeout(
        &shared.runtime,
        HANDSHAKE_TIMEOUT,
        read_frame(&mut io, 0, &mut body),
    )
    .await;
    match read {
        Some(Ok(FrameKind::MembersAsk)) => {}
        Some(Ok(kind)) => {
            debug!(?kind, "unexpected frame on a members stream; closing it");
            return;
        }
        Some(Err(ReadFrameError::Closed)) | None => return,
        Some(Err(e)) => {
            debug!(error = %e, "members question not read");
            return;
        }
    }
    let result = match shared.members.get() {
        Some(service) => service().await,
        None => Err(Error::Stopped),
    };
    let reply = encode_answer(result.ok().as_ref());
    if let Err(e) = write_frame(shared, &mut io, FrameKind::MembersAnswer, &reply).await {
        debug!(error = %e, "members answer not written");
    }
}

fn encode_answer(facts: Option<&ClusterFacts>) -> Vec<u8> {
    let Some(facts) = facts else {
        return vec![1];
    };
    let mut out = vec![0];
    for version in [facts.cluster_version, facts.downgrade_target] {
        let text = version.map(|v| v.to_string()).unwrap_or_default();
        // A version's text is a few bytes; a longer one would not parse.
        let text = &text.as_bytes()[..text.len().min(u8::MAX as usize)];
        out.push(text.len() as u8);
        out.extend_from_slice(text);
    }
    out.extend_from_slice(&facts.members.encode_to_vec());
    out
}

fn decode_answer(body: &[u8]) -> Result<ClusterFacts, String> {
    let malformed = |why: &str| format!("malformed members answer: {why}");
    let mut rest = match body {
        [1] => return Err("the peer cannot tell its membership yet".to_owned()),
        [0, rest @ ..] => rest,
        _ => return Err(malformed("bad status")),
    };
    let mut versions = [None, None];
    for version in &mut versions {
        let (&len, tail) = rest.split_first().ok_or_else(|| malformed("cut short"))?;
        let len = usize::from(len);
        if tail.len() < len {
            return Err(malformed("cut short"));
        }
        let (text, tail) = tail.split_at(len);
        if len > 0 {
            let text = std::str::from_utf8(text).map_err(|_| malformed("a version not text"))?;
            *version = Some(Version::parse_stored(text).ok_or_else(|| malformed("a bad version"))?);
        }
        rest = tail;
    }
    let members = MemberListResponse::decode(rest).map_err(|e| malformed(&e.to_string()))?;
    Ok(ClusterFacts {
        members,
        cluster_version: versions[0],
        downgrade_target: versions[1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::{Member, ResponseHeader};

    #[test]
    fn answers_round_trip_and_bad_ones_are_refused() {
        let list = MemberListResponse {
            header: Some(ResponseHeader {
                cluster_id: 0xc1,
                member_id: 7,
                ..Default::default()
            }),
            members: vec![Member {
                id: 7,
                name: "a".into(),
                peer_ur_ls: vec!["http://127.0.0.1:2380".into()],
                ..Default::default()
            }],
        };
        let version = |text: &str| Version::parse_stored(text);
        for (cluster_version, downgrade_target) in [
            (None, None),
            (version("3.6.0"), None),
            (version("3.6.0"), version("3.5.0")),
        ] {
            let facts = ClusterFacts {
                members: list.clone(),
                cluster_version,
                downgrade_target,
            };
            let back = decode_answer(&encode_answer(Some(&facts))).expect("decodes");
            assert_eq!(back, facts);
        }
        assert!(decode_answer(&encode_answer(None)).is_err());
        for bad in [
            &[][..],
            &[2][..],
            &[0][..],
            &[0, 5, b'3'][..],
            &[0, 1, b'x', 0][..],
            &[0, 0, 0, 0xff, 0xff][..],
        ] {
            assert!(decode_answer(bad).is_err(), "{bad:?}");
        }
    }
}
