//! `oxetcd`: the server on tokio.
//!
//! This file holds only what is tokio-specific — the [`Runtime`]
//! implementation and `main`; everything else is in `oxetcd-server`.

use std::future::Future;
use std::io;
use std::process::ExitCode;
use std::time::Instant;

use hyper_util::rt::TokioIo;
use oxetcd_server::{BoundSocket, Either, Remote, Runtime, SocketAddress};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};

/// mimalloc, for its cheaper small allocations across threads (see
/// [`oxetcd_server::allocator`]).
#[global_allocator]
static ALLOCATOR: oxetcd_server::allocator::Allocator = oxetcd_server::allocator::Allocator;

/// tokio's multi-threaded runtime, which the server runs on inside `main`.
/// It holds the runtime's handle because the driver thread, which is not
/// one of tokio's, spawns peer tasks too.
#[derive(Clone, Debug)]
struct Tokio(tokio::runtime::Handle);

impl Runtime for Tokio {
    type Listener = Either<TcpListener, UnixListener>;
    type Io = Either<TokioIo<TcpStream>, TokioIo<UnixStream>>;
    type Sleep = tokio::time::Sleep;

    fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(future);
    }

    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        self.0.spawn_blocking(work);
    }

    fn listener(&self, socket: BoundSocket) -> io::Result<Self::Listener> {
        Ok(match socket {
            BoundSocket::Tcp(listener) => Either::Left(TcpListener::from_std(listener)?),
            BoundSocket::Unix(listener) => Either::Right(UnixListener::from_std(listener)?),
        })
    }

    async fn accept(&self, listener: &Self::Listener) -> io::Result<(Self::Io, Remote)> {
        match listener {
            Either::Left(listener) => {
                let (stream, remote) = listener.accept().await?;
                stream.set_nodelay(true)?;
                Ok((Either::Left(TokioIo::new(stream)), Remote::Tcp(remote)))
            }
            Either::Right(listener) => {
                let (stream, _) = listener.accept().await?;
                Ok((Either::Right(TokioIo::new(stream)), Remote::Unix))
            }
        }
    }

    async fn connect(&self, address: SocketAddress) -> io::Result<Self::Io> {
        match address {
            SocketAddress::Tcp(addr) => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                Ok(Either::Left(TokioIo::new(stream)))
            }
            SocketAddress::Unix(path) => Ok(Either::Right(TokioIo::new(
                UnixStream::connect(path).await?,
            ))),
        }
    }

    fn sleep_until(&self, deadline: Instant) -> tokio::time::Sleep {
        tokio::time::sleep_until(deadline.into())
    }

    fn shutdown_signal(&self) -> io::Result<impl Future<Output = ()> + Send + 'static> {
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        })
    }
}

fn main() -> ExitCode {
    oxetcd_server::allocator::tune();
    let config = oxetcd_server::config::from_process();
    // tokio's default: a worker per core (or TOKIO_WORKER_THREADS), not
    // the one fewer the smol runtime polls with (`async_threads`). tokio's
    // workers steal each other's tasks, so on two cores a second worker
    // takes the watch fan-out's encoding and sending while the first
    // answers requests: +8 to +10 % events/s, one client's put p50 -5 %,
    // three members unchanged; at 256 clients the same req/s for 2-3 %
    // more server CPU per put (alternating runs). smol's executor gained
    // nothing from it (watch +0 %, CPU per event +9 %).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let runtime = match builder.enable_all().thread_name("oxetcd-tokio").build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(oxetcd_server::run(Tokio(runtime.handle().clone()), config));
    oxetcd_server::exit_code(result)
}
