//! etcdctl sessions: command sequences run on a fresh server, recorded as a
//! normalised transcript, and compared between etcd and an oxetcd binary.

use std::fmt::Write as _;

use oxetcd_conformance::{Server, ServerKind};

use crate::etcdctl::{self, Output};

/// One etcdctl invocation.
#[derive(Clone, Debug)]
pub struct Step {
    /// Arguments after the global flags.
    pub args: Vec<String>,
    /// Text fed to standard input (for `txn`).
    pub stdin: Option<String>,
    /// Whether etcd answers this with a non-zero exit code. Checked against
    /// etcd, so a broken harness cannot make both sides "agree" on errors.
    pub fails: bool,
}

/// A step that succeeds; `command` is split on spaces.
pub fn ok(command: &str) -> Step {
    step(command, None, false)
}

/// A step that fails on etcd.
pub fn fails(command: &str) -> Step {
    step(command, None, true)
}

/// `etcdctl txn` (non-interactive) reading `script` from stdin.
pub fn txn(extra: &str, script: &str) -> Step {
    step(&format!("txn {extra}"), Some(script), false)
}

/// A step with arguments given one by one (for arguments with spaces or
/// empty ones).
pub fn args(args: &[&str], fails: bool) -> Step {
    Step {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        stdin: None,
        fails,
    }
}

fn step(command: &str, stdin: Option<&str>, fails: bool) -> Step {
    Step {
        args: command.split_whitespace().map(str::to_owned).collect(),
        stdin: stdin.map(str::to_owned),
        fails,
    }
}

/// A named command sequence, run on one fresh server.
pub struct Session {
    /// Name for reports.
    pub name: &'static str,
    /// The commands, in order.
    pub steps: Vec<Step>,
}

/// What each step of a session printed, normalised.
pub type Transcript = Vec<Output>;

/// Runs `session` on a fresh server of `kind`.
pub fn record(kind: ServerKind, session: &Session) -> Result<Transcript, String> {
    let server = Server::start(kind)?;
    let address = server.address();
    let mut transcript = Vec::with_capacity(session.steps.len());
    for step in &session.steps {
        let output = etcdctl::run(&address, &step.args, step.stdin.as_deref()).map_err(|e| {
            format!(
                "{}: {e}\n--- server log ---\n{}",
                kind.name(),
                server.log_tail()
            )
        })?;
        transcript.push(etcdctl::normalise(&output, &address));
    }
    Ok(transcript)
}

/// Runs every session against etcd and against `kind` and returns a report
/// of every step whose normalised output differs (empty when all agree).
/// Fails outright if etcd itself does not behave as the steps say.
pub fn compare_with_etcd(kind: ServerKind, sessions: &[Session]) -> Result<String, String> {
    let mut report = String::new();
    for session in sessions {
        let reference = record(ServerKind::Etcd, session)?;
        for (step, output) in session.steps.iter().zip(&reference) {
            if (output.code != 0) != step.fails {
                return Err(format!(
                    "etcd itself: session {} step `etcdctl {}` exited {} (expected {}):\n{}{}",
                    session.name,
                    step.args.join(" "),
                    output.code,
                    if step.fails { "failure" } else { "success" },
                    output.stdout,
                    output.stderr
                ));
            }
        }
        let actual = record(kind, session)?;
        for ((step, want), got) in session.steps.iter().zip(&reference).zip(&actual) {
            if want != got {
                let _ = writeln!(
                    report,
                    "--- session {}: etcdctl {}{}\n  etcd:   exit {} stdout {:?} stderr {:?}\n  {:<7} exit {} stdout {:?} stderr {:?}",
                    session.name,
                    step.args.join(" "),
                    step.stdin.as_deref().map(|s| format!(" <<< {s:?}")).unwrap_or_default(),
                    want.code,
                    want.stdout,
                    want.stderr,
                    format!("{}:", kind.name()),
                    got.code,
                    got.stdout,
                    got.stderr,
                );
            }
        }
    }
    Ok(report)
}
