//! One HTTP/2 client connection served by oxetcd's own framing
//! ([`crate::http2::connection::Connection`]), every request answered
//! inside the connection's task.
//!
//! Design: one task owns the socket and the connection's state machine.
//! Each pass reads what the socket has, lets the machine turn it into
//! events, starts a request's route when its headers arrive, polls the
//! requests' responders, hands what they produced to the machine, and
//! writes everything the pass produced in one vectored write. A responder
//! is a future per stream, polled in this task (no task per request, no
//! channel between a stream and the connection): it awaits the route's
//! response and then its body, frame by frame, leaving each in the
//! connection's outbox; a stream with data waiting for window waits for
//! the machine's [`Event::Writable`]. A request's body is fed by the
//! connection and may be read from any task (a watch stream's reader is
//! one), so it lives behind a lock of its own; what it consumed is given
//! back to the machine as window. A pass that produced output yields once
//! before writing, so responses finished by the same pass of the executor
//! leave together, and a lone PING acknowledgement is held up to
//! [`PONG_HOLD`] to leave with the next response.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;
use hashbrown::HashMap;
use http::{HeaderMap, StatusCode};
use http_body::{Body as _, Frame};
use hyper::rt::{Read, ReadBuf, Sleep, Timer, Write};
use tonic::body::Body;

use crate::http2::connection::{Config, Connection, Event};
use crate::http2::frame::{Reason, PREFACE};

/// Bytes read from the socket at a time.
const READ_BYTES: usize = 16 * 1024;

/// How long a PING acknowledgement alone may wait for a response to leave
/// with: grpc-go sends a PING (its window estimate) with nearly every
/// request that follows a response, and acknowledging it at once would
/// cost a second send per request and a second wake-up of the client.
/// Longer than a commit under load takes, far shorter than any
/// keepalive's timeout; HTTP/2 asks only that acknowledgements go out
/// promptly (RFC 9113 §6.7), and a client reads a later one as a longer
/// round trip, so its window estimate can only grow.
const PONG_HOLD: Duration = Duration::from_millis(5);

/// How long the client's resets of unanswered streams count against
/// their bound before they are forgiven (see
/// [`Connection::forgive_resets`]).
const RESET_PERIOD: Duration = Duration::from_secs(1);

/// Slices one write takes at most.
const WRITE_SLICES: usize = 64;

/// Passes one poll of a connection makes at most before it yields.
const PASSES_PER_POLL: usize = 32;

/// A responder yields to its connection after handing over this much.
const YIELD_AFTER_BYTES: usize = 64 * 1024;

/// Output beyond this waits for the socket before responders run again.
const OUTPUT_HIGH_BYTES: usize = 1024 * 1024;

/// What a responder hands to the connection.
enum Out {
    Head {
        status: StatusCode,
        headers: HeaderMap,
        end_stream: bool,
    },
    Data(Bytes, bool),
    Trailers(HeaderMap),
    Reset(Reason),
}

/// What the connection's task shares with its streams.
#[derive(Default)]
struct Shared {
    outbox: Mutex<Vec<(u32, Out)>>,
    /// Request body bytes consumed, to give back as window.
    released: Mutex<Vec<(u32, usize)>>,
    /// The connection's task is in a pass (it reads `released` before it
    /// sleeps), so a release needs no wake-up.
    polling: AtomicBool,
    waker: AtomicWaker,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing holding these locks can panic midway; a poisoned lock's
    // state is as consistent as an unpoisoned one's.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn send(&self, stream: u32, out: Out) {
        lock(&self.outbox).push((stream, out));
    }

    fn release(&self, stream: u32, n: usize) {
        lock(&self.released).push((stream, n));
        if !self.polling.load(Ordering::Acquire) {
            self.waker.wake();
        }
    }
}

/// One stream's state shared by the connection, its body and responder.
struct Stream {
    id: u32,
    state: Mutex<StreamState>,
}

#[derive(Default)]
struct StreamState {
    chunks: Chunks,
    ended: bool,
    reset: bool,
    /// Data waits for window: the responder waits for room.
    paused: bool,
    body_waker: Option<Waker>,
    responder_waker: Option<Waker>,
}

