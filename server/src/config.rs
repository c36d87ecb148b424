//! Flags and `ETCD_*` environment variables, with etcd's names and defaults.
//!
//! Design: one table ([`FLAGS`]) names every flag, its default and its help
//! text. [`parse`] is a pure function of the arguments and the environment —
//! it reads neither itself — so every rule is unit-tested: `--flag value` and
//! `--flag=value` (one or two dashes), a flag beats its `ETCD_*` variable,
//! an unknown flag or a malformed value is an error, an unknown `ETCD_*`
//! variable only a warning. Switches take `ETCD_*` values too (`true`,
//! `false`, …), except `--version` and `--help`; durations are Go's
//! (`5m0s`, `500ms`). Flags etcd 3.6 renamed from `--experimental-*` are
//! accepted under both names, the plain one winning. [`from_process`] wraps it for `main`: help and
//! version go to stdout with exit code 0, errors to stderr with exit code 1.
//!
//! TLS flags of the client and peer ports are checked here as etcd checks
//! them (an `https://` URL needs `--cert-file` and `--key-file` or
//! `--auto-tls`, their `--peer-*` forms for peer URLs); the files
//! themselves are read when the server starts (`serve/tls.rs`,
//! `peer/tls.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use oxetcd_core::ids;

/// A fully resolved server configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// Where the raft log and the backend live (`--data-dir`).
    pub data_dir: PathBuf,
    /// Addresses to serve clients on (`--listen-client-urls`).
    pub listen_client_urls: Vec<ListenUrl>,
    /// TLS of the `https://` client URLs. Its versions and cipher suites
    /// apply to the peer links too.
    pub client_tls: ClientTls,
    /// TLS of the `https://` peer URLs.
    pub peer_tls: PeerTls,
    /// Client URLs published to the cluster (`--advertise-client-urls`).
    pub advertise_client_urls: Vec<String>,
    /// Addresses to serve peers on (`--listen-peer-urls`).
    pub listen_peer_urls: Vec<ListenUrl>,
    /// Peer URLs advertised to the cluster (`--initial-advertise-peer-urls`);
    /// with the token they determine the member ID.
    pub initial_advertise_peer_urls: Vec<String>,
    /// `--initial-cluster-token`.
    pub initial_cluster_token: String,
    /// `--initial-cluster`: the members a new cluster starts with, this
    /// one among them (checked), in the order given.
    pub initial_cluster: Vec<InitialMember>,
    /// `--initial-cluster-state`.
    pub initial_cluster_state: ClusterState,
    /// `--heartbeat-interval`, in milliseconds.
    pub heartbeat_interval_ms: u64,
    /// `--election-timeout`, in milliseconds; at least five heartbeats.
    pub election_timeout_ms: u64,
    /// `--snapshot-count`: applied entries between snapshots.
    pub snapshot_count: u64,
    /// `--experimental-snapshot-catchup-entries`: entries kept in the log
    /// after a snapshot for slow followers.
    pub snapshot_catchup_entries: u64,
    /// `--max-learners`: learners the cluster admits at once.
    pub max_learners: usize,
    /// Largest client request accepted, in bytes (`--max-request-bytes`).
    pub max_request_bytes: usize,
    /// Largest number of operations in one txn (`--max-txn-ops`).
    pub max_txn_ops: usize,
    /// How often the leader records the remaining TTL of long leases
    /// through the log (`--experimental-lease-checkpoint-interval`).
    /// oxetcd always checkpoints; etcd's switches that turn checkpoints and
    /// their persistence on are accepted and change nothing.
    pub lease_checkpoint_interval: Duration,
    /// How often watchers that asked for `progress_notify` hear the
    /// current revision when no event reached them
    /// (`--experimental-watch-progress-notify-interval`).
    pub watch_progress_notify_interval: Duration,
    /// `--log-level`.
    pub log_level: LogLevel,
    /// Things worth a warning once logging is up (unknown `ETCD_*`
    /// variables, variables shadowed by flags).
    pub warnings: Vec<String>,
}

impl Config {
    /// This member's ID, derived from its advertised peer URLs and the
    /// cluster token.
    pub fn member_id(&self) -> u64 {
        let urls: Vec<&str> = self
            .initial_advertise_peer_urls
            .iter()
            .map(String::as_str)
            .collect();
        ids::member_id(&urls, &self.initial_cluster_token)
    }

    /// The ID of the cluster `--initial-cluster` describes, derived from
    /// its members' IDs as etcd derives it. (A member joining an existing
    /// cluster learns the real ID from its peers: `running_cluster_id`.)
    pub fn cluster_id(&self) -> u64 {
        let members: Vec<u64> = self
            .initial_cluster
            .iter()
            .map(|m| m.member_id(&self.initial_cluster_token))
            .collect();
        ids::cluster_id(&members)
    }

    /// The cluster ID this member starts with. A member joining with
    /// `--initial-cluster-state existing` cannot derive it (the cluster's
    /// members may have changed since it was created), so it starts with 0
    /// and takes the ID stored in its data directory or, on a first start,
    /// learns it from its peers (see `peer/wire.rs`).
    pub fn running_cluster_id(&self) -> u64 {
        match self.initial_cluster_state {
            ClusterState::New => self.cluster_id(),
            ClusterState::Existing => 0,
        }
    }

    /// The other members of `--initial-cluster`: ID and peer URLs, for the
    /// peer transport.
    pub fn initial_peers(&self) -> Vec<(u64, Vec<String>)> {
        let me = self.member_id();
        self.initial_cluster
            .iter()
            .map(|m| {
                (
                    m.member_id(&self.initial_cluster_token),
                    m.peer_urls.clone(),
                )
            })
            .filter(|(id, _)| *id != me)
            .collect()
    }

    /// The peer transport's settings: this member and cluster, frames
    /// large enough for `--max-request-bytes`, and incoming snapshots under
    /// `<data-dir>/member/snap`.
    pub fn peer_transport_config(&self) -> crate::peer::PeerTransportConfig {
        crate::peer::PeerTransportConfig::new(
            self.running_cluster_id(),
            self.member_id(),
            self.data_dir.join("member").join("snap"),
        )
        .for_request_bytes(self.max_request_bytes)
    }

    /// The node's configuration.
    pub fn node_config(&self) -> oxetcd_core::Config {
        let member_id = self.member_id();
        let election_timeout = Duration::from_millis(self.election_timeout_ms);
        let initial_members = self
            .initial_cluster
            .iter()
            .map(|m| oxetcd_core::InitialMember {
                id: m.member_id(&self.initial_cluster_token),
                name: m.name.clone(),
                peer_urls: m.peer_urls.clone(),
            })
            .collect();
        // `Limits` grows as core enforces more of etcd's limits; the
        // defaults fill what no flag sets yet.
        #[allow(clippy::needless_update)]
        oxetcd_core::Config {
            name: self.name.clone(),
            member_id,
            cluster_id: self.running_cluster_id(),
            client_urls: self.advertise_client_urls.clone(),
            initial_members,
            initial_cluster_state: match self.initial_cluster_state {
                ClusterState::New => oxetcd_core::ClusterState::New,
                ClusterState::Existing => oxetcd_core::ClusterState::Existing,
            },
            max_request_bytes: self.max_request_bytes,
            limits: oxetcd_core::mvcc::Limits {
                txn_ops_max: self.max_txn_ops,
                ..Default::default()
            },
            rng_seed: member_id,
            // etcd's lease timing follows its raft timing flags.
            lease: oxetcd_core::lease::LeaseConfig {
                checkpoint_interval: self.lease_checkpoint_interval,
                ..oxetcd_core::lease::LeaseConfig::from_raft_timing(
                    self.heartbeat_interval_ms,
                    self.election_timeout_ms,
                )
            },
            watch_progress_notify_interval: self.watch_progress_notify_interval,
            election_timeout,
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
            snapshot_count: self.snapshot_count,
            snapshot_catch_up_entries: self.snapshot_catchup_entries,
            max_learners: self.max_learners,
            cluster_token: self.initial_cluster_token.clone(),
            // etcd's request timeout: 5 s plus two election timeouts.
            request_timeout: Duration::from_secs(5) + 2 * election_timeout,
            ..oxetcd_core::Config::single(&self.name)
        }
    }
}

