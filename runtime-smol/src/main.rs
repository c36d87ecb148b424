//! `oxetcd-smol`: the server on smol.
//!
//! This file holds only what is smol-specific — the [`Runtime`]
//! implementation, an adapter from async-io sockets to hyper's I/O traits,
//! and `main`; everything else is in `oxetcd-server`. No tokio runtime,
//! reactor or timer is started: tasks run on an `async-executor`, sockets
//! and timers on async-io's reactor, blocking work on smol's thread pool,
//! and signals arrive through `async-signal` (smol's own crate, already in
//! its dependency tree, which delivers them through the same reactor).

use std::future::Future;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use async_io::{Async, Timer};
use async_signal::{Signal, Signals};
use futures_lite::{AsyncRead, AsyncWrite, StreamExt};
use oxetcd_server::{BoundSocket, Either, Remote, Runtime, SocketAddress};
use smol::Executor;

/// mimalloc, for its cheaper small allocations across threads (see
/// [`oxetcd_server::allocator`]).
#[global_allocator]
static ALLOCATOR: oxetcd_server::allocator::Allocator = oxetcd_server::allocator::Allocator;

/// Tasks run on this executor, polled by [`oxetcd_server::runtime::async_threads`] threads.
#[derive(Clone)]
struct Smol {
    executor: Arc<Executor<'static>>,
}

impl Runtime for Smol {
    type Listener = Either<Async<TcpListener>, Async<UnixListener>>;
    type Io = Either<SmolIo<TcpStream>, SmolIo<UnixStream>>;
    type Sleep = Timer;

    fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        self.executor.spawn(future).detach();
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        smol::unblock(work).detach();
    }

    fn listener(&self, socket: BoundSocket) -> io::Result<Self::Listener> {
        Ok(match socket {
            BoundSocket::Tcp(listener) => Either::Left(Async::new(listener)?),
            BoundSocket::Unix(listener) => Either::Right(Async::new(listener)?),
        })
    }

    async fn accept(&self, listener: &Self::Listener) -> io::Result<(Self::Io, Remote)> {
        match listener {
            Either::Left(listener) => {
                let (stream, remote) = listener.accept().await?;
                stream.get_ref().set_nodelay(true)?;
                Ok((Either::Left(SmolIo::new(stream)), Remote::Tcp(remote)))
            }
            Either::Right(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok((Either::Right(SmolIo::new(stream)), Remote::Unix))
            }
        }
    }

    async fn connect(&self, address: SocketAddress) -> io::Result<Self::Io> {
        match address {
            SocketAddress::Tcp(addr) => {
                let stream = Async::<TcpStream>::connect(addr).await?;
                stream.get_ref().set_nodelay(true)?;
                Ok(Either::Left(SmolIo::new(stream)))
            }
            SocketAddress::Unix(path) => Ok(Either::Right(SmolIo::new(
                Async::<UnixStream>::connect(path).await?,
            ))),
        }
    }

    fn sleep_until(&self, deadline: Instant) -> Timer {
        Timer::at(deadline)
    }

    fn shutdown_signal(&self) -> io::Result<impl Future<Output = ()> + Send + 'static> {
        let mut signals = Signals::new([Signal::Int, Signal::Term])?;
        Ok(async move {
            signals.next().await;
        })
    }
}

/// Bytes read from a socket per call. hyper asks for at most its buffer's
/// free space; this bounds the per-connection copy buffer.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// An accepted or connected stream as hyper's I/O. Reads go through an
/// initialized scratch buffer, which keeps this adapter free of unsafe code
/// at the cost of one copy.
///
/// A read that returns less than asked for has emptied the socket, so the
/// next read waits for readiness first instead of trying the socket:
/// async-io would otherwise spend a `recvfrom` that fails with
/// `WouldBlock` on every wake. Waiting is safe because async-io arms the
/// socket's interest when it registers the waker, and the poller reports
/// data that arrived in between at once.
struct SmolIo<S> {
    stream: Async<S>,
    scratch: Box<[u8]>,
    /// The last read emptied the socket.
    drained: bool,
}

impl<S> SmolIo<S> {
    fn new(stream: Async<S>) -> Self {
        Self {
            stream,
            scratch: vec![0; READ_CHUNK_BYTES].into_boxed_slice(),
            drained: false,
        }
    }
}

impl<S> hyper::rt::Read for SmolIo<S>
where
    Async<S>: AsyncRead + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.drained {
            if let Err(e) = ready!(this.stream.poll_readable(cx)) {
                return Poll::Ready(Err(e));
            }
            this.drained = false;
        }
        let len = this.scratch.len().min(buf.remaining());
        let read = Pin::new(&mut this.stream).poll_read(cx, &mut this.scratch[..len]);
        match read {
            Poll::Ready(Ok(n)) => {
                this.drained = n > 0 && n < len;
                buf.put_slice(&this.scratch[..n]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S> hyper::rt::Write for SmolIo<S>
where
    Async<S>: AsyncWrite + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_close(cx)
    }
}

fn main() -> ExitCode {
    oxetcd_server::allocator::tune();
    let config = oxetcd_server::config::from_process();
    let executor = Arc::new(Executor::new());
    // The main thread polls the executor too.
    for i in 1..oxetcd_server::runtime::async_threads() {
        let executor = executor.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("oxetcd-smol-{i}"))
            .spawn(move || async_io::block_on(executor.run(futures_lite::future::pending::<()>())));
        if let Err(e) = spawned {
            eprintln!("error: cannot start an executor thread: {e}");
            return ExitCode::FAILURE;
        }
    }
    let runtime = Smol {
        executor: executor.clone(),
    };
    let result = async_io::block_on(executor.run(oxetcd_server::run(runtime, config)));
    oxetcd_server::exit_code(result)
}
