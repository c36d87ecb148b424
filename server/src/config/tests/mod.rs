//! The parser's rules, one test per rule.

mod cluster;
mod file;
mod fuzz;
mod table;
mod tls;

use super::values::*;
use super::*;
use std::net::SocketAddr;

use crate::socket::SocketAddress;

/// A TCP socket address.
fn tcp(addr: &str) -> SocketAddress {
    SocketAddress::Tcp(addr.parse::<SocketAddr>().unwrap())
}
use std::path::PathBuf;
use std::time::Duration;

const NO_ENV: [(&str, &str); 0] = [];

fn run(args: &[&str], env: &[(&str, &str)]) -> Config {
    match parse(args, env.iter().copied()) {
        Ok(Command::Run(config)) => config,
        other => panic!("expected a config, got {other:?}"),
    }
}

fn error(args: &[&str], env: &[(&str, &str)]) -> ConfigError {
    match parse(args, env.iter().copied()) {
        Err(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn defaults_match_etcd() {
    let config = run(&[], &[]);
    assert_eq!(config.name, "default");
    assert_eq!(config.data_dir, PathBuf::from("default.etcd"));
    assert_eq!(config.listen_client_urls.len(), 1);
    assert_eq!(config.listen_client_urls[0].url, "http://localhost:2379");
    assert_eq!(config.listen_client_urls[0].addr, tcp("127.0.0.1:2379"));
    assert_eq!(config.advertise_client_urls, ["http://localhost:2379"]);
    assert_eq!(config.listen_peer_urls[0].addr, tcp("127.0.0.1:2380"));
    assert_eq!(
        config.initial_advertise_peer_urls,
        ["http://localhost:2380"]
    );
    assert_eq!(config.initial_cluster_token, "etcd-cluster");
    assert_eq!(config.max_request_bytes, 1_572_864);
    assert_eq!(config.max_txn_ops, 128);
    assert_eq!(config.logging.level, LogLevel::Info);
    assert!(config.warnings.is_empty());
    assert_eq!(format!("{:x}", config.member_id()), "8e9e05c52164694d");
    assert_eq!(format!("{:x}", config.cluster_id()), "cdf818194e3a8c32");
}

#[test]
fn data_dir_defaults_to_name() {
    assert_eq!(
        run(&["--name", "n1"], &[]).data_dir,
        PathBuf::from("n1.etcd")
    );
    assert_eq!(
        run(&["--name=n1", "--data-dir=/tmp/x"], &[]).data_dir,
        PathBuf::from("/tmp/x")
    );
}

#[test]
fn both_flag_spellings_and_dashes() {
    let a = run(
        &[
            "--max-request-bytes",
            "10",
            "-max-txn-ops=3",
            "-log-level",
            "debug",
        ],
        &[],
    );
    assert_eq!(a.max_request_bytes, 10);
    assert_eq!(a.max_txn_ops, 3);
    assert_eq!(a.logging.level, LogLevel::Debug);
    let b = run(
        &[
            "--max-request-bytes=10",
            "--max-txn-ops",
            "3",
            "--log-level=debug",
        ],
        &[],
    );
    assert_eq!(a, b);
}

#[test]
fn url_lists() {
    let config = run(
        &[
            "--listen-client-urls",
            "http://127.0.0.1:1234, http://[::1]:5678,http://0.0.0.0:9",
            "--advertise-client-urls=http://a.example:1,http://b.example:2/",
        ],
        &[],
    );
    let addrs: Vec<SocketAddress> = config
        .listen_client_urls
        .iter()
        .map(|u| u.addr.clone())
        .collect();
    assert_eq!(
        addrs,
        [tcp("127.0.0.1:1234"), tcp("[::1]:5678"), tcp("0.0.0.0:9")]
    );
    assert_eq!(config.listen_client_urls[1].url, "http://[::1]:5678");
    assert_eq!(
        config.advertise_client_urls,
        ["http://a.example:1", "http://b.example:2"]
    );
}

#[test]
fn bad_urls_are_refused() {
    for url in [
        "localhost:2379",
        "http://localhost",
        "http://localhost:notaport",
        "http://localhost:70000",
        "http://localhost:2379/path",
        "ftp://localhost:2379",
        "unix://",
        "http://::1:2379",
        "http://[::1:2379",
        "http://user@localhost:2379",
    ] {
        let e = error(&["--listen-client-urls", url], &[]);
        assert!(
            matches!(
                e,
                ConfigError::InvalidValue {
                    flag: "listen-client-urls",
                    ..
                }
            ),
            "{url}: {e}"
        );
    }
    // Listening needs an address, not a host name.
    let e = error(&["--listen-client-urls", "http://example.com:2379"], &[]);
    assert!(e.to_string().contains("IP address"), "{e}");
    // Advertising may use host names.
    run(&["--advertise-client-urls", "http://example.com:2379"], &[]);
    assert!(matches!(
        error(&["--advertise-client-urls", ""], &[]),
        ConfigError::InvalidValue { .. }
    ));
}

#[test]
fn unknown_and_malformed_flags() {
    assert_eq!(
        error(&["--nope"], &[]),
        ConfigError::UnknownFlag("--nope".into())
    );
    assert_eq!(
        error(&["--nope=1"], &[]),
        ConfigError::UnknownFlag("--nope=1".into())
    );
    assert_eq!(
        error(&["--name"], &[]),
        ConfigError::MissingValue("--name".into())
    );
    assert_eq!(
        error(&["stray"], &[]),
        ConfigError::NotAFlag("stray".into())
    );
    assert_eq!(
        error(&["--", "stray"], &[]),
        ConfigError::NotAFlag("stray".into())
    );
    for args in [
        &["--max-request-bytes", "lots"][..],
        &["--max-request-bytes", "0"],
        &["--max-txn-ops=-1"],
        &["--log-level", "loud"],
        &["--version=maybe"],
    ] {
        assert!(
            matches!(error(args, &[]), ConfigError::InvalidValue { .. }),
            "{args:?}"
        );
    }
    let message = error(&["--nope"], &[]).to_string();
    assert_eq!(message, "flag provided but not defined: --nope");
}

#[test]
fn help_and_version() {
    assert_eq!(parse(["--help"], NO_ENV), Ok(Command::Help));
    // Go's flag package, and so etcd, answers -h with the help.
    assert_eq!(parse(["-h"], NO_ENV), Ok(Command::Help));
    assert_eq!(parse(["--version"], NO_ENV), Ok(Command::Version));
    assert_eq!(parse(["--version=true"], NO_ENV), Ok(Command::Version));
    assert!(matches!(
        parse(["--version=false"], NO_ENV),
        Ok(Command::Run(_))
    ));
    assert!(version().starts_with("etcd Version: 3.6.0\n"));
    assert!(usage("oxetcd").contains("\n  --max-request-bytes '1572864'\n"));
    // etcd lists the alpha and beta gates, sorted, with stage and default.
    assert!(usage("oxetcd").contains(
        "feature=true|false. Options are:\n    AllAlpha=true|false (ALPHA - default=false)\n    \
         AllBeta=true|false (BETA - default=false)\n    \
         CompactHashCheck=true|false (ALPHA - default=false)\n"
    ));
    assert!(usage("oxetcd")
        .contains("\n    TxnModeWriteWithSharedBuffer=true|false (BETA - default=true)"));
}

#[test]
fn environment_fills_unset_flags() {
    let config = run(
        &[],
        &[
            ("ETCD_NAME", "envname"),
            ("ETCD_MAX_REQUEST_BYTES", "2048"),
            ("ETCD_LISTEN_CLIENT_URLS", "http://127.0.0.1:4000"),
            ("PATH", "/bin"),
            ("ETCDCTL_API", "3"),
        ],
    );
    assert_eq!(config.name, "envname");
    assert_eq!(config.data_dir, PathBuf::from("envname.etcd"));
    assert_eq!(config.max_request_bytes, 2048);
    assert_eq!(config.listen_client_urls[0].addr, tcp("127.0.0.1:4000"));
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
}

#[test]
fn flag_beats_environment() {
    let config = run(&["--name", "flagname"], &[("ETCD_NAME", "envname")]);
    assert_eq!(config.name, "flagname");
    assert_eq!(config.warnings.len(), 1);
    assert!(
        config.warnings[0].contains("shadowed"),
        "{:?}",
        config.warnings
    );
}

#[test]
fn unknown_environment_is_a_warning() {
    let config = run(
        &[],
        &[("ETCD_FROBNICATE", "yes"), ("ETCD_VERSION", "v3.5.9")],
    );
    assert_eq!(config.warnings.len(), 2, "{:?}", config.warnings);
    assert!(config
        .warnings
        .iter()
        .all(|w| w.contains("unrecognized environment variable")));
}

#[test]
fn malformed_environment_is_an_error() {
    let e = error(&[], &[("ETCD_MAX_TXN_OPS", "many")]);
    assert!(
        matches!(
            e,
            ConfigError::InvalidValue {
                flag: "max-txn-ops",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn go_durations_parse_like_go() {
    for (text, expected) in [
        ("5m0s", Duration::from_secs(300)),
        ("1s", Duration::from_secs(1)),
        ("500ms", Duration::from_millis(500)),
        ("1.5s", Duration::from_millis(1500)),
        (".5m", Duration::from_secs(30)),
        ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
        ("2µs", Duration::from_micros(2)),
        ("0", Duration::ZERO),
        ("+1m", Duration::from_secs(60)),
    ] {
        assert_eq!(parse_duration("x", text), Ok(expected), "{text}");
    }
    for text in [
        "",
        "5",
        "5x",
        "-1s",
        "1..5s",
        ".s",
        "s",
        "1s5",
        "9999999999h",
    ] {
        assert!(parse_duration("x", text).is_err(), "{text}");
    }
}

#[test]
fn lease_checkpoint_flags_are_accepted_and_set_the_interval() {
    let config = run(&[], &[]);
    assert_eq!(config.lease_checkpoint_interval, Duration::from_secs(300));
    assert_eq!(
        config.node_config().lease.checkpoint_interval,
        Duration::from_secs(300)
    );
    let config = run(
        &[
            "--experimental-enable-lease-checkpoint",
            "--experimental-enable-lease-checkpoint-persist=true",
            "--experimental-lease-checkpoint-interval=1s",
        ],
        &[],
    );
    assert_eq!(config.lease_checkpoint_interval, Duration::from_secs(1));
    assert_eq!(
        config.node_config().lease.checkpoint_interval,
        Duration::from_secs(1)
    );
    // Only deprecation warnings: the checkpoint gates are always on here,
    // so they are not "not yet supported".
    assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
    assert!(
        config.warnings.iter().all(|w| w.contains("deprecated")),
        "{:?}",
        config.warnings
    );
    assert_eq!(
        config.pending.feature_gates.get("LeaseCheckpoint"),
        Some(&true)
    );
    // The plain name wins over the experimental one.
    let config = run(
        &[
            "--experimental-lease-checkpoint-interval=1s",
            "--lease-checkpoint-interval",
            "2m",
        ],
        &[],
    );
    assert_eq!(config.lease_checkpoint_interval, Duration::from_secs(120));
    let config = run(
        &[],
        &[
            ("ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", "true"),
            ("ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT_PERSIST", "1"),
            ("ETCD_EXPERIMENTAL_LEASE_CHECKPOINT_INTERVAL", "1m30s"),
        ],
    );
    assert_eq!(config.lease_checkpoint_interval, Duration::from_secs(90));
    assert!(
        config.warnings.iter().all(|w| w.contains("deprecated")),
        "{:?}",
        config.warnings
    );
    let config = run(
        &["--experimental-enable-lease-checkpoint=false"],
        &[("ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", "true")],
    );
    assert!(
        config.warnings.iter().any(|w| w.contains("shadowed")),
        "{:?}",
        config.warnings
    );
    for (args, env) in [
        (&["--experimental-lease-checkpoint-interval=5"][..], &[][..]),
        (&["--experimental-lease-checkpoint-interval=0s"], &[]),
        (&["--lease-checkpoint-interval=-1s"], &[]),
        (&["--experimental-enable-lease-checkpoint=maybe"], &[]),
        (
            &[],
            &[("ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", "maybe")],
        ),
        (
            &[],
            &[("ETCD_EXPERIMENTAL_LEASE_CHECKPOINT_INTERVAL", "soon")],
        ),
    ] {
        assert!(
            matches!(error(args, env), ConfigError::InvalidValue { .. }),
            "{args:?} {env:?}"
        );
    }
    assert!(usage("oxetcd").contains("--experimental-lease-checkpoint-interval '5m0s'"));
}

#[test]
fn watch_progress_notify_interval_has_etcds_default_and_minimum() {
    let config = run(&[], &[]);
    assert_eq!(
        config.node_config().watch_progress_notify_interval,
        Duration::from_secs(600)
    );
    let config = run(
        &["--experimental-watch-progress-notify-interval=500ms"],
        &[],
    );
    assert_eq!(
        config.node_config().watch_progress_notify_interval,
        Duration::from_millis(500)
    );
    let config = run(&[], &[("ETCD_WATCH_PROGRESS_NOTIFY_INTERVAL", "2s")]);
    assert_eq!(
        config.watch_progress_notify_interval,
        Duration::from_secs(2)
    );
    let config = run(&["--watch-progress-notify-interval=10ms"], &[]);
    assert_eq!(
        config.watch_progress_notify_interval,
        Duration::from_millis(100)
    );
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert!(matches!(
        error(&["--experimental-watch-progress-notify-interval=10"], &[]),
        ConfigError::InvalidValue { .. }
    ));
}

#[test]
fn run_as_version_is_this_build_or_one_minor_below() {
    use oxetcd_core::version::{Version, SERVER_VERSION};
    assert_eq!(run(&[], &[]).server_version, SERVER_VERSION);
    assert_eq!(SERVER_VERSION.to_string(), crate::grpc::ETCD_VERSION);
    let older = run(&["--unsafe-run-as-version", "3.5.2"], &[]);
    assert_eq!(older.server_version, Version::new(3, 5, 2));
    assert_eq!(older.node_config().server_version, Version::new(3, 5, 2));
    for bad in ["3.4.0", "3.7.0", "3.5", "v3.5.0"] {
        let e = error(&["--unsafe-run-as-version", bad], &[]);
        assert!(
            matches!(
                e,
                ConfigError::InvalidValue {
                    flag: "unsafe-run-as-version",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
    }
}