/// One member of `--initial-cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialMember {
    /// Its `--name`.
    pub name: String,
    /// Its peer URLs, normalized and sorted.
    pub peer_urls: Vec<String>,
}

impl InitialMember {
    /// Its ID in a cluster with `token`.
    pub fn member_id(&self, token: &str) -> u64 {
        let urls: Vec<&str> = self.peer_urls.iter().map(String::as_str).collect();
        ids::member_id(&urls, token)
    }
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    New,
    /// Join a cluster that already runs (after `member add`).
    Existing,
}

/// A URL to listen on, with the socket address it binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenUrl {
    /// The URL as normalized (`http://host:port` or `https://host:port`).
    pub url: String,
    /// Where to bind (`localhost` binds 127.0.0.1).
    pub addr: SocketAddr,
}

impl ListenUrl {
    /// True for `https://`: served with TLS.
    pub fn is_secure(&self) -> bool {
        self.url.starts_with("https://")
    }
}

impl fmt::Display for ListenUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// TLS of the client port: `--cert-file`, `--key-file`,
/// `--trusted-ca-file`, `--client-cert-auth`, `--auto-tls`,
/// `--tls-min-version`, `--tls-max-version` and `--cipher-suites`. It
/// applies to the `https://` client URLs; `http://` ones stay plaintext.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The server's certificate chain.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// CAs client certificates must chain to. As in etcd, giving it makes
    /// a client certificate mandatory, with or without `--client-cert-auth`.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--client-cert-auth`.
    pub client_cert_auth: bool,
    /// `--auto-tls` with no certificate given: serve a self-signed
    /// certificate kept in `<data-dir>/fixtures/client`.
    pub auto_tls: bool,
    /// Protocol versions.
    pub versions: oxetcd_tls::Versions,
    /// TLS 1.2 cipher suites (empty: all).
    pub cipher_suites: Vec<oxetcd_tls::rustls::CipherSuite>,
}

/// TLS of the peer links: `--peer-cert-file`, `--peer-key-file`,
/// `--peer-trusted-ca-file`, `--peer-client-cert-auth`, `--peer-auto-tls`,
/// `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname` (versions
/// and cipher suites are [`ClientTls`]'s, as in etcd). It applies to this
/// member's `https://` listen peer URLs and to dials to `https://` peer
/// URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerTls {
    /// The member's certificate chain, served and presented to peers.
    pub cert_file: Option<PathBuf>,
    /// Its key.
    pub key_file: Option<PathBuf>,
    /// CAs peers' certificates must chain to, both ways. As in etcd,
    /// giving it makes a certificate mandatory for members that dial in.
    pub trusted_ca_file: Option<PathBuf>,
    /// `--peer-client-cert-auth`.
    pub client_cert_auth: bool,
    /// `--peer-auto-tls` with no certificate given: a self-signed
    /// certificate kept in `<data-dir>/fixtures/peer`, and peers'
    /// certificates not verified.
    pub auto_tls: bool,
    /// `--peer-cert-allowed-cn` or `--peer-cert-allowed-hostname`.
    pub allowed: Option<oxetcd_tls::AllowedPeer>,
}

impl PeerTls {
    /// A certificate to serve and present: files or `--peer-auto-tls`.
    pub fn has_identity(&self) -> bool {
        self.cert_file.is_some() || self.auto_tls
    }
}

/// `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// The default.
    Info,
    /// Warnings and errors.
    Warn,
    /// Errors only.
    Error,
}

impl LogLevel {
    /// The level as a `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the server.
    Run(Config),
    /// Print usage and exit.
    Help,
    /// Print the version and exit.
    Version,
}

