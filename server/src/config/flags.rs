//! The flag table: every flag's name, default and help text.

use std::time::Duration;

use oxetcd_core::ids;

/// One flag: its name, a placeholder for its value (`None`: a boolean
/// switch), its default, and its help text.
pub(super) struct Flag {
    pub(super) name: &'static str,
    pub(super) value: Option<&'static str>,
    pub(super) default: &'static str,
    pub(super) help: &'static str,
}

pub(super) const fn flag(
    name: &'static str,
    value: &'static str,
    default: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        name,
        value: Some(value),
        default,
        help,
    }
}

/// Every flag the server accepts.
pub(super) const FLAGS: &[Flag] = &[
    flag(
        "name",
        "NAME",
        "default",
        "Human-readable name for this member.",
    ),
    flag(
        "data-dir",
        "DIR",
        "${name}.etcd",
        "Path to the data directory.",
    ),
    flag(
        "listen-client-urls",
        "URLS",
        "http://localhost:2379",
        "Comma-separated URLs to listen on for client traffic.",
    ),
    flag(
        "advertise-client-urls",
        "URLS",
        "http://localhost:2379",
        "Comma-separated client URLs of this member, published to the cluster.",
    ),
    flag(
        "cert-file",
        "PATH",
        "",
        "Path to the client server TLS cert file (for https:// client URLs).",
    ),
    flag(
        "key-file",
        "PATH",
        "",
        "Path to the client server TLS key file.",
    ),
    flag(
        "trusted-ca-file",
        "PATH",
        "",
        "Path to the client server TLS trusted CA cert file; clients must present a certificate it signed.",
    ),
    Flag {
        name: "client-cert-auth",
        value: None,
        default: "false",
        help: "Enable client cert authentication (against --trusted-ca-file).",
    },
    Flag {
        name: "auto-tls",
        value: None,
        default: "false",
        help: "Client TLS using a generated self-signed certificate, kept in <data-dir>/fixtures/client.",
    },
    flag(
        "tls-min-version",
        "VERSION",
        "TLS1.2",
        "Minimum TLS version of the client and peer ports: TLS1.2 or TLS1.3.",
    ),
    flag(
        "tls-max-version",
        "VERSION",
        "TLS1.3",
        "Maximum TLS version of the client and peer ports: TLS1.2 or TLS1.3.",
    ),
    flag(
        "cipher-suites",
        "LIST",
        "",
        "Comma-separated TLS 1.2 cipher suites, Go's names (empty: every suite oxetcd implements).",
    ),
    flag(
        "peer-cert-file",
        "PATH",
        "",
        "Path to the peer TLS cert file (for https:// peer URLs), served to peers and presented to them.",
    ),
    flag(
        "peer-key-file",
        "PATH",
        "",
        "Path to the peer TLS key file.",
    ),
    flag(
        "peer-trusted-ca-file",
        "PATH",
        "",
        "Path to the peer TLS trusted CA file; peers' certificates must chain to it.",
    ),
    Flag {
        name: "peer-client-cert-auth",
        value: None,
        default: "false",
        help: "Enable peer client cert authentication (against --peer-trusted-ca-file).",
    },
    Flag {
        name: "peer-auto-tls",
        value: None,
        default: "false",
        help: "Peer TLS using a generated self-signed certificate, kept in <data-dir>/fixtures/peer; peers' certificates are not verified.",
    },
    flag(
        "peer-cert-allowed-cn",
        "CN",
        "",
        "Required common name of the certificates of peers dialing in.",
    ),
    flag(
        "peer-cert-allowed-hostname",
        "HOST",
        "",
        "Required host name (or IP address) the certificates of peers dialing in are valid for.",
    ),
    flag(
        "listen-peer-urls",
        "URLS",
        "http://localhost:2380",
        "Comma-separated URLs to listen on for peer traffic.",
    ),
    flag(
        "initial-advertise-peer-urls",
        "URLS",
        "http://localhost:2380",
        "Comma-separated peer URLs of this member, advertised to the cluster.",
    ),
    flag(
        "initial-cluster-token",
        "TOKEN",
        ids::DEFAULT_CLUSTER_TOKEN,
        "Initial cluster token; it keeps the IDs of distinct clusters apart.",
    ),
    flag(
        "initial-cluster",
        "NAME=URL,...",
        DEFAULT_INITIAL_CLUSTER,
        "Initial cluster configuration for bootstrapping: each member's name and peer URL.",
    ),
    flag(
        "initial-cluster-state",
        "STATE",
        "new",
        "Initial cluster state: new (bootstrap) or existing (join a running cluster).",
    ),
    flag(
        "heartbeat-interval",
        "MS",
        "100",
        "Time (in milliseconds) of a heartbeat interval.",
    ),
    flag(
        "election-timeout",
        "MS",
        "1000",
        "Time (in milliseconds) for an election to timeout.",
    ),
    flag(
        "snapshot-count",
        "N",
        "10000",
        "Number of committed transactions to trigger a snapshot to disk.",
    ),
    flag(
        "experimental-snapshot-catchup-entries",
        "N",
        "5000",
        "Number of entries kept in the log after a snapshot, for slow followers to catch up from.",
    ),
    flag(
        "max-learners",
        "N",
        "1",
        "Maximum number of learners the cluster admits at once.",
    ),
    flag(
        "max-request-bytes",
        "BYTES",
        "1572864",
        "Maximum client request size in bytes the server will accept.",
    ),
    flag(
        "max-txn-ops",
        "N",
        "128",
        "Maximum number of operations permitted in a transaction.",
    ),
    flag(
        "log-level",
        "LEVEL",
        "info",
        "Log level: debug, info, warn or error.",
    ),
    Flag {
        name: "experimental-initial-corrupt-check",
        value: None,
        default: "false",
        help: "Check the member's data against its peers' before serving (accepted; the check \
               itself is not yet supported and is logged as such).",
    },
    Flag {
        name: "experimental-enable-lease-checkpoint",
        value: None,
        default: "false",
        help: "Accepted for etcd compatibility: oxetcd always checkpoints the remaining TTL of \
               long leases, so a new leader never renews them to their full TTL.",
    },
    Flag {
        name: "experimental-enable-lease-checkpoint-persist",
        value: None,
        default: "false",
        help: "Accepted for etcd compatibility: oxetcd always persists checkpointed remaining \
               TTLs (as etcd 3.6 does).",
    },
    flag(
        "experimental-lease-checkpoint-interval",
        "DURATION",
        LEASE_CHECKPOINT_INTERVAL_DEFAULT,
        "How often the leader checkpoints the remaining TTL of leases longer than this.",
    ),
    flag(
        "lease-checkpoint-interval",
        "DURATION",
        LEASE_CHECKPOINT_INTERVAL_DEFAULT,
        "Same as --experimental-lease-checkpoint-interval, which it overrides.",
    ),
    flag(
        "experimental-watch-progress-notify-interval",
        "DURATION",
        WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT,
        "Duration of periodic watch progress notifications.",
    ),
    flag(
        "watch-progress-notify-interval",
        "DURATION",
        WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT,
        "Same as --experimental-watch-progress-notify-interval, which it overrides.",
    ),
    Flag {
        name: "version",
        value: None,
        default: "false",
        help: "Print the version and exit.",
    },
    Flag {
        name: "help",
        value: None,
        default: "false",
        help: "Show this help and exit.",
    },
];

