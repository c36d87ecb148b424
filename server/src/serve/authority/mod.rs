//! Inbound `:authority` repair for clients that put a URL there.
//!
//! etcdctl 3.4 dials `passthrough:///http://host:port` when given
//! `--endpoints http://host:port`, and grpc-go then sends
//! `:authority: http://host:port`. grpc-go servers (etcd) accept that; h2
//! resets the stream as a malformed authority. [`AuthorityRewrite`] wraps
//! a client connection before hyper sees it and, on HTTP/2 connections
//! only, strips the scheme (and any path) from literal `:authority` values
//! in the client's header blocks. Everything else passes through
//! byte-for-byte, and responses are not touched.
//!
//! # What is parsed
//!
//! A connection that does not open with the HTTP/2 client preface
//! (HTTP/1.1) is passed through from the first mismatching byte on; reads
//! then go straight to the socket. After the preface, frame headers are
//! parsed and every frame except HEADERS passes through as it arrives. A
//! HEADERS frame and its CONTINUATIONs are held until END_HEADERS, the
//! fragments are joined (padding and priority fields taken off) and the
//! HPACK block is walked by [`hpack`]. When no `:authority` needs
//! repair, the held bytes go on unchanged. Otherwise the new block is sent
//! as one HEADERS frame, with END_STREAM and PRIORITY (and its fields) kept
//! and padding dropped, split into CONTINUATIONs when it exceeds 16,384
//! bytes, the smallest maximum frame size a peer may advertise.
//!
//! # Why h2's dynamic table stays in step
//!
//! The repaired field keeps its representation — incremental indexing,
//! without indexing or never indexed — so h2's decoder adds exactly the
//! entries the client's encoder added, in the same order; only a repaired
//! entry is smaller (its value lost the scheme). HPACK evicts oldest
//! first, so an entry stays exactly as long as it and every newer entry
//! fit the size limit at each insertion and size update (size updates pass
//! through unchanged, so both sides have the same limits). With every
//! decoder entry no larger than its encoder twin, that holds on the decoder
//! at least as long: its table is the encoder's table followed perhaps by
//! older entries the encoder already evicted (or, after an entry too big
//! for the encoder's table, one the encoder never kept). Indexes count
//! from the newest entry, so every index the client
//! sends names the same entry on both sides, and a later indexed reference
//! to a repaired `:authority` yields the repaired value. The extra old
//! entries are never referenced, since the encoder only refers to what it
//! holds. This is why a value is only ever shortened, never lengthened.
//!
//! # Limits and failure
//!
//! A header block of more than [`HEADER_BLOCK_BYTES_MAX`] raw bytes (over
//! hyper's 16 KiB header list limit in any realistic encoding) is not
//! rewritten: what is held goes on unchanged and the rest of the connection
//! passes through. Likewise on anything malformed — a frame between
//! HEADERS and its last CONTINUATION, bad padding, an HPACK block that does
//! not parse: the original bytes go on and rewriting stops, so h2 sees
//! exactly what the client sent and reports the error itself. This module
//! never panics on input and never closes a connection.
//!
//! Not repaired: `:authority` named by a dynamic table index (the rewrite
//! keeps no table; Go's encoder always names it by static index 1), and
//! `:authority` in PUSH_PROMISE, which clients must not send.
//!
//! # Cost
//!
//! On HTTP/2, bytes are read into one [`READ_BUFFER_BYTES`] buffer per
//! connection and copied once into hyper's; whole runs of non-HEADERS
//! frames go in one copy, with no allocation per frame. Header blocks are
//! copied a few times more, through buffers kept for the connection's life
//! (each at most about [`HEADER_BLOCK_BYTES_MAX`]). An HTTP/1.1 connection
//! frees its buffer once told apart and then reads straight into hyper's.

mod hpack;
mod huffman;

use std::io;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Length, type, flags and stream identifier (RFC 9113 §4.1).
const FRAME_HEADER_BYTES: usize = 9;

/// Largest payload of a frame this module writes: the initial
/// SETTINGS_MAX_FRAME_SIZE, which every HTTP/2 peer must accept whatever
/// it advertises.
const FRAME_PAYLOAD_BYTES_MAX: usize = 16_384;

/// Header blocks larger than this (HEADERS and CONTINUATION frames, as
/// received) are not rewritten, which bounds what one connection holds
/// back. Four default-sized frames; hyper refuses header lists over 16 KiB
/// anyway.
const HEADER_BLOCK_BYTES_MAX: usize = 64 * 1024;

