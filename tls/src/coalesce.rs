//! Write coalescing for HTTP/2 connections: many frames, one syscall.
//!
//! hyper's HTTP/2 connection task writes and flushes whatever frames are
//! queued each time it runs, and it runs once per finished message: the
//! stream task that completes a request or response wakes it, and the
//! executor runs it next. Under load that is one `writev` per message, and
//! on loopback a send also pays for the receiver's TCP processing, so the
//! syscall costs more than the rest of the message's framing together. h2
//! adds to it on vectored connections: a DATA frame over 256 bytes is kept
//! apart from its send buffer, and h2 writes it out and flushes before it
//! buffers the next frame, so a burst of 300-byte messages still costs one
//! syscall each (hence [`WriteCoalesce`] is not vectored).
//!
//! [`WriteCoalesce`] fixes both:
//!
//! - The first write after a flush yields once: it wakes its own task and
//!   reports `Pending`, so the tasks already queued run first and add their
//!   frames to h2's send queue, and the next poll writes them all. The
//!   delay is one pass through the executor's queue, bounded by what is
//!   already runnable.
//! - Writes are copied into a buffer of at most [`WRITE_BUFFER_BYTES`]
//!   and reach the socket on flush (or when the buffer is full), so a
//!   frame header and its payload, written apart, go out together. A write
//!   larger than the buffer goes straight to the socket once the buffer
//!   ahead of it is out.
//! - h2 also flushes after every DATA frame whose payload it writes apart
//!   from its own buffer (one of [`CHAINED_PAYLOAD_BYTES`] or more), to make
//!   room for the next frame, not because it has nothing more to write. So
//!   a burst of 16 KiB frames would cost a syscall per frame. A flush
//!   right after such a payload, while the buffer has room for another
//!   frame, is therefore put off: it reports done, wakes its own task, and
//!   the buffer goes out at the next flush that finds no payload written
//!   since (h2 flushes on every poll of its connection), or when the
//!   buffer fills. The delay is again one pass through the executor's
//!   queue.
//!
//! Nothing is reordered: buffered bytes always go out before later ones.
//! What a writer wrote is on the socket once its flush completes, but for
//! a flush put off as above, whose bytes leave on the next poll of the
//! task; hyper flushes after every batch of frames. Reads pass straight
//! through.
//!
//! `oxetcdctl bench` wraps its connections in it: hyper's HTTP/2 client
//! writes one or two frames per request, and the benchmark's clients share
//! few connections. It lives in this crate, beside [`TlsStream`], because
//! both are runtime-agnostic streams over hyper's I/O traits. It knows
//! nothing of TLS: over a [`TlsStream`] it gathers the plaintext, before
//! encryption.
//!
//! [`TlsStream`]: crate::TlsStream

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};

/// Bytes held back for one write: h2's send buffer (16 KiB) and one DATA
/// frame of the default maximum size fit, so what h2 writes between two
/// flushes goes out in one syscall; so do three such frames, put off as
/// the module docs tell. Anything larger goes to the socket as it is.
pub const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// A DATA payload this large or larger is written apart from h2's own
/// buffer, and h2 flushes after it (its threshold on connections that are
/// not vectored, as this one is not).
pub const CHAINED_PAYLOAD_BYTES: usize = 1024;

/// A DATA frame of HTTP/2's default maximum size, with its header: the
/// room a put-off flush leaves for the next frame.
const DATA_FRAME_BYTES: usize = 16 * 1024 + 9;

/// A connection whose writes are gathered until the next flush, after one
/// pass through the executor (see the module docs).
pub struct WriteCoalesce<T> {
    inner: T,
    state: WriteState,
    /// Written but not yet on the socket: `buffer[sent..]`.
    buffer: Vec<u8>,
    sent: usize,
    /// The last write was a DATA payload h2 wrote apart: the flush after it
    /// only makes room for the next frame (see the module docs).
    after_payload: bool,
}

impl<T: std::fmt::Debug> std::fmt::Debug for WriteCoalesce<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteCoalesce")
            .field("inner", &self.inner)
            .field("state", &self.state)
            .field("buffered", &(self.buffer.len() - self.sent))
            .field("after_payload", &self.after_payload)
            .finish()
    }
}

/// Where the connection is between two flushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteState {
    /// Everything written so far is flushed; the next write yields first.
    Flushed,
    /// The next write has yielded once and goes through when retried.
    Yielded,
    /// Writes go through until the next completed flush.
    Writing,
}