/// Why the command line or environment could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A flag nobody defined.
    UnknownFlag(String),
    /// A flag that needs a value was last on the line.
    MissingValue(String),
    /// An argument that is not a flag.
    NotAFlag(String),
    /// A flag or variable whose value does not parse.
    InvalidValue {
        /// The flag's name, without dashes.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownFlag(flag) => write!(f, "flag provided but not defined: {flag}"),
            Self::MissingValue(flag) => write!(f, "flag needs an argument: {flag}"),
            Self::NotAFlag(arg) => write!(f, "'{arg}' is not a valid flag"),
            Self::InvalidValue {
                flag,
                value,
                reason,
            } => {
                write!(f, "invalid value {value:?} for flag --{flag}: {reason}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// One flag: its name, a placeholder for its value (`None`: a boolean
/// switch), its default, and its help text.
struct Flag {
    name: &'static str,
    value: Option<&'static str>,
    default: &'static str,
    help: &'static str,
}

const fn flag(
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
const FLAGS: &[Flag] = &[
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
const DEFAULT_NAME: &str = "default";

/// etcd's default `--initial-cluster`: the default name at the default
/// advertised peer URL.
const DEFAULT_INITIAL_CLUSTER: &str = "default=http://localhost:2380";

/// etcd's default `--snapshot-count` (3.6), also used when 0 is given.
const SNAPSHOT_COUNT_DEFAULT: u64 = 10_000;

/// etcd's ceiling on `--election-timeout`, in milliseconds.
const ELECTION_TIMEOUT_MS_MAX: u64 = 50_000;

/// Prefix of the environment variables that stand in for flags.
const ENV_PREFIX: &str = "ETCD_";

/// etcd's lease checkpoint interval (5 minutes), as Go prints it.
const LEASE_CHECKPOINT_INTERVAL_DEFAULT: &str = "5m0s";

/// etcd's periodic watch progress interval (10 minutes), as Go prints it.
const WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT: &str = "10m0s";

/// etcd raises a shorter progress notify interval to this.
const WATCH_PROGRESS_NOTIFY_INTERVAL_MIN: Duration = Duration::from_millis(100);

/// Switches that are never taken from the environment: `ETCD_VERSION` is
/// commonly set by scripts to say which release they want.
const SWITCHES_NOT_FROM_ENV: [&str; 2] = ["version", "help"];

/// Parses `args` (without the program name) and the environment `env`.
pub fn parse<A, E, S, T>(args: A, env: E) -> Result<Command, ConfigError>
where
    A: IntoIterator<Item = S>,
    S: AsRef<str>,
    E: IntoIterator<Item = (T, T)>,
    T: AsRef<str>,
{
    let mut warnings = Vec::new();
    let mut values: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut switches: BTreeMap<&'static str, bool> = BTreeMap::new();

    // Flags first; the environment only fills what they left unset.
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg.as_ref();
        if arg == "--" {
            if let Some(extra) = args.next() {
                return Err(ConfigError::NotAFlag(extra.as_ref().to_owned()));
            }
            break;
        }
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            return Err(ConfigError::NotAFlag(arg.to_owned()));
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let Some(flag) = FLAGS.iter().find(|f| f.name == name) else {
            return Err(ConfigError::UnknownFlag(arg.to_owned()));
        };
        match flag.value {
            None => {
                let on = match inline {
                    None => true,
                    Some(value) => parse_bool(flag.name, value)?,
                };
                switches.insert(flag.name, on);
            }
            Some(_) => {
                let value = match inline {
                    Some(value) => value.to_owned(),
                    None => match args.next() {
                        Some(value) => value.as_ref().to_owned(),
                        None => return Err(ConfigError::MissingValue(arg.to_owned())),
                    },
                };
                values.insert(flag.name, value);
            }
        }
    }
    if switches.get("help").copied().unwrap_or(false) {
        return Ok(Command::Help);
    }
    if switches.get("version").copied().unwrap_or(false) {
        return Ok(Command::Version);
    }

    let mut env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
        .filter(|(k, _)| k.starts_with(ENV_PREFIX))
        .collect();
    env.sort();
    for (key, value) in env {
        let name = key[ENV_PREFIX.len()..]
            .to_ascii_lowercase()
            .replace('_', "-");
        let flag = FLAGS
            .iter()
            .find(|f| f.name == name && !SWITCHES_NOT_FROM_ENV.contains(&f.name));
        match flag {
            None => warnings.push(format!("unrecognized environment variable {key}={value}")),
            Some(flag) if values.contains_key(flag.name) || switches.contains_key(flag.name) => {
                warnings.push(format!(
                    "environment variable {key} is shadowed by the command-line flag --{}",
                    flag.name
                ))
            }
            Some(flag) if flag.value.is_none() => {
                switches.insert(flag.name, parse_bool(flag.name, &value)?);
            }
            Some(flag) => {
                values.insert(flag.name, value);
            }
        }
    }

    let value = |name: &'static str| -> String {
        values.get(name).cloned().unwrap_or_else(|| {
            FLAGS
                .iter()
                .find(|f| f.name == name)
                .map(|f| f.default.to_owned())
                .unwrap_or_default()
        })
    };

    let name = value("name");
    let data_dir = match values.get("data-dir") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        Some(_) => return Err(invalid("data-dir", "", "must not be empty")),
        None => PathBuf::from(format!("{name}.etcd")),
    };
    let listen_client_urls = parse_listen_urls("listen-client-urls", &value("listen-client-urls"))?;
    let client_tls = parse_client_tls(&value, &switches, &listen_client_urls, &mut warnings)?;
    let advertise_client_urls =
        parse_urls("advertise-client-urls", &value("advertise-client-urls"))?;
    let listen_peer_urls = parse_listen_urls("listen-peer-urls", &value("listen-peer-urls"))?;
    let initial_advertise_peer_urls = parse_urls(
        "initial-advertise-peer-urls",
        &value("initial-advertise-peer-urls"),
    )?;
    let initial_cluster_token = value("initial-cluster-token");
    let initial_cluster = parse_initial_cluster(
        &name,
        &initial_advertise_peer_urls,
        &value("initial-cluster"),
    )?;
    let peer_tls = parse_peer_tls(
        &value,
        &switches,
        &listen_peer_urls,
        &initial_advertise_peer_urls,
        &initial_cluster,
        &mut warnings,
    )?;
    let initial_cluster_state = match value("initial-cluster-state").as_str() {
        "new" => ClusterState::New,
        "existing" => ClusterState::Existing,
        other => {
            return Err(invalid(
                "initial-cluster-state",
                other,
                "expected new or existing",
            ))
        }
    };
    let (heartbeat_interval_ms, election_timeout_ms) =
        parse_raft_timing(&value("heartbeat-interval"), &value("election-timeout"))?;
    let snapshot_count = match value("snapshot-count").trim().parse::<u64>() {
        Ok(0) => {
            warnings.push(format!(
                "--snapshot-count is 0; using the default {SNAPSHOT_COUNT_DEFAULT}"
            ));
            SNAPSHOT_COUNT_DEFAULT
        }
        Ok(n) => n,
        Err(e) => {
            return Err(invalid(
                "snapshot-count",
                &value("snapshot-count"),
                e.to_string(),
            ))
        }
    };
    let snapshot_catchup_entries = parse_positive(
        "experimental-snapshot-catchup-entries",
        &value("experimental-snapshot-catchup-entries"),
    )?;
    let max_learners = parse_positive("max-learners", &value("max-learners"))?;
    let max_request_bytes = parse_positive("max-request-bytes", &value("max-request-bytes"))?;
    let max_txn_ops = parse_positive("max-txn-ops", &value("max-txn-ops"))?;
    let log_level = parse_log_level(&value("log-level"))?;
    // etcd 3.6 also knows these without the `experimental-` prefix; the
    // plain name wins when both are given.
    let renamed = |plain: &'static str, experimental: &'static str| {
        if values.contains_key(plain) {
            (plain, value(plain))
        } else {
            (experimental, value(experimental))
        }
    };
    let (flag, text) = renamed(
        "lease-checkpoint-interval",
        "experimental-lease-checkpoint-interval",
    );
    let lease_checkpoint_interval = parse_duration(flag, &text)?;
    if lease_checkpoint_interval.is_zero() {
        return Err(invalid(flag, &text, "must be greater than zero"));
    }
    let (flag, text) = renamed(
        "watch-progress-notify-interval",
        "experimental-watch-progress-notify-interval",
    );
    let mut watch_progress_notify_interval = parse_duration(flag, &text)?;
    // Zero keeps etcd's default rather than turning notifications off.
    if watch_progress_notify_interval.is_zero() {
        watch_progress_notify_interval = oxetcd_core::watch::PROGRESS_NOTIFY_INTERVAL_DEFAULT;
    } else if watch_progress_notify_interval < WATCH_PROGRESS_NOTIFY_INTERVAL_MIN {
        warnings.push(format!(
            "--{flag} {text} is below the minimum; using {WATCH_PROGRESS_NOTIFY_INTERVAL_MIN:?}"
        ));
        watch_progress_notify_interval = WATCH_PROGRESS_NOTIFY_INTERVAL_MIN;
    }

    if switches
        .get("experimental-initial-corrupt-check")
        .copied()
        .unwrap_or(false)
    {
        warnings.push("not yet supported: --experimental-initial-corrupt-check".to_owned());
    }

    Ok(Command::Run(Config {
        name,
        data_dir,
        listen_client_urls,
        client_tls,
        peer_tls,
        advertise_client_urls,
        listen_peer_urls,
        initial_advertise_peer_urls,
        initial_cluster_token,
        initial_cluster,
        initial_cluster_state,
        heartbeat_interval_ms,
        election_timeout_ms,
        snapshot_count,
        snapshot_catchup_entries: snapshot_catchup_entries as u64,
        max_learners,
        max_request_bytes,
        max_txn_ops,
        lease_checkpoint_interval,
        watch_progress_notify_interval,
        log_level,
        warnings,
    }))
}

/// Parses the process's arguments and environment. Prints help or the
/// version and exits 0 when asked; prints a clear error and exits 1 on a bad
/// flag or value.
pub fn from_process() -> Config {
    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "oxetcd".to_owned());
    let mut arguments = Vec::new();
    for arg in args {
        match arg.into_string() {
            Ok(arg) => arguments.push(arg),
            Err(arg) => {
                eprintln!("{program}: argument {arg:?} is not valid UTF-8");
                std::process::exit(1);
            }
        }
    }
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    match parse(arguments, env) {
        Ok(Command::Run(config)) => config,
        Ok(Command::Help) => {
            print!("{}", usage(&program));
            std::process::exit(0);
        }
        Ok(Command::Version) => {
            print!("{}", version());
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("{program}: error verifying flags, {e}. See '{program} --help'.");
            std::process::exit(1);
        }
    }
}

/// The `--help` text.
pub fn usage(program: &str) -> String {
    let mut text = format!(
        "Usage:\n\n  {program} [flags]\n\nStart an etcd-compatible server.\n\nFlags \
         (each may also be set by an ETCD_* environment variable, e.g. \
         --data-dir as ETCD_DATA_DIR; a flag wins over its variable):\n\n"
    );
    for flag in FLAGS {
        let head = match flag.value {
            Some(value) => format!("  --{} {value}", flag.name),
            None => format!("  --{}", flag.name),
        };
        text.push_str(&format!("{head}\n      {}", flag.help));
        if flag.value.is_some() {
            text.push_str(&format!(" (default: {:?})", flag.default));
        }
        text.push('\n');
    }
    text
}

/// The `--version` text. Its first line has the shape tools parse to learn
/// which etcd API a server speaks.
pub fn version() -> String {
    format!(
        "etcd Version: {}\noxetcd Version: {}\nOS/Arch: {}/{}\n",
        crate::grpc::ETCD_VERSION,
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
    )
}

fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

fn parse_bool(flag: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(flag, value, "expected true or false")),
    }
}

