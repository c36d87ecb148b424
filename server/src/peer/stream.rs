//! Byte-level reads and writes on a runtime's stream.
//!
//! The runtimes hand out hyper's `Read`/`Write` streams; these helpers give
//! them the few sequential operations the peer protocol needs, with every
//! length bounded by the caller. The one place that reads and writes the
//! same stream at once, the outbound writer, polls it directly.
//!
//! A messages stream carries nothing but frames to its end, so it is read
//! through a [`FrameReader`]: one read takes in whatever the peer has sent,
//! often many frames, where reading a frame's header and body apart costs
//! three reads a frame. Streams that change from frames to raw bytes
//! (snapshots) or carry one frame (members, hashes) use [`read_frame`],
//! which never reads past its frame.

use std::future::poll_fn;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::wire::{self, FrameKind, FRAME_HEADER_BYTES};

/// Bytes a frame body buffer grows by as its data arrives, so a header that
/// announces a large body costs memory only once the body is really sent.
const FRAME_READ_STEP_BYTES: usize = 64 * 1024;

/// Reads some bytes into `buf`; `Ok(0)` is end of stream.
pub(crate) fn poll_read_some<T: hyper::rt::Read + Unpin>(
    io: &mut T,
    cx: &mut Context<'_>,
    buf: &mut [u8],
) -> Poll<io::Result<usize>> {
    let mut read_buf = hyper::rt::ReadBuf::new(buf);
    ready!(Pin::new(io).poll_read(cx, read_buf.unfilled()))?;
    Poll::Ready(Ok(read_buf.filled().len()))
}

/// Fills `buf` completely, or fails with `UnexpectedEof`.
pub(crate) async fn read_exact<T: hyper::rt::Read + Unpin>(
    io: &mut T,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = poll_fn(|cx| poll_read_some(io, cx, &mut buf[filled..])).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        filled += n;
    }
    Ok(())
}

/// Writes all of `buf`, then flushes.
pub(crate) async fn write_all<T: hyper::rt::Write + Unpin>(
    io: &mut T,
    mut buf: &[u8],
) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx)).await
}

/// How reading a frame failed.
#[derive(Debug)]
pub(crate) enum ReadFrameError {
    /// The stream ended cleanly between frames.
    Closed,
    /// The stream failed or ended inside a frame.
    Io(io::Error),
    /// The header is not acceptable.
    Frame(wire::FrameError),
}

impl std::fmt::Display for ReadFrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed => f.write_str("connection closed"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Frame(e) => write!(f, "{e}"),
        }
    }
}

/// Reads one frame of at most `max` body bytes into `body` (replacing its
/// contents).
pub(crate) async fn read_frame<T: hyper::rt::Read + Unpin>(
    io: &mut T,
    max: usize,
    body: &mut Vec<u8>,
) -> Result<FrameKind, ReadFrameError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    // End of stream before the first header byte is a clean close.
    let first = poll_fn(|cx| poll_read_some(io, cx, &mut header[..1]))
        .await
        .map_err(ReadFrameError::Io)?;
    if first == 0 {
        return Err(ReadFrameError::Closed);
    }
    read_exact(io, &mut header[1..])
        .await
        .map_err(ReadFrameError::Io)?;
    let (kind, len) = wire::parse_frame_header(&header, max).map_err(ReadFrameError::Frame)?;
    body.clear();
    while body.len() < len {
        let start = body.len();
        let step = (len - start).min(FRAME_READ_STEP_BYTES);
        body.resize(start + step, 0);
        read_exact(io, &mut body[start..])
            .await
            .map_err(ReadFrameError::Io)?;
    }
    Ok(kind)
}

/// Bytes a [`FrameReader`] asks the stream for at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A buffer this size or larger is let go once it has been read out, so a
/// large frame does not keep its memory for the life of the stream.
const BUFFER_KEPT_BYTES: usize = 1024 * 1024;

/// Reads frames through a buffer (see the module docs).
///
/// Invariant: `buf[start..filled]` is read but not yet returned, and
/// `buf[..start]` belongs to the frame returned last; `filled` moves only
/// when a read completes, so a read cancelled half-way loses nothing.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    filled: usize,
}

impl FrameReader {
    /// The next frame of at most `max` body bytes, and its body.
    pub(crate) async fn read<T: hyper::rt::Read + Unpin>(
        &mut self,
        io: &mut T,
        max: usize,
    ) -> Result<(FrameKind, &[u8]), ReadFrameError> {
        loop {
            let frame_end = match self.parsed(max)? {
                Ok((kind, body)) => return Ok((kind, &self.buf[body])),
                Err(frame_end) => frame_end,
            };
            let want = self.make_room(frame_end);
            let at = self.filled;
            let n = poll_fn(|cx| poll_read_some(io, cx, &mut self.buf[at..at + want]))
                .await
                .map_err(ReadFrameError::Io)?;
            if n == 0 {
                return Err(if self.start == self.filled {
                    ReadFrameError::Closed
                } else {
                    ReadFrameError::Io(io::ErrorKind::UnexpectedEof.into())
                });
            }
            self.filled += n;
        }
    }

    /// The next whole frame in the buffer, consumed; or, when none is
    /// whole yet, the length of the frame in progress with its header (0
    /// while its header is not all in).
    fn parsed(
        &mut self,
        max: usize,
    ) -> Result<Result<(FrameKind, Range<usize>), usize>, ReadFrameError> {
        let unread = &self.buf[self.start..self.filled];
        let Some(header) = unread.first_chunk::<FRAME_HEADER_BYTES>() else {
            return Ok(Err(0));
        };
        let (kind, len) = wire::parse_frame_header(header, max).map_err(ReadFrameError::Frame)?;
        let frame_end = FRAME_HEADER_BYTES + len;
        if unread.len() < frame_end {
            return Ok(Err(frame_end));
        }
        let body = self.start + FRAME_HEADER_BYTES..self.start + frame_end;
        self.start = body.end;
        Ok(Ok((kind, body)))
    }

