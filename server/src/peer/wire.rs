//! The peer wire format, as pure encode and decode functions.
//!
//! A connection opens with a fixed-size [`Hello`] from the dialing member and
//! a fixed-size [`Answer`] from the listening one. After an accepting
//! answer only the dialer speaks, in frames: a 4-byte big-endian body
//! length, a 1-byte [`FrameKind`], then the body. A snapshot stream ends
//! with one acknowledgement byte from the listener ([`SNAPSHOT_ACK`]).
//!
//! ```text
//! Hello  (36 bytes): magic "oxetcdpr" | version u16 | stream u8 | 0u8
//!                    | cluster ID u64 | sender ID u64 | receiver ID u64
//! Answer (12 bytes): status u8 (0 accepted, else a Reject code) | 0u8
//!                    | listener's version u16 | listener's cluster ID u64
//! Frame:             length u32 | kind u8 | body (length bytes)
//! ```
//!
//! The dialer reads the first 4 bytes of the answer, then the cluster ID
//! only if the versions match (version 1 answers were 4 bytes long).
//!
//! Cluster IDs: a listener accepts its own cluster ID. A member joining an
//! existing cluster (`--initial-cluster-state existing`, no stored ID)
//! cannot derive the ID, so until it learns it, it dials with cluster ID 0,
//! "joining". A listener accepts 0 only from a sender in its current
//! membership (one added with `member add`), and answers with the real ID.
//! The joining member adopts the ID of the first answer that accepts it,
//! and, while it has none, accepts a hello carrying an ID from a member it
//! knows as a peer (the leader may dial first) and adopts that ID. Either
//! way it adopts before reading or sending any frame, and never replaces
//! an ID it has. Two members without an ID refuse each other.
//!
//! A *members* stream is the exception to these checks: a member joining
//! an existing cluster asks it for its membership before it knows its own
//! ID (see `members.rs`), so its hello carries IDs of 0 and is accepted
//! whatever the IDs, as etcd serves `/members` on its peer port. The server
//! stores a learned ID (`<data-dir>/member/cluster_id`, synced) before the
//! node sees it, so a restarted member dials with it.
//!
//! All integers are big-endian. Nothing here allocates more than the caller
//! allows: a frame header is checked against the maximum before its body is
//! read. This module does no I/O.

use std::fmt;

/// Opens every peer connection; anything else on the peer port (an HTTP
/// client, a port scanner) is refused by its first eight bytes.
pub(crate) const MAGIC: [u8; 8] = *b"oxetcdpr";

/// The protocol this build speaks. A listener refuses other versions with
/// [`Reject::Version`], naming its own, so a mixed-version cluster fails
/// with a clear log line instead of misreading frames.
pub(crate) const PROTOCOL_VERSION: u16 = 2;

/// Bytes in a [`Hello`].
pub(crate) const HELLO_BYTES: usize = 36;

/// Bytes in an [`Answer`].
pub(crate) const ANSWER_BYTES: usize = 12;

/// Bytes of an [`Answer`] every version sends: status and version.
pub(crate) const ANSWER_HEAD_BYTES: usize = 4;

/// Bytes in a frame header (length and kind).
pub(crate) const FRAME_HEADER_BYTES: usize = 5;

/// The byte a listener writes after it has taken a whole snapshot.
pub(crate) const SNAPSHOT_ACK: u8 = 1;

/// Which kind of stream a connection carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StreamKind {
    /// Raft messages other than snapshots, in order.
    Messages,
    /// One snapshot: data chunks, then its `MsgSnapshot`.
    Snapshot,
    /// One `HashKV` question and its answer (see `hash_kv.rs`).
    HashKv,
    /// One question for the cluster's membership and its answer (see
    /// `members.rs`), asked by a member joining before it knows any ID.
    Members,
}

impl StreamKind {
    fn code(self) -> u8 {
        match self {
            Self::Messages => 1,
            Self::Snapshot => 2,
            Self::HashKv => 3,
            Self::Members => 4,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Messages),
            2 => Some(Self::Snapshot),
            3 => Some(Self::HashKv),
            4 => Some(Self::Members),
            _ => None,
        }
    }
}

/// The dialing member's introduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) version: u16,
    pub(crate) kind: StreamKind,
    pub(crate) cluster_id: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

