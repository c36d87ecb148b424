//! Processes a test spawns itself (a server started with hand-made flags
//! or environment, a long-running etcdctl): killed and reaped when the
//! guard drops, so a failed assertion leaves nothing running. Servers the
//! harness starts are [`crate::Server`]s, which do the same.

use std::process::{Child, Command};

/// A child process killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
}

impl ChildGuard {
    /// Spawns `command`; the error names the program.
    pub fn spawn(command: &mut Command) -> Result<Self, String> {
        let child = command
            .spawn()
            .map_err(|e| format!("spawn {:?}: {e}", command.get_program()))?;
        Ok(Self { child })
    }

    /// The process, for its pipes and its status.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Kills the process with SIGKILL and reaps it. Idempotent.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}
