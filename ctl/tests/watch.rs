//! `watch -i` (watch and progress requests read from stdin) and `watch KEY
//! -- COMMAND` (a command run for every event), compared with Debian's
//! etcdctl: both clients watch the same server at the same time, and what
//! they print must be the same byte for byte.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl::{self, Output};
use oxetcd_tests::{Server, ServerKind};

/// Longest a watcher may take to print what a step expects.
const STEP_DEADLINE: Duration = Duration::from_secs(15);

fn oxetcdctl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oxetcdctl"))
}

fn etcdctl_program() -> PathBuf {
    etcdctl::program().expect("etcdctl")
}

/// A client process whose output is collected as it comes.
struct Watcher {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Watcher {
    fn spawn(program: &Path, address: &str, args: &[&str]) -> Self {
        let mut child = etcdctl::command(program, address)
            .env_remove("ETCDCTL_WATCH_KEY")
            .env_remove("ETCDCTL_WATCH_RANGE_END")
            .args(args)
            .stdin(Stdio::piped())
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
            name: program.display().to_string(),
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: stdin: {e}", self.name));
    }

    /// Waits until `ready` holds for stdout and stderr, or panics.
    fn wait_until(&self, what: &str, ready: impl Fn(&str, &str) -> bool) {
        let started = Instant::now();
        while !ready(&self.stdout(), &self.stderr()) {
            assert!(
                started.elapsed() < STEP_DEADLINE,
                "{}: {what} not seen within {STEP_DEADLINE:?}\nstdout: {:?}\nstderr: {:?}",
                self.name,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin and waits for the exit (killed after the deadline).
    fn finish(mut self) -> Output {
        drop(self.stdin.take());
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
        Output {
            stdout: self.stdout(),
            stderr: client_lines(&self.stderr()),
            code,
        }
    }

    /// Kills a watcher that would run forever.
    fn stop(mut self) -> Output {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(100));
        Output {
            stdout: self.stdout(),
            stderr: client_lines(&self.stderr()),
            code: 0,
        }
    }
}

/// stderr without etcd's client log lines (JSON retries and warnings).
fn client_lines(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.starts_with('{'))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn put(address: &str, args: &[&str]) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = etcdctl::run(address, &args, None).expect("etcdctl runs");
    assert_eq!(out.code, 0, "{args:?}: {out:?}");
}

/// Sends `line` to both watchers, then waits until each shows `ready`.
fn step(watchers: &mut [Watcher], line: &str, ready: impl Fn(&str, &str) -> bool) {
    for w in watchers.iter_mut() {
        w.send(line);
    }
    for w in watchers.iter() {
        w.wait_until(line.trim(), &ready);
    }
}

fn assert_same(kind: ServerKind, what: &str, reference: &Output, ours: &Output) {
    assert_eq!(
        reference,
        ours,
        "{} {what}: etcdctl (left) and oxetcdctl (right) differ",
        kind.name()
    );
}

fn interactive_on(kind: ServerKind) {
    let server = Server::start(kind).expect("server starts");
    let address = server.address();
    for args in [
        &["put", "foo", "1"][..],
        &["put", "foo", "2"],
        &["put", "k1", "a"],
        &["del", "foo"],
        &["put", "k1", "b"],
    ] {
        put(&address, args);
    }
    let mut watchers = [
        Watcher::spawn(&etcdctl_program(), &address, &["watch", "-i"]),
        Watcher::spawn(&oxetcdctl(), &address, &["watch", "-i"]),
    ];
    let errors = |n: usize| move |_: &str, err: &str| client_lines(err).lines().count() >= n;
    step(&mut watchers, "\n", errors(1));
    step(&mut watchers, "bogus\n", errors(2));
    step(&mut watchers, "watch\n", errors(3));
    step(&mut watchers, "watch a b --prefix\n", errors(4));
    step(&mut watchers, "watch -- echo x\n", errors(5));
    // History replayed from revision 1 arrives whenever the watch starts.
    step(&mut watchers, "watch foo --rev 1\n", |out, _| {
        out.contains("DELETE")
    });
    step(
        &mut watchers,
        "watch --prefix k --prev-kv --rev 1\n",
        |out, _| out.matches("k1\n").count() >= 3,
    );
    // Both watches exist now: each reports the revision.
    step(&mut watchers, "progress\n", |out, _| {
        out.matches("progress notify: ").count() >= 2
    });
    put(&address, &["put", "k2", "live"]);
    for w in &watchers {
        w.wait_until("the live event", |out, _| out.contains("live\n"));
    }
    let [reference, ours] = watchers;
    let (reference, ours) = (reference.finish(), ours.finish());
    assert_eq!(ours.code, 3, "{ours:?}");
    assert!(
        ours.stderr
            .ends_with("Error: Error reading watch request line: EOF\n"),
        "{ours:?}"
    );
    assert!(ours.stdout.contains("progress notify: 6\n"), "{ours:?}");
    assert_same(kind, "watch -i", &reference, &ours);
}

#[test]
fn interactive_watch_matches_etcdctl_on_oxetcd() {
    interactive_on(ServerKind::Oxetcd);
}

#[test]
fn interactive_watch_matches_etcdctl_on_etcd() {
    interactive_on(ServerKind::Etcd);
}

/// Prints what etcdctl's exec mode puts in the environment.
const PRINT_ENV: &str = "printf '%s|%s|%s|%s\\n' \"$ETCD_WATCH_REVISION\" \"$ETCD_WATCH_EVENT_TYPE\" \"$ETCD_WATCH_KEY\" \"$ETCD_WATCH_VALUE\"";

#[test]
fn exec_mode_matches_etcdctl() {
    let server = Server::start(ServerKind::Oxetcd).expect("server starts");
    let address = server.address();
    put(&address, &["put", "foo", "bar"]);
    put(&address, &["put", "foo", "with space \"quoted\""]);
    put(&address, &["del", "foo"]);
    put(&address, &["put", "other", "x"]);

    let args = ["watch", "foo", "--rev", "1", "--", "sh", "-c", PRINT_ENV];
    let watchers = [
        Watcher::spawn(&etcdctl_program(), &address, &args),
        Watcher::spawn(&oxetcdctl(), &address, &args),
    ];
    for w in &watchers {
        w.wait_until("three commands", |out, _| out.matches('|').count() >= 9);
    }
    let [reference, ours] = watchers;
    let (reference, ours) = (reference.stop(), ours.stop());
    assert!(
        ours.stdout.contains("5|\"PUT\"|\"foo\"|\"bar\"\n"),
        "{ours:?}"
    );
    assert!(
        ours.stdout
            .contains("5|\"PUT\"|\"foo\"|\"with space \\\"quoted\\\"\"\n"),
        "{ours:?}"
    );
    assert!(
        ours.stdout.contains("5|\"DELETE\"|\"foo\"|\"\"\n"),
        "{ours:?}"
    );
    assert_same(ServerKind::Oxetcd, "watch -- sh", &reference, &ours);

    // A failing command ends the watch with etcdctl's message and code.
    for command in [
        &["false"][..],
        &["/nonexistent/program", "arg"],
        &["no-such-program-here"],
        &["sh", "-c", "kill -9 $$"],
    ] {
        let mut args = vec!["watch", "foo", "--rev", "1", "--"];
        args.extend(command);
        let watchers = [
            Watcher::spawn(&etcdctl_program(), &address, &args),
            Watcher::spawn(&oxetcdctl(), &address, &args),
        ];
        let [reference, ours] = watchers;
        let (reference, ours) = (reference.finish(), ours.finish());
        assert_eq!(ours.code, 1, "{ours:?}");
        assert_same(ServerKind::Oxetcd, &args.join(" "), &reference, &ours);
    }

    // Lines of `watch -i` that end the session, and a last line with no
    // newline (never read as a request).
    for (line, code) in [
        ("watch foo --rev 1 --\n", 128),
        ("watch --prefix\n", 128),
        ("watch foo --bogus\n", 128),
        ("watch foo --rev 1", 3),
    ] {
        let mut watchers = [
            Watcher::spawn(&etcdctl_program(), &address, &["watch", "-i"]),
            Watcher::spawn(&oxetcdctl(), &address, &["watch", "-i"]),
        ];
        for w in &mut watchers {
            w.send(line);
        }
        let [reference, ours] = watchers;
        let (reference, ours) = (reference.finish(), ours.finish());
        assert_eq!(ours.code, code, "{line:?}: {ours:?}");
        assert_same(ServerKind::Oxetcd, line, &reference, &ours);
    }

    // Argument errors.
    for args in [
        &["watch", "foo", "--"][..],
        &["watch", "--", "echo", "x"],
        &["watch"],
    ] {
        let reference = Watcher::spawn(&etcdctl_program(), &address, args).finish();
        let ours = Watcher::spawn(&oxetcdctl(), &address, args).finish();
        assert_eq!(ours.code, 128, "{args:?}: {ours:?}");
        assert_same(ServerKind::Oxetcd, &args.join(" "), &reference, &ours);
    }
}
