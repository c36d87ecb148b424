//! Flags, `ETCD_*` environment variables and the YAML config file, with
//! etcd's names, defaults and precedence.
//!
//! Design: one table (`flags/`) names every flag of etcd 3.4 to 3.7, its
//! value syntax, default, help text and what oxetcd does with it. [`parse`]
//! is a function of the arguments and the environment (it reads only the
//! file `--config-file` names), so every rule is unit-tested: `--flag value`
//! and `--flag=value` (one or two dashes), a flag beats its `ETCD_*`
//! variable, a config file replaces both, an unknown flag or a malformed
//! value is an error naming the flag, an unknown `ETCD_*` variable only a
//! warning. Flags etcd 3.6 renamed from `--experimental-*` are accepted
//! under both names, the plain one winning, the old one warned about.
//! Every flag's value is kept in [`Config::settings`]; flags whose feature
//! oxetcd lacks are stored (typed, in [`Config::pending`]) and logged as
//! `not yet supported` when set, or refused where ignoring them could cost
//! data. [`from_process`] wraps it for `main`: help and version go to
//! stdout with exit code 0, errors to stderr with exit code 1.
//!
//! TLS flags of the client and peer ports are checked here as etcd checks
//! them (an `https://` URL needs `--cert-file` and `--key-file` or
//! `--auto-tls`, their `--peer-*` forms for peer URLs); the files
//! themselves are read when the server starts (`serve/tls.rs`,
//! `peer/tls.rs`).

mod build;
mod cluster;
mod discovery;
mod file;
mod flags;
mod gates;
mod help;
mod logging;
mod parse;
mod settings;
mod tls;
mod urls;
mod values;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use cluster::{ClusterState, InitialMember};
pub use discovery::{Discovery, V3Discovery};
pub use gates::{FeatureGates, Gate, Stage, FEATURE_GATES};
pub use help::{usage, version};
pub use logging::{LogFormat, LogLevel, LogOutput, Logging};
pub use parse::parse;
pub use settings::{AutoCompaction, Pending, Settings};
pub use tls::PortTls;
pub use urls::ListenUrl;
pub use values::Value;
// The JWT `ttl` option of --auth-token is a Go duration too.
pub(crate) use values::parse_duration;

/// A fully resolved server configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Human-readable member name (`--name`).
    pub name: String,
    /// Where the raft log and the backend live (`--data-dir`).
    pub data_dir: PathBuf,
    /// Addresses to serve clients on (`--listen-client-urls`).
    pub listen_client_urls: Vec<ListenUrl>,
    /// TLS of the `https://` client URLs.
    pub client_tls: PortTls,
    /// TLS of the `https://` peer URLs (its versions and cipher suites are
    /// the client side's: etcd has one set of flags for them).
    pub peer_tls: PortTls,
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
    /// Where a new member learns its initial cluster instead, if anywhere
    /// (v3 discovery or DNS SRV); until then `initial_cluster` is this
    /// member alone.
    pub discovery: Option<Discovery>,
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
    /// `--strict-reconfig-check`: refuse membership changes that would
    /// cost quorum.
    pub strict_reconfig_check: bool,
    /// HTTP/2 streams one client connection may have open at once
    /// (`--max-concurrent-streams`; etcd's default: no practical limit).
    pub max_concurrent_streams: u32,
    /// bcrypt's cost for hashing user passwords (`--bcrypt-cost`).
    pub bcrypt_cost: u32,
    /// `--auth-token`, as given (`simple`, or `jwt,...`).
    pub auth_token: String,
    /// How long a simple token lives after its last use
    /// (`--auth-token-ttl`).
    pub auth_token_ttl: Duration,
    /// `--logger`, `--log-level`, `--log-format`, `--log-outputs`.
    pub logging: Logging,
    /// `--metrics extensive`: the gRPC handling-time histograms too.
    pub metrics_extensive: bool,
    /// `--listen-metrics-urls`: more places serving `/metrics` and
    /// `/health` (over TLS with the client port's certificate for
    /// `https://`).
    pub listen_metrics_urls: Vec<ListenUrl>,
    /// The server version this member runs as: this build's, or one minor
    /// below it with `--unsafe-run-as-version`.
    pub server_version: oxetcd_core::version::Version,
    /// Settings of features oxetcd does not have yet.
    pub pending: Pending,
    /// IDs known from somewhere other than the flags: stored by an
    /// earlier start, or learned from the cluster's members at join. When
    /// set they win over the IDs the flags derive (see `identity.rs`).
    pub known_ids: Option<KnownIds>,
    /// Every flag's value, given or default.
    pub settings: Settings,
    /// Things worth a warning once logging is up (unknown `ETCD_*`
    /// variables, variables shadowed by flags).
    pub warnings: Vec<String>,
}

/// Member and cluster IDs that override what the flags derive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KnownIds {
    /// This member's ID.
    pub member_id: u64,
    /// The cluster's ID; 0 when only the stored one (in the log) knows it.
    pub cluster_id: u64,
    /// Other members' IDs by their peer URLs (normalized and sorted, as in
    /// [`InitialMember::peer_urls`]).
    pub members: Vec<(Vec<String>, u64)>,
}

impl Config {
    /// This member's ID: the known one, else the one derived from its
    /// advertised peer URLs and the cluster token.
    pub fn member_id(&self) -> u64 {
        match &self.known_ids {
            Some(known) => known.member_id,
            None => self.derived_member_id(),
        }
    }