/// A request body's chunks not yet read, in order. Most requests arrive
/// in one DATA frame: it waits in place, and only a second chunk makes a
/// queue (one allocation fewer per request).
#[derive(Default)]
struct Chunks {
    /// The oldest chunk, when the queue was empty as it came.
    first: Option<Bytes>,
    rest: VecDeque<Bytes>,
}

impl Chunks {
    fn push(&mut self, chunk: Bytes) {
        if self.is_empty() {
            self.first = Some(chunk);
        } else {
            self.rest.push_back(chunk);
        }
    }

    fn pop(&mut self) -> Option<Bytes> {
        self.first.take().or_else(|| self.rest.pop_front())
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }
}

impl Stream {
    fn update(&self, change: impl FnOnce(&mut StreamState)) {
        let wakers = {
            let mut state = lock(&self.state);
            change(&mut state);
            (state.body_waker.take(), state.responder_waker.take())
        };
        wakers.0.into_iter().chain(wakers.1).for_each(Waker::wake);
    }
}

/// A request's body, fed by its connection.
pub(crate) struct RequestBody {
    stream: Arc<Stream>,
    shared: Arc<Shared>,
}

/// The client reset the stream before the request's body ended.
#[derive(Debug)]
pub(crate) struct StreamReset;

impl std::fmt::Display for StreamReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the client reset the stream")
    }
}

impl std::error::Error for StreamReset {}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = StreamReset;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, StreamReset>>> {
        let mut state = lock(&self.stream.state);
        if let Some(chunk) = state.chunks.pop() {
            drop(state);
            self.shared.release(self.stream.id, chunk.len());
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if state.reset {
            return Poll::Ready(Some(Err(StreamReset)));
        }
        if state.ended {
            return Poll::Ready(None);
        }
        state.body_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let state = lock(&self.stream.state);
        state.ended && state.chunks.is_empty()
    }
}

