//! A reply from the node, awaited by polling for a moment when a client
//! sends one request at a time, so that the async worker does not go to
//! sleep meanwhile.
//!
//! Design: a task that sends the node a request counts itself as awaiting
//! a reply until it comes ([`reply`]). A request is *lone* when it is the
//! only one awaited and the last [`LONE_STREAK_MIN`] requests each found
//! none awaited before them: a sequential client, the usual one-client
//! case. A lone request polls for its reply for up to the bound by which
//! the node's driver thread polls for its commands, if the last reply came
//! within that time (the same rule: see `super::spin`). Each poll that
//! finds none wakes its task again, so the runtime keeps the worker
//! running instead of parking it, and the reply, when it comes, finds the
//! worker awake: the node's wake-up is a flag rather than a syscall, and
//! the worker goes on without the kernel's wake-up latency (on a virtual
//! machine an idle vCPU's, tens of microseconds). A single client's put
//! waits for the disk's fsync with the worker otherwise idle, so both were
//! on its path. Every [`YIELD_EVERY`] polls the worker's thread yields its
//! core, so the node's and the client's threads are not kept waiting for
//! it.
//!
//! The runtime still runs its other tasks and reads its sockets between
//! two polls, but only every so many polls (tokio's 61 ticks,
//! async-executor's 200), so a request arriving meanwhile is read later
//! than from an idle worker: with several clients in flight, polling
//! made their puts slower (4 % fewer a second at 16 clients), hence
//! only lone requests poll. Under load the worker has tasks to run and
//! never idles anyway. A reply slower than the budget (a member of a
//! cluster waits for its peers, a disk with a slow fsync) would only be
//! polled for in vain, taking a core the peers sharing the machine need:
//! three members on one machine answered one client 21 % slower until
//! the last reply's wait decided.
//!
//! Measured with the Go client against the same server without it
//! (alternating runs, `scripts/bench-ab.py`), one client's put on tokio
//! in four sittings: p50 -9 %, -16 %, -5 % and unchanged; p99 -14 %,
//! -28 %, -3 % and -20 %. On smol: p50 -11 %, p99 -19 %. 2, 4, 16 and
//! 256 clients, and three members, unchanged within the noise.
//!
//! The counts, and the bound, are process-wide; servers sharing a process
//! (tests) share them, which only makes their requests poll less often, or
//! for as long as another server's driver polls.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::spin::SPIN_MAX;

/// How long a lone request polls for its reply, in nanoseconds: the
/// driver's own bound (see [`set_bound`]). A member alone answers a put
/// after its fsync and apply, within `SPIN_MAX_ALONE`; on a slower
/// virtual machine, with the driver polling for 500 µs, a 1-client put's
/// p50 was 0.68 ms when its reply was polled for 250 µs and 0.59 ms when
/// for 500 µs. A member of a cluster answers after its peers, mostly
/// later than [`SPIN_MAX`], so it rarely polls (see the module docs).
static REPLY_SPIN_NANOS: AtomicU64 = AtomicU64::new(nanos(SPIN_MAX));

const fn nanos(bound: Duration) -> u64 {
    bound.as_nanos() as u64
}

/// The driver tells how long it polls for its commands (which depends on
/// whether its member has peers), and lone requests poll as long for their
/// replies. It tells at every wait; only a change is written, so the
/// request tasks' core keeps its copy.
pub(super) fn set_bound(bound: Duration) {
    let bound = nanos(bound);
    if REPLY_SPIN_NANOS.load(Ordering::Relaxed) != bound {
        REPLY_SPIN_NANOS.store(bound, Ordering::Relaxed);
    }
}

/// Polls between two in which a lone request lets the OS run another
/// thread waiting for its core (the node's, the client's) first. Not
/// every poll: the runtime reads its sockets only every so many polls.
const YIELD_EVERY: u32 = 8;

/// Requests in a row that found no other reply awaited, from which a lone
/// request polls: a client that sends one request at a time.
const LONE_STREAK_MIN: usize = 8;

/// The process's replies (see the module docs).
static REPLIES: Replies = Replies::new();

/// `reply`, polled for a while as the module docs tell.
pub(super) fn reply<F: Future + Unpin>(reply: F) -> Awaited<'static, F> {
    Awaited::new(
        reply,
        &REPLIES,
        Duration::from_nanos(REPLY_SPIN_NANOS.load(Ordering::Relaxed)),
    )
}

/// Replies tasks are waiting for, how many requests in a row found none
/// awaited, and how long the last reply took to come, in nanoseconds.
struct Replies {
    awaited: AtomicUsize,
    lone: AtomicUsize,
    last_wait: AtomicU64,
}

impl Replies {
    const fn new() -> Self {
        Self {
            awaited: AtomicUsize::new(0),
            lone: AtomicUsize::new(0),
            last_wait: AtomicU64::new(0),
        }
    }

    /// Whether a request waiting for its reply should poll for it again,
    /// `waited` after its first poll (see the module docs).
    fn polls_again(&self, waited: Duration, spin: Duration) -> bool {
        let spin_nanos = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
        waited < spin
            && self.awaited.load(Ordering::Acquire) == 1
            && self.lone.load(Ordering::Relaxed) >= LONE_STREAK_MIN
            && self.last_wait.load(Ordering::Relaxed) <= spin_nanos
    }
}