/// Why a [`Hello`] could not be read at all; the connection is closed
/// without an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HelloError {
    /// Not our protocol (wrong magic).
    Magic,
    /// Our protocol, but a stream kind this version does not know.
    Kind(u8),
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Magic => f.write_str("not an oxetcd peer handshake (bad magic)"),
            Self::Kind(code) => write!(f, "unknown peer stream kind {code}"),
        }
    }
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = [0u8; HELLO_BYTES];
        out[..8].copy_from_slice(&MAGIC);
        out[8..10].copy_from_slice(&self.version.to_be_bytes());
        out[10] = self.kind.code();
        out[11] = 0;
        out[12..20].copy_from_slice(&self.cluster_id.to_be_bytes());
        out[20..28].copy_from_slice(&self.from.to_be_bytes());
        out[28..36].copy_from_slice(&self.to.to_be_bytes());
        out
    }

    /// Decodes a hello. The version is returned as sent, whatever it is, so
    /// the listener can answer a mismatch by name; the stream kind is only
    /// checked when the version is ours.
    pub(crate) fn decode(bytes: &[u8; HELLO_BYTES]) -> Result<Self, HelloError> {
        if bytes[..8] != MAGIC {
            return Err(HelloError::Magic);
        }
        let version = u16::from_be_bytes([bytes[8], bytes[9]]);
        let kind = match StreamKind::from_code(bytes[10]) {
            Some(kind) => kind,
            // A newer peer may define more kinds; the version check answers it.
            None if version != PROTOCOL_VERSION => StreamKind::Messages,
            None => return Err(HelloError::Kind(bytes[10])),
        };
        Ok(Self {
            version,
            kind,
            cluster_id: u64_at(bytes, 12),
            from: u64_at(bytes, 20),
            to: u64_at(bytes, 28),
        })
    }
}

/// Why a listener refused a connection. The codes are part of the wire
/// format: never renumber them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    /// The dialer speaks another protocol version.
    Version,
    /// The dialer belongs to another cluster (or another
    /// `--initial-cluster-token`).
    ClusterId,
    /// The dialer thinks it is talking to another member: its list of peer
    /// URLs is stale or wrong.
    WrongMember,
    /// The dialer was removed from the cluster.
    Removed,
    /// The listener is already taking as many snapshots as it allows.
    Busy,
    /// A code this version does not know (a newer listener's).
    Other(u8),
}

impl Reject {
    fn code(self) -> u8 {
        match self {
            Self::Version => 1,
            Self::ClusterId => 2,
            Self::WrongMember => 3,
            Self::Removed => 4,
            Self::Busy => 5,
            Self::Other(code) => code,
        }
    }

    fn from_code(code: u8) -> Self {
        match code {
            1 => Self::Version,
            2 => Self::ClusterId,
            3 => Self::WrongMember,
            4 => Self::Removed,
            5 => Self::Busy,
            other => Self::Other(other),
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version => f.write_str("unsupported peer protocol version"),
            Self::ClusterId => f.write_str("cluster ID mismatch"),
            Self::WrongMember => f.write_str("member ID mismatch"),
            Self::Removed => f.write_str("the sending member was removed from the cluster"),
            Self::Busy => f.write_str("too many snapshots in flight"),
            Self::Other(code) => write!(f, "rejected with unknown reason code {code}"),
        }
    }
}

/// The listener's answer to a [`Hello`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    /// `None`: accepted.
    pub(crate) reject: Option<Reject>,
    /// The listener's protocol version.
    pub(crate) version: u16,
    /// The listener's cluster ID (0 if it has none yet).
    pub(crate) cluster_id: u64,
}

impl Answer {
    pub(crate) fn encode(&self) -> [u8; ANSWER_BYTES] {
        let mut out = [0u8; ANSWER_BYTES];
        out[0] = self.reject.map_or(0, Reject::code);
        out[2..4].copy_from_slice(&self.version.to_be_bytes());
        out[4..12].copy_from_slice(&self.cluster_id.to_be_bytes());
        out
    }

    /// Decodes the head of an answer; the cluster ID is read separately
    /// ([`Answer::decode_cluster_id`]) when the version is ours.
    pub(crate) fn decode_head(bytes: &[u8; ANSWER_HEAD_BYTES]) -> Self {
        let reject = match bytes[0] {
            0 => None,
            code => Some(Reject::from_code(code)),
        };
        Self {
            reject,
            version: u16::from_be_bytes([bytes[2], bytes[3]]),
            cluster_id: 0,
        }
    }

    /// Reads the cluster ID that follows the head.
    pub(crate) fn decode_cluster_id(bytes: &[u8; ANSWER_BYTES - ANSWER_HEAD_BYTES]) -> u64 {
        u64_at(bytes, 0)
    }
}

/// What a frame's body holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// A protobuf `eraftpb.Message` (messages streams).
    Message,
    /// Raw snapshot data (snapshot streams).
    SnapshotChunk,
    /// The protobuf `MsgSnapshot` that ends a snapshot stream.
    SnapshotEnd,
    /// A `HashKV` question (hash-kv streams, dialer to listener).
    HashKvAsk,
    /// A `HashKV` answer or refusal (hash-kv streams, listener to dialer).
    HashKvAnswer,
    /// A membership question (members streams, dialer to listener).
    MembersAsk,
    /// The membership, or a refusal (members streams, listener to dialer).
    MembersAnswer,
}

impl FrameKind {
    fn code(self) -> u8 {
        match self {
            Self::Message => 1,
            Self::SnapshotChunk => 2,
            Self::SnapshotEnd => 3,
            Self::HashKvAsk => 4,
            Self::HashKvAnswer => 5,
            Self::MembersAsk => 6,
            Self::MembersAnswer => 7,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Message),
            2 => Some(Self::SnapshotChunk),
            3 => Some(Self::SnapshotEnd),
            4 => Some(Self::HashKvAsk),
            5 => Some(Self::HashKvAnswer),
            6 => Some(Self::MembersAsk),
            7 => Some(Self::MembersAnswer),
            _ => None,
        }
    }
}

