//! HTTP/2 frames (RFC 9113 §4 and §6) as the server reads and writes them.
//!
//! Design: [`decode`] takes one whole frame off the front of the read
//! buffer, checks what the frame itself can tell (its length against
//! `SETTINGS_MAX_FRAME_SIZE` and its type, its stream id, padding,
//! settings values), and hands back its payload as `Bytes` split off the
//! buffer, so a DATA payload or a header block is never copied. What
//! depends on the connection's state (which streams exist, windows,
//! whether a header block is open) is the connection's to check. The
//! writers append whole frames to the connection's output buffer. No input
//! can make this module panic.

use bytes::{Buf, Bytes, BytesMut};

/// What a client sends first (RFC 9113 §3.4), before its SETTINGS.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The size of a frame header.
pub(crate) const HEAD_BYTES: usize = 9;

/// `SETTINGS_MAX_FRAME_SIZE`'s initial value, and its least.
pub(crate) const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;

/// `SETTINGS_MAX_FRAME_SIZE`'s greatest value.
const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;

/// The largest flow-control window (RFC 9113 §6.9.1).
pub(crate) const MAX_WINDOW: u32 = (1 << 31) - 1;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

/// An error code (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reason(pub(crate) u32);

impl Reason {
    pub(crate) const NO_ERROR: Self = Self(0x0);
    pub(crate) const PROTOCOL_ERROR: Self = Self(0x1);
    pub(crate) const INTERNAL_ERROR: Self = Self(0x2);
    pub(crate) const FLOW_CONTROL_ERROR: Self = Self(0x3);
    pub(crate) const FRAME_SIZE_ERROR: Self = Self(0x6);
    pub(crate) const REFUSED_STREAM: Self = Self(0x7);
    pub(crate) const COMPRESSION_ERROR: Self = Self(0x9);
    pub(crate) const ENHANCE_YOUR_CALM: Self = Self(0xb);
}

/// A frame the client sent, payload split off the read buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// DATA; `flow_len` is the whole payload with padding, what flow
    /// control counts.
    Data {
        stream: u32,
        data: Bytes,
        end_stream: bool,
        flow_len: u32,
    },
    /// HEADERS, padding and priority fields removed.
    Headers {
        stream: u32,
        block: Bytes,
        end_stream: bool,
        end_headers: bool,
    },
    /// CONTINUATION.
    Continuation {
        stream: u32,
        block: Bytes,
        end_headers: bool,
    },
    /// PRIORITY: deprecated, read and ignored.
    Priority,
    /// RST_STREAM.
    Reset { stream: u32, reason: Reason },
    /// SETTINGS (not an acknowledgement), values checked.
    Settings(Settings),
    /// An acknowledgement of our SETTINGS.
    SettingsAck,
    /// PING.
    Ping { ack: bool, payload: [u8; 8] },
    /// GOAWAY.
    GoAway { last_stream: u32, reason: Reason },
    /// WINDOW_UPDATE, the increment nonzero.
    WindowUpdate { stream: u32, increment: u32 },
    /// A frame of a type this server does not know: ignored (§5.5).
    Unknown,
}

/// The settings one SETTINGS frame changes; `None` for those it leaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) header_table_size: Option<u32>,
    pub(crate) max_concurrent_streams: Option<u32>,
    pub(crate) initial_window_size: Option<u32>,
    pub(crate) max_frame_size: Option<u32>,
    pub(crate) max_header_list_size: Option<u32>,
}

/// Why a frame was refused: the connection, or one stream, ends with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    Connection(Reason),
    Stream(u32, Reason),
}

