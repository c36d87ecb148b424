//! Byte-level reads and writes on a runtime's stream.
//!
//! The runtimes hand out hyper's `Read`/`Write` streams; these helpers give
//! them the few sequential operations the peer protocol needs, with every
//! length bounded by the caller. The one place that reads and writes the
//! same stream at once, the outbound writer, polls it directly.

use std::future::poll_fn;
use std::io;
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