/// Why a frame header is refused; the connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// The body would exceed the maximum.
    TooLarge { len: u64, max: usize },
    /// An unknown kind code.
    Kind(u8),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the maximum of {max}")
            }
            Self::Kind(code) => write!(f, "unknown frame kind {code}"),
        }
    }
}

/// Appends a frame header for a body of `len` bytes. The caller has checked
/// `len` against the maximum (which fits in a `u32`).
pub(crate) fn put_frame_header(out: &mut Vec<u8>, kind: FrameKind, len: usize) {
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.push(kind.code());
}

/// Reads a frame header, refusing bodies over `max` bytes before anything
/// is allocated for them.
pub(crate) fn parse_frame_header(
    bytes: &[u8; FRAME_HEADER_BYTES],
    max: usize,
) -> Result<(FrameKind, usize), FrameError> {
    let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let kind = FrameKind::from_code(bytes[4]).ok_or(FrameError::Kind(bytes[4]))?;
    match usize::try_from(len) {
        Ok(len) if len <= max => Ok((kind, len)),
        _ => Err(FrameError::TooLarge {
            len: u64::from(len),
            max,
        }),
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            kind: StreamKind::Snapshot,
            cluster_id: 0x0102_0304_0506_0708,
            from: 0x1111,
            to: u64::MAX,
        }
    }

    /// The layout is the wire format; this pins it byte for byte.
    #[test]
    fn hello_layout_is_stable() {
        let bytes = hello().encode();
        assert_eq!(&bytes[..8], b"oxetcdpr");
        assert_eq!(&bytes[8..12], &[0, 2, 2, 0]);
        assert_eq!(&bytes[12..20], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[20..28], &[0, 0, 0, 0, 0, 0, 0x11, 0x11]);
        assert_eq!(&bytes[28..36], &[0xff; 8]);
        assert_eq!(Hello::decode(&bytes), Ok(hello()));
    }

    #[test]
    fn bad_magic_is_refused() {
        let mut bytes = hello().encode();
        bytes[..8].copy_from_slice(b"GET / HT");
        assert_eq!(Hello::decode(&bytes), Err(HelloError::Magic));
        assert_eq!(Hello::decode(&[0; HELLO_BYTES]), Err(HelloError::Magic));
    }

    #[test]
    fn unknown_kind_is_refused_only_in_our_version() {
        let mut bytes = hello().encode();
        bytes[10] = 9;
        assert_eq!(Hello::decode(&bytes), Err(HelloError::Kind(9)));
        // A future version's kinds are not ours to judge: the version is.
        bytes[8..10].copy_from_slice(&7u16.to_be_bytes());
        assert_eq!(Hello::decode(&bytes).map(|h| h.version), Ok(7));
    }

    #[test]
    fn answers_round_trip() {
        for reject in [
            None,
            Some(Reject::Version),
            Some(Reject::ClusterId),
            Some(Reject::WrongMember),
            Some(Reject::Removed),
            Some(Reject::Busy),
            Some(Reject::Other(200)),
        ] {
            let answer = Answer {
                reject,
                version: PROTOCOL_VERSION,
                cluster_id: 0x0102_0304_0506_0708,
            };
            let bytes = answer.encode();
            let mut decoded = Answer::decode_head(bytes[..4].try_into().unwrap());
            decoded.cluster_id = Answer::decode_cluster_id(bytes[4..].try_into().unwrap());
            assert_eq!(decoded, answer);
        }
        assert_eq!(
            Answer {
                reject: Some(Reject::ClusterId),
                version: 2,
                cluster_id: 0xc1,
            }
            .encode(),
            [2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xc1]
        );
        // A version 1 listener's 4-byte answer reads the same.
        let v1 = Answer::decode_head(&[1, 0, 0, 1]);
        assert_eq!((v1.reject, v1.version), (Some(Reject::Version), 1));
    }

    #[test]
    fn frame_headers_are_bounded() {
        let mut out = Vec::new();
        put_frame_header(&mut out, FrameKind::SnapshotChunk, 1000);
        assert_eq!(out, [0, 0, 3, 0xe8, 2]);
        let header: [u8; FRAME_HEADER_BYTES] = out.try_into().unwrap();
        assert_eq!(
            parse_frame_header(&header, 1000),
            Ok((FrameKind::SnapshotChunk, 1000))
        );
        assert_eq!(
            parse_frame_header(&header, 999),
            Err(FrameError::TooLarge {
                len: 1000,
                max: 999
            })
        );
        assert_eq!(
            parse_frame_header(&[0xff, 0xff, 0xff, 0xff, 1], usize::MAX),
            Ok((FrameKind::Message, u32::MAX as usize))
        );
        assert_eq!(
            parse_frame_header(&[0, 0, 0, 1, 0], 10),
            Err(FrameError::Kind(0))
        );
    }
}
