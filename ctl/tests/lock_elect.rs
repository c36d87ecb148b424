//! `lock` and `elect` compared with Debian's etcdctl: each client runs the
//! same scenes on its own fresh oxetcd server (etcdctl with its client-side
//! recipe over KV, Lease and Watch; oxetcdctl through the Lock and
//! Election services), and what each process prints, and how it exits,
//! must be the same once lease IDs in keys read `LEASE`. The scenes: a
//! holder and a waiter that takes over when the holder is interrupted, a
//! waiter interrupted while it waits, a locked command with the lock in
//! its environment, a holder whose lease is revoked under it, an observer
//! following two leaders, and the argument errors; and with auth on, a
//! user allowed one prefix and refused another, and a client without a
//! user. Every scene also asserts its own facts (the waiter waits, no key
//! is left behind), so it would fail on both clients alike.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Server, ServerKind};

/// Longest a process may take to print what a scene waits for, or to
/// exit once interrupted.
const STEP_DEADLINE: Duration = Duration::from_secs(15);

/// How long a waiter is shown to keep waiting.
const STILL_WAITING: Duration = Duration::from_millis(500);

fn oxetcdctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oxetcdctl"))
}

/// A client process whose output is collected as it comes.
struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Proc {
    fn spawn(program: &Path, address: &str, args: &[&str]) -> Self {
        let mut child = etcdctl::command(program, address)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let collect = |mut pipe: Box<dyn Read + Send>| {
            let text = Arc::new(Mutex::new(String::new()));
            let sink = text.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut t) = sink.lock() {
                        t.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
            text
        };
        let stdout = collect(Box::new(child.stdout.take().expect("stdout")));
        let stderr = collect(Box::new(child.stderr.take().expect("stderr")));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Waits until stdout has `lines` lines, or panics.
    fn wait_lines(&self, lines: usize) {
        let started = Instant::now();
        while self.stdout().lines().count() < lines {
            assert!(
                started.elapsed() < STEP_DEADLINE,
                "{lines} lines not printed in time: {:?}",
                self.stdout()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGINT, as etcd's e2e tests do.
    fn interrupt(&self) {
        let status = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the exit (killed past the deadline: exit -1).
    fn finish(mut self) -> Output {
        let started = Instant::now();
        let code = loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                break status.code().unwrap_or(-1);
            }
            if started.elapsed() > STEP_DEADLINE {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break -1;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader threads drain the pipes once the process is gone.
        std::thread::sleep(Duration::from_millis(100));
        let stderr = self.stderr.lock().map(|t| t.clone()).unwrap_or_default();
        Output {
            stdout: leases_hidden(&self.stdout()),
            // etcd's client logs retries as JSON on stderr: noise.
            stderr: stderr
                .lines()
                .filter(|l| !l.starts_with('{'))
                .collect::<Vec<_>>()
                .join("\n"),
            code,
        }
    }
}

/// `name/<hex lease ID>` as `name/LEASE`.
fn leases_hidden(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(slash) = rest.find('/') {
        out.push_str(&rest[..=slash]);
        rest = &rest[slash + 1..];
        let hex = rest
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len());
        if hex >= 8 {
            out.push_str("LEASE");
            rest = &rest[hex..];
        }
    }
    out.push_str(rest);
    out
}

/// How many keys start with `prefix`.
fn keys_under(address: &str, prefix: &str) -> usize {
    etcdctl::ctl_ok(address, &["get", "--prefix", "--keys-only", prefix])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

/// Everything one client printed in every scene, in order.
fn scenes(program: &Path) -> Vec<(String, Output)> {
    let server = Server::start(ServerKind::Oxetcd).unwrap_or_else(|e| panic!("{e}"));
    let address = server.address();
    let mut seen = Vec::new();
    let run = |args: &[&str]| Proc::spawn(program, &address, args);

    // A locked command sees the lock; its failure is the client's.
    let command = run(&[
        "lock",
        "job",
        "--",
        "sh",
        "-c",
        "echo key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV; exit 3",
    ]);
    seen.push(("lock job -- sh".to_owned(), command.finish()));
    assert_eq!(
        keys_under(&address, "job/"),
        0,
        "the command's lock is released"
    );

    // A holder, a waiter interrupted while it waits, and a waiter that
    // takes over when the holder is interrupted.
    let holder = run(&["lock", "mutex"]);
    holder.wait_lines(2);
    let quitter = run(&["lock", "mutex"]);
    let taker = run(&["lock", "mutex"]);
    std::thread::sleep(STILL_WAITING);
    assert_eq!(quitter.stdout(), "", "the second locker must wait");
    assert_eq!(taker.stdout(), "", "the third locker must wait");
    quitter.interrupt();
    seen.push(("interrupted waiter".to_owned(), quitter.finish()));
    holder.interrupt();
    seen.push(("lock holder".to_owned(), holder.finish()));
    taker.wait_lines(2);
    taker.interrupt();
    seen.push(("lock taker".to_owned(), taker.finish()));
    assert_eq!(keys_under(&address, "mutex/"), 0, "every lock key is gone");

    // A holder whose lease is revoked under it: its session is lost.
    let lost = run(&["lock", "--ttl", "3", "held"]);
    lost.wait_lines(2);
    let key = etcdctl::ctl_ok(&address, &["get", "--prefix", "--keys-only", "held/"]);
    let lease = key
        .trim()
        .strip_prefix("held/")
        .unwrap_or_else(|| panic!("no lock key: {key:?}"))
        .to_owned();
    etcdctl::ctl_ok(&address, &["lease", "revoke", &lease]);
    seen.push(("lock whose lease is revoked".to_owned(), lost.finish()));

    // An election: an observer, a leader, a candidate that waits, then
    // leads once the leader resigns.
    let observer = run(&["elect", "-l", "vote"]);
    let leader = run(&["elect", "vote", "p1"]);
    leader.wait_lines(2);
    observer.wait_lines(2);
    let candidate = run(&["elect", "vote", "p2"]);
    std::thread::sleep(STILL_WAITING);
    assert_eq!(candidate.stdout(), "", "the candidate must wait");
    leader.interrupt();
    seen.push(("leader".to_owned(), leader.finish()));
    candidate.wait_lines(2);
    observer.wait_lines(4);
    candidate.interrupt();
    seen.push(("candidate".to_owned(), candidate.finish()));
    observer.interrupt();
    seen.push(("observer".to_owned(), observer.finish()));
    assert_eq!(keys_under(&address, "vote/"), 0, "every candidate resigned");

    for args in [
        &["lock"][..],
        &["elect"],
        &["elect", "vote"],
        &["elect", "-l", "vote", "p"],
        &["elect", "a", "b", "c"],
    ] {
        seen.push((args.join(" "), run(args).finish()));
    }
    seen
}

#[test]
fn lock_and_elect_print_as_etcdctl() {
    let reference = scenes(&etcdctl::program().expect("etcdctl"));
    let ours = scenes(&oxetcdctl());
    let mut report = String::new();
    for ((scene, want), (_, got)) in reference.iter().zip(&ours) {
        if want != got {
            report.push_str(&format!(
                "--- {scene}\n  etcdctl:   {want:?}\n  oxetcdctl: {got:?}\n"
            ));
        }
    }
    assert!(
        report.is_empty(),
        "oxetcdctl differs from etcdctl:\n{report}"
    );
    // What the scenes must show on any client.
    let find = |scene: &str| {
        &ours
            .iter()
            .find(|(s, _)| s == scene)
            .unwrap_or_else(|| panic!("no scene {scene}"))
            .1
    };
    assert_eq!(find("lock job -- sh").stdout, "key=job/LEASE rev=2\n");
    assert_eq!(find("lock holder").stdout, "mutex/LEASE\n\n");
    assert_eq!(find("lock holder").code, 0);
    let lost = find("lock whose lease is revoked");
    assert_eq!(
        (lost.stderr.as_str(), lost.code),
        ("Error: session expired", 1)
    );
    assert_eq!(find("leader").stdout, "vote/LEASE\np1\n");
    assert_eq!(find("observer").stdout, "vote/LEASE\np1\nvote/LEASE\np2\n");
}

/// With auth on: a user granted `ok/` locks and campaigns there, is
/// refused elsewhere with etcd's message, and a client without a user is
/// refused too; each client on its own fresh server, the same answers.
fn auth_scenes(program: &Path) -> Vec<(String, Output)> {
    let server = Server::start(ServerKind::Oxetcd).unwrap_or_else(|e| panic!("{e}"));
    let address = server.address();
    for args in [
        &["user", "add", "root:rootpw", "--interactive=false"][..],
        &["user", "grant-role", "root", "root"],
        &["user", "add", "alice:alicepw", "--interactive=false"],
        &["role", "add", "oks"],
        &[
            "role",
            "grant-permission",
            "oks",
            "readwrite",
            "ok/",
            "--prefix=true",
        ],
        &["user", "grant-role", "alice", "oks"],
        &["auth", "enable"],
    ] {
        etcdctl::ctl_ok(&address, args);
    }
    let scenes: [&[&str]; 5] = [
        &[
            "--user",
            "alice:alicepw",
            "lock",
            "ok",
            "--",
            "sh",
            "-c",
            "echo $ETCD_LOCK_KEY",
        ],
        &["--user", "alice:alicepw", "lock", "no", "--", "true"],
        &["lock", "ok", "--", "true"],
        &["--user", "alice:alicepw", "elect", "no", "p"],
        &["elect", "ok", "p"],
    ];
    scenes
        .iter()
        .map(|args| {
            let done = Proc::spawn(program, &address, args).finish();
            (args.join(" "), done)
        })
        .collect()
}

#[test]
fn lock_and_elect_with_auth_answer_as_etcdctl() {
    let reference = auth_scenes(&etcdctl::program().expect("etcdctl"));
    let ours = auth_scenes(&oxetcdctl());
    for ((scene, want), (_, got)) in reference.iter().zip(&ours) {
        assert_eq!(want, got, "{scene}: etcdctl (left) and oxetcdctl (right)");
    }
    for (scene, done) in &ours {
        assert_ne!(done.code, -1, "{scene}: never ended");
    }
    assert_eq!(ours[0].1.stdout, "ok/LEASE\n", "alice locks under ok/");
    assert_eq!(
        (ours[1].1.stderr.as_str(), ours[1].1.code),
        ("Error: etcdserver: permission denied", 1)
    );
}