impl<T> WriteCoalesce<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            state: WriteState::Flushed,
            buffer: Vec::new(),
            sent: 0,
            after_payload: false,
        }
    }

    /// Yields once per flush: `true` means "report `Pending` now", with the
    /// task already woken to retry.
    fn yield_first(&mut self, cx: &mut Context<'_>) -> bool {
        match self.state {
            WriteState::Flushed => {
                self.state = WriteState::Yielded;
                cx.waker().wake_by_ref();
                true
            }
            WriteState::Yielded | WriteState::Writing => {
                self.state = WriteState::Writing;
                false
            }
        }
    }
}

impl<T: Write + Unpin> WriteCoalesce<T> {
    /// Writes the buffer out; `Ready(Ok)` once it is empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.buffer.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Takes `bufs` (of `len` bytes in all) into the buffer, or — when
    /// they do not fit even an empty one — straight to the socket.
    fn poll_take(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
        len: usize,
    ) -> Poll<io::Result<usize>> {
        if self.yield_first(cx) {
            return Poll::Pending;
        }
        if self.buffer.len() + len > WRITE_BUFFER_BYTES {
            ready!(self.poll_drain(cx))?;
            if len > WRITE_BUFFER_BYTES {
                self.after_payload = false;
                return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
            }
        }
        for buf in bufs {
            self.buffer.extend_from_slice(buf);
        }
        self.after_payload = len >= CHAINED_PAYLOAD_BYTES;
        Poll::Ready(Ok(len))
    }
}

