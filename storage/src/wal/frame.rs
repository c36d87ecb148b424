//! WAL framing: one frame per write, and the typed items inside it.
//!
//! Design. A frame is what one `write` puts on disk, so a crash can tear at
//! most the last frame:
//!
//! ```text
//! frame  = len u32 LE | crc u32 LE | payload (len bytes) | zero pad to 8
//! crc    = CRC-32C of (len bytes | payload)
//! payload = item*
//! item   = type u8 | body len u32 LE | body
//! ```
//!
//! Frames start 8-byte aligned, so a scan for a valid frame after a bad one
//! (is the damage a torn tail or a hole in the middle?) tries every eighth
//! offset. A zero `len` is never written: a zero header is the preallocated
//! tail. Entries and hard states are raft's protobuf messages; the other
//! bodies are fixed little-endian fields.

use std::fmt;

use protobuf::Message;
use raft_proto::eraftpb::{Entry, HardState};

use crate::crc32c::Crc32c;

/// Bytes of a frame header (length, checksum).
pub(crate) const FRAME_HEADER_BYTES: usize = 8;
/// Frames start at multiples of this.
pub(crate) const FRAME_ALIGN: usize = 8;
/// A frame larger than this is refused on write and taken for damage on
/// read: a batch is bounded by raft's message limits far below it.
pub(crate) const FRAME_BYTES_MAX: usize = 1 << 30;
/// The WAL format this build writes and the only one it reads.
pub(crate) const WAL_VERSION: u32 = 1;
/// The first item of every segment starts with these bytes.
const MAGIC: [u8; 4] = *b"oxwl";

const ITEM_HEADER: u8 = 1;
const ITEM_ENTRY: u8 = 2;
const ITEM_HARD_STATE: u8 = 3;
const ITEM_MARK: u8 = 4;
const ITEM_CLUSTER_ID: u8 = 5;

/// What a segment starts with: the whole log state except the entries, so
/// that older segments can be removed once compacted.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SegmentHeader {
    /// The segment's sequence number (also its file name).
    pub(crate) seq: u64,
    pub(crate) first_index: u64,
    pub(crate) last_index: u64,
    pub(crate) snapshot_term: u64,
    pub(crate) cluster_id: u64,
    pub(crate) hard_state: HardState,
}

/// One change to the log state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item {
    /// The first item of each segment.
    Header(SegmentHeader),
    /// An entry, replacing any stored at or after its index.
    Entry(Entry),
    /// The hard state from now on.
    HardState(HardState),
    /// The log now starts at `first_index`, the entry before it having
    /// `snapshot_term`; with `replace`, every entry is dropped
    /// (a snapshot was installed).
    Mark {
        first_index: u64,
        snapshot_term: u64,
        replace: bool,
    },
    /// The cluster ID learned from the peers.
    ClusterId(u64),
}

/// Why bytes are not a valid frame or item.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    /// A zero header: the preallocated tail (or a hole).
    Zero,
    /// The header or payload runs past the end of the file.
    Truncated,
    /// The length is impossible.
    BadLength(u64),
    /// The checksum does not match.
    Checksum { stored: u32, computed: u32 },
    /// The checksum matches but an item does not decode.
    BadItem(String),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero => write!(f, "zero record header"),
            Self::Truncated => write!(f, "record runs past the end of the file"),
            Self::BadLength(len) => write!(f, "impossible record length {len}"),
            Self::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:08x}, computed {computed:08x})"
            ),
            Self::BadItem(detail) => write!(f, "{detail}"),
        }
    }
}