fn parse_positive(flag: &'static str, value: &str) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err(invalid(flag, value, "must be greater than zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(invalid(flag, value, e.to_string())),
    }
}

/// A Go duration (`time.ParseDuration`): a sequence of decimal numbers,
/// each with an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), as in "5m0s" or "1.5s"; a bare "0" is zero. Negative
/// durations are refused: no flag of ours takes one.
fn parse_duration(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
    const DURATION_EXPECTED: &str = "expected a duration like 500ms or 5m0s";
    let text = value.trim();
    let text = text.strip_prefix('+').unwrap_or(text);
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.starts_with('-') {
        return Err(invalid(flag, value, DURATION_EXPECTED));
    }
    let mut rest = text;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid(flag, value, "missing unit in duration")),
            other => return Err(invalid(flag, value, format!("unknown unit {other:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(invalid(flag, value, DURATION_EXPECTED));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| invalid(flag, value, "duration out of range"))?
        };
        let mut nanos = whole.saturating_mul(unit_nanos);
        let mut scale = unit_nanos;
        for digit in fraction.bytes().take(30) {
            scale /= 10;
            nanos = nanos.saturating_add(u128::from(digit - b'0') * scale);
        }
        total_nanos = total_nanos.saturating_add(nanos);
        rest = tail;
    }
    // Go's durations stop at about 292 years.
    if total_nanos > i64::MAX as u128 {
        return Err(invalid(flag, value, "duration out of range"));
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

fn parse_log_level(value: &str) -> Result<LogLevel, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        _ => Err(invalid(
            "log-level",
            value,
            "expected debug, info, warn or error",
        )),
    }
}

/// Parses `--initial-cluster` (`name=url,name=url,...`, a name repeated
/// for each of its URLs) and checks it as etcd does at bootstrap: this
/// member is in it with exactly its advertised peer URLs, and no URL is
/// listed twice. Left at its default while `--name` is not, it stands for
/// `<name>=<each advertised peer URL>`, as in etcd.
fn parse_initial_cluster(
    name: &str,
    advertise_peer_urls: &[String],
    value: &str,
) -> Result<Vec<InitialMember>, ConfigError> {
    const FLAG: &str = "initial-cluster";
    let derived;
    let value = if name != DEFAULT_NAME && value == DEFAULT_INITIAL_CLUSTER {
        derived = advertise_peer_urls
            .iter()
            .map(|url| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
        derived.as_str()
    } else {
        value
    };
    let mut members: Vec<InitialMember> = Vec::new();
    let mut seen_urls = std::collections::BTreeSet::new();
    for pair in split_list(value) {
        let Some((member, url)) = pair.split_once('=') else {
            return Err(invalid(FLAG, value, format!("{pair:?} is not name=URL")));
        };
        let url = parse_url(FLAG, url.trim())?.normalized;
        if !seen_urls.insert(url.clone()) {
            return Err(invalid(FLAG, value, format!("duplicate URL {url}")));
        }
        match members.iter_mut().find(|m| m.name == member) {
            Some(existing) => existing.peer_urls.push(url),
            None => members.push(InitialMember {
                name: member.to_owned(),
                peer_urls: vec![url],
            }),
        }
    }
    if members.is_empty() {
        return Err(invalid(FLAG, value, "at least one member is required"));
    }
    for member in &mut members {
        member.peer_urls.sort();
    }
    let Some(local) = members.iter().find(|m| m.name == name) else {
        return Err(invalid(
            FLAG,
            value,
            format!("couldn't find local name {name:?} in the initial cluster configuration"),
        ));
    };
    let mut advertised = advertise_peer_urls.to_vec();
    advertised.sort();
    if local.peer_urls != advertised {
        let missing: Vec<String> = local
            .peer_urls
            .iter()
            .filter(|url| !advertised.contains(url))
            .map(|url| format!("{name}={url}"))
            .collect();
        let reason = if missing.is_empty() {
            let extra: Vec<&str> = advertised
                .iter()
                .filter(|url| !local.peer_urls.contains(url))
                .map(String::as_str)
                .collect();
            format!(
                "--initial-advertise-peer-urls has {} but missing from --initial-cluster",
                extra.join(",")
            )
        } else {
            format!(
                "--initial-cluster has {} but missing from --initial-advertise-peer-urls={}",
                missing.join(","),
                advertised.join(",")
            )
        };
        return Err(invalid(FLAG, value, reason));
    }
    Ok(members)
}

/// `--heartbeat-interval` and `--election-timeout`, with etcd's rules: both
/// positive, the timeout at least five heartbeats and at most 50 s.
fn parse_raft_timing(heartbeat: &str, election: &str) -> Result<(u64, u64), ConfigError> {
    let positive = |flag: &'static str, value: &str| match value.trim().parse::<u64>() {
        Ok(0) => Err(invalid(flag, value, "must be greater than zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(invalid(flag, value, e.to_string())),
    };
    let heartbeat_ms = positive("heartbeat-interval", heartbeat)?;
    let election_ms = positive("election-timeout", election)?;
    if heartbeat_ms.saturating_mul(5) > election_ms {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] should be at least as 5 times as \
                 --heartbeat-interval[{heartbeat_ms}ms]"
            ),
        ));
    }
    if election_ms > ELECTION_TIMEOUT_MS_MAX {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] is too long, and should be set less than \
                 {ELECTION_TIMEOUT_MS_MAX}ms"
            ),
        ));
    }
    Ok((heartbeat_ms, election_ms))
}