/// etcd's default `--name`.
pub(super) const DEFAULT_NAME: &str = "default";

/// etcd's default `--initial-cluster`: the default name at the default
/// advertised peer URL.
pub(super) const DEFAULT_INITIAL_CLUSTER: &str = "default=http://localhost:2380";

/// etcd's default `--snapshot-count` (3.6), also used when 0 is given.
pub(super) const SNAPSHOT_COUNT_DEFAULT: u64 = 10_000;

/// etcd's ceiling on `--election-timeout`, in milliseconds.
pub(super) const ELECTION_TIMEOUT_MS_MAX: u64 = 50_000;

/// Prefix of the environment variables that stand in for flags.
pub(super) const ENV_PREFIX: &str = "ETCD_";

/// etcd's lease checkpoint interval (5 minutes), as Go prints it.
pub(super) const LEASE_CHECKPOINT_INTERVAL_DEFAULT: &str = "5m0s";

/// etcd's periodic watch progress interval (10 minutes), as Go prints it.
pub(super) const WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT: &str = "10m0s";

/// etcd raises a shorter progress notify interval to this.
pub(super) const WATCH_PROGRESS_NOTIFY_INTERVAL_MIN: Duration = Duration::from_millis(100);

/// Switches that are never taken from the environment: `ETCD_VERSION` is
/// commonly set by scripts to say which release they want.
pub(super) const SWITCHES_NOT_FROM_ENV: [&str; 2] = ["version", "help"];
