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
//!
//! This file is the connection wrapper; the parser that decides what is
//! held and rewritten is [`inbound`], HTTP/2 framing is [`frame`], and the
//! header block itself is [`hpack`]'s (with [`huffman`] for its strings).

mod frame;
mod hpack;
mod huffman;
mod inbound;

#[cfg(test)]
mod tests;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

use self::inbound::{Inbound, Scan};

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Header blocks larger than this (HEADERS and CONTINUATION frames, as
/// received) are not rewritten, which bounds what one connection holds
/// back. Four default-sized frames; hyper refuses header lists over 16 KiB
/// anyway.
const HEADER_BLOCK_BYTES_MAX: usize = 64 * 1024;

/// Bytes read from the connection at once on HTTP/2: hyper's own read size
/// is of this order, and one 16 KiB DATA frame fits.
const READ_BUFFER_BYTES: usize = 16 * 1024;

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
