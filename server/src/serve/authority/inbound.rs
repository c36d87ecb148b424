//! The inbound byte stream's parser: sans-io, shown the client's bytes by
//! [`super::AuthorityRewrite`], holding back only header blocks.
//!
//! It matches the client preface, then walks frame headers: every frame
//! but HEADERS passes as it arrives; a HEADERS frame and its CONTINUATIONs
//! are held until END_HEADERS, then queued unchanged or rewritten (taken
//! apart and framed again by [`super::frame`], the `:authority` repaired by
//! [`super::hpack`]). Anything unexpected — not HTTP/2, a block too large,
//! a frame inside a block, bytes that do not parse — makes it give up:
//! what it holds goes on unchanged, then everything after it.

use std::mem;

use super::frame::{
    frame_header, reframe, unframe, FrameHeader, Malformed, FLAG_END_HEADERS, FRAME_HEADER_BYTES,
    TYPE_CONTINUATION, TYPE_HEADERS,
};
use super::{hpack, HEADER_BLOCK_BYTES_MAX, PREFACE};

/// What [`Inbound::scan`] did with the bytes it was shown.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan {
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

/// The inbound byte stream's parser (see the module docs).
pub(super) struct Inbound {
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

impl Inbound {
    /// A parser waiting for the client preface.
    pub(super) fn new() -> Self {
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
    pub(super) fn is_pass_through(&self) -> bool {
        self.mode == Mode::PassThrough && self.output().is_none()
    }

    /// Bytes to deliver before any more input.
    pub(super) fn output(&self) -> Option<&[u8]> {
        (self.output_start < self.output.len()).then(|| &self.output[self.output_start..])
    }

    /// `n` bytes of [`Inbound::output`] were delivered.
    pub(super) fn consume_output(&mut self, n: usize) {
        self.output_start += n;
        if self.output_start == self.output.len() {
            self.output.clear();
            self.output_start = 0;
        }
    }

    /// Looks at the next input bytes (`data` is not empty, and
    /// [`Inbound::output`] is drained); always makes progress.
    pub(super) fn scan(&mut self, data: &[u8]) -> Scan {
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
            // The hot path: run over whole frames up to a HEADERS frame that
            // needs more than a look (see `passes_whole`), a header split
            // across reads, or the end of `data`.
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
                if header.kind == TYPE_HEADERS && !self.passes_whole(rest, &header) {
                    break;
                }
                self.payload_left = header.length;
                at += FRAME_HEADER_BYTES;
            }
            if at > 0 {
                return Scan::Pass(at);
            }
        }
        let (n, complete) = self.take_frame_header(data);
        if let Some(raw) = complete {
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

    /// Whether `rest` holds the whole HEADERS frame it starts with, a block
    /// of its own that is not too large and needs no repair: such a frame
    /// (the usual request, its `:authority` indexed or already bare) goes
    /// on like any other, without being held and copied. Any other block
    /// takes the way that holds it, and gets the same answer there.
    fn passes_whole(&mut self, rest: &[u8], header: &FrameHeader) -> bool {
        let end = FRAME_HEADER_BYTES + header.length;
        header.flags & FLAG_END_HEADERS != 0
            && end <= HEADER_BLOCK_BYTES_MAX
            && rest.len() >= end
            && unframe(&rest[..end], &mut self.fragments).is_ok_and(|held| {
                let repaired = hpack::strip_authority_scheme(
                    held.fragment,
                    &mut self.block,
                    &mut self.scratch,
                );
                matches!(repaired, Ok(false))
            })
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
        let (n, complete) = self.take_frame_header(data);
        if let Some(raw) = complete {
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

    /// Takes what `data` holds of a frame header that may arrive in pieces;
    /// the bytes taken, and the header once it is complete.
    fn take_frame_header(&mut self, data: &[u8]) -> (usize, Option<[u8; FRAME_HEADER_BYTES]>) {
        let n = (FRAME_HEADER_BYTES - self.header_len).min(data.len());
        self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
        self.header_len += n;
        if self.header_len < FRAME_HEADER_BYTES {
            return (n, None);
        }
        self.header_len = 0;
        (n, Some(self.header))
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
        let held = unframe(&self.held, &mut self.fragments)?;
        if !hpack::strip_authority_scheme(held.fragment, &mut self.block, &mut self.scratch)? {
            return Ok(false);
        }
        reframe(
            &self.block,
            held.priority,
            held.flags,
            self.stream_id,
            &mut self.frames,
        );
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
    pub(super) fn finish(&mut self) {
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