    /// The member ID the flags give: the advertised peer URLs and the
    /// cluster token.
    pub fn derived_member_id(&self) -> u64 {
        oxetcd_urls::member_id(
            &self.initial_advertise_peer_urls,
            &self.initial_cluster_token,
        )
    }

    /// The ID of a member of `--initial-cluster`: the known one for its
    /// peer URLs, else derived from them and the token.
    fn id_of(&self, member: &InitialMember) -> u64 {
        if member.name == self.name {
            return self.member_id();
        }
        self.known_ids
            .iter()
            .flat_map(|known| known.members.iter())
            .find(|(urls, _)| *urls == member.peer_urls)
            .map_or_else(
                || member.member_id(&self.initial_cluster_token),
                |(_, id)| *id,
            )
    }

    /// Replaces the initial cluster with the one discovery found
    /// (`name=url,…`), which must hold this member with its advertised
    /// peer URLs.
    pub fn discovered(&mut self, initial_cluster: &str) -> Result<(), ConfigError> {
        self.initial_cluster = cluster::parse_initial_cluster(
            &self.name,
            &self.initial_advertise_peer_urls,
            initial_cluster,
        )?;
        Ok(())
    }

    /// The ID of the cluster `--initial-cluster` describes, derived from
    /// its members' IDs as etcd derives it. (A member joining an existing
    /// cluster learns the real ID from its peers: `running_cluster_id`.)
    pub fn cluster_id(&self) -> u64 {
        oxetcd_urls::cluster_id(&self.initial_cluster, &self.initial_cluster_token)
    }

    /// The cluster ID this member starts with. A member joining with
    /// `--initial-cluster-state existing` cannot derive it (the cluster's
    /// members may have changed since it was created), so it starts with 0
    /// and takes the ID stored in its data directory or, on a first start,
    /// learns it from its peers (see `peer/wire.rs`).
    pub fn running_cluster_id(&self) -> u64 {
        if let Some(known) = self.known_ids.as_ref().filter(|k| k.cluster_id != 0) {
            return known.cluster_id;
        }
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
            .map(|m| (self.id_of(m), m.peer_urls.clone()))
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

    /// Whether this member checks its data against its peers' before it
    /// starts (`--experimental-initial-corrupt-check`, 3.6's
    /// `--feature-gates=InitialCorruptCheck=true`).
    pub fn initial_corrupt_check(&self) -> bool {
        self.feature_gates().enabled("InitialCorruptCheck")
    }

    /// Every feature gate's value: set by `--feature-gates` (or an old
    /// `--experimental-*` switch), by `AllAlpha`/`AllBeta`, or its default.
    pub fn feature_gates(&self) -> FeatureGates {
        FeatureGates::resolve(FEATURE_GATES, &self.pending.feature_gates)
    }

    /// How often the leader compares the hashes recorded at compactions
    /// with its peers', if it does (`--experimental-compact-hash-check-enabled`,
    /// 3.6's `--feature-gates=CompactHashCheck=true`, every
    /// `--compact-hash-check-time`).
    pub fn compact_hash_check(&self) -> Option<Duration> {
        let on = self.feature_gates().enabled("CompactHashCheck");
        let every = self.pending.compact_hash_check_time;
        (on && !every.is_zero()).then_some(every)
    }

    /// When requests are slow enough to warn about
    /// (`--warning-apply-duration`, `--warning-unary-request-duration`).
    pub fn slow_requests(&self) -> crate::slow_requests::SlowRequests {
        crate::slow_requests::SlowRequests {
            apply: self.settings.duration("warning-apply-duration"),
            unary: self.settings.duration("warning-unary-request-duration"),
        }
    }

    /// The node's configuration.
    pub fn node_config(&self) -> oxetcd_core::Config {
        let member_id = self.member_id();
        let election_timeout = Duration::from_millis(self.election_timeout_ms);
        let initial_members = self
            .initial_cluster
            .iter()
            .map(|m| oxetcd_core::InitialMember {
                id: self.id_of(m),
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
                checkpoint_persist: self.feature_gates().enabled("LeaseCheckpointPersist"),
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
            strict_reconfig_check: self.strict_reconfig_check,
            learner_auto_promote: self.feature_gates().enabled("LearnerAutoPromote"),
            priority_request: self.feature_gates().enabled("PriorityRequest"),
            fast_lease_keep_alive: self.feature_gates().enabled("FastLeaseKeepAlive"),
            cluster_token: self.initial_cluster_token.clone(),
            // etcd's request timeout: 5 s plus two election timeouts.
            request_timeout: Duration::from_secs(5) + 2 * election_timeout,
            auth_token_ttl: self.auth_token_ttl,
            quota: oxetcd_core::alarm::Quota::from_flag(self.pending.quota_backend_bytes),
            auto_compaction: self.pending.auto_compaction,
            downgrade_check_interval: self.settings.duration("downgrade-check-time"),
            server_version: self.server_version,
            ..oxetcd_core::Config::single(&self.name)
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
    /// The config file cannot be read or is not YAML.
    ConfigFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
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
            Self::ConfigFile { path, reason } => {
                write!(f, "cannot use config file {path}: {reason}")
            }
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

impl From<oxetcd_urls::InvalidValue> for ConfigError {
    fn from(e: oxetcd_urls::InvalidValue) -> Self {
        Self::InvalidValue {
            flag: e.flag,
            value: e.value,
            reason: e.reason,
        }
    }
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