/// Takes one frame off the front of `buf` when all of it is there.
/// `max_frame_size` is the `SETTINGS_MAX_FRAME_SIZE` this server sent.
pub(crate) fn decode(buf: &mut BytesMut, max_frame_size: u32) -> Result<Option<Frame>, FrameError> {
    let Some(head) = buf.get(..HEAD_BYTES) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]);
    let kind = head[3];
    let flags = head[4];
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
    if len > max_frame_size {
        return Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR));
    }
    let whole = HEAD_BYTES + len as usize;
    if buf.len() < whole {
        buf.reserve(whole - buf.len());
        return Ok(None);
    }
    buf.advance(HEAD_BYTES);
    let payload = buf.split_to(len as usize).freeze();
    parse(kind, flags, stream, payload).map(Some)
}

fn parse(kind: u8, flags: u8, stream: u32, payload: Bytes) -> Result<Frame, FrameError> {
    use FrameError::Connection;
    let on_stream = |stream: u32| {
        if stream == 0 {
            Err(Connection(Reason::PROTOCOL_ERROR))
        } else {
            Ok(stream)
        }
    };
    let on_connection = || {
        if stream != 0 {
            Err(Connection(Reason::PROTOCOL_ERROR))
        } else {
            Ok(())
        }
    };
    Ok(match kind {
        DATA => {
            let stream = on_stream(stream)?;
            let flow_len = payload.len() as u32;
            Frame::Data {
                stream,
                data: unpad(flags, payload)?,
                end_stream: flags & END_STREAM != 0,
                flow_len,
            }
        }
        HEADERS => {
            let stream = on_stream(stream)?;
            let mut block = unpad(flags, payload)?;
            if flags & PRIORITY_FLAG != 0 {
                if block.len() < 5 {
                    return Err(Connection(Reason::FRAME_SIZE_ERROR));
                }
                block.advance(5);
            }
            Frame::Headers {
                stream,
                block,
                end_stream: flags & END_STREAM != 0,
                end_headers: flags & END_HEADERS != 0,
            }
        }
        CONTINUATION => Frame::Continuation {
            stream: on_stream(stream)?,
            block: payload,
            end_headers: flags & END_HEADERS != 0,
        },
        PRIORITY => {
            let stream = on_stream(stream)?;
            if payload.len() != 5 {
                return Err(FrameError::Stream(stream, Reason::FRAME_SIZE_ERROR));
            }
            Frame::Priority
        }
        RST_STREAM => {
            let stream = on_stream(stream)?;
            let code = be32(&payload).ok_or(Connection(Reason::FRAME_SIZE_ERROR))?;
            if payload.len() != 4 {
                return Err(Connection(Reason::FRAME_SIZE_ERROR));
            }
            Frame::Reset {
                stream,
                reason: Reason(code),
            }
        }
        SETTINGS => {
            on_connection()?;
            if flags & ACK != 0 {
                if !payload.is_empty() {
                    return Err(Connection(Reason::FRAME_SIZE_ERROR));
                }
                Frame::SettingsAck
            } else {
                Frame::Settings(settings(&payload)?)
            }
        }
        PUSH_PROMISE => return Err(Connection(Reason::PROTOCOL_ERROR)),
        PING => {
            on_connection()?;
            let payload: [u8; 8] = payload[..]
                .try_into()
                .map_err(|_| Connection(Reason::FRAME_SIZE_ERROR))?;
            Frame::Ping {
                ack: flags & ACK != 0,
                payload,
            }
        }
        GOAWAY => {
            on_connection()?;
            let last_stream = be32(&payload).ok_or(Connection(Reason::FRAME_SIZE_ERROR))?;
            let code = payload
                .get(4..8)
                .and_then(be32)
                .ok_or(Connection(Reason::FRAME_SIZE_ERROR))?;
            Frame::GoAway {
                last_stream: last_stream & MAX_WINDOW,
                reason: Reason(code),
            }
        }
        WINDOW_UPDATE => {
            if payload.len() != 4 {
                return Err(Connection(Reason::FRAME_SIZE_ERROR));
            }
            let increment = be32(&payload).unwrap_or(0) & MAX_WINDOW;
            if increment == 0 {
                return Err(match stream {
                    0 => Connection(Reason::PROTOCOL_ERROR),
                    stream => FrameError::Stream(stream, Reason::PROTOCOL_ERROR),
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        _ => Frame::Unknown,
    })
}

fn be32(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

/// Removes a PADDED frame's pad length and padding.
fn unpad(flags: u8, mut payload: Bytes) -> Result<Bytes, FrameError> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let Some(&pad) = payload.first() else {
        return Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR));
    };
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return Err(FrameError::Connection(Reason::PROTOCOL_ERROR));
    }
    payload.truncate(payload.len() - pad);
    payload.advance(1);
    Ok(payload)
}

fn settings(payload: &[u8]) -> Result<Settings, FrameError> {
    use FrameError::Connection;
    if !payload.len().is_multiple_of(6) {
        return Err(Connection(Reason::FRAME_SIZE_ERROR));
    }
    let mut settings = Settings::default();
    for entry in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([entry[0], entry[1]]);
        let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
        match id {
            0x1 => settings.header_table_size = Some(value),
            // A client must not enable push; either value is no matter here.
            0x2 if value > 1 => return Err(Connection(Reason::PROTOCOL_ERROR)),
            0x3 => settings.max_concurrent_streams = Some(value),
            0x4 if value > MAX_WINDOW => return Err(Connection(Reason::FLOW_CONTROL_ERROR)),
            0x4 => settings.initial_window_size = Some(value),
            0x5 if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) => {
                return Err(Connection(Reason::PROTOCOL_ERROR))
            }
            0x5 => settings.max_frame_size = Some(value),
            0x6 => settings.max_header_list_size = Some(value),
            // Unknown settings are ignored (§6.5.2).
            _ => {}
        }
    }
    Ok(settings)
}