/// Answers one stream: the route's response, then its body's frames.
/// Ends when the response has, or when the stream is reset.
async fn respond<F>(route: F, stream: Arc<Stream>, shared: Arc<Shared>) -> u32
where
    F: Future<Output = http::Response<Body>>,
{
    let id = stream.id;
    let mut route = pin!(route);
    // Whether the responder may go on: `None` once the stream is reset;
    // with `wait_room`, `Some(false)` while the stream has data waiting
    // for window. Either change wakes the task registered here.
    let until_reset = |wait_room: bool, cx: &mut Context<'_>| -> Option<bool> {
        let mut state = lock(&stream.state);
        if state.reset {
            return None;
        }
        state.responder_waker = Some(cx.waker().clone());
        Some(!(wait_room && state.paused))
    };
    let response = poll_fn(|cx| match until_reset(false, cx) {
        None => Poll::Ready(None),
        Some(_) => route.as_mut().poll(cx).map(Some),
    })
    .await;
    let Some(response) = response else {
        return id;
    };
    let (parts, mut body) = response.into_parts();
    let end_stream = body.is_end_stream();
    shared.send(
        id,
        Out::Head {
            status: parts.status,
            headers: parts.headers,
            end_stream,
        },
    );
    if end_stream {
        return id;
    }
    // Bytes handed over since this stream last let the connection run: a
    // body that is always ready (a snapshot, a long range) yields now and
    // then, so the connection sends and can pause it.
    let mut handed = 0;
    loop {
        if handed >= YIELD_AFTER_BYTES {
            handed = 0;
            let mut yielded = false;
            poll_fn(|cx| {
                if std::mem::replace(&mut yielded, true) {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
        }
        let frame = poll_fn(|cx| match until_reset(true, cx) {
            None => Poll::Ready(None),
            Some(false) => Poll::Pending,
            Some(true) => Pin::new(&mut body).poll_frame(cx).map(Some),
        })
        .await;
        let Some(frame) = frame else {
            return id;
        };
        match frame {
            None => {
                shared.send(id, Out::Data(Bytes::new(), true));
                return id;
            }
            Some(Err(e)) => {
                tracing::debug!(stream = id, error = %e, "a response body failed");
                shared.send(id, Out::Reset(Reason::INTERNAL_ERROR));
                return id;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if !data.is_empty() {
                        handed += data.len();
                        shared.send(id, Out::Data(data, false));
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        shared.send(id, Out::Trailers(trailers));
                        return id;
                    }
                }
            },
        }
    }
}

/// Serves one connection whose first bytes, `read`, are the HTTP/2
/// client preface (or the start of it), until it closes. `route` answers
/// each request.
pub(crate) async fn serve<IO, R, F>(
    mut io: IO,
    read: Bytes,
    config: Config,
    timer: Arc<dyn Timer + Send + Sync>,
    route: R,
) where
    IO: Read + Write + Unpin,
    R: Fn(http::Request<RequestBody>) -> F,
    F: Future<Output = http::Response<Body>>,
{
    let shared = Arc::new(Shared::default());
    let mut machine = Connection::new(config);
    let mut input = BytesMut::from(&read[..]);
    let mut scratch = vec![0u8; READ_BYTES].into_boxed_slice();
    let mut events = Vec::new();
    let mut streams: HashMap<u32, Arc<Stream>> = HashMap::new();
    let mut responders = FuturesUnordered::new();
    let mut outbox = Vec::new();
    let mut released = Vec::new();
    let mut eof = false;
    let mut gathered = false;
    let mut pong_hold: Option<Pin<Box<dyn Sleep>>> = None;
    // Armed by the first unanswered reset of a period, so that an idle
    // connection has no timer.
    let mut reset_period: Option<Pin<Box<dyn Sleep>>> = None;
    machine.receive(&mut input, &mut events);
    let ended = poll_fn(|cx| {
        shared.waker.register(cx.waker());
        shared.polling.store(true, Ordering::Release);
        let mut passes = 0;
        loop {
            let mut progressed = false;
            // A client that never lets up still shares its thread.
            passes += 1;
            let mut yield_now = passes == PASSES_PER_POLL;
            // A client that does not read what it asked for is not read
            // either: the output (responses, acknowledgements) is bounded.
            let reading = machine.output_len() < OUTPUT_HIGH_BYTES;
            if !eof && !machine.is_closed() && reading {
                let mut buf = ReadBuf::new(&mut scratch);
                match Pin::new(&mut io).poll_read(cx, buf.unfilled()) {
                    Poll::Ready(Ok(())) if buf.filled().is_empty() => eof = true,
                    Poll::Ready(Ok(())) => {
                        input.extend_from_slice(buf.filled());
                        machine.receive(&mut input, &mut events);
                        progressed = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
            }
            for event in events.drain(..) {
                match event {
                    Event::Request {
                        stream,
                        request,
                        end_stream,
                    } => {
                        let state = Arc::new(Stream {
                            id: stream,
                            state: Mutex::new(StreamState {
                                ended: end_stream,
                                ..StreamState::default()
                            }),
                        });
                        let body = RequestBody {
                            stream: state.clone(),
                            shared: shared.clone(),
                        };
                        let answer = route(request.map(|()| body));
                        responders.push(respond(answer, state.clone(), shared.clone()));
                        streams.insert(stream, state);
                    }
                    Event::Data {
                        stream,
                        data,
                        end_stream,
                    } => match streams.get(&stream) {
                        Some(state) => state.update(|s| {
                            s.chunks.push(data);
                            s.ended |= end_stream;
                        }),
                        None => machine.release(stream, data.len()),
                    },
                    Event::End { stream } => {
                        if let Some(state) = streams.get(&stream) {
                            state.update(|s| s.ended = true);
                        }
                    }
                    Event::Reset { stream } => {
                        if let Some(state) = streams.remove(&stream) {
                            state.update(|s| s.reset = true);
                        }
                    }
                    Event::Writable { stream } => {
                        if let Some(state) = streams.get(&stream) {
                            state.update(|s| s.paused = false);
                        }
                    }
                }
            }
            if machine.output_len() < OUTPUT_HIGH_BYTES {
                while let Poll::Ready(Some(stream)) = responders.poll_next_unpin(cx) {
                    streams.remove(&stream);
                    progressed = true;
                }
            }
            // Swapped with the task's own vectors, which keep their room.
            std::mem::swap(&mut outbox, &mut *lock(&shared.outbox));
            for (stream, out) in outbox.drain(..) {
                progressed = true;
                match out {
                    Out::Head {
                        status,
                        headers,
                        end_stream,
                    } => machine.send_headers(stream, status, &headers, end_stream),
                    Out::Data(data, end_stream) => machine.send_data(stream, data, end_stream),
                    Out::Trailers(trailers) => machine.send_trailers(stream, trailers),
                    Out::Reset(reason) => machine.reset(stream, reason),
                }
                if !machine.has_room(stream) {
                    if let Some(state) = streams.get(&stream) {
                        lock(&state.state).paused = true;
                    }
                }
            }
            std::mem::swap(&mut released, &mut *lock(&shared.released));
            for (stream, n) in released.drain(..) {
                machine.release(stream, n);
            }
            if machine.has_unanswered_resets() {
                let period = reset_period.get_or_insert_with(|| timer.sleep(RESET_PERIOD));
                if period.as_mut().poll(cx).is_ready() {
                    machine.forgive_resets();
                    reset_period = None;
                }
            }
            // Write what this pass produced, after one yield (see the
            // module docs), or a lone PONG after its hold.
            if machine.output_len() > 0 {
                let hold = machine.only_pongs() && !machine.is_closed();
                let due = if hold {
                    let sleep = pong_hold.get_or_insert_with(|| timer.sleep(PONG_HOLD));
                    sleep.as_mut().poll(cx).is_ready()
                } else {
                    true
                };
                if due && !gathered && !hold {
                    gathered = true;
                    yield_now = true;
                } else if due {
                    gathered = false;
                    pong_hold = None;
                    while machine.output_len() > 0 {
                        match write(&mut io, &machine, cx) {
                            Poll::Ready(Ok(0)) => {
                                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()))
                            }
                            Poll::Ready(Ok(n)) => {
                                machine.written(n);
                                progressed = true;
                            }
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                            Poll::Pending => break,
                        }
                    }
                    if machine.output_len() == 0 {
                        if let Poll::Ready(Err(e)) = Pin::new(&mut io).poll_flush(cx) {
                            return Poll::Ready(Err(e));
                        }
                    }
                }
            }
            if machine.output_len() == 0 && (eof || machine.is_closed()) {
                return Poll::Ready(Ok(()));
            }
            if yield_now {
                shared.polling.store(false, Ordering::Release);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if !progressed {
                shared.polling.store(false, Ordering::Release);
                if lock(&shared.released).is_empty() {
                    return Poll::Pending;
                }
                shared.polling.store(true, Ordering::Release);
            }
        }
    })
    .await;
    if let Err(e) = ended {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
    // What the streams still hold is dropped with them: their routes
    // (watches among them) end here.
    for state in streams.values() {
        state.update(|s| s.reset = true);
    }
}

/// Writes what `machine` has to write, in one vectored write when `io`
/// takes one.
fn write<IO: Write + Unpin>(
    io: &mut IO,
    machine: &Connection,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
    let n = machine.output(&mut slices);
    if io.is_write_vectored() {
        Pin::new(io).poll_write_vectored(cx, &slices[..n])
    } else {
        Pin::new(io).poll_write(cx, &slices[0])
    }
}

/// What a connection's first bytes say it speaks.
pub(crate) enum Sniffed {
    /// The HTTP/2 preface: serve it with [`serve`].
    Http2(Bytes),
    /// Anything else (HTTP/1.1): these bytes come first.
    Other(Bytes),
}

/// Reads until the first bytes tell the HTTP/2 preface from anything
/// else; `Ok(None)` when the connection closed first.
pub(crate) async fn sniff<IO: Read + Unpin>(io: &mut IO) -> io::Result<Option<Sniffed>> {
    let mut read = Vec::with_capacity(PREFACE.len());
    let mut scratch = [0u8; 24];
    loop {
        let n = poll_fn(|cx| {
            let mut buf = ReadBuf::new(&mut scratch[..PREFACE.len() - read.len()]);
            match Pin::new(&mut *io).poll_read(cx, buf.unfilled()) {
                Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        if n == 0 {
            return Ok(None);
        }
        read.extend_from_slice(&scratch[..n]);
        if read[..] != PREFACE[..read.len()] {
            return Ok(Some(Sniffed::Other(read.into())));
        }
        if read.len() == PREFACE.len() {
            return Ok(Some(Sniffed::Http2(read.into())));
        }
    }
}

/// `inner` with `read` put back in front of what it reads.
pub(crate) struct Rewind<IO> {
    read: Bytes,
    inner: IO,
}

impl<IO> Rewind<IO> {
    pub(crate) fn new(read: Bytes, inner: IO) -> Self {
        Self { read, inner }
    }
}

impl<IO: Read + Unpin> Read for Rewind<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<IO: Write + Unpin> Write for Rewind<IO> {
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

#[cfg(test)]
mod tests {
    use futures_lite::future::block_on;

    use super::*;
    use crate::test_io::Trickle;

    /// Everything `io` reads, to its end.
    fn read_all<IO: Read + Unpin>(io: &mut IO) -> Vec<u8> {
        let mut all = Vec::new();
        let mut scratch = [0u8; 7];
        loop {
            let n = block_on(poll_fn(|cx| {
                let mut buf = ReadBuf::new(&mut scratch);
                match Pin::new(&mut *io).poll_read(cx, buf.unfilled()) {
                    Poll::Ready(Ok(())) => Poll::Ready(buf.filled().len()),
                    Poll::Ready(Err(e)) => panic!("{e}"),
                    Poll::Pending => Poll::Pending,
                }
            }));
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&scratch[..n]);
        }
    }

    #[test]
    fn a_body_reads_its_chunks_in_order() {
        let mut chunks = Chunks::default();
        assert_eq!(chunks.pop(), None);
        chunks.push(Bytes::from_static(b"a"));
        chunks.push(Bytes::from_static(b"b"));
        assert_eq!(chunks.pop().as_deref(), Some(&b"a"[..]));
        chunks.push(Bytes::from_static(b"c"));
        assert_eq!(chunks.pop().as_deref(), Some(&b"b"[..]));
        chunks.push(Bytes::from_static(b"d"));
        assert_eq!(chunks.pop().as_deref(), Some(&b"c"[..]));
        assert!(!chunks.is_empty());
        assert_eq!(chunks.pop().as_deref(), Some(&b"d"[..]));
        assert!(chunks.is_empty() && chunks.pop().is_none());
        chunks.push(Bytes::from_static(b"e"));
        assert_eq!(chunks.pop().as_deref(), Some(&b"e"[..]));
    }

    #[test]
    fn the_preface_is_told_from_http1_however_it_arrives() {
        let mut h2 = PREFACE.to_vec();
        h2.extend_from_slice(b"\0\0\0\x04\0\0\0\0\0");
        for chunk in [1, 5, 24, 100] {
            let mut io = Trickle::new(&h2, chunk);
            let Ok(Some(Sniffed::Http2(read))) = block_on(sniff(&mut io)) else {
                panic!("chunk {chunk}: not HTTP/2");
            };
            assert_eq!(&read[..], PREFACE);
            // What follows the preface is still the connection's to read.
            assert_eq!(read_all(&mut io), &h2[PREFACE.len()..]);

            let http1 = b"PRI-NOT /health HTTP/1.1\r\nhost: x\r\n\r\n";
            let mut io = Trickle::new(http1, chunk);
            let Ok(Some(Sniffed::Other(read))) = block_on(sniff(&mut io)) else {
                panic!("chunk {chunk}: not told apart");
            };
            let mut rewound = Rewind::new(read, io);
            assert_eq!(read_all(&mut rewound), http1);
        }
        let mut closed = Trickle::new(b"PRI * HT", 3);
        assert!(matches!(block_on(sniff(&mut closed)), Ok(None)));
    }
}