/// The client port's TLS flags, checked as etcd checks them: an
/// `https://` URL needs a certificate and key (or `--auto-tls`); TLS
/// settings next to `http://` URLs only are ignored with a warning.
fn parse_client_tls(
    value: &dyn Fn(&'static str) -> String,
    switches: &BTreeMap<&'static str, bool>,
    listen_client_urls: &[ListenUrl],
    warnings: &mut Vec<String>,
) -> Result<ClientTls, ConfigError> {
    let path =
        |flag: &'static str| Some(PathBuf::from(value(flag))).filter(|p| !p.as_os_str().is_empty());
    let switch = |flag: &'static str| switches.get(flag).copied().unwrap_or(false);
    let tls_error =
        |flag: &'static str, e: oxetcd_tls::TlsError| invalid(flag, &value(flag), e.to_string());
    let mut tls = ClientTls {
        cert_file: path("cert-file"),
        key_file: path("key-file"),
        trusted_ca_file: path("trusted-ca-file"),
        client_cert_auth: switch("client-cert-auth"),
        auto_tls: switch("auto-tls"),
        ..ClientTls::default()
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) | (None, Some(_)) => {
            let flag = if tls.cert_file.is_some() {
                "cert-file"
            } else {
                "key-file"
            };
            return Err(invalid(
                flag,
                &value(flag),
                "--cert-file and --key-file must be given together",
            ));
        }
        (Some(_), Some(_)) if tls.auto_tls => {
            warnings.push("ignoring client auto TLS since certs given".to_owned());
            tls.auto_tls = false;
        }
        _ => {}
    }
    let version = |flag: &'static str, default: oxetcd_tls::TlsVersion| match value(flag).trim() {
        "" => Ok(default),
        text => oxetcd_tls::TlsVersion::parse(text).map_err(|e| tls_error(flag, e)),
    };
    let min = version("tls-min-version", oxetcd_tls::TlsVersion::Tls12)?;
    let max = version("tls-max-version", oxetcd_tls::TlsVersion::Tls13)?;
    tls.versions =
        oxetcd_tls::Versions::new(min, max).map_err(|e| tls_error("tls-max-version", e))?;
    let names: Vec<String> = split_list(&value("cipher-suites"))
        .map(str::to_owned)
        .collect();
    let suites =
        oxetcd_tls::parse_cipher_suites(&names).map_err(|e| tls_error("cipher-suites", e))?;
    for name in &suites.unsupported {
        warnings.push(format!(
            "cipher suite {name} is not implemented by oxetcd; ignoring it"
        ));
    }
    if !suites.tls12.is_empty() && min == oxetcd_tls::TlsVersion::Tls13 {
        return Err(invalid(
            "cipher-suites",
            &value("cipher-suites"),
            "cipher suites cannot be configured when only TLS1.3 is enabled",
        ));
    }
    tls.cipher_suites = suites.tls12;

    let has_identity = tls.cert_file.is_some() || tls.auto_tls;
    let configured = has_identity || tls.trusted_ca_file.is_some() || tls.client_cert_auth;
    for url in listen_client_urls {
        if url.is_secure() && !has_identity {
            return Err(invalid(
                "listen-client-urls",
                &url.url,
                format!(
                    "TLS key/cert (--cert-file, --key-file) must be provided for client url {} \
                     with HTTPS scheme",
                    url.url
                ),
            ));
        }
        if !url.is_secure() && configured {
            warnings.push(format!(
                "scheme is HTTP while TLS flags are present; serving client URL {} without TLS",
                url.url
            ));
        }
    }
    let secure = listen_client_urls.iter().any(ListenUrl::is_secure);
    if secure && tls.client_cert_auth && tls.trusted_ca_file.is_none() {
        return Err(invalid(
            "trusted-ca-file",
            "",
            "--client-cert-auth needs --trusted-ca-file: client certificates are verified against it",
        ));
    }
    Ok(tls)
}

/// The peer links' TLS flags, checked as etcd checks them: an `https://`
/// listen peer URL needs a certificate and key (or `--peer-auto-tls`);
/// TLS flags next to `http://` listen peer URLs only are ignored with a
/// warning. This member's other `https://` peer URLs (advertised, or in
/// `--initial-cluster`) are dialed with the same certificate, so they need
/// one too.
fn parse_peer_tls(
    value: &dyn Fn(&'static str) -> String,
    switches: &BTreeMap<&'static str, bool>,
    listen_peer_urls: &[ListenUrl],
    advertise_peer_urls: &[String],
    initial_cluster: &[InitialMember],
    warnings: &mut Vec<String>,
) -> Result<PeerTls, ConfigError> {
    let path =
        |flag: &'static str| Some(PathBuf::from(value(flag))).filter(|p| !p.as_os_str().is_empty());
    let text = |flag: &'static str| Some(value(flag)).filter(|v| !v.is_empty());
    let switch = |flag: &'static str| switches.get(flag).copied().unwrap_or(false);
    let mut tls = PeerTls {
        cert_file: path("peer-cert-file"),
        key_file: path("peer-key-file"),
        trusted_ca_file: path("peer-trusted-ca-file"),
        client_cert_auth: switch("peer-client-cert-auth"),
        auto_tls: switch("peer-auto-tls"),
        allowed: None,
    };
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) | (None, Some(_)) => {
            let flag = if tls.cert_file.is_some() {
                "peer-cert-file"
            } else {
                "peer-key-file"
            };
            return Err(invalid(
                flag,
                &value(flag),
                "--peer-cert-file and --peer-key-file must be given together",
            ));
        }
        (Some(_), Some(_)) if tls.auto_tls => {
            warnings.push("ignoring peer auto TLS since certs given".to_owned());
            tls.auto_tls = false;
        }
        _ => {}
    }
    tls.allowed = match (
        text("peer-cert-allowed-cn"),
        text("peer-cert-allowed-hostname"),
    ) {
        (Some(cn), Some(hostname)) => {
            return Err(invalid(
                "peer-cert-allowed-cn",
                &cn,
                format!(
                    "AllowedCN and AllowedHostname are mutually exclusive (cn={cn:?}, \
                     hostname={hostname:?})"
                ),
            ))
        }
        (Some(cn), None) => Some(oxetcd_tls::AllowedPeer::CommonName(cn)),
        (None, Some(hostname)) => Some(oxetcd_tls::AllowedPeer::Hostname(hostname)),
        (None, None) => None,
    };

    let configured = tls.has_identity() || tls.trusted_ca_file.is_some();
    for url in listen_peer_urls {
        if url.is_secure() && !tls.has_identity() {
            return Err(invalid(
                "listen-peer-urls",
                &url.url,
                format!(
                    "cannot listen on TLS for {}: KeyFile and CertFile are not presented \
                     (give --peer-cert-file and --peer-key-file, or --peer-auto-tls)",
                    url.addr
                ),
            ));
        }
        if !url.is_secure() && configured {
            warnings.push(format!(
                "scheme is HTTP while peer key and cert files are present; serving peer URL {} \
                 without TLS",
                url.url
            ));
        }
        if !url.is_secure() && tls.client_cert_auth {
            warnings.push(format!(
                "scheme is HTTP while --peer-client-cert-auth is enabled; ignoring client cert \
                 auth for peer URL {}",
                url.url
            ));
        }
    }
    let https = |url: &&String| url.starts_with("https://");
    let dialed_https = advertise_peer_urls
        .iter()
        .map(|url| ("initial-advertise-peer-urls", url))
        .chain(
            initial_cluster
                .iter()
                .flat_map(|m| &m.peer_urls)
                .map(|url| ("initial-cluster", url)),
        )
        .find(|(_, url)| https(url));
    if let Some((flag, url)) = dialed_https {
        if !tls.has_identity() {
            return Err(invalid(
                flag,
                url,
                format!(
                    "peer URL {url} uses TLS but no peer certificate is given (--peer-cert-file \
                     and --peer-key-file, or --peer-auto-tls)"
                ),
            ));
        }
    }
    let secure = listen_peer_urls.iter().any(ListenUrl::is_secure);
    if secure && tls.client_cert_auth && tls.trusted_ca_file.is_none() {
        return Err(invalid(
            "peer-trusted-ca-file",
            "",
            "--peer-client-cert-auth needs --peer-trusted-ca-file: peer certificates are \
             verified against it",
        ));
    }
    if tls.allowed.is_some() && tls.trusted_ca_file.is_none() {
        let flag = match tls.allowed {
            Some(oxetcd_tls::AllowedPeer::Hostname(_)) => "peer-cert-allowed-hostname",
            _ => "peer-cert-allowed-cn",
        };
        return Err(invalid(
            flag,
            &value(flag),
            "needs --peer-trusted-ca-file: only verified peer certificates are checked for it",
        ));
    }
    Ok(tls)
}

/// A parsed `http://host:port` or `https://host:port` URL.
struct Url {
    /// `scheme://host:port`, scheme in lower case, host as given (IPv6 in
    /// brackets).
    normalized: String,
    host: String,
    port: u16,
}

fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn parse_urls(flag: &'static str, value: &str) -> Result<Vec<String>, ConfigError> {
    let urls: Vec<String> = split_list(value)
        .map(|url| parse_url(flag, url).map(|u| u.normalized))
        .collect::<Result<_, _>>()?;
    if urls.is_empty() {
        return Err(invalid(flag, value, "at least one URL is required"));
    }
    Ok(urls)
}

fn parse_listen_urls(flag: &'static str, value: &str) -> Result<Vec<ListenUrl>, ConfigError> {
    let mut urls = Vec::new();
    for raw in split_list(value) {
        let url = parse_url(flag, raw)?;
        let ip = if url.host.eq_ignore_ascii_case("localhost") {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            let bare = url.host.trim_start_matches('[').trim_end_matches(']');
            bare.parse::<IpAddr>().map_err(|_| {
                invalid(
                    flag,
                    raw,
                    "expected an IP address or localhost in a URL to listen on",
                )
            })?
        };
        urls.push(ListenUrl {
            url: url.normalized,
            addr: SocketAddr::new(ip, url.port),
        });
    }
    if urls.is_empty() {
        return Err(invalid(flag, value, "at least one URL is required"));
    }
    Ok(urls)
}

fn parse_url(flag: &'static str, raw: &str) -> Result<Url, ConfigError> {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return Err(invalid(
            flag,
            raw,
            "expected a URL like http://127.0.0.1:2379",
        ));
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => "http",
        "https" => "https",
        _ => {
            return Err(invalid(
                flag,
                raw,
                format!("unsupported URL scheme {scheme:?}; use http:// or https://"),
            ))
        }
    };
    let authority = match rest.split_once('/') {
        Some((authority, "")) => authority,
        Some(_) => return Err(invalid(flag, raw, "a URL path is not allowed")),
        None => rest,
    };
    if authority.contains(['@', '?', '#']) {
        return Err(invalid(flag, raw, "expected http://host:port"));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && (!host.contains(':') || host.ends_with(']')) => {
            (host, port)
        }
        _ => return Err(invalid(flag, raw, "a port is required (http://host:port)")),
    };
    if host.starts_with('[') != host.ends_with(']') {
        return Err(invalid(
            flag,
            raw,
            "unbalanced brackets around an IPv6 address",
        ));
    }
    let port = port
        .parse::<u16>()
        .map_err(|_| invalid(flag, raw, format!("invalid port {port:?}")))?;
    Ok(Url {
        normalized: format!("{scheme}://{host}:{port}"),
        host: host.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            config.listen_client_urls[0].addr,
            "127.0.0.1:2379".parse().unwrap()
        );
        assert_eq!(config.advertise_client_urls, ["http://localhost:2379"]);
        assert_eq!(
            config.listen_peer_urls[0].addr,
            "127.0.0.1:2380".parse().unwrap()
        );
        assert_eq!(
            config.initial_advertise_peer_urls,
            ["http://localhost:2380"]
        );
        assert_eq!(config.initial_cluster_token, "etcd-cluster");
        assert_eq!(config.max_request_bytes, 1_572_864);
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.log_level, LogLevel::Info);
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
        assert_eq!(a.log_level, LogLevel::Debug);
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
        let addrs: Vec<SocketAddr> = config.listen_client_urls.iter().map(|u| u.addr).collect();
        assert_eq!(
            addrs,
            [
                "127.0.0.1:1234".parse().unwrap(),
                "[::1]:5678".parse().unwrap(),
                "0.0.0.0:9".parse().unwrap()
            ]
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
            "unixs://localhost:2379",
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
    fn https_client_urls_need_a_certificate() {
        let e = error(&["--listen-client-urls=https://127.0.0.1:2379"], &[]);
        assert_eq!(
            e.to_string(),
            "invalid value \"https://127.0.0.1:2379\" for flag --listen-client-urls: TLS \
             key/cert (--cert-file, --key-file) must be provided for client url \
             https://127.0.0.1:2379 with HTTPS scheme"
        );
        let config = run(
            &[
                "--listen-client-urls=http://127.0.0.1:2379,HTTPS://127.0.0.1:2380",
                "--advertise-client-urls=https://example.com:2380",
                "--cert-file=/c.pem",
                "--key-file",
                "/k.pem",
                "--trusted-ca-file=/ca.pem",
            ],
            &[],
        );
        let secure: Vec<bool> = config
            .listen_client_urls
            .iter()
            .map(ListenUrl::is_secure)
            .collect();
        assert_eq!(secure, [false, true]);
        assert_eq!(config.listen_client_urls[1].url, "https://127.0.0.1:2380");
        assert_eq!(config.advertise_client_urls, ["https://example.com:2380"]);
        assert_eq!(config.client_tls.cert_file, Some(PathBuf::from("/c.pem")));
        assert_eq!(config.client_tls.key_file, Some(PathBuf::from("/k.pem")));
        assert_eq!(
            config.client_tls.trusted_ca_file,
            Some(PathBuf::from("/ca.pem"))
        );
        // The plaintext URL next to TLS flags is worth a warning, as in etcd.
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(config.warnings[0].contains("http://127.0.0.1:2379"));
        // --auto-tls stands in for the files.
        let config = run(
            &["--listen-client-urls=https://127.0.0.1:2379", "--auto-tls"],
            &[],
        );
        assert!(config.client_tls.auto_tls);
        assert_eq!(
            config.client_tls,
            ClientTls {
                auto_tls: true,
                ..ClientTls::default()
            }
        );
    }

    #[test]
    fn tls_flags_are_checked() {
        let https = "--listen-client-urls=https://127.0.0.1:2379";
        let reason = |args: &[&str], env: &[(&str, &str)]| error(args, env).to_string();
        let r = reason(&[https, "--cert-file=/c.pem"], &[]);
        assert!(
            r.contains("--cert-file and --key-file must be given together"),
            "{r}"
        );
        let r = reason(&[https, "--key-file=/k.pem"], &[]);
        assert!(r.contains("must be given together"), "{r}");
        let r = reason(&[https, "--auto-tls", "--client-cert-auth"], &[]);
        assert!(
            r.contains("--client-cert-auth needs --trusted-ca-file"),
            "{r}"
        );
        let r = reason(&[https, "--auto-tls", "--tls-min-version=TLS1.1"], &[]);
        assert!(r.contains("TLS1.1 is not supported"), "{r}");
        let r = reason(
            &[
                https,
                "--auto-tls",
                "--tls-min-version=TLS1.3",
                "--tls-max-version=TLS1.2",
            ],
            &[],
        );
        assert!(r.contains("is above --tls-max-version"), "{r}");
        let r = reason(&[https, "--auto-tls", "--cipher-suites=TLS_NOPE"], &[]);
        assert!(r.contains("unknown cipher suite"), "{r}");
        let r = reason(
            &[
                https,
                "--auto-tls",
                "--tls-min-version=TLS1.3",
                "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ],
            &[],
        );
        assert!(r.contains("only TLS1.3 is enabled"), "{r}");

        let config = run(
            &[
                https,
                "--cert-file=/c.pem",
                "--key-file=/k.pem",
                "--auto-tls",
                "--tls-min-version",
                "TLS1.3",
            ],
            &[],
        );
        assert!(
            !config.client_tls.auto_tls,
            "certificates win over --auto-tls"
        );
        assert_eq!(
            config.client_tls.versions.min(),
            oxetcd_tls::TlsVersion::Tls13
        );
        assert!(config.warnings[0].contains("ignoring client auto TLS"));
        let config = run(
            &[
                https,
                "--auto-tls",
                "--cipher-suites",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA",
            ],
            &[],
        );
        assert_eq!(config.client_tls.cipher_suites.len(), 1);
        assert!(
            config
                .warnings
                .iter()
                .any(|w| w.contains("TLS_RSA_WITH_AES_128_CBC_SHA")),
            "{:?}",
            config.warnings
        );
    }

    #[test]
    fn tls_flags_come_from_the_environment_too() {
        let config = run(
            &[],
            &[
                ("ETCD_LISTEN_CLIENT_URLS", "https://127.0.0.1:2379"),
                ("ETCD_CERT_FILE", "/c.pem"),
                ("ETCD_KEY_FILE", "/k.pem"),
                ("ETCD_TRUSTED_CA_FILE", "/ca.pem"),
                ("ETCD_CLIENT_CERT_AUTH", "true"),
                ("ETCD_TLS_MAX_VERSION", "TLS1.2"),
                (
                    "ETCD_CIPHER_SUITES",
                    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                ),
            ],
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let tls = &config.client_tls;
        assert!(tls.client_cert_auth);
        assert_eq!(tls.trusted_ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(tls.versions.max(), oxetcd_tls::TlsVersion::Tls12);
        assert_eq!(tls.cipher_suites.len(), 1);
        let config = run(
            &["--listen-client-urls=https://127.0.0.1:2379"],
            &[("ETCD_AUTO_TLS", "true")],
        );
        assert!(config.client_tls.auto_tls);
    }

    #[test]
    fn peer_tls_flags_are_checked_like_etcds() {
        let https = [
            "--listen-peer-urls=https://127.0.0.1:2380",
            "--initial-advertise-peer-urls=https://127.0.0.1:2380",
            "--initial-cluster=default=https://127.0.0.1:2380",
        ];
        let with = |extra: &[&str]| -> Vec<String> {
            https.iter().chain(extra).map(|s| (*s).to_owned()).collect()
        };
        let reason = |extra: &[&str]| {
            let args = with(extra);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            error(&args, &[]).to_string()
        };
        // An https:// peer URL needs a certificate, as in etcd.
        let e = reason(&[]);
        assert!(
            e.contains(
                "cannot listen on TLS for 127.0.0.1:2380: KeyFile and CertFile are not presented"
            ),
            "{e}"
        );
        let e = error(
            &[
                "--initial-advertise-peer-urls=https://127.0.0.1:2380",
                "--initial-cluster=default=https://127.0.0.1:2380",
            ],
            &[],
        )
        .to_string();
        assert!(e.contains("no peer certificate is given"), "{e}");
        let e = reason(&["--peer-cert-file=/c.pem"]);
        assert!(e.contains("must be given together"), "{e}");
        let e = reason(&["--peer-auto-tls", "--peer-client-cert-auth"]);
        assert!(e.contains("needs --peer-trusted-ca-file"), "{e}");
        let e = reason(&[
            "--peer-auto-tls",
            "--peer-cert-allowed-cn=a",
            "--peer-cert-allowed-hostname=b",
        ]);
        assert!(
            e.contains("AllowedCN and AllowedHostname are mutually exclusive"),
            "{e}"
        );
        let e = reason(&["--peer-auto-tls", "--peer-cert-allowed-cn=a"]);
        assert!(
            e.contains("--peer-cert-allowed-cn") && e.contains("trusted-ca"),
            "{e}"
        );

        let args = with(&[
            "--peer-cert-file=/p.pem",
            "--peer-key-file=/pk.pem",
            "--peer-trusted-ca-file=/ca.pem",
            "--peer-client-cert-auth",
            "--peer-cert-allowed-hostname=localhost",
            "--peer-auto-tls",
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let config = run(&args, &[]);
        assert_eq!(
            config.peer_tls,
            PeerTls {
                cert_file: Some(PathBuf::from("/p.pem")),
                key_file: Some(PathBuf::from("/pk.pem")),
                trusted_ca_file: Some(PathBuf::from("/ca.pem")),
                client_cert_auth: true,
                auto_tls: false,
                allowed: Some(oxetcd_tls::AllowedPeer::Hostname("localhost".into())),
            }
        );
        assert!(config.warnings[0].contains("ignoring peer auto TLS"));
        assert!(config.listen_peer_urls[0].is_secure());

        // --peer-auto-tls stands in for the files; http:// peer URLs with
        // TLS flags are served in plaintext with a warning.
        let args = with(&["--peer-auto-tls"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(run(&args, &[]).peer_tls.auto_tls);
        let config = run(&["--peer-auto-tls", "--peer-client-cert-auth"], &[]);
        assert!(config
            .warnings
            .iter()
            .any(|w| w.contains("serving peer URL")));
        assert!(config
            .warnings
            .iter()
            .any(|w| w.contains("ignoring client cert auth")));
        assert_eq!(
            run(&["--peer-auto-tls=false"], &[]).peer_tls,
            PeerTls::default()
        );
    }

    #[test]
    fn peer_tls_flags_come_from_the_environment_too() {
        let config = run(
            &[],
            &[
                ("ETCD_LISTEN_PEER_URLS", "https://127.0.0.1:2380"),
                ("ETCD_INITIAL_ADVERTISE_PEER_URLS", "https://127.0.0.1:2380"),
                ("ETCD_INITIAL_CLUSTER", "default=https://127.0.0.1:2380"),
                ("ETCD_PEER_CERT_FILE", "/p.pem"),
                ("ETCD_PEER_KEY_FILE", "/pk.pem"),
                ("ETCD_PEER_TRUSTED_CA_FILE", "/ca.pem"),
                ("ETCD_PEER_CLIENT_CERT_AUTH", "true"),
                ("ETCD_PEER_CERT_ALLOWED_CN", "member"),
            ],
        );
        let tls = &config.peer_tls;
        assert!(tls.client_cert_auth);
        assert_eq!(tls.cert_file, Some(PathBuf::from("/p.pem")));
        assert_eq!(tls.trusted_ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            tls.allowed,
            Some(oxetcd_tls::AllowedPeer::CommonName("member".into()))
        );
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = run(
            &[
                "--listen-peer-urls=https://127.0.0.1:2380",
                "--initial-advertise-peer-urls=https://127.0.0.1:2380",
                "--initial-cluster=default=https://127.0.0.1:2380",
            ],
            &[("ETCD_PEER_AUTO_TLS", "true")],
        );
        assert!(config.peer_tls.auto_tls);
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
        assert_eq!(
            parse(["-h"], NO_ENV),
            Err(ConfigError::UnknownFlag("-h".into()))
        );
        assert_eq!(parse(["--version"], NO_ENV), Ok(Command::Version));
        assert_eq!(parse(["--version=true"], NO_ENV), Ok(Command::Version));
        assert!(matches!(
            parse(["--version=false"], NO_ENV),
            Ok(Command::Run(_))
        ));
        assert!(version().starts_with("etcd Version: 3.6.0\n"));
        assert!(usage("oxetcd").contains("--max-request-bytes BYTES"));
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
        assert_eq!(
            config.listen_client_urls[0].addr,
            "127.0.0.1:4000".parse().unwrap()
        );
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
    fn peer_urls_and_token_give_the_member_id() {
        // With the default name, etcd requires --initial-cluster to match
        // the advertised URLs; another name derives it from them.
        let a = run(
            &[
                "--name=n1",
                "--initial-advertise-peer-urls",
                "http://10.0.0.1:2380",
            ],
            &[],
        );
        let b = run(
            &[
                "--name=n1",
                "--initial-advertise-peer-urls",
                "http://10.0.0.1:2380",
                "--initial-cluster-token",
                "t",
            ],
            &[],
        );
        let expected = ids::member_id(&["http://10.0.0.1:2380"], "etcd-cluster");
        assert_eq!(a.member_id(), expected);
        assert_ne!(a.member_id(), b.member_id());
        assert_eq!(a.node_config().member_id, expected);
        assert_eq!(a.node_config().cluster_id, ids::cluster_id(&[expected]));
    }

    #[test]
    fn cluster_flags_default_like_etcd() {
        let config = run(&[], &[]);
        assert_eq!(
            config.initial_cluster,
            [InitialMember {
                name: "default".into(),
                peer_urls: vec!["http://localhost:2380".into()],
            }]
        );
        assert_eq!(config.initial_cluster_state, ClusterState::New);
        assert_eq!(config.heartbeat_interval_ms, 100);
        assert_eq!(config.election_timeout_ms, 1000);
        assert_eq!(config.snapshot_count, 10_000);
        assert_eq!(config.max_learners, 1);
        assert!(config.initial_peers().is_empty());
        // A single default member keeps etcd's well-known IDs.
        assert_eq!(format!("{:x}", config.cluster_id()), "cdf818194e3a8c32");
    }

    #[test]
    fn initial_cluster_defaults_to_the_name_when_only_the_name_is_set() {
        let config = run(
            &[
                "--name=n1",
                "--initial-advertise-peer-urls=http://127.0.0.1:12380,http://10.0.0.1:12380",
            ],
            &[],
        );
        assert_eq!(config.initial_cluster.len(), 1);
        assert_eq!(config.initial_cluster[0].name, "n1");
        assert_eq!(
            config.initial_cluster[0].peer_urls,
            ["http://10.0.0.1:12380", "http://127.0.0.1:12380"]
        );
        assert_eq!(config.cluster_id(), ids::cluster_id(&[config.member_id()]));
    }

    #[test]
    fn three_member_cluster_ids() {
        let cluster = "a=http://127.0.0.1:1,b=http://127.0.0.1:2,c=http://127.0.0.1:3";
        let member = |name: &str, port: u16| {
            run(
                &[
                    "--name",
                    name,
                    "--initial-advertise-peer-urls",
                    &format!("http://127.0.0.1:{port}"),
                    "--initial-cluster",
                    cluster,
                    "--initial-cluster-token",
                    "tok",
                    "--initial-cluster-state=existing",
                ],
                &[],
            )
        };
        let (a, b, c) = (member("a", 1), member("b", 2), member("c", 3));
        assert_eq!(a.initial_cluster_state, ClusterState::Existing);
        let ids = [a.member_id(), b.member_id(), c.member_id()];
        assert_eq!(ids[0], ids::member_id(&["http://127.0.0.1:1"], "tok"));
        // Every member derives the same cluster ID from the same flags.
        assert_eq!(a.cluster_id(), ids::cluster_id(&ids));
        assert_eq!(a.cluster_id(), b.cluster_id());
        assert_eq!(b.cluster_id(), c.cluster_id());
        assert_eq!(
            a.initial_peers(),
            [
                (ids[1], vec!["http://127.0.0.1:2".to_owned()]),
                (ids[2], vec!["http://127.0.0.1:3".to_owned()])
            ]
        );
        let transport = a.peer_transport_config();
        assert_eq!(transport.member_id, ids[0]);
        // Joining (`existing`), a member learns the ID from its peers (see
        // `running_cluster_id`).
        assert_eq!(transport.cluster_id, 0);
        assert_eq!(a.node_config().cluster_id, 0);
        assert!(transport.frame_bytes_max >= a.max_request_bytes);
        // One member listed with two URLs (name repeated).
        let two = run(
            &[
                "--initial-advertise-peer-urls=http://127.0.0.1:2,http://127.0.0.1:1",
                "--initial-cluster=default=http://127.0.0.1:1,default=http://127.0.0.1:2",
            ],
            &[],
        );
        assert_eq!(two.initial_cluster.len(), 1);
        assert_eq!(two.initial_cluster[0].peer_urls.len(), 2);
    }

    #[test]
    fn initial_cluster_is_checked_like_etcd() {
        let reason = |args: &[&str]| match error(args, &[]) {
            ConfigError::InvalidValue { flag, reason, .. } => format!("{flag}: {reason}"),
            other => panic!("{other:?}"),
        };
        // This member must be listed.
        let r = reason(&["--name=x", "--initial-cluster=a=http://127.0.0.1:1"]);
        assert!(r.contains("couldn't find local name \"x\""), "{r}");
        // With exactly its advertised URLs.
        let r = reason(&[
            "--initial-advertise-peer-urls=http://127.0.0.1:9",
            "--initial-cluster=default=http://127.0.0.1:1",
        ]);
        assert!(
            r.contains("--initial-cluster has default=http://127.0.0.1:1 but missing from --initial-advertise-peer-urls=http://127.0.0.1:9"),
            "{r}"
        );
        // The default name with custom advertised URLs and no
        // --initial-cluster fails as in etcd.
        let r = reason(&["--initial-advertise-peer-urls=http://127.0.0.1:9"]);
        assert!(
            r.contains("missing from --initial-advertise-peer-urls"),
            "{r}"
        );
        let r = reason(&[
            "--initial-advertise-peer-urls=http://127.0.0.1:1,http://127.0.0.1:2",
            "--initial-cluster=default=http://127.0.0.1:1",
        ]);
        assert!(
            r.contains("--initial-advertise-peer-urls has http://127.0.0.1:2"),
            "{r}"
        );
        let r =
            reason(&["--initial-cluster=default=http://localhost:2380,b=http://localhost:2380"]);
        assert!(r.contains("duplicate URL"), "{r}");
        for bad in ["default", "default=localhost:2380", ""] {
            let r = reason(&["--initial-cluster", bad]);
            assert!(r.starts_with("initial-cluster: "), "{bad}: {r}");
        }
        let r = reason(&["--initial-cluster-state=maybe"]);
        assert!(r.starts_with("initial-cluster-state: "), "{r}");
    }

    #[test]
    fn raft_timing_is_checked_like_etcd() {
        let config = run(&["--heartbeat-interval=50", "--election-timeout=250"], &[]);
        assert_eq!(
            (config.heartbeat_interval_ms, config.election_timeout_ms),
            (50, 250)
        );
        let e = error(&["--heartbeat-interval=300"], &[]).to_string();
        assert!(
            e.contains("--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"),
            "{e}"
        );
        let e = error(&["--election-timeout=60000"], &[]).to_string();
        assert!(e.contains("is too long"), "{e}");
        for args in [
            &["--heartbeat-interval=0"][..],
            &["--election-timeout=0"],
            &["--election-timeout=soon"],
            &["--max-learners=0"],
            &["--snapshot-count=-1"],
        ] {
            assert!(
                matches!(error(args, &[]), ConfigError::InvalidValue { .. }),
                "{args:?}"
            );
        }
        let config = run(&["--snapshot-count=0", "--max-learners=3"], &[]);
        assert_eq!(config.snapshot_count, 10_000);
        assert_eq!(config.max_learners, 3);
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        let config = run(
            &[],
            &[
                ("ETCD_ELECTION_TIMEOUT", "2000"),
                ("ETCD_INITIAL_CLUSTER_STATE", "existing"),
            ],
        );
        assert_eq!(config.election_timeout_ms, 2000);
        assert_eq!(config.initial_cluster_state, ClusterState::Existing);
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
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
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
        assert!(config.warnings.is_empty(), "{:?}", config.warnings);
        let config = run(
            &["--experimental-enable-lease-checkpoint=false"],
            &[("ETCD_EXPERIMENTAL_ENABLE_LEASE_CHECKPOINT", "true")],
        );
        assert!(
            config.warnings.len() == 1 && config.warnings[0].contains("shadowed"),
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
        assert!(usage("oxetcd").contains("--experimental-lease-checkpoint-interval DURATION"));
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
}
