//! When a watch stream sends the live events it has gathered.
//!
//! Design: a stream that keeps up sends each apply's events as soon as it
//! takes them. A stream that finds the events of more than one apply
//! waiting when it takes them has fallen behind its writers: every response
//! it sends then costs its client a message to decode and dispatch, for a
//! handful of events. From then on it is *paced*: it sends at most once per
//! [`WATCH_PACE`], and what arrives meanwhile joins the next send, so each
//! watcher gets its revisions in fewer, larger responses (still in order,
//! each revision whole; see `oxetcd_core::watch::batch`). It is unpaced
//! again once a whole pace passes with at most one apply's events. etcd
//! behaves alike under load: watchers whose channel fills are served from
//! its victim loop every 10 ms, and those further behind from its sync
//! loop every 100 ms.
//!
//! The pace trades a paced stream's delivery delay for the fixed cost of
//! a response, paid by both ends (a message to frame and send, and on the
//! client one to read, decode and hand to its watcher). Measured on the
//! Go client's fan-out (256 watchers on 16 connections, 16 writers): a
//! 10 ms pace sent 53 events per response, 20 ms 109, for 8 % less CPU
//! per event on each side and 8 % more events a second; 40 ms sent 203
//! and saved nothing more beyond the noise.
//!
//! [`Pace`] only decides; the stream ([`super::watch`]) gathers, arms the
//! timer and sends, and sends at once whatever must not wait: a response of
//! another kind queued behind the events, or a queue half its bound.

use std::time::{Duration, Instant};

/// The shortest time between two sends of a paced stream: twice etcd's
/// victim loop's period, a fifth of its sync loop's (see the module docs).
pub(crate) const WATCH_PACE: Duration = Duration::from_millis(20);

/// A stream's pacing state (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Pace {
    paced: bool,
    /// When events last went out.
    last_sent: Option<Instant>,
    /// Applies whose events were gathered since then.
    gathered: usize,
}

impl Pace {
    /// The events of `applies` more applies were gathered at `now`: returns
    /// when they may go out, `None` for at once.
    pub(crate) fn gathered(&mut self, applies: usize, now: Instant) -> Option<Instant> {
        self.gathered += applies;
        if !self.paced {
            // Fallen behind: these go out now, the next ones wait.
            self.paced = self.gathered > 1;
            return None;
        }
        let due = self.last_sent? + WATCH_PACE;
        (now < due).then_some(due)
    }

    /// The gathered events went out at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        if self.paced && self.gathered <= 1 {
            self.paced = false;
        }
        self.gathered = 0;
        self.last_sent = Some(now);
    }

    /// Whether the stream is paced.
    #[cfg(test)]
    fn is_paced(&self) -> bool {
        self.paced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_stream_that_keeps_up_sends_each_apply_at_once() {
        let start = Instant::now();
        let mut pace = Pace::default();
        for i in 0..100 {
            let now = start + Duration::from_micros(100 * i);
            assert_eq!(pace.gathered(1, now), None);
            pace.sent(now);
            assert!(!pace.is_paced());
        }
    }

    #[test]
    fn a_stream_that_fell_behind_sends_once_per_pace_until_it_keeps_up_again() {
        let start = Instant::now();
        let pace_ms = WATCH_PACE.as_millis() as u64;
        let mut pace = Pace::default();
        // Three applies found waiting: they go out now, the stream is paced.
        assert_eq!(pace.gathered(3, start), None);
        pace.sent(start);
        assert!(pace.is_paced());
        // What follows waits for the pace, however much arrives.
        assert_eq!(pace.gathered(1, start + ms(1)), Some(start + WATCH_PACE));
        assert_eq!(pace.gathered(4, start + ms(4)), Some(start + WATCH_PACE));
        // Due: it goes out, and the stream stays paced (5 applies gathered).
        assert_eq!(pace.gathered(1, start + ms(pace_ms)), None);
        pace.sent(start + ms(pace_ms));
        assert!(pace.is_paced());
        // A pace with one apply only: sent when due, and unpaced after.
        assert_eq!(
            pace.gathered(1, start + ms(pace_ms + 2)),
            Some(start + ms(2 * pace_ms))
        );
        pace.sent(start + ms(2 * pace_ms));
        assert!(!pace.is_paced());
        assert_eq!(pace.gathered(1, start + ms(2 * pace_ms + 1)), None);
    }

    #[test]
    fn a_paced_stream_idle_for_a_pace_sends_at_once() {
        let start = Instant::now();
        let mut pace = Pace::default();
        assert_eq!(pace.gathered(2, start), None);
        pace.sent(start);
        assert_eq!(pace.gathered(2, start + 3 * WATCH_PACE), None);
    }
}