/// Bytes read from the connection at once on HTTP/2: hyper's own read size
/// is of this order, and one 16 KiB DATA frame fits.
const READ_BUFFER_BYTES: usize = 16 * 1024;

const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

/// Stream dependency and weight, present with FLAG_PRIORITY.
const PRIORITY_BYTES: usize = 5;

/// A client connection whose inbound HTTP/2 header blocks have any
/// `http://` or `https://` stripped from `:authority` (see the module
/// docs). Writes go straight to the inner connection.
pub(crate) struct AuthorityRewrite<T> {
    inner: T,
    inbound: Inbound,
    /// Bytes read from `inner`; `input[start..end]` is not yet delivered.
    input: Box<[u8]>,
    start: usize,
    end: usize,
    /// `input[start..start + pass]` is known to go on unchanged.
    pass: usize,
    /// `inner` reached end of file.
    eof: bool,
}

impl<T> AuthorityRewrite<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            inbound: Inbound::new(),
            input: Box::default(),
            start: 0,
            end: 0,
            pass: 0,
            eof: false,
        }
    }
}

impl<T: Read + Unpin> Read for AuthorityRewrite<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut delivered = false;
        while buf.remaining() > 0 {
            // Held or rewritten bytes precede everything still in `input`.
            if let Some(output) = this.inbound.output() {
                let n = output.len().min(buf.remaining());
                buf.put_slice(&output[..n]);
                this.inbound.consume_output(n);
                delivered = true;
                continue;
            }
            if this.pass > 0 {
                let n = this.pass.min(buf.remaining());
                buf.put_slice(&this.input[this.start..this.start + n]);
                this.start += n;
                this.pass -= n;
                delivered = true;
                continue;
            }
            if this.start < this.end {
                match this.inbound.scan(&this.input[this.start..this.end]) {
                    Scan::Pass(n) => this.pass = n,
                    Scan::Consumed(n) => this.start += n,
                }
                continue;
            }
            if delivered || this.eof {
                break;
            }
            if this.inbound.is_pass_through() {
                // Nothing buffered and nothing left to look at: read
                // straight into hyper's buffer.
                this.input = Box::default();
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.input.is_empty() {
                this.input = vec![0; READ_BUFFER_BYTES].into_boxed_slice();
            }
            let mut read = ReadBuf::new(&mut this.input);
            match Pin::new(&mut this.inner).poll_read(cx, read.unfilled()) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            this.start = 0;
            this.end = read.filled().len();
            if this.end == 0 {
                this.eof = true;
                this.inbound.finish();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: Write + Unpin> Write for AuthorityRewrite<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}

/// What [`Inbound::scan`] did with the bytes it was shown.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// The first `n` bytes go on unchanged.
    Pass(usize),
    /// The first `n` bytes were taken in; [`Inbound::output`] may now have
    /// bytes to deliver before the rest.
    Consumed(usize),
}

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    /// Matching the client preface; this many bytes matched so far.
    Preface(usize),
    /// Between or inside HTTP/2 frames.
    Frames,
    /// Not HTTP/2, or rewriting gave up: everything goes on unchanged.
    PassThrough,
}

/// The inbound byte stream's parser: sans-io, shown bytes by
/// [`AuthorityRewrite`] and holding back only header blocks.
struct Inbound {
    mode: Mode,
    /// Payload bytes of the current passed-through frame not yet seen.
    payload_left: usize,
    /// A frame header arriving in pieces: its bytes and how many arrived.
    header: [u8; FRAME_HEADER_BYTES],
    header_len: usize,
    /// Inside a header block: its raw frames so far.
    collecting: bool,
    held: Vec<u8>,
    /// Payload bytes of the last held frame not yet seen.
    held_payload_left: usize,
    /// Whether the last held frame ends the block.
    held_end_headers: bool,
    /// The block's stream identifier, as its HEADERS frame carried it.
    stream_id: [u8; 4],
    /// Bytes to deliver before any more input.
    output: Vec<u8>,
    output_start: usize,
    /// Work buffers for a header block, kept to avoid allocating per block.
    fragments: Vec<u8>,
    block: Vec<u8>,
    frames: Vec<u8>,
    scratch: Vec<u8>,
}

/// A held header block could not be taken apart.
struct Malformed;