/// A reply being awaited; counted in `replies` until it comes or the
/// future is dropped.
pub(super) struct Awaited<'a, F> {
    reply: F,
    replies: &'a Replies,
    spin: Duration,
    began: Option<Instant>,
    polls: u32,
    counted: bool,
}

impl<'a, F> Awaited<'a, F> {
    fn new(reply: F, replies: &'a Replies, spin: Duration) -> Self {
        if replies.awaited.fetch_add(1, Ordering::AcqRel) == 0 {
            replies.lone.fetch_add(1, Ordering::Relaxed);
        } else {
            replies.lone.store(0, Ordering::Relaxed);
        }
        Self {
            reply,
            replies,
            spin,
            began: None,
            polls: 0,
            counted: true,
        }
    }

    fn uncount(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.replies.awaited.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<F: Future + Unpin> Future for Awaited<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if let Poll::Ready(reply) = Pin::new(&mut this.reply).poll(cx) {
            let waited = this.began.map_or(Duration::ZERO, |began| began.elapsed());
            let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
            this.replies.last_wait.store(nanos, Ordering::Relaxed);
            this.uncount();
            return Poll::Ready(reply);
        }
        let now = Instant::now();
        let began = *this.began.get_or_insert(now);
        if this.replies.polls_again(now - began, this.spin) {
            this.polls = this.polls.wrapping_add(1);
            if this.polls.is_multiple_of(YIELD_EVERY) {
                std::thread::yield_now();
            }
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

impl<F> Drop for Awaited<'_, F> {
    fn drop(&mut self) {
        self.uncount();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use futures_channel::oneshot;

    use super::*;

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    type Reply<'a> = Awaited<'a, oneshot::Receiver<usize>>;

    /// Polls a request the node has not answered: whether it asked to be
    /// polled again.
    fn polls_again(request: &mut Reply<'_>, waker: &Arc<CountingWaker>) -> bool {
        let before = waker.0.load(Ordering::Relaxed);
        let waker_ref = waker.clone().into();
        let mut cx = Context::from_waker(&waker_ref);
        assert!(Pin::new(request).poll(&mut cx).is_pending());
        waker.0.load(Ordering::Relaxed) > before
    }

    /// Answers `request` with `n` and polls it to its end.
    fn answer(mut request: Reply<'_>, send: oneshot::Sender<usize>, n: usize) {
        send.send(n).unwrap();
        let waker = Arc::new(CountingWaker::default()).into();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(Pin::new(&mut request).poll(&mut cx), Poll::Ready(Ok(n)));
        assert_eq!(request.replies.awaited.load(Ordering::Relaxed), 0);
    }

    /// A request to `replies` with `spin` as its budget, and its sender.
    fn request(replies: &Replies, spin: Duration) -> (Reply<'_>, oneshot::Sender<usize>) {
        let (send, answer) = oneshot::channel();
        (Awaited::new(answer, replies, spin), send)
    }

    #[test]
    fn a_lone_reply_is_polled_for_a_while_and_others_wait_to_be_woken() {
        let waker = Arc::new(CountingWaker::default());
        let replies = Replies::new();
        let long = Duration::from_secs(30);
        let awaited = || replies.awaited.load(Ordering::Relaxed);

        // A client one request at a time polls once the streak is long
        // enough; an answered request is uncounted, once.
        for n in 1..=LONE_STREAK_MIN {
            let (mut one, send) = request(&replies, long);
            assert_eq!(awaited(), 1);
            assert_eq!(
                polls_again(&mut one, &waker),
                n == LONE_STREAK_MIN,
                "request {n}"
            );
            answer(one, send, n);
            assert_eq!(awaited(), 0);
        }
        let (mut lone, _send) = request(&replies, long);
        assert!(polls_again(&mut lone, &waker));

        // A second request: neither polls, and the streak starts over.
        let (mut other, _send_other) = request(&replies, long);
        assert!(!polls_again(&mut lone, &waker));
        assert!(!polls_again(&mut other, &waker));
        drop(other);
        assert_eq!(awaited(), 1, "a dropped one is uncounted");
        assert!(
            !polls_again(&mut lone, &waker),
            "not lone: the streak broke"
        );
        drop(lone);

        // A reply slower than the budget: the next lone one does not poll,
        // and its own quick reply lets the one after it poll again.
        let budget = Duration::from_millis(2);
        for _ in 0..LONE_STREAK_MIN {
            drop(request(&replies, long));
        }
        let (mut slow, send) = request(&replies, budget);
        assert!(polls_again(&mut slow, &waker));
        std::thread::sleep(budget * 2);
        answer(slow, send, 1);
        let (mut next, send) = request(&replies, budget);
        assert!(!polls_again(&mut next, &waker), "the last reply was slow");
        answer(next, send, 2);
        let (mut after, _send) = request(&replies, long);
        assert!(polls_again(&mut after, &waker));
        drop(after);

        // Past its time, a lone one waits to be woken too.
        let (mut late, _send) = request(&replies, Duration::ZERO);
        assert!(!polls_again(&mut late, &waker));
    }
}
