//! `check datascale` and `check perf` against oxetcd: the verdicts, the
//! refusal of a prefix that holds keys, an unknown load, and the clean-up
//! of the check's keys. etcdctl's own `check datascale` runs against the
//! same server and reaches the same verdict line.

use std::process::Command;
use std::time::Duration;

use oxetcd_ctl::client::{Client, Config};
use oxetcd_ctl::command::check::{perf, CheckArgs, PerfModel};
use oxetcd_ctl::command::Context;
use oxetcd_ctl::output::{Format, Printer};
use oxetcd_tests::etcdctl;
use oxetcd_tests::{binary_path, Server, ServerKind};

fn oxetcdctl(endpoint: &str, args: &[&str]) -> std::process::Output {
    let program = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    Command::new(program)
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .output()
        .unwrap()
}

fn keys_under(endpoint: &str, prefix: &str) -> String {
    etcdctl::ctl(endpoint, &["get", prefix, "--prefix", "--keys-only"]).stdout
}

#[test]
fn datascale_reports_memory_and_cleans_up() {
    let server = Server::start(ServerKind::Oxetcd).expect("oxetcd starts");
    let endpoint = server.address();
    let out = oxetcdctl(&endpoint, &["check", "datascale", "--auto-compact"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("Start data scale check for work load [10000 key-value pairs, 1024 bytes per key-value, 50 concurrent clients]."), "{stdout}");
    assert!(
        stdout.contains("PASS: Approximate system memory used : "),
        "{stdout}"
    );
    assert!(stdout.contains("compacted revision "), "{stdout}");
    assert_eq!(keys_under(&endpoint, "/etcdctl-check-datascale/"), "");

    let theirs = etcdctl::ctl(&endpoint, &["check", "datascale"]);
    assert_eq!(theirs.code, 0, "{theirs:?}");
    assert!(
        theirs
            .stdout
            .contains("PASS: Approximate system memory used : "),
        "{theirs:?}"
    );

    etcdctl::ctl(&endpoint, &["put", "/etcdctl-check-datascale/x", "y"]);
    let out = oxetcdctl(&endpoint, &["check", "datascale"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("prefix \"/etcdctl-check-datascale/\" has keys. Delete with etcdctl del --prefix /etcdctl-check-datascale/ first"), "{stderr}");
    let out = oxetcdctl(&endpoint, &["check", "perf", "--load=huge"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn perf_passes_a_rate_the_server_sustains() {
    let server = Server::start(ServerKind::OxetcdSmol).expect("oxetcd-smol starts");
    let endpoint = server.address();
    let ctx = Context {
        client: Client::new(Config::new(vec![endpoint.clone()])).expect("client"),
        printer: Printer {
            format: Format::Simple,
            hex: false,
            value_only: false,
        },
        command_timeout_given: false,
    };
    // etcdctl's small model is 150 puts/s from 50 clients for 60 s; this
    // is the same check, shorter.
    let model = PerfModel {
        limit: 100,
        clients: 10,
        duration: Duration::from_secs(3),
    };
    let args = CheckArgs {
        load: "s".to_owned(),
        prefix: None,
        auto_compact: false,
        auto_defrag: false,
    };
    perf(&ctx, model, "/etcdctl-check-perf/", &args)
        .await
        .expect("the check passes");
    let endpoint2 = endpoint.clone();
    let left = tokio::task::spawn_blocking(move || keys_under(&endpoint2, "/etcdctl-check-perf/"))
        .await
        .unwrap();
    assert_eq!(left, "");
}
