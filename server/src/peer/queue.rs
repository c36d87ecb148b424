//! One peer's bounded send queue: pushed from any thread without blocking
//! (the driver thread is not async), drained by the peer's writer task.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;

use super::lock;
use oxetcd_proto::eraftpb::Message;

/// Why a push was refused; the message is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The queue holds its maximum.
    Full,
    /// The writer has no connection: a message queued now would be stale by
    /// the time one exists, and raft resends what matters.
    Disconnected,
    /// The peer was removed or the transport stopped.
    Closed,
}

pub(crate) struct SendQueue {
    state: Mutex<State>,
    capacity: usize,
    /// The writer task, woken by a push, a close, or a reconnect request.
    waker: AtomicWaker,
}

struct State {
    messages: VecDeque<Message>,
    connected: bool,
    closed: bool,
    /// Bumped to make the writer drop its connection and dial again (new
    /// URLs).
    redial: u64,
}

impl SendQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                messages: VecDeque::new(),
                connected: false,
                closed: false,
                redial: 0,
            }),
            capacity,
            waker: AtomicWaker::new(),
        }
    }

    pub(crate) fn push(&self, message: Message) -> Result<(), PushError> {
        {
            let mut state = lock(&self.state);
            if state.closed {
                return Err(PushError::Closed);
            }
            if !state.connected {
                return Err(PushError::Disconnected);
            }
            if state.messages.len() >= self.capacity {
                return Err(PushError::Full);
            }
            state.messages.push_back(message);
        }
        self.waker.wake();
        Ok(())
    }

    /// Marks the connection up (pushes accepted) or down (pushes refused and
    /// anything queued dropped; returns how many).
    pub(crate) fn set_connected(&self, connected: bool) -> usize {
        let mut state = lock(&self.state);
        state.connected = connected;
        if connected {
            0
        } else {
            let dropped = state.messages.len();
            state.messages.clear();
            dropped
        }
    }

    pub(crate) fn close(&self) {
        {
            let mut state = lock(&self.state);
            state.closed = true;
            state.messages.clear();
        }
        self.waker.wake();
    }

    pub(crate) fn request_redial(&self) {
        lock(&self.state).redial += 1;
        self.waker.wake();
    }

    /// The current redial generation.
    pub(crate) fn redial_generation(&self) -> u64 {
        lock(&self.state).redial
    }

    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Moves up to `max` queued messages into `out`. Ready with `false` once
    /// closed; pending (waker registered) while empty.
    pub(crate) fn poll_drain(
        &self,
        cx: &mut Context<'_>,
        out: &mut Vec<Message>,
        max: usize,
    ) -> Poll<bool> {
        self.waker.register(cx.waker());
        let mut state = lock(&self.state);
        if state.closed {
            return Poll::Ready(false);
        }
        if state.messages.is_empty() {
            return Poll::Pending;
        }
        let n = state.messages.len().min(max);
        out.extend(state.messages.drain(..n));
        Poll::Ready(true)
    }

    /// Registers the writer to be woken by a close or redial request while
    /// it is not draining (backing off, dialing).
    pub(crate) fn register(&self, cx: &mut Context<'_>) {
        self.waker.register(cx.waker());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn message(index: u64) -> Message {
        Message {
            index,
            ..Default::default()
        }
    }

    #[test]
    fn bounded_and_refused_while_disconnected() {
        let queue = SendQueue::new(2);
        assert_eq!(queue.push(message(1)), Err(PushError::Disconnected));
        queue.set_connected(true);
        assert_eq!(queue.push(message(1)), Ok(()));
        assert_eq!(queue.push(message(2)), Ok(()));
        assert_eq!(queue.push(message(3)), Err(PushError::Full));
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        assert_eq!(queue.poll_drain(&mut cx, &mut out, 1), Poll::Ready(true));
        assert_eq!(out.len(), 1);
        assert_eq!(queue.set_connected(false), 1);
        assert_eq!(queue.poll_drain(&mut cx, &mut out, 10), Poll::Pending);
        queue.close();
        assert_eq!(queue.push(message(4)), Err(PushError::Closed));
        assert_eq!(queue.poll_drain(&mut cx, &mut out, 10), Poll::Ready(false));
    }
}
