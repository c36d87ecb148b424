//! The binaries as a user starts them: unknown or malformed flags and an
//! unusable data dir are refused with a clear message and a non-zero exit,
//! before anything is served; `--version` and an unknown `ETCD_*` variable
//! are not errors.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use oxetcd_conformance::{binary_path, free_port, Grpc};

const BINARIES: [&str; 2] = ["oxetcd", "oxetcd-smol"];

/// Longest a refused start may take; it must fail fast, not hang.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(20);

fn run(binary: &str, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let program = binary_path(binary).unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in envs {
        command.env(name, value);
    }
    let child = command.spawn().expect("spawn");
    let started = std::time::Instant::now();
    let output = child.wait_with_output().expect("wait");
    assert!(
        started.elapsed() < REFUSAL_DEADLINE,
        "{binary} {args:?} took {:?}",
        started.elapsed()
    );
    output
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A start that must be refused: non-zero exit, `needle` in the output.
fn refused(binary: &str, args: &[&str], needle: &str) {
    let output = run(binary, args, &[]);
    let said = text(&output);
    assert!(
        !output.status.success(),
        "{binary} {args:?} succeeded: {said}"
    );
    assert!(
        said.contains(needle),
        "{binary} {args:?}: expected {needle:?} in: {said}"
    );
}

#[test]
fn unknown_and_malformed_flags_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    for binary in BINARIES {
        refused(
            binary,
            &["--data-dir", data, "--no-such-flag"],
            "no-such-flag",
        );
        refused(
            binary,
            &["--data-dir", data, "--max-request-bytes", "lots"],
            "max-request-bytes",
        );
        refused(
            binary,
            &["--data-dir", data, "--log-level", "chatty"],
            "log-level",
        );
        refused(binary, &["--data-dir", data, "--name"], "name");
        refused(
            binary,
            &["--data-dir", data, "--listen-client-urls", "not a url"],
            "listen-client-urls",
        );
        assert!(
            !dir.path().join("data").exists(),
            "{binary} created the data dir although its flags were refused"
        );
    }
}

#[test]
fn unusable_data_dir_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    let under_file = file.join("data");
    for binary in BINARIES {
        let port = free_port().expect("port").to_string();
        let url = format!("http://127.0.0.1:{port}");
        refused(
            binary,
            &[
                "--data-dir",
                under_file.to_str().expect("utf-8"),
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ],
            "a-file",
        );
    }
}

#[test]
fn version_is_printed() {
    for binary in BINARIES {
        let output = run(binary, &["--version"], &[]);
        assert!(
            output.status.success(),
            "{binary} --version: {}",
            text(&output)
        );
        assert!(
            text(&output).contains("etcd Version: 3.6"),
            "{binary} --version: {}",
            text(&output)
        );
    }
}

#[test]
fn unknown_etcd_variable_is_only_a_warning() {
    for binary in BINARIES {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port().expect("port");
        let url = format!("http://127.0.0.1:{port}");
        // Its own peer port too: the default (2380) may be taken on a
        // machine that runs other members.
        let peer_url = format!("http://127.0.0.1:{}", free_port().expect("port"));
        let initial_cluster = format!("default={peer_url}");
        let program = binary_path(binary).unwrap_or_else(|e| panic!("{e}"));
        let mut child = Command::new(program)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &initial_cluster,
            ])
            .env("ETCD_DATA_DIR", dir.path().join("data"))
            .env("ETCD_FROBNICATE", "yes")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let client = Grpc::connect(&url);
        let _ = child.kill();
        let _ = child.wait();
        client.unwrap_or_else(|e| panic!("{binary} with ETCD_FROBNICATE set: {e}"));
        assert!(
            dir.path().join("data").is_dir(),
            "{binary} ignored ETCD_DATA_DIR"
        );
    }
}