/// Appends one frame holding `items` to `out` (which must end 8-aligned).
pub(crate) fn encode_frame(items: &[ItemRef<'_>], out: &mut Vec<u8>) -> Result<(), String> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_BYTES]);
    for item in items {
        item.encode(out)?;
    }
    let len = out.len() - start - FRAME_HEADER_BYTES;
    if len == 0 || len > FRAME_BYTES_MAX {
        return Err(format!("a WAL record of {len} bytes"));
    }
    let len_bytes = (len as u32).to_le_bytes();
    let mut crc = Crc32c::default();
    crc.update(&len_bytes);
    crc.update(&out[start + FRAME_HEADER_BYTES..]);
    out[start..start + 4].copy_from_slice(&len_bytes);
    out[start + 4..start + 8].copy_from_slice(&crc.sum().to_le_bytes());
    out.resize(out.len().next_multiple_of(FRAME_ALIGN), 0);
    Ok(())
}

/// The frame at the start of `bytes`: its payload and its length on disk
/// (padding included).
pub(crate) fn decode_frame(bytes: &[u8]) -> Result<(&[u8], usize), FrameError> {
    let Some(header) = bytes.get(..FRAME_HEADER_BYTES) else {
        return if bytes.iter().all(|&b| b == 0) {
            Err(FrameError::Zero)
        } else {
            Err(FrameError::Truncated)
        };
    };
    let len_bytes = [header[0], header[1], header[2], header[3]];
    let stored = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len == 0 {
        return Err(if stored == 0 {
            FrameError::Zero
        } else {
            FrameError::BadLength(0)
        });
    }
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::BadLength(len as u64));
    }
    let end = FRAME_HEADER_BYTES + len;
    // The padding is part of the same write: a frame cut short in it is
    // torn like any other.
    if end.next_multiple_of(FRAME_ALIGN) > bytes.len() {
        return Err(FrameError::Truncated);
    }
    let payload = &bytes[FRAME_HEADER_BYTES..end];
    let mut crc = Crc32c::default();
    crc.update(&len_bytes);
    crc.update(payload);
    if crc.sum() != stored {
        return Err(FrameError::Checksum {
            stored,
            computed: crc.sum(),
        });
    }
    Ok((payload, end.next_multiple_of(FRAME_ALIGN)))
}

/// An item to encode, borrowing what it holds.
pub(crate) enum ItemRef<'a> {
    Header(&'a SegmentHeader),
    Entry(&'a Entry),
    HardState(&'a HardState),
    Mark {
        first_index: u64,
        snapshot_term: u64,
        replace: bool,
    },
    ClusterId(u64),
}

impl ItemRef<'_> {
    fn encode(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let at = out.len();
        out.extend_from_slice(&[0; 5]);
        let kind = match self {
            Self::Header(h) => {
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(&WAL_VERSION.to_le_bytes());
                for v in [
                    h.seq,
                    h.first_index,
                    h.last_index,
                    h.snapshot_term,
                    h.cluster_id,
                ] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                h.hard_state
                    .write_to_vec(out)
                    .map_err(|e| format!("encode hard state: {e}"))?;
                ITEM_HEADER
            }
            Self::Entry(entry) => {
                entry
                    .write_to_vec(out)
                    .map_err(|e| format!("encode log entry {}: {e}", entry.index))?;
                ITEM_ENTRY
            }
            Self::HardState(hard_state) => {
                hard_state
                    .write_to_vec(out)
                    .map_err(|e| format!("encode hard state: {e}"))?;
                ITEM_HARD_STATE
            }
            Self::Mark {
                first_index,
                snapshot_term,
                replace,
            } => {
                out.extend_from_slice(&first_index.to_le_bytes());
                out.extend_from_slice(&snapshot_term.to_le_bytes());
                out.push(u8::from(*replace));
                ITEM_MARK
            }
            Self::ClusterId(id) => {
                out.extend_from_slice(&id.to_le_bytes());
                ITEM_CLUSTER_ID
            }
        };
        let body = out.len() - at - 5;
        let body = u32::try_from(body).map_err(|_| format!("a WAL item of {body} bytes"))?;
        out[at] = kind;
        out[at + 1..at + 5].copy_from_slice(&body.to_le_bytes());
        Ok(())
    }
}

/// The items of a frame's payload, in order.
pub(crate) fn decode_items(mut payload: &[u8]) -> Result<Vec<Item>, FrameError> {
    let bad = |detail: String| FrameError::BadItem(detail);
    let mut items = Vec::new();
    while !payload.is_empty() {
        let Some((&kind, rest)) = payload.split_first() else {
            break;
        };
        let len = rest
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad("item header cut short".into()))?;
        let body = rest
            .get(4..4 + len)
            .ok_or_else(|| bad(format!("item of {len} bytes runs past its record")))?;
        payload = &rest[4 + len..];
        items.push(decode_item(kind, body).map_err(bad)?);
    }
    Ok(items)
}

