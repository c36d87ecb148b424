//! In-memory connections for tests of what reads from hyper's streams.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor};

/// A connection that delivers `data` at most `chunk` bytes per read,
/// answering every other read with `Pending` first (its task woken), then
/// end of stream.
pub(crate) struct Trickle {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
    stall: bool,
}

impl Trickle {
    pub(crate) fn new(data: &[u8], chunk: usize) -> Self {
        Self {
            data: data.to_vec(),
            at: 0,
            chunk,
            stall: false,
        }
    }
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
