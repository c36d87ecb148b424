//! `make-mirror`: a prefix of one cluster copied into another and kept in
//! step — the keys there before the mirror started, then puts, deletes and
//! a multi-key txn made while it runs — by oxetcdctl and, the same way,
//! by Debian's etcdctl; both mirrors must end up holding the same keys
//! and values. The source is oxetcd, the destination oxetcd-smol.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oxetcd_tests::etcdctl;
use oxetcd_tests::process::ChildGuard;
use oxetcd_tests::{binary_path, Server, ServerKind};

/// Longest the mirror may lag.
const DEADLINE: Duration = Duration::from_secs(20);

fn ctl(endpoint: &str, args: &[&str]) -> String {
    let out = etcdctl::ctl(endpoint, args);
    assert_eq!(out.code, 0, "etcdctl {args:?}: {out:?}");
    out.stdout
}

/// Every key and value at `endpoint`, as `get "" --from-key` prints them.
fn everything(endpoint: &str) -> String {
    ctl(endpoint, &["get", "", "--from-key"])
}

/// Waits until `endpoint` holds exactly `want`.
fn wait_for(endpoint: &str, want: &str) {
    let started = Instant::now();
    loop {
        let have = everything(endpoint);
        if have == want {
            return;
        }
        assert!(started.elapsed() < DEADLINE, "have:\n{have}\nwant:\n{want}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `program`'s make-mirror from a fresh source to a fresh
/// destination; returns what the destination held at the end.
fn mirror_with(program: &Path) -> String {
    let source = Server::start(ServerKind::Oxetcd).expect("source starts");
    let dest = Server::start(ServerKind::OxetcdSmol).expect("destination starts");
    let (src, dst) = (source.address(), dest.address());
    for (key, value) in [("k1", "a"), ("k2", "b"), ("other", "x")] {
        ctl(&src, &["put", key, value]);
    }
    let mut child = Command::new(program);
    child
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints={src}"),
            "make-mirror",
            "--prefix=k",
            "--dest-prefix=m/",
            &dst,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _mirror = ChildGuard::spawn(&mut child).unwrap_or_else(|e| panic!("{e}"));
    wait_for(&dst, "m/1\na\nm/2\nb\n");

    ctl(&src, &["put", "k3", "c"]);
    ctl(&src, &["del", "k1"]);
    ctl(&src, &["put", "unmirrored", "y"]);
    let txn = "\nput k2 b2\nput k4 d\ndel k3\n\n\n";
    let out = etcdctl::run(&src, &["txn".to_owned()], Some(txn)).expect("txn");
    assert_eq!(out.code, 0, "{out:?}");
    let want = "m/2\nb2\nm/4\nd\n";
    wait_for(&dst, want);
    everything(&dst)
}

#[test]
fn make_mirror_copies_and_follows_a_prefix_as_etcdctl_does() {
    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    let etcdctl = etcdctl::program().unwrap_or_else(|e| panic!("{e}"));
    let ours = mirror_with(&oxetcdctl);
    let theirs = mirror_with(&etcdctl);
    assert_eq!(ours, theirs);
}

#[test]
fn make_mirror_checks_its_arguments() {
    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    for (args, message) in [
        (
            &["make-mirror"][..],
            "make-mirror takes one destination argument",
        ),
        (
            &[
                "make-mirror",
                "--dest-prefix=a",
                "--no-dest-prefix",
                "127.0.0.1:1",
            ][..],
            "`--dest-prefix` and `--no-dest-prefix` cannot be set at the same time",
        ),
    ] {
        let out = Command::new(&oxetcdctl)
            .args(["--endpoints=127.0.0.1:1"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(128), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
