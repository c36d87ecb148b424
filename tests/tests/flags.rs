//! The binaries as a user starts them: unknown or malformed flags and an
//! unusable data dir are refused with a clear message and a non-zero exit,
//! before anything is served; `--version` and an unknown `ETCD_*` variable
//! are not errors.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use oxetcd_tests::process::ChildGuard;
use oxetcd_tests::{binary_path, Grpc, Ports};

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

/// `--feature-gates` with an unknown gate or a value that is not a bool is
/// refused with etcd's words, before anything is created.
#[test]
fn unknown_feature_gates_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    for binary in BINARIES {
        refused(
            binary,
            &["--data-dir", data, "--feature-gates=NoSuchGate=true"],
            "unrecognized feature gate: NoSuchGate",
        );
        refused(
            binary,
            &[
                "--data-dir",
                data,
                "--feature-gates",
                "InitialCorruptCheck=maybe",
            ],
            "invalid value of InitialCorruptCheck=maybe",
        );
        refused(
            binary,
            &[
                "--data-dir",
                data,
                "--experimental-initial-corrupt-check=true",
                "--feature-gates=InitialCorruptCheck=true",
            ],
            "cannot specify both flags: --experimental-initial-corrupt-check=true and \
             --feature-gates=InitialCorruptCheck=true at the same time",
        );
        assert!(
            !dir.path().join("data").exists(),
            "{binary} created the data dir although its feature gates were refused"
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
        let url = Ports::Kernel.http_url();
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
        let url = Ports::Kernel.http_url();
        // Its own peer port too: the default (2380) may be taken on a
        // machine that runs other members.
        let peer_url = Ports::Kernel.http_url();
        let initial_cluster = format!("default={peer_url}");
        let program = binary_path(binary).unwrap_or_else(|e| panic!("{e}"));
        let server = ChildGuard::spawn(
            Command::new(program)
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
                .stderr(Stdio::null()),
        )
        .expect("spawn");
        let client = Grpc::connect(&url);
        drop(server);
        client.unwrap_or_else(|e| panic!("{binary} with ETCD_FROBNICATE set: {e}"));
        assert!(
            dir.path().join("data").is_dir(),
            "{binary} ignored ETCD_DATA_DIR"
        );
    }
}

#[test]
fn help_lists_etcds_groups() {
    for binary in BINARIES {
        for flag in ["--help", "-h"] {
            let output = run(binary, &[flag], &[]);
            let help = text(&output);
            assert!(output.status.success(), "{binary} {flag}: {help}");
            for needle in [
                "\nMember:\n",
                "\nClustering:\n",
                "\nSecurity:\n",
                "\nLogging:\n",
                "\nProfiling and monitoring:\n",
                "\n  --quota-backend-bytes '0'\n",
                "\n  --log-format 'json'\n",
            ] {
                assert!(help.contains(needle), "{binary} {flag}: no {needle:?}");
            }
        }
    }
}

#[test]
fn removed_and_refused_flags_say_why() {
    for binary in BINARIES {
        refused(binary, &["--enable-v2"], "removed in etcd v3.6");
        refused(binary, &["--proxy=on"], "--proxy");
        refused(
            binary,
            &["--quota-backend-bytes=lots"],
            "--quota-backend-bytes",
        );
        refused(
            binary,
            &["--config-file=/no/such/file.yaml"],
            "/no/such/file.yaml",
        );
        // A log file that cannot be opened stops the start, as in etcd.
        refused(
            binary,
            &["--log-outputs=/no/such/dir/oxetcd.log"],
            "cannot open log output /no/such/dir/oxetcd.log",
        );
    }
}

/// A config file alone starts the server (flags beside it are ignored, as
/// in etcd), and its log settings are followed: console lines appended to
/// the file it names.
#[test]
fn config_file_starts_the_server_and_routes_its_log() {
    for binary in BINARIES {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = Ports::Kernel.http_url();
        let peer_url = Ports::Kernel.http_url();
        let log = dir.path().join("server.log");
        let yaml = format!(
            "name: filed\ndata-dir: {data}\nlisten-client-urls: {url}\n\
             advertise-client-urls: {url}\nlisten-peer-urls: {peer_url}\n\
             initial-advertise-peer-urls: {peer_url}\ninitial-cluster: filed={peer_url}\n\
             log-format: console\nlog-outputs: [{log}]\n",
            data = dir.path().join("data").display(),
            log = log.display(),
        );
        let file = dir.path().join("etcd.yaml");
        std::fs::write(&file, yaml).expect("write config");
        let program = binary_path(binary).unwrap_or_else(|e| panic!("{e}"));
        let server = ChildGuard::spawn(
            Command::new(program)
                .args(["--config-file", file.to_str().expect("utf-8")])
                .args(["--name", "ignored-because-of-the-file"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("spawn");
        let client = Grpc::connect(&url);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut logged = String::new();
        while !logged.contains("enabled capabilities") && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            logged = std::fs::read_to_string(&log).unwrap_or_default();
        }
        drop(server);
        client.unwrap_or_else(|e| panic!("{binary} from a config file: {e}"));
        assert!(
            logged.contains("published {Name:filed ClientURLs:"),
            "{binary}: log file {}:\n{logged}",
            log.display()
        );
        assert!(
            !logged.starts_with('{'),
            "{binary}: not console lines:\n{logged}"
        );
    }
}
