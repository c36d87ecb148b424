//! Ports on 127.0.0.1 for the servers a test starts.
//!
//! A port is chosen free and bound by the server a moment later; in
//! between, anything else on the machine may take it. [`Ports::Kernel`]
//! asks the kernel for one (its ephemeral range: quick, and fine for a
//! single server). [`Ports::BELOW_EPHEMERAL`] hands out ports below Linux's
//! ephemeral range (32768–60999), where no outbound connection of a
//! running member can land between the choice and the bind: clusters,
//! whose members dial each other a lot, use it by default. Neither hands
//! out the same port twice in a process.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};

use oxetcd_conformance::free_port;

/// Where a test's ports come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Whatever free port the kernel gives.
    Kernel,
    /// Ports from `from` up, `span` of them, cycled through from a
    /// per-process offset; the kernel's choice if none of them is free.
    Range {
        /// The lowest port.
        from: u16,
        /// How many ports the range holds.
        span: u16,
    },
}

impl Ports {
    /// 20000–31999: below Linux's ephemeral range.
    pub const BELOW_EPHEMERAL: Self = Self::Range {
        from: 20_000,
        span: 12_000,
    };

    /// A port on 127.0.0.1 that was free a moment ago.
    pub fn take(self) -> u16 {
        match self {
            Self::Kernel => kernel_port(),
            Self::Range { from, span } => {
                /// Offsets already handed out, over every range.
                static NEXT: AtomicU16 = AtomicU16::new(0);
                // Processes with nearby IDs start far apart.
                let spread = u64::from(std::process::id()).wrapping_mul(2_654_435_761);
                let start = u16::try_from(spread % u64::from(span)).unwrap_or(0);
                for _ in 0..span {
                    let offset = NEXT.fetch_add(1, Ordering::Relaxed);
                    let candidate = from + start.wrapping_add(offset) % span;
                    if TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
                        return candidate;
                    }
                }
                kernel_port()
            }
        }
    }

    /// `http://127.0.0.1:<port>` on a port of [`Ports::take`].
    pub fn http_url(self) -> String {
        format!("http://127.0.0.1:{}", self.take())
    }

    /// `https://127.0.0.1:<port>` on a port of [`Ports::take`].
    pub fn https_url(self) -> String {
        format!("https://127.0.0.1:{}", self.take())
    }
}

/// A free port from the kernel, never one handed out before in this
/// process ([`free_port`]); a test cannot go on without one.
fn kernel_port() -> u16 {
    free_port().unwrap_or_else(|e| panic!("no free port: {e}"))
}
