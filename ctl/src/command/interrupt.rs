//! SIGINT and SIGTERM as something to wait for: how `lock` and `elect`
//! learn to let go of what they hold before exiting, as etcdctl's do.
//! Installing it replaces the default action (exit at once), so it is
//! installed before the command takes anything.

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::Failure;

/// The two signals etcdctl's `lock` and `elect` handle.
pub struct Interrupt {
    interrupt: Signal,
    terminate: Signal,
}

impl Interrupt {
    /// Starts catching SIGINT and SIGTERM.
    pub fn install() -> Result<Self, Failure> {
        let catch = |kind| signal(kind).map_err(Failure::error);
        Ok(Self {
            interrupt: catch(SignalKind::interrupt())?,
            terminate: catch(SignalKind::terminate())?,
        })
    }

    /// Resolves at the next SIGINT or SIGTERM.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
