//! Log lines about events that an outsider can cause at will (refused TLS
//! handshakes, connections pushed out of a full queue): logged, but never
//! as a flood.
//!
//! Design. A [`LogBudget`] allows [`LINES_PER_WINDOW`] lines per
//! [`WINDOW`]; beyond it events are counted, and the next line logged says
//! how many were held back. Each source of such lines keeps its own
//! budget in a `static`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines logged per window before further events are only counted.
pub(crate) const LINES_PER_WINDOW: u32 = 10;

/// The length of one window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

/// A budget of log lines: [`LINES_PER_WINDOW`] per [`WINDOW`].
pub(crate) struct LogBudget {
    window: Mutex<Window>,
}

struct Window {
    started: Option<Instant>,
    logged: u32,
    held_back: u64,
}

impl LogBudget {
    pub(crate) const fn new() -> Self {
        Self {
            window: Mutex::new(Window {
                started: None,
                logged: 0,
                held_back: 0,
            }),
        }
    }

    /// Calls `log` with the number of lines held back since the last one
    /// logged, unless this window's budget is spent.
    pub(crate) fn log(&self, now: Instant, log: impl FnOnce(u64)) {
        let held_back = {
            let mut window = match self.window.lock() {
                Ok(window) => window,
                Err(poisoned) => poisoned.into_inner(),
            };
            if window
                .started
                .is_none_or(|started| now.saturating_duration_since(started) >= WINDOW)
            {
                window.started = Some(now);
                window.logged = 0;
            }
            if window.logged >= LINES_PER_WINDOW {
                window.held_back += 1;
                return;
            }
            window.logged += 1;
            std::mem::take(&mut window.held_back)
        };
        log(held_back);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_logs_its_budget_then_counts() {
        let budget = LogBudget::new();
        let start = Instant::now();
        let mut lines = Vec::new();
        for k in 0..25u64 {
            let at = start + Duration::from_millis(k * 10);
            budget.log(at, |held| lines.push(held));
        }
        assert_eq!(lines, vec![0; LINES_PER_WINDOW as usize]);
        // The next window logs again and reports what the last held back.
        budget.log(start + WINDOW, |held| lines.push(held));
        assert_eq!(lines.len(), LINES_PER_WINDOW as usize + 1);
        assert_eq!(lines.last(), Some(&(25 - LINES_PER_WINDOW as u64)));
    }
}
