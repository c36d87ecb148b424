//! Running Debian's `etcdctl` (API v3) and normalising what it prints.
//!
//! Normalised away: the endpoint address, member and cluster IDs, raft
//! term and indexes, database sizes, version strings and timings. Kept:
//! everything a script would parse — keys, values, revisions, counts,
//! error messages and gRPC codes, exit codes.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where Debian's `etcd-client` package installs etcdctl.
pub const ETCDCTL_PATH: &str = "/usr/bin/etcdctl";

/// Longest one etcdctl invocation may run before it is killed; etcdctl's
/// own dial and command timeouts (below) normally end it much sooner.
const RUN_DEADLINE: Duration = Duration::from_secs(20);

/// What one etcdctl invocation printed, and how it exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Exit code (-1 if killed by a signal).
    pub code: i32,
}

/// The etcdctl binary; an error (never a skip) when it is missing.
pub fn program() -> Result<PathBuf, String> {
    let path = PathBuf::from(ETCDCTL_PATH);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{ETCDCTL_PATH} is missing: install Debian's etcd-client (scripts/test.sh does this)"
        ))
    }
}

/// Runs `etcdctl --endpoints <address> <args>` with `stdin`, bounded by
/// [`RUN_DEADLINE`].
pub fn run(address: &str, args: &[String], stdin: Option<&str>) -> Result<Output, String> {
    run_program(&program()?, address, args, stdin)
}

/// Runs another etcdctl-compatible client (`oxetcdctl`) exactly as [`run`]
/// runs etcdctl: same global flags, environment, stdin and deadline.
pub fn run_program(
    program: &Path,
    address: &str,
    args: &[String],
    stdin: Option<&str>,
) -> Result<Output, String> {
    let mut command = command(program, address);
    command.arg("--command-timeout=10s").args(args);
    run_command(command, stdin)
}

/// Runs `program` with exactly `args`: no global flags, no environment
/// of ours (for flags that may not be given twice, or tests of the
/// defaults), bounded by [`RUN_DEADLINE`].
pub fn run_exactly(program: &Path, args: &[String], stdin: Option<&str>) -> Result<Output, String> {
    let mut command = Command::new(program);
    command.args(args);
    run_command(command, stdin)
}

/// `program` (etcdctl or oxetcdctl) set up as every run here is: API v3,
/// `--endpoints=<address>`, a 5 s dial timeout. Commands and their flags
/// come after; long-running ones (`watch`, `lease keep-alive`) are spawned
/// from it.
pub fn command(program: &Path, address: &str) -> Command {
    let mut command = Command::new(program);
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={address}"))
        .arg("--dial-timeout=5s");
    command
}

/// etcdctl `args` against `address`; panics only when etcdctl cannot run.
pub fn ctl(address: &str, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run(address, &args, None).unwrap_or_else(|e| panic!("{e}"))
}

/// etcdctl `args` against `address`, which must succeed; its stdout.
pub fn ctl_ok(address: &str, args: &[&str]) -> String {
    let out = ctl(address, args);
    assert_eq!(out.code, 0, "etcdctl {args:?} on {address}: {out:?}");
    out.stdout
}

/// A pipe to the child's standard input when `wanted`, else nothing.
pub fn stdin_pipe(wanted: bool) -> Stdio {
    if wanted {
        Stdio::piped()
    } else {
        Stdio::null()
    }
}

/// Runs `command` with `stdin`, reading both pipes as it goes, killed if
/// it runs past [`RUN_DEADLINE`].
fn run_command(mut command: Command, stdin: Option<&str>) -> Result<Output, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut child = command
        .stdin(stdin_pipe(stdin.is_some()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {program}: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{program} stdin: {e}"))?;
    }
    // Read both pipes on threads so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let mut stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stdout.read_to_end(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break status;
        }
        if started.elapsed() > RUN_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "{program} {args:?} ran longer than {RUN_DEADLINE:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Output {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        code: status.code().unwrap_or(-1),
    })
}

/// The output with everything server-specific replaced by placeholders.
pub fn normalise(output: &Output, address: &str) -> Output {
    let stdout = output.stdout.replace(address, "ENDPOINT");
    let stdout = stdout
        .lines()
        .map(normalise_line)
        .collect::<Vec<_>>()
        .join("\n");
    let stderr = output
        .stderr
        .replace(address, "ENDPOINT")
        .lines()
        .filter_map(normalise_error_line)
        .collect::<Vec<_>>()
        .join("\n");
    Output {
        stdout,
        stderr,
        code: output.code,
    }
}

