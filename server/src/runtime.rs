//! The seam between the server and an async runtime.
//!
//! [`Runtime`] holds only what differs between the runtimes we ship: spawning
//! a task, running blocking work, wrapping a bound listener and accepting
//! connections on it, connecting out (peers), sleeping, and waiting for a
//! stop signal. Everything
//! built on top of those — hyper's executor and timer, accept loops, the
//! driver, the services — is written once, here in `server`, so no logic is
//! duplicated across runtimes. Sockets (TCP or unix, see [`crate::socket`])
//! are bound with `std` (plain blocking calls that need no reactor) and
//! handed to the runtime to register.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::socket::{BoundSocket, Remote, SocketAddress};

/// How many threads the smol runtime polls its tasks with: one per core
/// but one, at least one. The driver thread runs the node and applies
/// entries, busy under load, and keeps a core to itself; on two cores a
/// second smol thread only added wake-ups and contention (one client's
/// put p99 +18 %, the watch fan-out's CPU per event +9 %, its events/s
/// unchanged). The tokio runtime keeps tokio's default of one worker per
/// core instead, where the second worker pays off (see its `main`).
pub fn async_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores.saturating_sub(1).max(1)
}

/// What the server needs from an async runtime.
pub trait Runtime: Clone + Send + Sync + Unpin + 'static {
    /// A listening socket registered with the runtime's reactor.
    type Listener: Send + Sync + 'static;
    /// An accepted or connected stream, readable and writable by hyper.
    /// The peer transport frames its own protocol over the same traits.
    type Io: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static;
    /// The future returned by [`Runtime::sleep_until`].
    type Sleep: Future + Send + Sync + 'static;

    /// Runs `future` to completion in the background.
    fn spawn(&self, future: impl Future<Output = ()> + Send + 'static);

    /// Runs `work` on a thread where blocking is allowed (disk reads).
    fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static);

    /// Registers a bound, non-blocking listener with the runtime.
    fn listener(&self, socket: BoundSocket) -> io::Result<Self::Listener>;

    /// Accepts the next connection, TCP ones with `TCP_NODELAY` set
    /// (responses are small and latency-bound), and where it came from.
    fn accept<'a>(
        &'a self,
        listener: &'a Self::Listener,
    ) -> impl Future<Output = io::Result<(Self::Io, Remote)>> + Send + 'a;

    /// Opens a connection to `address`, TCP ones with `TCP_NODELAY` set
    /// (raft messages are small and latency-bound). No timeout: callers
    /// bound it.
    fn connect(
        &self,
        address: SocketAddress,
    ) -> impl Future<Output = io::Result<Self::Io>> + Send + '_;

    /// A future that completes at `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Self::Sleep;

    /// Installs handlers for SIGINT and SIGTERM now, and returns a future
    /// that completes when either arrives. Installing eagerly means a signal
    /// sent right after the readiness lines is not lost to the default
    /// action.
    fn shutdown_signal(&self) -> io::Result<impl Future<Output = ()> + Send + 'static>;
}

/// hyper's executor, on any [`Runtime`].
///
/// A task is polled once where hyper hands it over, before it is spawned:
/// an HTTP/2 request then reaches its service (and the node) within the
/// connection's own poll, instead of after the connection has written
/// and flushed whatever else it had (a PING's acknowledgement, for one:
/// grpc-go sends a PING with most requests). That first poll has a waker
/// that does nothing; a task still pending is spawned, and the runtime
/// polls it again at once with its own, as a future's contract requires
/// of whoever polls it. Boxed, the task the runtime moves about is a
/// pointer rather than hyper's kilobyte-sized stream future.
#[derive(Clone)]
pub(crate) struct HyperExecutor<R>(pub(crate) R);

impl<R, F> hyper::rt::Executor<F> for HyperExecutor<R>
where
    R: Runtime,
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        if let Some(future) = poll_first(future) {
            self.0.spawn(async move {
                future.await;
            });
        }
    }
}

/// Polls `future` once, with a waker that does nothing; the future, boxed,
/// if that did not finish it (see [`HyperExecutor`]).
fn poll_first<F: Future>(future: F) -> Option<Pin<Box<F>>> {
    let mut future = Box::pin(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    future.as_mut().poll(&mut cx).is_pending().then_some(future)
}

/// hyper's timer (HTTP/1 header timeouts, HTTP/2 keep-alive), on any
/// [`Runtime`].
#[derive(Clone)]
pub(crate) struct HyperTimer<R>(pub(crate) R);

impl<R: Runtime> hyper::rt::Timer for HyperTimer<R> {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(deadline_after(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperSleep(Box::pin(self.0.sleep_until(deadline))))
    }
}

/// A runtime's sleep future as hyper's `Sleep`; boxed inside so it is `Unpin`
/// without unsafe pin projection.
struct HyperSleep<S>(Pin<Box<S>>);

impl<S: Future> Future for HyperSleep<S> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx).map(|_| ())
    }
}

impl<S: Future + Send + Sync> hyper::rt::Sleep for HyperSleep<S> {}

/// `now + duration`, or a deadline far enough away to mean "never" when the
/// sum overflows.
pub(crate) fn deadline_after(duration: Duration) -> Instant {
    /// Stands in for "never": about thirty years.
    const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(duration)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

/// Runs `future` until it completes or `duration` passes (then `None`).
pub(crate) async fn timeout<R: Runtime, F: Future>(
    runtime: &R,
    duration: Duration,
    future: F,
) -> Option<F::Output> {
    let sleep = runtime.sleep_until(deadline_after(duration));
    let future = std::pin::pin!(future);
    let sleep = std::pin::pin!(sleep);
    match futures_util::future::select(future, sleep).await {
        futures_util::future::Either::Left((output, _)) => Some(output),
        futures_util::future::Either::Right(_) => None,
    }
}

/// Runs `work` on a blocking thread of `runtime` and waits for its result.
pub(crate) async fn blocking<R: Runtime, T: Send + 'static>(
    runtime: &R,
    work: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    let (done, result) = futures_channel::oneshot::channel();
    runtime.spawn_blocking(move || {
        let _ = done.send(work());
    });
    result
        .await
        .map_err(|_| io::Error::other("blocking work was abandoned"))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::task::Waker;

    use super::*;

    /// A future that counts its polls and finishes on the second.
    struct TwoPolls<'a>(&'a Cell<u32>);

    impl Future for TwoPolls<'_> {
        type Output = ();

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.0.set(self.0.get() + 1);
            if self.0.get() >= 2 {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[test]
    fn a_task_is_polled_once_before_it_is_handed_over() {
        let polls = Cell::new(0);
        let pending = poll_first(TwoPolls(&polls));
        assert_eq!(polls.get(), 1, "polled where it was handed over");
        let mut pending = pending.expect("still pending after one poll");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(pending.as_mut().poll(&mut cx).is_ready());
        // A task that finishes at once is not handed over at all.
        assert!(poll_first(std::future::ready(())).is_none());
    }
}