impl From<hpack::Malformed> for Malformed {
    fn from(_: hpack::Malformed) -> Self {
        Self
    }
}

impl Inbound {
    fn new() -> Self {
        Self {
            mode: Mode::Preface(0),
            payload_left: 0,
            header: [0; FRAME_HEADER_BYTES],
            header_len: 0,
            collecting: false,
            held: Vec::new(),
            held_payload_left: 0,
            held_end_headers: false,
            stream_id: [0; 4],
            output: Vec::new(),
            output_start: 0,
            fragments: Vec::new(),
            block: Vec::new(),
            frames: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Whether every further byte goes on unchanged, with nothing held.
    fn is_pass_through(&self) -> bool {
        self.mode == Mode::PassThrough && self.output().is_none()
    }

    /// Bytes to deliver before any more input.
    fn output(&self) -> Option<&[u8]> {
        (self.output_start < self.output.len()).then(|| &self.output[self.output_start..])
    }

    fn consume_output(&mut self, n: usize) {
        self.output_start += n;
        if self.output_start == self.output.len() {
            self.output.clear();
            self.output_start = 0;
        }
    }

    /// Looks at the next input bytes (`data` is not empty, and
    /// [`Inbound::output`] is drained); always makes progress.
    fn scan(&mut self, data: &[u8]) -> Scan {
        match self.mode {
            Mode::PassThrough => Scan::Pass(data.len()),
            Mode::Preface(matched) => {
                let n = (PREFACE.len() - matched).min(data.len());
                if data[..n] == PREFACE[matched..matched + n] {
                    self.mode = if matched + n == PREFACE.len() {
                        Mode::Frames
                    } else {
                        Mode::Preface(matched + n)
                    };
                    Scan::Pass(n)
                } else {
                    self.give_up();
                    Scan::Pass(data.len())
                }
            }
            Mode::Frames if self.collecting => self.collect(data),
            Mode::Frames => self.scan_frames(data),
        }
    }

    /// Between frames or inside a passed-through one.
    fn scan_frames(&mut self, data: &[u8]) -> Scan {
        if self.header_len == 0 {
            // The hot path: run over whole frames up to a HEADERS frame, a
            // header split across reads, or the end of `data`.
            let mut at = 0;
            loop {
                let n = self.payload_left.min(data.len() - at);
                self.payload_left -= n;
                at += n;
                let rest = &data[at..];
                if self.payload_left > 0 || rest.len() < FRAME_HEADER_BYTES {
                    break;
                }
                let header = frame_header(rest);
                if header.kind == TYPE_HEADERS {
                    break;
                }
                self.payload_left = header.length;
                at += FRAME_HEADER_BYTES;
            }
            if at > 0 {
                return Scan::Pass(at);
            }
        }
        let n = (FRAME_HEADER_BYTES - self.header_len).min(data.len());
        self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
        self.header_len += n;
        if self.header_len == FRAME_HEADER_BYTES {
            self.header_len = 0;
            let raw = self.header;
            let header = frame_header(&raw);
            if header.kind == TYPE_HEADERS {
                self.collecting = true;
                self.held.clear();
                self.stream_id.copy_from_slice(&raw[5..]);
                self.hold_frame(&raw, &header);
            } else {
                self.output.extend_from_slice(&raw);
                self.payload_left = header.length;
            }
        }
        Scan::Consumed(n)
    }

    /// Inside a header block.
    fn collect(&mut self, data: &[u8]) -> Scan {
        if self.held_payload_left > 0 {
            let n = self.held_payload_left.min(data.len());
            self.held.extend_from_slice(&data[..n]);
            self.held_payload_left -= n;
            if self.held_payload_left == 0 && self.held_end_headers {
                self.finish_block();
            }
            return Scan::Consumed(n);
        }
        // The next frame must be a CONTINUATION of the same stream.
        let n = (FRAME_HEADER_BYTES - self.header_len).min(data.len());
        self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
        self.header_len += n;
        if self.header_len == FRAME_HEADER_BYTES {
            self.header_len = 0;
            let raw = self.header;
            let header = frame_header(&raw);
            if header.kind == TYPE_CONTINUATION && raw[5..] == self.stream_id {
                self.hold_frame(&raw, &header);
            } else {
                // A connection error for h2 to report.
                self.held.extend_from_slice(&raw);
                self.give_up();
            }
        }
        Scan::Consumed(n)
    }

    /// Holds a frame of the block whose header is `raw`.
    fn hold_frame(&mut self, raw: &[u8; FRAME_HEADER_BYTES], header: &FrameHeader) {
        self.held.extend_from_slice(raw);
        if self.held.len() + header.length > HEADER_BLOCK_BYTES_MAX {
            self.give_up();
            return;
        }
        self.held_payload_left = header.length;
        self.held_end_headers = header.flags & FLAG_END_HEADERS != 0;
        if header.length == 0 && self.held_end_headers {
            self.finish_block();
        }
    }

    /// The block is complete: queue it, rewritten if it needs to be.
    fn finish_block(&mut self) {
        debug_assert!(
            self.output().is_none(),
            "a block completed with output pending"
        );
        self.collecting = false;
        self.output.clear();
        self.output_start = 0;
        match self.rewrite_block() {
            Ok(true) => {
                mem::swap(&mut self.output, &mut self.frames);
                self.held.clear();
            }
            Ok(false) => mem::swap(&mut self.output, &mut self.held),
            Err(Malformed) => self.give_up(),
        }
    }

    /// Rewrites the held block into `frames`; `false` when it needs no
    /// change.
    fn rewrite_block(&mut self) -> Result<bool, Malformed> {
        let first = frame_header(&self.held);
        let mut payload = &self.held[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + first.length];
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
        if first_end < self.held.len() {
            // Join the CONTINUATIONs' fragments to the first.
            self.fragments.clear();
            self.fragments.extend_from_slice(fragment);
            let mut at = first_end;
            while at < self.held.len() {
                let header = frame_header(&self.held[at..]);
                at += FRAME_HEADER_BYTES;
                self.fragments
                    .extend_from_slice(&self.held[at..at + header.length]);
                at += header.length;
            }
            fragment = &self.fragments;
        }
        if !hpack::strip_authority_scheme(fragment, &mut self.block, &mut self.scratch)? {
            return Ok(false);
        }

        // One HEADERS frame, then CONTINUATIONs while the block lasts.
        self.frames.clear();
        let first_room = FRAME_PAYLOAD_BYTES_MAX - priority.len();
        let (head, mut rest) = self.block.split_at(self.block.len().min(first_room));
        let mut flags = first.flags & (FLAG_END_STREAM | FLAG_PRIORITY);
        if rest.is_empty() {
            flags |= FLAG_END_HEADERS;
        }
        push_frame_header(
            &mut self.frames,
            priority.len() + head.len(),
            TYPE_HEADERS,
            flags,
            self.stream_id,
        );
        self.frames.extend_from_slice(priority);
        self.frames.extend_from_slice(head);
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(rest.len().min(FRAME_PAYLOAD_BYTES_MAX));
            let flags = if after.is_empty() {
                FLAG_END_HEADERS
            } else {
                0
            };
            push_frame_header(
                &mut self.frames,
                chunk.len(),
                TYPE_CONTINUATION,
                flags,
                self.stream_id,
            );
            self.frames.extend_from_slice(chunk);
            rest = after;
        }
        Ok(true)
    }

    /// Stops rewriting: what is held goes on unchanged, then everything
    /// after it.
    fn give_up(&mut self) {
        self.mode = Mode::PassThrough;
        self.collecting = false;
        if !self.held.is_empty() {
            debug_assert!(self.output().is_none(), "held bytes queued behind output");
            mem::swap(&mut self.output, &mut self.held);
            self.output_start = 0;
        }
        self.held = Vec::new();
        self.fragments = Vec::new();
        self.block = Vec::new();
        self.frames = Vec::new();
        self.scratch = Vec::new();
    }

    /// The input ended: whatever is held goes on as it is.
    fn finish(&mut self) {
        if self.header_len > 0 {
            let partial = self.header;
            if self.collecting {
                self.held.extend_from_slice(&partial[..self.header_len]);
            } else {
                self.output.extend_from_slice(&partial[..self.header_len]);
            }
            self.header_len = 0;
        }
        self.give_up();
    }
}

/// A parsed frame header.
struct FrameHeader {
    length: usize,
    kind: u8,
    flags: u8,
}

/// Parses the frame header at the start of `bytes` (at least nine long).
fn frame_header(bytes: &[u8]) -> FrameHeader {
    FrameHeader {
        length: usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]),
        kind: bytes[3],
        flags: bytes[4],
    }
}