fn decode_item(kind: u8, body: &[u8]) -> Result<Item, String> {
    let mut fields = Fields(body);
    Ok(match kind {
        ITEM_HEADER => {
            if fields.take(4)? != MAGIC {
                return Err("segment header without the WAL magic".into());
            }
            let version = fields.u32()?;
            if version != WAL_VERSION {
                return Err(format!(
                    "WAL format version {version}; this build reads version {WAL_VERSION}"
                ));
            }
            let seq = fields.u64()?;
            let first_index = fields.u64()?;
            let last_index = fields.u64()?;
            let snapshot_term = fields.u64()?;
            let cluster_id = fields.u64()?;
            let hard_state = HardState::parse_from_bytes(fields.0)
                .map_err(|e| format!("hard state in segment header: {e}"))?;
            Item::Header(SegmentHeader {
                seq,
                first_index,
                last_index,
                snapshot_term,
                cluster_id,
                hard_state,
            })
        }
        ITEM_ENTRY => {
            Item::Entry(Entry::parse_from_bytes(body).map_err(|e| format!("log entry: {e}"))?)
        }
        ITEM_HARD_STATE => Item::HardState(
            HardState::parse_from_bytes(body).map_err(|e| format!("hard state: {e}"))?,
        ),
        ITEM_MARK => {
            let first_index = fields.u64()?;
            let snapshot_term = fields.u64()?;
            let replace = match fields.take(1)? {
                [0] => false,
                [1] => true,
                other => return Err(format!("compaction mark with flag {other:?}")),
            };
            Item::Mark {
                first_index,
                snapshot_term,
                replace,
            }
        }
        ITEM_CLUSTER_ID => Item::ClusterId(fields.u64()?),
        other => return Err(format!("unknown item type {other}")),
    })
}

/// Fixed fields read off the front of an item body.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("item body cut short".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64) -> Entry {
        Entry {
            index,
            term: 3,
            data: vec![7; 300].into(),
            ..Entry::default()
        }
    }

    #[test]
    fn items_round_trip_through_a_frame() {
        let header = SegmentHeader {
            seq: 4,
            first_index: 10,
            last_index: 12,
            snapshot_term: 2,
            cluster_id: 0xc1,
            hard_state: HardState {
                term: 3,
                vote: 1,
                commit: 11,
                ..HardState::default()
            },
        };
        let e = entry(13);
        let mut buf = Vec::new();
        encode_frame(
            &[
                ItemRef::Header(&header),
                ItemRef::Entry(&e),
                ItemRef::HardState(&header.hard_state),
                ItemRef::Mark {
                    first_index: 11,
                    snapshot_term: 3,
                    replace: true,
                },
                ItemRef::ClusterId(9),
            ],
            &mut buf,
        )
        .unwrap();
        assert_eq!(buf.len() % FRAME_ALIGN, 0);
        buf.extend_from_slice(&[0; 16]);
        let (payload, len) = decode_frame(&buf).unwrap();
        assert_eq!(len % FRAME_ALIGN, 0);
        assert_eq!(
            decode_items(payload).unwrap(),
            vec![
                Item::Header(header.clone()),
                Item::Entry(e),
                Item::HardState(header.hard_state.clone()),
                Item::Mark {
                    first_index: 11,
                    snapshot_term: 3,
                    replace: true
                },
                Item::ClusterId(9),
            ]
        );
        assert_eq!(decode_frame(&buf[len..]), Err(FrameError::Zero));
    }

    #[test]
    fn damage_is_detected() {
        let e = entry(1);
        let mut buf = Vec::new();
        encode_frame(&[ItemRef::Entry(&e)], &mut buf).unwrap();
        for at in 0..buf.len() - 8 {
            let mut bad = buf.clone();
            bad[at] ^= 0x10;
            let (payload, _) = match decode_frame(&bad) {
                Err(_) => continue,
                Ok(frame) => frame,
            };
            // Only the padding is outside the checksum.
            assert!(at >= FRAME_HEADER_BYTES + payload.len(), "flip at {at}");
        }
        assert_eq!(decode_frame(&buf[..20]), Err(FrameError::Truncated));
        assert_eq!(decode_frame(&buf[..5]), Err(FrameError::Truncated));
    }

    #[test]
    fn a_frame_cut_in_its_padding_is_truncated() {
        // Some entry size leaves padding; bounded by the alignment.
        let padded = (0..FRAME_ALIGN).find_map(|extra| {
            let e = Entry {
                index: 1,
                data: vec![1; 100 + extra].into(),
                ..Entry::default()
            };
            let mut buf = Vec::new();
            encode_frame(&[ItemRef::Entry(&e)], &mut buf).unwrap();
            let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            (FRAME_HEADER_BYTES + len < buf.len()).then_some(buf)
        });
        let buf = padded.expect("some size needs padding");
        assert!(decode_frame(&buf).is_ok());
        assert_eq!(
            decode_frame(&buf[..buf.len() - 1]),
            Err(FrameError::Truncated)
        );
    }
}