impl<T: Read + Unpin> Read for WriteCoalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for WriteCoalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_take(cx, &[io::IoSlice::new(buf)], buf.len())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|buf| buf.len()).sum();
        self.get_mut().poll_take(cx, bufs, len)
    }

    /// Not vectored, on purpose: on a vectored connection h2 keeps every
    /// DATA frame over 256 bytes out of its send buffer and writes it, and
    /// flushes, before it buffers the next frame, which defeats the
    /// gathering above for messages of a few hundred bytes (a put with a
    /// 256-byte value). Otherwise h2 copies frames up to 1 KiB into its
    /// buffer, and hands a larger one over as two writes, frame header
    /// then payload, which the buffer here joins again.
    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.after_payload && this.buffer.len() + DATA_FRAME_BYTES <= WRITE_BUFFER_BYTES {
            // Room for the next frame: put off until a flush finds no
            // payload written since, on this task's next poll at the latest.
            this.after_payload = false;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        let flushed = Pin::new(&mut this.inner).poll_flush(cx);
        if flushed.is_ready() {
            this.state = WriteState::Flushed;
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// Counts what reaches it; takes at most `chunk` bytes per write.
    struct Sink {
        writes: usize,
        bytes: Vec<u8>,
        flushes: usize,
        chunk: usize,
        /// Report `Pending` (without waking) to the next this many writes.
        blocked: usize,
    }

    impl Sink {
        fn new(chunk: usize) -> Self {
            Self {
                writes: 0,
                bytes: Vec::new(),
                flushes: 0,
                chunk,
                blocked: 0,
            }
        }
    }

    impl Write for Sink {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.blocked > 0 {
                self.blocked -= 1;
                return Poll::Pending;
            }
            let n = buf.len().min(self.chunk);
            self.writes += 1;
            self.bytes.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn write(io: &mut WriteCoalesce<Sink>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<usize> {
        Pin::new(io)
            .poll_write(cx, bytes)
            .map(|r| r.expect("sink never fails"))
    }

    fn flush(io: &mut WriteCoalesce<Sink>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(io)
            .poll_flush(cx)
            .map(|r| r.expect("sink never fails"))
    }

    #[test]
    fn writes_between_flushes_reach_the_socket_as_one_after_one_yield() {
        let wakes = Arc::new(CountingWaker::default());
        let waker = Arc::clone(&wakes).into();
        let mut cx = Context::from_waker(&waker);
        let mut io = WriteCoalesce::new(Sink::new(usize::MAX));
        for round in 1..=3 {
            assert_eq!(write(&mut io, &mut cx, b"ab"), Poll::Pending);
            assert_eq!(wakes.0.load(Ordering::Relaxed), round);
            assert_eq!(write(&mut io, &mut cx, b"ab"), Poll::Ready(2));
            assert_eq!(write(&mut io, &mut cx, b"cd"), Poll::Ready(2));
            assert_eq!(
                io.inner.writes,
                round - 1,
                "nothing is written before the flush"
            );
            assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
            assert_eq!(io.inner.writes, round);
        }
        assert_eq!(io.inner.flushes, 3);
        assert_eq!(io.inner.bytes, b"abcdabcdabcd");
    }

    #[test]
    fn a_full_buffer_goes_out_first_and_large_writes_go_straight_through() {
        let waker = Arc::new(CountingWaker::default()).into();
        let mut cx = Context::from_waker(&waker);
        let mut io = WriteCoalesce::new(Sink::new(usize::MAX));
        let small = vec![1u8; WRITE_BUFFER_BYTES - 10];
        let large = vec![2u8; WRITE_BUFFER_BYTES + 1];
        assert_eq!(write(&mut io, &mut cx, &small), Poll::Pending);
        assert_eq!(write(&mut io, &mut cx, &small), Poll::Ready(small.len()));
        assert_eq!(write(&mut io, &mut cx, &large), Poll::Ready(large.len()));
        assert_eq!(io.inner.writes, 2);
        assert_eq!(write(&mut io, &mut cx, b"xyz"), Poll::Ready(3));
        assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
        let mut expected = small.clone();
        expected.extend_from_slice(&large);
        expected.extend_from_slice(b"xyz");
        assert_eq!(io.inner.bytes, expected);
    }

    #[test]
    fn a_flush_after_a_data_payload_waits_for_the_next_frames_while_there_is_room() {
        let wakes = Arc::new(CountingWaker::default());
        let waker = Arc::clone(&wakes).into();
        let mut cx = Context::from_waker(&waker);
        let mut io = WriteCoalesce::new(Sink::new(usize::MAX));
        let header = [0u8; 9];
        let payload = vec![7u8; DATA_FRAME_BYTES - header.len()];
        // h2's way with a burst of large DATA frames: the header from its
        // buffer, the payload apart, a flush to make room; and again.
        let mut expected = Vec::new();
        for frame in 1..=3 {
            write_all(&mut io, &mut cx, &header);
            write_all(&mut io, &mut cx, &payload);
            expected.extend_from_slice(&header);
            expected.extend_from_slice(&payload);
            let woken = wakes.0.load(Ordering::Relaxed);
            assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
            if frame < 3 {
                assert_eq!(io.inner.writes, 0, "frame {frame}: put off");
                assert_eq!(wakes.0.load(Ordering::Relaxed), woken + 1, "and woken");
            } else {
                assert_eq!(io.inner.writes, 1, "no room for a fourth: out at once");
            }
        }
        assert_eq!(io.inner.bytes, expected);
        // A put-off flush goes out at the next flush with nothing written
        // since, in one write; and small writes are never put off.
        write_all(&mut io, &mut cx, &payload);
        assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
        assert_eq!(io.inner.writes, 1);
        assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
        assert_eq!(io.inner.writes, 2);
        write_all(&mut io, &mut cx, &payload[..CHAINED_PAYLOAD_BYTES - 1]);
        assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
        assert_eq!(io.inner.writes, 3);
        expected.extend_from_slice(&payload);
        expected.extend_from_slice(&payload[..CHAINED_PAYLOAD_BYTES - 1]);
        assert_eq!(io.inner.bytes, expected);
        assert_eq!(
            io.inner.flushes, 3,
            "the socket is flushed only when written"
        );
    }

    /// Writes `bytes` after the yield that follows a flush.
    fn write_all(io: &mut WriteCoalesce<Sink>, cx: &mut Context<'_>, bytes: &[u8]) {
        if write(io, cx, bytes).is_pending() {
            assert_eq!(write(io, cx, bytes), Poll::Ready(bytes.len()));
        }
    }

    #[test]
    fn partial_and_blocked_socket_writes_keep_every_byte_in_order() {
        let waker = Arc::new(CountingWaker::default()).into();
        let mut cx = Context::from_waker(&waker);
        let mut io = WriteCoalesce::new(Sink::new(3));
        assert_eq!(write(&mut io, &mut cx, b"0123"), Poll::Pending);
        assert_eq!(write(&mut io, &mut cx, b"0123"), Poll::Ready(4));
        assert_eq!(write(&mut io, &mut cx, b"4567"), Poll::Ready(4));
        io.inner.blocked = 2;
        assert_eq!(flush(&mut io, &mut cx), Poll::Pending);
        assert_eq!(flush(&mut io, &mut cx), Poll::Pending);
        assert_eq!(flush(&mut io, &mut cx), Poll::Ready(()));
        assert_eq!(io.inner.bytes, b"01234567");
        assert_eq!(io.inner.writes, 3);
        assert_eq!(io.inner.flushes, 1);
    }
}