fn push_frame_header(out: &mut Vec<u8>, length: usize, kind: u8, flags: u8, stream_id: [u8; 4]) {
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

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::hpack::tests::{field, Decoder, Encoder, Field, Repr};
    use super::*;

    /// A connection that delivers `data` at most `chunk` bytes per read,
    /// answering every other read with `Pending` first.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
        stall: bool,
    }

    impl Read for Trickle {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            mut buf: ReadBufCursor<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            this.stall = !this.stall;
            if this.stall {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = this
                .chunk
                .min(buf.remaining())
                .min(this.data.len() - this.at);
            buf.put_slice(&this.data[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    /// Everything hyper would read from `input` through the rewrite, the
    /// connection giving `read_chunk` bytes at a time and hyper asking for
    /// `hyper_chunk`.
    fn through(input: &[u8], read_chunk: usize, hyper_chunk: usize) -> Vec<u8> {
        let mut io = AuthorityRewrite::new(Trickle {
            data: input.to_vec(),
            at: 0,
            chunk: read_chunk,
            stall: false,
        });
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        let mut chunk = vec![0; hyper_chunk];
        let mut pendings = 0;
        loop {
            let mut buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut io).poll_read(&mut cx, buf.unfilled()) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return out,
                Poll::Ready(Ok(())) => out.extend_from_slice(buf.filled()),
                Poll::Ready(Err(e)) => panic!("read failed: {e}"),
                Poll::Pending => {
                    pendings += 1;
                    assert!(pendings <= 2 * input.len() + 2, "no progress");
                }
            }
        }
    }

    /// Chunkings every stream is tried with: byte by byte both ways, odd
    /// sizes, and big reads.
    const CHUNKINGS: &[(usize, usize)] = &[
        (1, 1),
        (1, 4096),
        (4096, 1),
        (7, 13),
        (13, 7),
        (65_536, 65_536),
    ];

    /// The stream read through every chunking; they must all agree.
    fn rewritten(input: &[u8]) -> Vec<u8> {
        let first = through(input, CHUNKINGS[0].0, CHUNKINGS[0].1);
        for &(read_chunk, hyper_chunk) in &CHUNKINGS[1..] {
            assert!(
                through(input, read_chunk, hyper_chunk) == first,
                "chunking ({read_chunk}, {hyper_chunk}) changed the output"
            );
        }
        first
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        push_frame_header(&mut out, payload.len(), kind, flags, stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[derive(Debug, PartialEq, Eq)]
    struct Frame {
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    }

    fn frames(mut bytes: &[u8]) -> Vec<Frame> {
        assert_eq!(&bytes[..PREFACE.len()], PREFACE);
        bytes = &bytes[PREFACE.len()..];
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let header = frame_header(bytes);
            let end = FRAME_HEADER_BYTES + header.length;
            frames.push(Frame {
                kind: header.kind,
                flags: header.flags,
                stream: u32::from_be_bytes(bytes[5..9].try_into().unwrap()),
                payload: bytes[FRAME_HEADER_BYTES..end].to_vec(),
            });
            bytes = &bytes[end..];
        }
        frames
    }

    /// Decodes every header block in a frame stream (checking the framing
    /// rules on the way) and returns the header lists, and the other frames.
    fn decode_stream(bytes: &[u8]) -> (Vec<Vec<Field>>, Vec<Frame>) {
        let mut decoder = Decoder::new();
        let mut lists = Vec::new();
        let mut others = Vec::new();
        let mut block: Option<Vec<u8>> = None;
        for frame in frames(bytes) {
            assert!(frame.payload.len() <= FRAME_PAYLOAD_BYTES_MAX);
            let ends_block = frame.flags & FLAG_END_HEADERS != 0
                && matches!(frame.kind, TYPE_HEADERS | TYPE_CONTINUATION);
            match (frame.kind, block.as_mut()) {
                (TYPE_HEADERS, None) => {
                    let mut payload = &frame.payload[..];
                    if frame.flags & FLAG_PADDED != 0 {
                        let pad = usize::from(payload[0]);
                        payload = &payload[1..payload.len() - pad];
                    }
                    if frame.flags & FLAG_PRIORITY != 0 {
                        payload = &payload[PRIORITY_BYTES..];
                    }
                    block = Some(payload.to_vec());
                }
                (TYPE_CONTINUATION, Some(block)) => block.extend_from_slice(&frame.payload),
                (_, None) => others.push(frame),
                (kind, Some(_)) => panic!("frame type {kind} inside a header block"),
            }
            if ends_block {
                lists.push(decoder.decode(&block.take().unwrap()));
            }
        }
        assert!(block.is_none(), "header block left open");
        (lists, others)
    }

    fn settings() -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0x10, 0, 0]));
        out.extend(frame(0x8, 0, 0, &[0, 0x0f, 0, 1]));
        out
    }

    /// What grpc-go sends for one unary call to `authority`.
    fn grpc_request(authority: &str) -> Vec<(Field, Repr)> {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/etcdserverpb.Maintenance/Status"),
            (":authority", authority),
            ("content-type", "application/grpc"),
            ("user-agent", "grpc-go/1.26.0"),
            ("te", "trailers"),
        ]
        .iter()
        .map(|&(name, value)| (field(name, value), Repr::Indexing))
        .collect()
    }

    fn stripped(fields: &[(Field, Repr)]) -> Vec<Field> {
        fields
            .iter()
            .map(|((name, value), _)| {
                let mut value = value.clone();
                if name == b":authority" {
                    for scheme in [&b"http://"[..], b"https://"] {
                        if value.starts_with(scheme) {
                            value.drain(..scheme.len());
                        }
                    }
                }
                (name.clone(), value)
            })
            .collect()
    }

    #[test]
    fn http1_passes_through_byte_for_byte() {
        for input in [
            &b"POST /v3/kv/range HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}"[..],
            b"PRI * HTTP/1.1\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n",
            b"",
        ] {
            assert_eq!(rewritten(input), input);
        }
    }

    #[test]
    fn grpc_calls_get_a_bare_authority() {
        for huffman in [true, false] {
            let mut encoder = Encoder::new(huffman);
            let mut input = settings();
            let mut expected = Vec::new();
            for (stream, authority) in [
                (1, "http://127.0.0.1:2379"),
                (3, "http://127.0.0.1:2379"),
                (5, "https://10.0.0.1:2379"),
                (7, "127.0.0.1:2379"),
            ] {
                let request = grpc_request(authority);
                input.extend(frame(
                    TYPE_HEADERS,
                    FLAG_END_HEADERS,
                    stream,
                    &encoder.encode(&request),
                ));
                input.extend(frame(
                    0x0,
                    FLAG_END_STREAM,
                    stream,
                    &[0, 0, 0, 0, 2, 0x08, 0x01],
                ));
                expected.push(stripped(&request));
            }
            let output = rewritten(&input);
            let (lists, others) = decode_stream(&output);
            assert_eq!(lists, expected);
            let (_, original_others) = decode_stream(&input);
            assert_eq!(others, original_others, "other frames changed");
            // The second call names the authority by a dynamic index, which
            // resolved to the rewritten value.
        }
    }

    #[test]
    fn dynamic_table_stays_in_step_across_requests() {
        // A small table forces evictions; values vary in length and scheme,
        // and every representation occurs.
        let mut encoder = Encoder::new(true);
        let mut input = settings();
        let mut expected = Vec::new();
        let mut block = Vec::new();
        encoder.resize(&mut block, 256);
        let reprs = [Repr::Indexing, Repr::WithoutIndexing, Repr::NeverIndexed];
        for request in 0..40u32 {
            let authority = match request % 5 {
                0 => format!("http://host-{}.example:2379", request % 3),
                1 => format!("https://h{request}:1"),
                2 => "http://127.0.0.1:2379".to_owned(),
                3 => format!("plain-{}:2379", request % 2),
                _ => format!(
                    "http://a-much-longer-host-name-{}.example.com:2379/path",
                    request % 4
                ),
            };
            let mut fields = grpc_request(&authority);
            fields[3].1 = reprs[request as usize % 3];
            fields.push((
                field("x-request", &format!("r{}", request % 6)),
                Repr::Indexing,
            ));
            for (f, repr) in &fields {
                encoder.field(&mut block, f, *repr);
            }
            input.extend(frame(
                TYPE_HEADERS,
                FLAG_END_HEADERS | FLAG_END_STREAM,
                2 * request + 1,
                &block,
            ));
            block.clear();
            let mut want = stripped(&fields);
            if let Some(at) = want[3].1.iter().position(|&b| b == b'/') {
                want[3].1.truncate(at);
            }
            expected.push(want);
        }
        let (lists, _) = decode_stream(&rewritten(&input));
        assert_eq!(lists, expected);
    }

    #[test]
    fn continuations_and_padding_become_one_frame() {
        let mut encoder = Encoder::new(false);
        let request = grpc_request("http://127.0.0.1:2379");
        let block = encoder.encode(&request);
        let (a, rest) = block.split_at(10);
        let (b, c) = rest.split_at(20);
        let priority = [0x80, 0, 0, 0x01, 0x0f];
        let mut headers = vec![3u8];
        headers.extend_from_slice(&priority);
        headers.extend_from_slice(a);
        headers.extend_from_slice(&[0, 0, 0]);
        let mut input = settings();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_STREAM | FLAG_PADDED | FLAG_PRIORITY,
            3,
            &headers,
        ));
        input.extend(frame(TYPE_CONTINUATION, 0, 3, b));
        input.extend(frame(TYPE_CONTINUATION, 0, 3, &[]));
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, c));
        input.extend(frame(0x6, 0, 0, &[1, 2, 3, 4, 5, 6, 7, 8]));

        let output = rewritten(&input);
        let out = frames(&output);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[2].kind, TYPE_HEADERS);
        assert_eq!(
            out[2].flags,
            FLAG_END_STREAM | FLAG_PRIORITY | FLAG_END_HEADERS
        );
        assert_eq!(out[2].stream, 3);
        assert_eq!(out[2].payload[..PRIORITY_BYTES], priority);
        assert_eq!(out[3].kind, 0x6);
        let (lists, _) = decode_stream(&output);
        assert_eq!(lists, [stripped(&request)]);
    }

    #[test]
    fn long_blocks_are_split_into_continuations() {
        let mut encoder = Encoder::new(false);
        let mut request = grpc_request("http://127.0.0.1:2379");
        for i in 0..20 {
            let value = format!("{i:0>1000}");
            request.push((field(&format!("x-big-{i}"), &value), Repr::WithoutIndexing));
        }
        let block = encoder.encode(&request);
        assert!(block.len() > FRAME_PAYLOAD_BYTES_MAX);
        let mut input = settings();
        let mut pieces = block.chunks(FRAME_PAYLOAD_BYTES_MAX).peekable();
        let mut kind = TYPE_HEADERS;
        while let Some(piece) = pieces.next() {
            let flags = if pieces.peek().is_none() {
                FLAG_END_HEADERS
            } else {
                0
            };
            input.extend(frame(kind, flags, 1, piece));
            kind = TYPE_CONTINUATION;
        }
        let output = rewritten(&input);
        let out = frames(&output);
        assert_eq!(
            out.len(),
            2 + 2,
            "{:?}",
            out.iter()
                .map(|f| (f.kind, f.flags, f.payload.len()))
                .collect::<Vec<_>>()
        );
        assert_eq!(out[2].payload.len(), FRAME_PAYLOAD_BYTES_MAX);
        assert_eq!(out[2].flags, 0);
        assert_eq!(out[3].flags, FLAG_END_HEADERS);
        let (lists, _) = decode_stream(&output);
        assert_eq!(lists, [stripped(&request)]);
    }

    #[test]
    fn blocks_that_grow_past_a_frame_are_split() {
        // A Huffman-coded authority of `a`s (five bits each) grows when
        // re-encoded raw, so a block that filled one frame needs two.
        let authority = format!("http://{}:1", "a".repeat(80));
        // '0' takes five bits: start the search just short of a full frame.
        let bare = Encoder::new(true).encode(&grpc_request(&authority)).len();
        let start = (FRAME_PAYLOAD_BYTES_MAX - bare - 20) * 8 / 5;
        let (request, block) = (start..)
            .find_map(|filler| {
                let mut request = grpc_request(&authority);
                let value = "0".repeat(filler);
                request.push((field("x-filler", &value), Repr::WithoutIndexing));
                let block = Encoder::new(true).encode(&request);
                (block.len() >= FRAME_PAYLOAD_BYTES_MAX - 2).then_some((request, block))
            })
            .unwrap();
        assert!(block.len() <= FRAME_PAYLOAD_BYTES_MAX);
        let mut input = settings();
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS | FLAG_END_STREAM,
            1,
            &block,
        ));
        let output = rewritten(&input);
        let out = frames(&output);
        assert_eq!(out.len(), 4);
        assert_eq!((out[2].kind, out[2].flags), (TYPE_HEADERS, FLAG_END_STREAM));
        assert_eq!(
            (out[3].kind, out[3].flags),
            (TYPE_CONTINUATION, FLAG_END_HEADERS)
        );
        let (lists, _) = decode_stream(&output);
        assert_eq!(lists, [stripped(&request)]);
    }

    #[test]
    fn blocks_needing_no_change_pass_unchanged() {
        let mut encoder = Encoder::new(true);
        let block = encoder.encode(&grpc_request("127.0.0.1:2379"));
        let mut input = settings();
        let mut padded = vec![4u8];
        padded.extend_from_slice(&block);
        padded.extend_from_slice(&[0; 4]);
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_PADDED | FLAG_END_HEADERS,
            1,
            &padded,
        ));
        input.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &[]));
        input.extend(frame(0x0, FLAG_END_STREAM, 1, &[0; 40_000][..16_000]));
        assert_eq!(rewritten(&input), input);
    }

    #[test]
    fn oversized_blocks_stop_the_rewrite() {
        let mut encoder = Encoder::new(false);
        let mut input = settings();
        input.extend(frame(
            TYPE_HEADERS,
            0,
            1,
            &encoder.encode(&grpc_request("http://a:1")),
        ));
        for _ in 0..4 {
            input.extend(frame(
                TYPE_CONTINUATION,
                0,
                1,
                &[0x82; FRAME_PAYLOAD_BYTES_MAX],
            ));
        }
        input.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[0x82]));
        // Later blocks are not rewritten either.
        input.extend(frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            3,
            &encoder.encode(&grpc_request("http://b:1")),
        ));
        assert_eq!(rewritten(&input), input);
    }

    #[test]
    fn malformed_input_passes_unchanged() {
        let mut encoder = Encoder::new(false);
        let good = encoder.encode(&grpc_request("http://a:1"));
        let cases: Vec<Vec<u8>> = vec![
            // A DATA frame inside a header block.
            [
                frame(TYPE_HEADERS, 0, 1, &good),
                frame(0x0, 0, 1, b"x"),
                frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, &[]),
            ]
            .concat(),
            // A CONTINUATION of another stream.
            [
                frame(TYPE_HEADERS, 0, 1, &good),
                frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 3, &[]),
            ]
            .concat(),
            // Padding longer than the payload.
            frame(
                TYPE_HEADERS,
                FLAG_PADDED | FLAG_END_HEADERS,
                1,
                &[200, 0x82],
            ),
            // PADDED with no pad length, PRIORITY with no priority.
            frame(TYPE_HEADERS, FLAG_PADDED | FLAG_END_HEADERS, 1, &[]),
            frame(TYPE_HEADERS, FLAG_PRIORITY | FLAG_END_HEADERS, 1, &[0, 0]),
            // HPACK that does not parse, then a block that would be rewritten.
            [
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, &[0x41, 0x7f]),
                frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, &good),
            ]
            .concat(),
            // The input ends inside a block, and inside a frame header.
            frame(TYPE_HEADERS, 0, 1, &good),
            frame(TYPE_HEADERS, 0, 1, &good)[..5].to_vec(),
            [
                frame(TYPE_HEADERS, 0, 1, &good),
                frame(TYPE_CONTINUATION, 0, 1, &[])[..4].to_vec(),
            ]
            .concat(),
            frame(0x0, 0, 1, b"abc")[..6].to_vec(),
        ];
        for case in cases {
            let input = [settings(), case].concat();
            assert_eq!(rewritten(&input), input);
        }
    }

    #[test]
    fn garbage_never_panics() {
        // A seeded linear congruential generator: frames with random
        // types, flags and payloads, some made of HPACK-ish bytes.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as u32
        };
        for _ in 0..300 {
            let mut input = settings();
            for _ in 0..next() % 6 {
                let kind = [TYPE_HEADERS, TYPE_CONTINUATION, 0x0, 0x4][next() as usize % 4];
                let flags = next() as u8;
                let payload: Vec<u8> = (0..next() % 40).map(|_| next() as u8).collect();
                input.extend(frame(kind, flags, next() % 4, &payload));
            }
            if next() % 3 == 0 {
                input.truncate(PREFACE.len() + next() as usize % 60);
            }
            for &(read_chunk, hyper_chunk) in CHUNKINGS {
                through(&input, read_chunk, hyper_chunk);
            }
        }
    }
}