/// One stdout line: JSON gets its volatile fields replaced; the simple
/// formats of `endpoint status` and `endpoint health` likewise.
fn normalise_line(line: &str) -> String {
    let trimmed = line.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        if let Ok(mut value) = serde_json::from_str::<Value>(trimmed) {
            normalise_json(&mut value);
            return value.to_string();
        }
    }
    if line.starts_with("ENDPOINT is healthy: successfully committed proposal: took = ") {
        return "ENDPOINT is healthy: successfully committed proposal: took = TIME".to_owned();
    }
    if line.starts_with("ENDPOINT, ") {
        // endpoint, ID, version, db size, is leader, is learner, raft term,
        // raft index, raft applied index, errors
        let mut fields: Vec<String> = line.split(", ").map(str::to_owned).collect();
        for (i, placeholder) in [
            (1, "ID"),
            (2, "VERSION"),
            (3, "SIZE"),
            (6, "TERM"),
            (7, "INDEX"),
            (8, "INDEX"),
        ] {
            if let Some(field) = fields.get_mut(i) {
                *field = placeholder.to_owned();
            }
        }
        return fields.join(", ");
    }
    line.to_owned()
}

/// JSON fields whose values differ between servers (or runs) and are not
/// part of the KV contract.
const VOLATILE_JSON_FIELDS: &[&str] = &[
    "cluster_id",
    "member_id",
    "raft_term",
    "leader",
    "dbSize",
    "dbSizeInUse",
    "raftIndex",
    "raftTerm",
    "raftAppliedIndex",
    "took",
];

fn normalise_json(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                // A key-value's "version" is a number and part of the
                // contract; the server's "version" is a string.
                let server_version = key == "version" && field.is_string();
                if server_version || VOLATILE_JSON_FIELDS.contains(&key.as_str()) {
                    *field = Value::String("X".to_owned());
                } else {
                    normalise_json(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_json),
        _ => {}
    }
}

/// One stderr line: `Error: …` lines are kept; the client library's JSON
/// retry warnings are reduced to the gRPC error they carry (code and
/// message); anything else is dropped as log noise.
fn normalise_error_line(line: &str) -> Option<String> {
    if line.starts_with("Error:") {
        return Some(line.trim_end().to_owned());
    }
    let value: Value = serde_json::from_str(line.trim()).ok()?;
    let error = value.get("error")?.as_str()?;
    Some(format!("warn: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(stdout: &str, stderr: &str) -> Output {
        let output = Output {
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
            code: 1,
        };
        normalise(&output, "127.0.0.1:4242")
    }

    #[test]
    fn json_keeps_key_versions_and_drops_ids() {
        let got = norm(
            r#"{"header":{"cluster_id":14841639068965178418,"member_id":1,"revision":4,"raft_term":2},"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":4,"version":3,"value":"cQ=="}],"count":1}"#,
            "",
        );
        let value: Value = serde_json::from_str(&got.stdout).unwrap();
        assert_eq!(value["header"]["revision"], 4);
        assert_eq!(value["header"]["member_id"], "X");
        assert_eq!(value["kvs"][0]["version"], 3);
        assert_eq!(value["count"], 1);
    }

    #[test]
    fn status_json_drops_server_fields() {
        let got = norm(
            r#"[{"Endpoint":"127.0.0.1:4242","Status":{"header":{"revision":2},"version":"3.4.23","dbSize":20480,"leader":5,"raftIndex":7,"raftTerm":2,"raftAppliedIndex":7,"dbSizeInUse":16384}}]"#,
            "",
        );
        assert_eq!(
            got.stdout,
            r#"[{"Endpoint":"ENDPOINT","Status":{"dbSize":"X","dbSizeInUse":"X","header":{"revision":2},"leader":"X","raftAppliedIndex":"X","raftIndex":"X","raftTerm":"X","version":"X"}}]"#
        );
    }

    #[test]
    fn simple_status_and_health_lines() {
        let got = norm(
            "127.0.0.1:4242, 8e9e05c52164694d, 3.4.23, 20 kB, true, false, 2, 7, 7, \n\
             127.0.0.1:4242 is healthy: successfully committed proposal: took = 1.129355ms\n",
            "",
        );
        assert_eq!(
            got.stdout,
            "ENDPOINT, ID, VERSION, SIZE, true, false, TERM, INDEX, INDEX, \n\
             ENDPOINT is healthy: successfully committed proposal: took = TIME"
        );
    }

    #[test]
    fn stderr_keeps_errors_and_grpc_codes_only() {
        let got = norm(
            "",
            r#"{"level":"warn","ts":"2026-11-21T06:45:55.795Z","caller":"clientv3/retry_interceptor.go:62","msg":"retrying of unary invoker failed","target":"endpoint://client-7e/127.0.0.1:4242","attempt":0,"error":"rpc error: code = OutOfRange desc = etcdserver: mvcc: required revision is a future revision"}
Error: etcdserver: mvcc: required revision is a future revision
"#,
        );
        assert_eq!(
            got.stderr,
            "warn: rpc error: code = OutOfRange desc = etcdserver: mvcc: required revision is a future revision\n\
             Error: etcdserver: mvcc: required revision is a future revision"
        );
    }
}
