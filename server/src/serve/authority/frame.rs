//! HTTP/2 frames as this module reads and writes them (RFC 9113 §4.1,
//! §6.2, §6.10): frame headers, and a header block taken apart from its
//! HEADERS and CONTINUATION frames and framed again.
//!
//! Taking apart drops padding and keeps the priority fields; framing again
//! writes one HEADERS frame (END_STREAM and PRIORITY kept) and as many
//! CONTINUATIONs as the block needs, each payload at most
//! [`FRAME_PAYLOAD_BYTES_MAX`]. Bytes that do not parse are [`Malformed`],
//! never a panic.

use super::hpack;

/// Length, type, flags and stream identifier (RFC 9113 §4.1).
pub(super) const FRAME_HEADER_BYTES: usize = 9;

/// Largest payload of a frame this module writes: the initial
/// SETTINGS_MAX_FRAME_SIZE, which every HTTP/2 peer must accept whatever
/// it advertises.
pub(super) const FRAME_PAYLOAD_BYTES_MAX: usize = 16_384;

pub(super) const TYPE_HEADERS: u8 = 0x1;
pub(super) const TYPE_CONTINUATION: u8 = 0x9;
pub(super) const FLAG_END_STREAM: u8 = 0x1;
pub(super) const FLAG_END_HEADERS: u8 = 0x4;
pub(super) const FLAG_PADDED: u8 = 0x8;
pub(super) const FLAG_PRIORITY: u8 = 0x20;

/// Stream dependency and weight, present with FLAG_PRIORITY.
pub(super) const PRIORITY_BYTES: usize = 5;

/// A held header block could not be taken apart.
pub(super) struct Malformed;

impl From<hpack::Malformed> for Malformed {
    fn from(_: hpack::Malformed) -> Self {
        Self
    }
}

/// A parsed frame header.
pub(super) struct FrameHeader {
    pub(super) length: usize,
    pub(super) kind: u8,
    pub(super) flags: u8,
}

/// A held header block taken apart.
pub(super) struct HeldBlock<'a> {
    /// The HEADERS frame's flags.
    pub(super) flags: u8,
    /// Its stream dependency and weight, if FLAG_PRIORITY is set.
    pub(super) priority: &'a [u8],
    /// The header block fragment, CONTINUATIONs joined, padding dropped.
    pub(super) fragment: &'a [u8],
}

/// Parses the frame header at the start of `bytes` (at least nine long).
pub(super) fn frame_header(bytes: &[u8]) -> FrameHeader {
    FrameHeader {
        length: usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]),
        kind: bytes[3],
        flags: bytes[4],
    }
}

/// Writes a frame header for a payload of `length` bytes.
pub(super) fn push_frame_header(
    out: &mut Vec<u8>,
    length: usize,
    kind: u8,
    flags: u8,
    stream_id: [u8; 4],
) {
    debug_assert!(
        length <= FRAME_PAYLOAD_BYTES_MAX,
        "frame payload {length} too long"
    );
    out.extend_from_slice(&[
        (length >> 16) as u8,
        (length >> 8) as u8,
        length as u8,
        kind,
        flags,
    ]);
    out.extend_from_slice(&stream_id);
}

/// Takes apart `held` — a HEADERS frame and its CONTINUATIONs as received,
/// the last with END_HEADERS — joining the fragments in `joined` when
/// there are CONTINUATIONs.
pub(super) fn unframe<'a>(
    held: &'a [u8],
    joined: &'a mut Vec<u8>,
) -> Result<HeldBlock<'a>, Malformed> {
    let first = frame_header(held);
    let mut payload = &held[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + first.length];
    let mut padding = 0;
    if first.flags & FLAG_PADDED != 0 {
        let (&pad, rest) = payload.split_first().ok_or(Malformed)?;
        padding = usize::from(pad);
        payload = rest;
    }
    let mut priority: &[u8] = &[];
    if first.flags & FLAG_PRIORITY != 0 {
        if payload.len() < PRIORITY_BYTES {
            return Err(Malformed);
        }
        (priority, payload) = payload.split_at(PRIORITY_BYTES);
    }
    let fragment_len = payload.len().checked_sub(padding).ok_or(Malformed)?;
    let mut fragment = &payload[..fragment_len];
    let first_end = FRAME_HEADER_BYTES + first.length;
    if first_end < held.len() {
        joined.clear();
        joined.extend_from_slice(fragment);
        let mut at = first_end;
        while at < held.len() {
            let header = frame_header(&held[at..]);
            at += FRAME_HEADER_BYTES;
            joined.extend_from_slice(&held[at..at + header.length]);
            at += header.length;
        }
        fragment = joined;
    }
    Ok(HeldBlock {
        flags: first.flags,
        priority,
        fragment,
    })
}

/// Frames `block` into `frames`: one HEADERS frame on `stream_id` with
/// `priority`'s fields and, of `flags`, END_STREAM and PRIORITY; then
/// CONTINUATIONs while the block lasts.
pub(super) fn reframe(
    block: &[u8],
    priority: &[u8],
    flags: u8,
    stream_id: [u8; 4],
    frames: &mut Vec<u8>,
) {
    frames.clear();
    let first_room = FRAME_PAYLOAD_BYTES_MAX - priority.len();
    let (head, mut rest) = block.split_at(block.len().min(first_room));
    let mut flags = flags & (FLAG_END_STREAM | FLAG_PRIORITY);
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    push_frame_header(
        frames,
        priority.len() + head.len(),
        TYPE_HEADERS,
        flags,
        stream_id,
    );
    frames.extend_from_slice(priority);
    frames.extend_from_slice(head);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(FRAME_PAYLOAD_BYTES_MAX));
        let flags = if after.is_empty() {
            FLAG_END_HEADERS
        } else {
            0
        };
        push_frame_header(frames, chunk.len(), TYPE_CONTINUATION, flags, stream_id);
        frames.extend_from_slice(chunk);
        rest = after;
    }
}