    /// Moves the unread bytes to the front and makes room after them for
    /// the next read, given the length of the frame in progress
    /// ([`FrameReader::parsed`]); returns how many bytes that read may take.
    /// A large frame's room grows by at most [`READ_CHUNK_BYTES`] at a time
    /// and never past its end, so a header that announces a large body
    /// costs memory only as the body arrives.
    fn make_room(&mut self, frame_end: usize) -> usize {
        let unread = self.filled - self.start;
        if unread == 0 && self.buf.len() >= BUFFER_KEPT_BYTES {
            self.buf = Vec::new();
        } else if self.start > 0 {
            self.buf.copy_within(self.start..self.filled, 0);
        }
        self.start = 0;
        self.filled = unread;
        let want = if frame_end > READ_CHUNK_BYTES {
            // A large frame: its body, a chunk at a time.
            (frame_end - unread).min(READ_CHUNK_BYTES)
        } else {
            // Small frames: a whole chunk, which may hold many.
            READ_CHUNK_BYTES
        };
        let end = unread + want;
        if self.buf.len() < end {
            self.buf.resize(end, 0);
        }
        want
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::Waker;

    use super::*;
    use crate::test_io::Trickle;
    use wire::put_frame_header;

    /// Runs `future` on a no-op waker; the stream wakes as it goes.
    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..1_000_000 {
            if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
        }
        panic!("no progress");
    }

    fn frames(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut stream = Vec::new();
        for body in bodies {
            put_frame_header(&mut stream, FrameKind::Message, body.len());
            stream.extend_from_slice(body);
        }
        stream
    }

    /// Every frame read back from `stream`, delivered `chunk` bytes a
    /// read, then how the stream ended.
    fn read_all(stream: &[u8], chunk: usize, max: usize) -> (Vec<Vec<u8>>, ReadFrameError) {
        let mut io = Trickle::new(stream, chunk);
        let mut reader = FrameReader::default();
        let mut bodies = Vec::new();
        loop {
            match block_on(reader.read(&mut io, max)) {
                Ok((kind, body)) => {
                    assert_eq!(kind, FrameKind::Message);
                    bodies.push(body.to_vec());
                }
                Err(end) => return (bodies, end),
            }
        }
    }

    #[test]
    fn frames_come_back_whole_however_the_stream_is_cut() {
        let bodies: Vec<Vec<u8>> = [0, 1, 5, 300, 70_000, 2, 200_000, 0, 9]
            .iter()
            .enumerate()
            .map(|(i, &len)| (0..len).map(|b| (b * 7 + i) as u8).collect())
            .collect();
        let stream = frames(&bodies);
        for chunk in [1, 3, FRAME_HEADER_BYTES, 4096, READ_CHUNK_BYTES, 1 << 20] {
            let (read, end) = read_all(&stream, chunk, 1 << 20);
            assert_eq!(read, bodies, "chunk {chunk}");
            assert!(
                matches!(end, ReadFrameError::Closed),
                "chunk {chunk}: {end}"
            );
        }
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_an_error_not_a_close() {
        let stream = frames(&[vec![1; 10], vec![2; 10]]);
        for cut in [stream.len() - 1, 15 + 3, 15 + FRAME_HEADER_BYTES] {
            let (read, end) = read_all(&stream[..cut], 4, 100);
            assert_eq!(read, vec![vec![1; 10]]);
            assert!(
                matches!(&end, ReadFrameError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof),
                "cut at {cut}: {end}"
            );
        }
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_before_its_body_is_read() {
        let stream = frames(&[vec![1; 10], vec![2; 101]]);
        let (read, end) = read_all(&stream, 7, 100);
        assert_eq!(read, vec![vec![1; 10]]);
        assert!(matches!(end, ReadFrameError::Frame(_)), "{end}");
    }

    #[test]
    fn a_large_frame_grows_the_buffer_as_it_arrives_and_lets_it_go() {
        let len = 3 * BUFFER_KEPT_BYTES;
        let mut stream = Vec::new();
        put_frame_header(&mut stream, FrameKind::Message, len);
        stream.extend_from_slice(&vec![4; READ_CHUNK_BYTES]);
        // Only a chunk of the announced body has come: the buffer holds
        // that and room for one more read, not the announced size.
        let mut io = Trickle::new(&stream, 1 << 20);
        let mut reader = FrameReader::default();
        assert!(block_on(reader.read(&mut io, len)).is_err());
        let bound = stream.len() + READ_CHUNK_BYTES;
        assert!(reader.buf.len() <= bound, "{} > {bound}", reader.buf.len());
        // Whole, then a small one: the large buffer is not kept.
        let stream = frames(&[vec![5; len], vec![6; 3]]);
        let mut io = Trickle::new(&stream, 1 << 20);
        let mut reader = FrameReader::default();
        assert_eq!(
            block_on(reader.read(&mut io, len))
                .map(|(_, b)| b.len())
                .ok(),
            Some(len)
        );
        assert_eq!(
            block_on(reader.read(&mut io, len))
                .map(|(_, b)| b.to_vec())
                .ok(),
            Some(vec![6; 3])
        );
        assert!(matches!(
            block_on(reader.read(&mut io, len)),
            Err(ReadFrameError::Closed)
        ));
        assert!(reader.buf.len() < BUFFER_KEPT_BYTES, "{}", reader.buf.len());
    }
}