/// Appends a frame header.
fn head(out: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = (len as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// Appends our SETTINGS: `(identifier, value)` pairs.
pub(crate) fn write_settings(out: &mut BytesMut, settings: &[(u16, u32)]) {
    head(out, settings.len() * 6, SETTINGS, 0, 0);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// The identifiers of the settings this server sends.
pub(crate) mod setting {
    pub(crate) const ENABLE_PUSH: u16 = 0x2;
    pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Appends an acknowledgement of the client's SETTINGS.
pub(crate) fn write_settings_ack(out: &mut BytesMut) {
    head(out, 0, SETTINGS, ACK, 0);
}

/// Appends the acknowledgement of a PING.
pub(crate) fn write_pong(out: &mut BytesMut, payload: [u8; 8]) {
    head(out, 8, PING, ACK, 0);
    out.extend_from_slice(&payload);
}

/// Appends a WINDOW_UPDATE (stream 0: the connection's window).
pub(crate) fn write_window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

/// Appends a RST_STREAM.
pub(crate) fn write_reset(out: &mut BytesMut, stream: u32, reason: Reason) {
    head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// Appends a GOAWAY.
pub(crate) fn write_goaway(out: &mut BytesMut, last_stream: u32, reason: Reason) {
    head(out, 8, GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

/// Appends the header of a DATA frame of `len` bytes; the payload follows.
pub(crate) fn write_data_head(out: &mut BytesMut, stream: u32, len: usize, end_stream: bool) {
    let flags = if end_stream { END_STREAM } else { 0 };
    head(out, len, DATA, flags, stream);
}

/// Appends a header block as one HEADERS frame and as many CONTINUATIONs
/// as frames of `max_frame_size` need.
pub(crate) fn write_headers(
    out: &mut BytesMut,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size as usize;
    let mut chunks = block.chunks(max.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let mut flags = if end_stream { END_STREAM } else { 0 };
    let mut kind = HEADERS;
    let mut chunk = first;
    loop {
        let next = chunks.next();
        if next.is_none() {
            flags |= END_HEADERS;
        }
        head(out, chunk.len(), kind, flags, stream);
        out.extend_from_slice(chunk);
        match next {
            Some(more) => {
                chunk = more;
                kind = CONTINUATION;
                flags = 0;
            }
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        head(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    fn one(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Frame, FrameError> {
        let mut buf = frame(kind, flags, stream, payload);
        let frame = decode(&mut buf, DEFAULT_MAX_FRAME_SIZE).map(|f| f.expect("whole"));
        if frame.is_ok() {
            assert!(buf.is_empty());
        }
        frame
    }

    #[test]
    fn a_frame_is_taken_only_when_whole() {
        let whole = frame(DATA, END_STREAM, 1, b"hello");
        for cut in 0..whole.len() {
            let mut part = BytesMut::from(&whole[..cut]);
            assert_eq!(decode(&mut part, DEFAULT_MAX_FRAME_SIZE), Ok(None), "{cut}");
            assert_eq!(part.len(), cut);
        }
        let mut two = whole.clone();
        two.extend_from_slice(&frame(PING, 0, 0, &[7; 8]));
        let first = decode(&mut two, DEFAULT_MAX_FRAME_SIZE).unwrap().unwrap();
        assert_eq!(
            first,
            Frame::Data {
                stream: 1,
                data: Bytes::from_static(b"hello"),
                end_stream: true,
                flow_len: 5
            }
        );
        let second = decode(&mut two, DEFAULT_MAX_FRAME_SIZE).unwrap().unwrap();
        assert_eq!(
            second,
            Frame::Ping {
                ack: false,
                payload: [7; 8]
            }
        );
    }

    #[test]
    fn padding_and_priority_are_removed_and_counted() {
        let padded = one(DATA, PADDED, 3, &[2, b'a', b'b', 0, 0]).unwrap();
        assert_eq!(
            padded,
            Frame::Data {
                stream: 3,
                data: Bytes::from_static(b"ab"),
                end_stream: false,
                flow_len: 5
            }
        );
        let headers = one(
            HEADERS,
            PADDED | PRIORITY_FLAG | END_HEADERS,
            5,
            &[1, 0, 0, 0, 1, 16, 0x82, 0],
        )
        .unwrap();
        assert_eq!(
            headers,
            Frame::Headers {
                stream: 5,
                block: Bytes::from_static(&[0x82]),
                end_stream: false,
                end_headers: true
            }
        );
        // Padding as long as the payload.
        assert_eq!(
            one(DATA, PADDED, 1, &[4, 0, 0, 0]),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            one(DATA, PADDED, 1, &[]),
            Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR))
        );
    }

    #[test]
    fn frames_are_checked_against_the_rfc() {
        let conn = |reason| Err(FrameError::Connection(reason));
        assert_eq!(one(DATA, 0, 0, b"x"), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(one(HEADERS, 0, 0, b""), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(one(SETTINGS, 0, 1, b""), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(one(SETTINGS, 0, 0, &[0; 5]), conn(Reason::FRAME_SIZE_ERROR));
        assert_eq!(
            one(SETTINGS, ACK, 0, &[0; 6]),
            conn(Reason::FRAME_SIZE_ERROR)
        );
        assert_eq!(one(PING, 0, 0, &[0; 7]), conn(Reason::FRAME_SIZE_ERROR));
        assert_eq!(one(PING, 0, 1, &[0; 8]), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(
            one(RST_STREAM, 0, 1, &[0; 3]),
            conn(Reason::FRAME_SIZE_ERROR)
        );
        assert_eq!(
            one(RST_STREAM, 0, 1, &[0; 5]),
            conn(Reason::FRAME_SIZE_ERROR)
        );
        assert_eq!(
            one(WINDOW_UPDATE, 0, 0, &[0; 4]),
            conn(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(
            one(WINDOW_UPDATE, 0, 3, &[0; 4]),
            Err(FrameError::Stream(3, Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            one(PRIORITY, 0, 3, &[0; 4]),
            Err(FrameError::Stream(3, Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            one(PUSH_PROMISE, 0, 1, &[0; 4]),
            conn(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(one(GOAWAY, 0, 0, &[0; 7]), conn(Reason::FRAME_SIZE_ERROR));
        assert_eq!(one(0x42, 0xff, 9, b"whatever"), Ok(Frame::Unknown));
        let mut big = frame(DATA, 0, 1, &vec![0; DEFAULT_MAX_FRAME_SIZE as usize + 1]);
        assert_eq!(
            decode(&mut big, DEFAULT_MAX_FRAME_SIZE),
            Err(FrameError::Connection(Reason::FRAME_SIZE_ERROR))
        );
    }

    #[test]
    fn settings_are_read_and_checked() {
        let mut payload = Vec::new();
        for (id, value) in [
            (1u16, 0u32),
            (3, 100),
            (4, 1 << 20),
            (5, 1 << 15),
            (6, 8192),
            (99, 1),
        ] {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        }
        assert_eq!(
            one(SETTINGS, 0, 0, &payload),
            Ok(Frame::Settings(Settings {
                header_table_size: Some(0),
                max_concurrent_streams: Some(100),
                initial_window_size: Some(1 << 20),
                max_frame_size: Some(1 << 15),
                max_header_list_size: Some(8192),
            }))
        );
        let bad = |id: u16, value: u32| {
            let mut p = id.to_be_bytes().to_vec();
            p.extend_from_slice(&value.to_be_bytes());
            one(SETTINGS, 0, 0, &p)
        };
        let conn = |reason| Err(FrameError::Connection(reason));
        assert_eq!(bad(2, 2), conn(Reason::PROTOCOL_ERROR));
        assert_eq!(bad(4, MAX_WINDOW + 1), conn(Reason::FLOW_CONTROL_ERROR));
        assert_eq!(
            bad(5, DEFAULT_MAX_FRAME_SIZE - 1),
            conn(Reason::PROTOCOL_ERROR)
        );
        assert_eq!(bad(5, MAX_MAX_FRAME_SIZE + 1), conn(Reason::PROTOCOL_ERROR));
    }

    #[test]
    fn written_frames_read_back() {
        let mut out = BytesMut::new();
        write_settings(&mut out, &[(setting::MAX_CONCURRENT_STREAMS, 7)]);
        write_settings_ack(&mut out);
        write_pong(&mut out, [1; 8]);
        write_window_update(&mut out, 3, 1000);
        write_reset(&mut out, 3, Reason(0x8));
        write_goaway(&mut out, 9, Reason::NO_ERROR);
        write_data_head(&mut out, 5, 2, true);
        out.extend_from_slice(b"ok");
        let block: Vec<u8> = (0..40u8).collect();
        write_headers(&mut out, 7, &block, true, 16);
        let mut buf = BytesMut::from(&out[..]);
        let mut frames = Vec::new();
        while let Some(frame) = decode(&mut buf, DEFAULT_MAX_FRAME_SIZE).unwrap() {
            frames.push(frame);
        }
        assert!(buf.is_empty());
        let expected = [
            Frame::Settings(Settings {
                max_concurrent_streams: Some(7),
                ..Settings::default()
            }),
            Frame::SettingsAck,
            Frame::Ping {
                ack: true,
                payload: [1; 8],
            },
            Frame::WindowUpdate {
                stream: 3,
                increment: 1000,
            },
            Frame::Reset {
                stream: 3,
                reason: Reason(0x8),
            },
            Frame::GoAway {
                last_stream: 9,
                reason: Reason::NO_ERROR,
            },
            Frame::Data {
                stream: 5,
                data: Bytes::from_static(b"ok"),
                end_stream: true,
                flow_len: 2,
            },
            Frame::Headers {
                stream: 7,
                block: Bytes::copy_from_slice(&block[..16]),
                end_stream: true,
                end_headers: false,
            },
            Frame::Continuation {
                stream: 7,
                block: Bytes::copy_from_slice(&block[16..32]),
                end_headers: false,
            },
            Frame::Continuation {
                stream: 7,
                block: Bytes::copy_from_slice(&block[32..]),
                end_headers: true,
            },
        ];
        assert_eq!(frames, expected);
    }
}
