//! Debian's `etcdctl` watching and leasing, against real etcd and both
//! oxetcd binaries: `watch` (`--prefix`, `--rev`, `--prev-kv`, interactive
//! `-i`) runs in the background while `lease grant/revoke/keep-alive/
//! timetolive --keys/list` and `put --lease` run in the foreground; the
//! normalised transcripts (lease IDs and remaining TTLs replaced) must match.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Server, ServerKind};

/// One action of the script.
enum Action {
    /// Run etcdctl and record what it printed; `{L1}` etc. in the
    /// arguments name the leases granted so far, in grant order.
    Run(&'static str),
    /// Start a long-running etcdctl (a watch); `Some` stdin lines are
    /// written and the pipe kept open (interactive mode).
    Spawn(&'static str, &'static str, Option<&'static str>),
    /// Let time pass.
    Sleep(u64),
    /// Stop a background etcdctl and record what it printed.
    Collect(&'static str),
}

fn script() -> Vec<Action> {
    use Action::*;
    vec![
        Run("put foo 1"),
        Spawn("prefix", "watch foo --prefix --prev-kv", None),
        Spawn("history", "watch --rev 1 foo --prefix", None),
        Spawn(
            "interactive",
            "watch -i",
            Some("watch foo\nwatch foo2 --prev-kv\n"),
        ),
        Sleep(1_000),
        Run("lease grant 60"),
        Run("put --lease={L1} foo2 a"),
        Run("put --lease={L1} foo3 b"),
        Run("put foo 2"),
        Run("del foo"),
        Run("lease timetolive {L1}"),
        Run("lease timetolive --keys {L1}"),
        Run("lease list"),
        Run("lease keep-alive --once {L1}"),
        Run("lease revoke {L1}"),
        Run("get foo --prefix"),
        Run("lease timetolive {L1}"),
        Run("lease keep-alive --once {L1}"),
        Run("lease revoke {L1}"),
        Run("lease grant 1"),
        Run("put --lease={L2} foo4 x"),
        Run("lease timetolive --keys {L2}"),
        Sleep(3_500),
        Run("get foo4"),
        Run("lease list"),
        Sleep(500),
        Collect("prefix"),
        Collect("history"),
        Collect("interactive"),
    ]
}

struct Background {
    child: Child,
    /// Kept open so an interactive etcdctl does not see end of input.
    _stdin: Option<ChildStdin>,
    stdout: JoinHandle<Vec<u8>>,
}

/// Runs the script on a fresh server of `kind`: one normalised output per
/// `Run` and `Collect`, labelled.
fn record(kind: ServerKind) -> Result<Vec<(String, Output)>, String> {
    let server = Server::start(kind)?;
    let address = server.address();
    let mut leases: Vec<String> = Vec::new();
    let mut background: HashMap<&str, Background> = HashMap::new();
    let mut transcript = Vec::new();
    for action in script() {
        match action {
            Action::Run(command) => {
                let args = substitute(command, &leases);
                let output = etcdctl::run(&address, &args, None)
                    .map_err(|e| format!("{}: {e}\n{}", kind.name(), server.log_tail()))?;
                for line in output.stdout.lines() {
                    if let Some(id) = line
                        .strip_prefix("lease ")
                        .and_then(|rest| rest.split_once(" granted"))
                        .map(|(id, _)| id.to_owned())
                    {
                        leases.push(id);
                    }
                }
                transcript.push((command.to_owned(), etcdctl::normalise(&output, &address)));
            }
            Action::Spawn(name, command, stdin) => {
                let mut child = etcdctl::command(&etcdctl::program()?, &address)
                    .args(command.split_whitespace())
                    .stdin(etcdctl::stdin_pipe(stdin.is_some()))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(|e| format!("spawn etcdctl: {e}"))?;
                let mut pipe = child.stdin.take();
                if let (Some(lines), Some(pipe)) = (stdin, pipe.as_mut()) {
                    pipe.write_all(lines.as_bytes())
                        .map_err(|e| format!("etcdctl stdin: {e}"))?;
                }
                let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
                let reader = thread::spawn(move || {
                    let mut out = Vec::new();
                    let _ = stdout.read_to_end(&mut out);
                    out
                });
                background.insert(
                    name,
                    Background {
                        child,
                        _stdin: pipe,
                        stdout: reader,
                    },
                );
            }
            Action::Sleep(ms) => thread::sleep(Duration::from_millis(ms)),
            Action::Collect(name) => {
                let mut watch = background
                    .remove(name)
                    .ok_or_else(|| format!("no background etcdctl {name}"))?;
                let _ = watch.child.kill();
                let _ = watch.child.wait();
                drop(watch._stdin);
                let stdout = watch.stdout.join().unwrap_or_default();
                let output = Output {
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::new(),
                    code: 0,
                };
                transcript.push((format!("<{name}>"), etcdctl::normalise(&output, &address)));
            }
        }
    }
    // Lease IDs differ between servers; remaining TTLs between runs.
    for (_, output) in &mut transcript {
        for (i, id) in leases.iter().enumerate() {
            output.stdout = output.stdout.replace(id.as_str(), &format!("L{}", i + 1));
            output.stderr = output.stderr.replace(id.as_str(), &format!("L{}", i + 1));
        }
        output.stdout = sort_attached_keys(&mask_remaining(&output.stdout));
    }
    Ok(transcript)
}

fn substitute(command: &str, leases: &[String]) -> Vec<String> {
    let mut text = command.to_owned();
    for (i, id) in leases.iter().enumerate() {
        text = text.replace(&format!("{{L{}}}", i + 1), id);
    }
    text.split_whitespace().map(str::to_owned).collect()
}

/// `remaining(57s)` → `remaining(Ns)`.
fn mask_remaining(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("remaining(") {
        let (before, after) = rest.split_at(at + "remaining(".len());
        out.push_str(before);
        match after.find("s)") {
            Some(end) if after[..end].chars().all(|c| c.is_ascii_digit() || c == '-') => {
                out.push('N');
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// etcd lists a lease's keys in Go map order: `attached keys([b a])` is
/// sorted to `attached keys([a b])`.
fn sort_attached_keys(text: &str) -> String {
    const OPEN: &str = "attached keys([";
    let Some(at) = text.find(OPEN) else {
        return text.to_owned();
    };
    let (head, tail) = text.split_at(at + OPEN.len());
    let Some(end) = tail.find("])") else {
        return text.to_owned();
    };
    let mut keys: Vec<&str> = tail[..end].split(' ').collect();
    keys.sort_unstable();
    format!("{head}{}{}", keys.join(" "), &tail[end..])
}

fn check(kind: ServerKind) {
    let reference = record(ServerKind::Etcd).unwrap_or_else(|e| panic!("etcd: {e}"));
    // The reference itself must show what the script is about.
    let text: String = reference
        .iter()
        .map(|(label, output)| format!("{label}\n{}\n{}\n", output.stdout, output.stderr))
        .collect();
    for needle in ["DELETE", "foo2", "already expired", "keepalived", "revoked"] {
        assert!(
            text.contains(needle),
            "etcd's transcript lacks {needle}:\n{text}"
        );
    }
    let actual = record(kind).unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
    let mut report = String::new();
    for ((label, want), (_, got)) in reference.iter().zip(&actual) {
        if want != got {
            report.push_str(&format!(
                "--- {label}\n  etcd:  exit {} stdout {:?} stderr {:?}\n  {}: exit {} stdout {:?} stderr {:?}\n",
                want.code,
                want.stdout,
                want.stderr,
                kind.name(),
                got.code,
                got.stdout,
                got.stderr
            ));
        }
    }
    assert!(
        report.is_empty(),
        "etcdctl watch/lease output from {} differs from etcd's:\n{report}",
        kind.name()
    );
}

#[test]
fn etcdctl_watch_and_lease_on_oxetcd_as_on_etcd() {
    check(ServerKind::Oxetcd);
}

#[test]
fn etcdctl_watch_and_lease_on_oxetcd_smol_as_on_etcd() {
    check(ServerKind::OxetcdSmol);
}

#[test]
fn attached_keys_are_sorted() {
    assert_eq!(
        sort_attached_keys(
            "lease L1 granted with TTL(60s), remaining(Ns), attached keys([foo3 foo2])"
        ),
        "lease L1 granted with TTL(60s), remaining(Ns), attached keys([foo2 foo3])"
    );
}

#[test]
fn remaining_ttls_are_masked() {
    assert_eq!(
        mask_remaining("granted with TTL(60s), remaining(59s), x remaining(bad"),
        "granted with TTL(60s), remaining(Ns), x remaining(bad"
    );
}
