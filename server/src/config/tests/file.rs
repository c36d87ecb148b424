//! `--config-file` precedence and etcd's nested keys; the v2 and unix
//! socket rules; the logging flags.

use super::*;
use crate::config::parse::parse_with;
use crate::socket::SocketAddress;

const FILE: &str = "\
name: infra1
data-dir: /var/lib/etcd
listen-client-urls: https://127.0.0.1:2379
advertise-client-urls: https://127.0.0.1:2379
heartbeat-interval: 200
election-timeout: 2000
log-outputs: [stdout, /var/log/etcd.log]
log-level: warn
grpc-keepalive-min-time: 10000000000
quota-backend-bytes: 8589934592
auto-compaction-mode: revision
auto-compaction-retention: '1000'
frobnicate: 1
client-transport-security:
  cert-file: /c.pem
  key-file: /k.pem
  client-cert-auth: true
  trusted-ca-file: /ca.pem
  crl-file: /client.crl
peer-transport-security:
  auto-tls: true
  trusted-ca-file: /peer-ca.pem
  allowed-hostname: peer.example
  crl-file: /peer.crl
";

fn from_file(args: &[&str], env: &[(&str, &str)]) -> Config {
    let read = |path: &str| -> Result<String, String> {
        assert_eq!(path, "/etc/etcd.yaml");
        Ok(FILE.to_owned())
    };
    match parse_with(args, env.iter().copied(), &read) {
        Ok(Command::Run(config)) => config,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_config_file_replaces_flags_and_environment() {
    let config = from_file(
        &["--config-file", "/etc/etcd.yaml", "--name", "ignored"],
        &[("ETCD_DATA_DIR", "/ignored"), ("ETCD_NOPE", "1")],
    );
    assert_eq!(config.name, "infra1");
    assert_eq!(config.data_dir, PathBuf::from("/var/lib/etcd"));
    assert_eq!(
        (config.heartbeat_interval_ms, config.election_timeout_ms),
        (200, 2000)
    );
    assert!(
        config
            .warnings
            .iter()
            .any(|w| w.contains("ignored: --name")),
        "{:?}",
        config.warnings
    );
    assert!(
        config.warnings.iter().any(|w| w.contains("frobnicate")),
        "{:?}",
        config.warnings
    );
    assert!(
        !config.warnings.iter().any(|w| w.contains("ETCD_NOPE")),
        "{:?}",
        config.warnings
    );
    assert_eq!(config.client_tls.cert_file, Some(PathBuf::from("/c.pem")));
    assert!(config.client_tls.client_cert_auth);
    assert_eq!(
        config.client_tls.crl_file,
        Some(PathBuf::from("/client.crl"))
    );
    assert!(config.peer_tls.auto_tls);
    assert_eq!(config.peer_tls.crl_file, Some(PathBuf::from("/peer.crl")));
    assert_eq!(
        config.peer_tls.allowed,
        Some(oxetcd_tls::AllowedPeer::Hostname("peer.example".into()))
    );
}

#[test]
fn file_values_have_their_types() {
    let config = from_file(&[], &[("ETCD_CONFIG_FILE", "/etc/etcd.yaml")]);
    assert_eq!(config.logging.level, LogLevel::Warn);
    assert_eq!(
        config.logging.outputs,
        [
            LogOutput::Stdout,
            LogOutput::File("/var/log/etcd.log".into())
        ]
    );
    // A bare number is nanoseconds, as etcd reads a Go duration.
    assert_eq!(
        config.pending.grpc_keepalive_min_time,
        Duration::from_secs(10)
    );
    assert_eq!(config.pending.quota_backend_bytes, 8 << 30);
    assert_eq!(
        config.pending.auto_compaction,
        AutoCompaction::Revision(1000)
    );
}

#[test]
fn a_bad_config_file_is_refused() {
    let missing = |_: &str| -> Result<String, String> { Err("No such file".into()) };
    let e = parse_with(["--config-file=/nope.yaml"], NO_ENV, &missing).unwrap_err();
    assert!(e.to_string().contains("/nope.yaml: No such file"), "{e}");
    let bad = |_: &str| -> Result<String, String> { Ok("name: [unclosed".into()) };
    let e = parse_with(["--config-file=/bad.yaml"], NO_ENV, &bad).unwrap_err();
    assert!(matches!(e, ConfigError::ConfigFile { .. }), "{e}");
    let wrong = |_: &str| -> Result<String, String> { Ok("max-txn-ops: many\n".into()) };
    let e = parse_with(["--config-file=/w.yaml"], NO_ENV, &wrong).unwrap_err();
    assert!(
        e.to_string().contains("--max-txn-ops") && e.to_string().contains("/w.yaml"),
        "{e}"
    );
}

#[test]
fn the_v2_api_is_refused_but_turning_it_off_is_fine() {
    run(&["--enable-v2=false"], &[]);
    let e = error(&["--enable-v2"], &[]).to_string();
    assert!(
        e.contains("--enable-v2") && e.contains("removed in etcd v3.6"),
        "{e}"
    );
    let e = error(&[], &[("ETCD_ENABLE_V2", "true")]).to_string();
    assert!(e.contains("ETCD_ENABLE_V2"), "{e}");
}

#[test]
fn unix_socket_urls_where_etcd_takes_them() {
    let config = run(
        &["--advertise-client-urls=unix:///tmp/etcd.sock,http://127.0.0.1:2379"],
        &[],
    );
    assert_eq!(config.advertise_client_urls[0], "unix:///tmp/etcd.sock");
    let config = run(&["--listen-metrics-urls", "unix:///tmp/m.sock"], &[]);
    assert_eq!(
        config.listen_metrics_urls[0].addr,
        SocketAddress::Unix("/tmp/m.sock".into())
    );
    let config = run(
        &["--listen-client-urls=unix:///tmp/etcd.sock,unix://etcd.unix:1"],
        &[],
    );
    let addrs: Vec<_> = config.listen_client_urls.iter().map(|u| &u.addr).collect();
    assert_eq!(
        addrs,
        [
            &SocketAddress::Unix("/tmp/etcd.sock".into()),
            &SocketAddress::Unix("etcd.unix:1".into())
        ]
    );
    assert!(!config.listen_client_urls[0].is_secure());
    // unixs is TLS over the socket, which needs the server's certificate.
    let e = error(&["--listen-client-urls=unixs:///tmp/etcd.sock"], &[]).to_string();
    assert!(e.contains("unixs:///tmp/etcd.sock"), "{e}");
}

#[test]
fn logging_flags() {
    let config = run(&[], &[]);
    assert_eq!(
        config.logging,
        Logging {
            logger: "zap".into(),
            level: LogLevel::Info,
            format: LogFormat::Json,
            outputs: vec![LogOutput::Stderr],
        }
    );
    let config = run(
        &[
            "--logger=capnslog",
            "--log-format",
            "console",
            "--log-outputs=stderr,default,/l",
        ],
        &[("ETCD_LOG_LEVEL", "FATAL")],
    );
    assert_eq!(config.logging.format, LogFormat::Console);
    assert_eq!(config.logging.level, LogLevel::Fatal);
    assert_eq!(config.logging.level.as_str(), "error");
    assert_eq!(
        config.logging.outputs,
        [LogOutput::Stderr, LogOutput::File("/l".into())]
    );
    // etcd 3.4's --debug, unless a level is given.
    assert_eq!(run(&["--debug"], &[]).logging.level, LogLevel::Debug);
    assert_eq!(
        run(&["--debug", "--log-level=warn"], &[]).logging.level,
        LogLevel::Warn
    );
    assert_eq!(
        run(&["--log-output=stdout"], &[]).logging.outputs,
        [LogOutput::Stdout]
    );
}

/// The quota reaches the node: 0 is etcd's default, above 8 GiB is
/// allowed with etcd's warning.
#[test]
fn quota_backend_bytes_reaches_the_node() {
    let default = run(&[], &[]);
    assert_eq!(
        default.node_config().quota.limit_bytes,
        Some(oxetcd_core::alarm::QUOTA_BYTES_DEFAULT)
    );
    let small = run(&["--quota-backend-bytes=262144"], &[]);
    assert_eq!(small.node_config().quota.limit_bytes, Some(262_144));
    assert!(small.warnings.is_empty(), "{:?}", small.warnings);
    let off = run(&["--quota-backend-bytes=-1"], &[]);
    assert_eq!(off.node_config().quota.limit_bytes, None, "negative: off");
    assert!(off.warnings.is_empty(), "{:?}", off.warnings);
    let large = run(&["--quota-backend-bytes=9GiB"], &[]);
    assert_eq!(large.node_config().quota.limit_bytes, Some(9 << 30));
    assert!(
        large
            .warnings
            .iter()
            .any(|w| w.starts_with("quota exceeds the maximum value")),
        "{:?}",
        large.warnings
    );
}

#[test]
fn not_yet_supported_values_are_logged_and_stored() {
    let config = run(
        &[
            "--quota-backend-bytes=8GiB",
            "--feature-gates=StopGRPCServiceOnDefrag=true,LeaseCheckpoint=true",
        ],
        &[],
    );
    assert_eq!(config.pending.quota_backend_bytes, 8 << 30);
    assert!(!config
        .warnings
        .iter()
        .any(|w| w.contains("--quota-backend-bytes")));
    assert!(config
        .warnings
        .contains(&"not yet supported: --feature-gates=StopGRPCServiceOnDefrag=true".to_owned()));
    assert!(
        !config
            .warnings
            .iter()
            .any(|w| w.contains("not yet supported") && w.contains("LeaseCheckpoint")),
        "{:?}",
        config.warnings
    );
    // Alpha gates set explicitly are warned about, as alpha.
    assert!(
        config.warnings.contains(
            &"Setting ALPHA feature gate LeaseCheckpoint=true: it may change or be removed in \
              a future release."
                .to_owned()
        ),
        "{:?}",
        config.warnings
    );
    let e = error(
        &[
            "--experimental-initial-corrupt-check",
            "--feature-gates=InitialCorruptCheck=true",
        ],
        &[],
    );
    assert!(e.to_string().contains("cannot specify both flags"), "{e}");
    assert!(run(&[], &[]).strict_reconfig_check);
    assert!(!run(&["--strict-reconfig-check=false"], &[]).strict_reconfig_check);
    let config = run(&["--auto-compaction-retention=5"], &[]);
    assert_eq!(
        config.pending.auto_compaction,
        AutoCompaction::Periodic(Duration::from_secs(5 * 3600))
    );
    assert!(error(
        &[
            "--auto-compaction-mode=revision",
            "--auto-compaction-retention=1h"
        ],
        &[]
    )
    .to_string()
    .contains("auto-compaction-retention"));
    assert!(error(&["--bcrypt-cost=3"], &[])
        .to_string()
        .contains("--bcrypt-cost"));
}
