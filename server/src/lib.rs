//! oxetcd-server: everything the runtimes share.
//!
//! A runtime crate implements [`Runtime`] (spawn, blocking work, accept,
//! sleep, signals), parses flags with [`config::from_process`] and calls
//! [`run`]. Everything else is here, written once:
//!
//! - [`auth_token`]: `--auth-token`, and etcd's JWT tokens.
//! - [`compact_hash_check`]: the leader's check of the hashes recorded at
//!   compactions.
//! - [`config`]: flags and `ETCD_*` variables.
//! - [`corruption`]: the initial and periodic `HashKV` comparisons with
//!   the peers, and the one place corruption is reported.
//! - [`driver`]: the node on its own thread, the log writer, the [`Handle`]
//!   services use.
//! - [`grpc`]: the etcd v3 services and the router in front of them.
//! - [`http`]: `/health`, `/version`, `/metrics`.
//! - [`metrics`]: etcd's Prometheus metrics, and the `--listen-metrics-urls`
//!   listeners.
//! - [`peer`]: the peer transport (raft messages and snapshots over TCP,
//!   with TLS for `https://` peer URLs).
//! - [`runtime`]: the [`Runtime`] trait and hyper's executor and timer on it.
//! - [`slow_requests`]: etcd's warnings for slow applies and requests.
//! - `http2` (private): HTTP/2 frames, HPACK and one connection's state
//!   machine, sans-io.
//! - `serve` (private): listeners, accept loops, one connection's HTTP/1.1
//!   (hyper) and HTTP/2 (`http2`, h2c or over TLS for `https://` URLs),
//!   and the gRPC-or-HTTP split by content type.
//!
//! This crate never starts a runtime, never spawns a thread except the
//! driver's two (and, at start, one that counts the backend's keys for
//! the metrics), and never touches the node other than through the driver.

#![warn(missing_docs, unreachable_pub)]

pub mod allocator;
pub mod auth_token;
pub mod compact_hash_check;
pub mod config;
pub mod corruption;
mod dial;
mod discovery;
pub mod driver;
pub mod gateway;
pub mod grpc;
pub mod http;
mod http2;
mod identity;
mod log_budget;
mod log_format;
pub mod metrics;
pub mod peer;
pub mod runtime;
mod serve;
pub mod slow_requests;
pub mod socket;
#[cfg(test)]
mod test_io;
mod tls_accept;
pub mod watch_routes;

use std::fmt;
use std::process::ExitCode;
use std::sync::Arc;

use oxetcd_core::storage::{LogStore, StorageError};
use tracing::{info, warn};

pub use config::Config;
pub use driver::Handle;
pub use http2::UNANSWERED_RESETS_MAX;
pub use runtime::Runtime;
pub use socket::{BoundSocket, Either, Remote, SocketAddress};

/// Why the server could not start or run.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The data directory could not be created or opened.
    DataDir(String),
    /// The node refused to start on the stored state.
    Node(oxetcd_core::Error),
    /// A listener could not be bound.
    Bind {
        /// The URL asked for.
        url: String,
        /// What went wrong.
        error: std::io::Error,
    },
    /// Signal handlers could not be installed.
    Signals(std::io::Error),
    /// The client port's TLS could not be set up (a certificate, key or
    /// CA file is missing or unusable).
    Tls(oxetcd_tls::TlsError),
    /// The peer links' TLS could not be set up.
    PeerTls(oxetcd_tls::TlsError),
    /// A `--log-outputs` file could not be opened (as in etcd, fatal).
    LogOutput(String),
    /// `--auth-token` names keys or options that cannot be used.
    AuthToken(auth_token::TokenConfigError),
    /// The initial corruption check found this member's data diverged
    /// from its peers' (or could not hash it).
    Corrupt(String),
    /// Discovery could not find the initial cluster.
    Discovery(String),
    /// A member joining an existing cluster could not learn its ID from
    /// the cluster, or its flags do not match the cluster.
    Join(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataDir(message) => write!(f, "cannot use the data directory: {message}"),
            Self::Node(e) => write!(f, "cannot start the node: {e}"),
            Self::Bind { url, error } => write!(f, "cannot listen on {url}: {error}"),
            Self::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
            Self::Tls(e) => write!(f, "cannot set up client TLS: {e}"),
            Self::AuthToken(e) => write!(f, "cannot set up auth tokens: {e}"),
            Self::PeerTls(e) => write!(f, "cannot set up peer TLS: {e}"),
            Self::LogOutput(message) => write!(f, "{message}"),
            Self::Corrupt(message) => write!(f, "{message}"),
            Self::Discovery(message) => write!(f, "discovery failed: {message}"),
            Self::Join(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs the server until SIGINT or SIGTERM: opens storage, starts the node,
/// serves clients, and on a signal stops the node and syncs the backend.
pub async fn run<R: Runtime>(runtime: R, mut config: Config) -> Result<(), RunError> {
    init_logging(&config.logging)?;
    for warning in &config.warnings {
        warn!("{warning}");
    }
    let shutdown = runtime.shutdown_signal().map_err(RunError::Signals)?;

    // Bind first: a busy port fails before the node starts.
    let listeners = serve::bind(&runtime, &config.listen_client_urls)?;
    let metrics_listeners = serve::bind(&runtime, &config.listen_metrics_urls)?;
    create_data_dir(&config.data_dir)?;
    // Certificates are read (or, with --auto-tls, made) before the node
    // starts: a bad file stops the server before it joins anything.
    let client_tls = serve::tls::server_config(&config)?;
    let tokens = auth_token::TokenConfig::parse(&config.auth_token, config.auth_token_ttl)
        .map_err(RunError::AuthToken)?;
    let peer_tls = peer::tls::configure(&config).map_err(RunError::PeerTls)?;
    let peer_listeners = bind_peers(&config)?;
    import_etcd_data_dir(&config)?;
    let (log, kv) = oxetcd_storage::open(&config.data_dir)
        .map_err(|e| RunError::DataDir(format!("{}: {e}", config.data_dir.display())))?;
    let fresh = is_fresh(&log, &config.data_dir)?;
    if fresh {
        if let Some(cluster) = discovery::initial_cluster(&runtime, &config)
            .await
            .map_err(RunError::Discovery)?
        {
            config
                .discovered(&cluster)
                .map_err(|e| RunError::Discovery(e.to_string()))?;
        }
    }
    identity::settle(&runtime, &mut config, peer_tls.clone(), &log, fresh).await?;
    let metrics = Arc::new(metrics::Metrics::new(
        &metrics::MetricsSettings::from_config(&config),
    ));
    {
        let metrics = metrics.clone();
        kv.observe_commits(Box::new(move |took| metrics.observe_backend_commit(took)));
    }
    let blocking: driver::Blocking = {
        let runtime = runtime.clone();
        Arc::new(move |work| runtime.spawn_blocking(work))
    };
    let mut mailbox = driver::Mailbox::default();
    mailbox.warn_slow_requests(config.slow_requests());
    let removal = mailbox.removal();
    let readiness = mailbox.readiness();
    let transport = start_peers(
        &runtime,
        &config,
        peer_tls,
        peer_listeners,
        &log,
        &mailbox,
        &metrics,
    )?;
    let link: Arc<dyn driver::PeerLink> = Arc::new(transport.clone());
    let node_config = config.node_config();
    let request_timeout = node_config.request_timeout;
    if config.initial_corrupt_check() {
        let me = config.member_id();
        let peers = config.initial_peers();
        corruption::check_before_start(&runtime, &transport, &kv, me, peers, request_timeout)
            .await
            .map_err(RunError::Corrupt)?;
    }
    let compact_hash_check = config.compact_hash_check();
    if compact_hash_check.is_some() {
        kv.keep_compaction_hashes();
    }
    let handle =
        driver::start_with_peers(node_config, log, kv, blocking, mailbox, Some(link), metrics)
            .await
            .map_err(RunError::Node)?;
    transport.serve_hash_kv(hash_kv_service(&handle));
    transport.serve_members(members_service(&handle));
    // Metrics answer from the start, before the member is ready.
    metrics::serve_metrics_urls(
        &runtime,
        handle.clone(),
        metrics_listeners,
        client_tls.clone(),
    );
    info!(
        name = %config.name,
        member_id = %format_args!("{:x}", config.member_id()),
        data_dir = %config.data_dir.display(),
        "node started"
    );

    let removed = async {
        // A dropped sender: the node stopped for another reason, which the
        // signal path handles.
        if removal.await.is_err() {
            std::future::pending::<()>().await;
        }
        true
    };
    let signalled = async {
        shutdown.await;
        false
    };
    let (removed, signalled) = (std::pin::pin!(removed), std::pin::pin!(signalled));
    let mut stopping = futures_util::future::select(removed, signalled);
    // Clients are served once the member is ready, as etcd serves them:
    // connections made before wait in the listen backlog, and the first
    // answer already has a leader and the membership behind it.
    let ready = async {
        match readiness.await {
            Ok(cluster_id) => cluster_id,
            Err(_) => std::future::pending().await,
        }
    };
    let removed = match futures_util::future::select(std::pin::pin!(ready), &mut stopping).await {
        futures_util::future::Either::Left((cluster_id, _)) => {
            serve::start(
                &runtime,
                &config,
                handle.clone(),
                listeners,
                client_tls,
                tokens,
            );
            info!(
                "published {{Name:{} ClientURLs:[{}]}} to cluster {:x}",
                config.name,
                config.advertise_client_urls.join(" "),
                cluster_id
            );
            // The cluster version once known, else this member's own.
            let capabilities = handle
                .metrics()
                .cluster_version()
                .unwrap_or(config.server_version);
            info!(
                "enabled capabilities for version {}",
                capabilities.major_minor_string()
            );
            info!("ready to serve client requests");
            let every = config.pending.corrupt_check_time;
            if !every.is_zero() {
                runtime.spawn(corruption::monitor(
                    runtime.clone(),
                    handle.clone(),
                    transport.clone(),
                    config.member_id(),
                    every,
                    request_timeout,
                ));
            }
            if let Some(every) = compact_hash_check {
                runtime.spawn(compact_hash_check::monitor(
                    runtime.clone(),
                    handle.clone(),
                    transport.clone(),
                    config.member_id(),
                    every,
                    request_timeout,
                ));
            }
            stopping.await.factor_first().0
        }
        futures_util::future::Either::Right((stopped, _)) => stopped.factor_first().0,
    };
    if removed {
        // etcd exits cleanly too: the removal is the cluster's decision.
        warn!("this member was removed from the cluster; exiting");
    } else {
        info!("received a stop signal; shutting down");
        handle.stop().await;
    }
    transport.shutdown();
    info!("stopped");
    Ok(())
}

/// How this member answers its peers' `HashKV` questions: on its own
/// applied state, as the Maintenance service answers clients.
fn hash_kv_service<K: oxetcd_core::storage::KvStore>(handle: &Handle<K>) -> peer::HashKvService {
    let handle = handle.clone();
    Arc::new(move |revision| {
        let handle = handle.clone();
        Box::pin(async move { handle.hash_kv(revision).await })
    })
}

/// How this member tells a joining peer the membership (its own view, as
/// `MemberList` without `linearizable` answers), the cluster version and
/// the downgrade in progress.
fn members_service<K: oxetcd_core::storage::KvStore>(handle: &Handle<K>) -> peer::MembersService {
    use oxetcd_core::{Request, Response};
    use oxetcd_proto::etcdserverpb::MemberListRequest;
    let handle = handle.clone();
    Arc::new(move || {
        let handle = handle.clone();
        Box::pin(async move {
            let list = Request::MemberList(MemberListRequest {
                linearizable: false,
            });
            let Response::MemberList(members) = handle.request(list).await? else {
                return Err(oxetcd_core::Error::Stopped);
            };
            let Response::Status(status) = handle.request(Request::Status).await? else {
                return Err(oxetcd_core::Error::Stopped);
            };
            let downgrade_target = status
                .downgrade_info
                .filter(|info| info.enabled)
                .and_then(|info| oxetcd_core::version::Version::parse_stored(&info.target_version));
            Ok(peer::ClusterFacts {
                members,
                cluster_version: handle.metrics().cluster_version(),
                downgrade_target,
            })
        })
    })
}

/// The peer transport, listening on the peer URLs and knowing the
/// initial cluster.
fn start_peers<R: Runtime>(
    runtime: &R,
    config: &Config,
    peer_tls: Option<peer::TransportTls>,
    peer_listeners: Vec<(config::ListenUrl, BoundSocket)>,
    log: &impl LogStore,
    mailbox: &driver::Mailbox,
    metrics: &metrics::Metrics,
) -> Result<peer::PeerTransport<R>, RunError> {
    // A member that joined an existing cluster stored the ID it learned.
    let mut transport_config = config.peer_transport_config();
    if transport_config.cluster_id == 0 {
        transport_config.cluster_id = stored_cluster_id(log, &config.data_dir)?;
    }
    transport_config.tls = peer_tls;
    let transport = peer::PeerTransport::new(runtime.clone(), transport_config, mailbox.deliver());
    // Before the first connection: a stream resolves its metric series
    // when it opens, and peers queued in the listen backlog are accepted
    // at once.
    transport.set_metrics(metrics.peers.clone());
    for (url, listener) in peer_listeners {
        let listening = if url.is_secure() {
            transport.listen_tls(listener)
        } else {
            transport.listen(listener)
        };
        listening.map_err(|error| RunError::Bind {
            url: url.url,
            error,
        })?;
    }
    // The node's stored membership is the truth once it runs; the initial
    // cluster lets a joining member reach the others from the start.
    for (id, urls) in config.initial_peers() {
        transport.add_peer(id, urls);
    }
    Ok(transport)
}

/// The cluster ID a joining member learned and stored in its log; 0 if
/// none. A data directory written before the log kept it has it in
/// `member/cluster_id` (hex), which is copied into the log.
fn stored_cluster_id(log: &impl LogStore, data_dir: &std::path::Path) -> Result<u64, RunError> {
    let storage = |e: StorageError| RunError::DataDir(format!("{}: {e}", data_dir.display()));
    let stored = log.state().map_err(storage)?.cluster_id;
    if stored != 0 {
        return Ok(stored);
    }
    let path = data_dir.join("member").join("cluster_id");
    let id = match std::fs::read_to_string(&path) {
        Ok(text) => u64::from_str_radix(text.trim(), 16)
            .map_err(|e| RunError::DataDir(format!("{}: {e}", path.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(RunError::DataDir(format!("{}: {e}", path.display()))),
    };
    log.store_cluster_id(id).map_err(storage)?;
    Ok(id)
}

/// Whether this member starts for the first time: nothing in its log yet,
/// so it learns its cluster (from the flags, or by discovery). A restarted
/// member has its cluster in its log and never discovers again.
/// Takes over the data directory if etcd wrote it (`member/snap/db`, no
/// oxetcd backend yet): see `oxetcd_storage::etcd_dir`. The member keeps
/// etcd's member ID, which must be the one the flags give or belong to a
/// member with this member's advertised peer URLs.
fn import_etcd_data_dir(config: &Config) -> Result<(), RunError> {
    let dir = &config.data_dir;
    if !oxetcd_storage::etcd_dir::holds_etcd_data(dir) {
        return Ok(());
    }
    info!(data_dir = %dir.display(), "found an etcd data directory; importing it");
    let flags = oxetcd_storage::etcd_dir::FlagsMember {
        id: config.derived_member_id(),
        peer_urls: &config.initial_advertise_peer_urls,
    };
    let imported = oxetcd_storage::etcd_dir::import(dir, Some(flags))
        .map_err(|e| RunError::DataDir(format!("{}: importing etcd's data: {e}", dir.display())))?;
    if let Some(done) = imported {
        // etcd's member ID is this member's from now on, whatever the
        // flags derive.
        identity::store_member_id(dir, done.member_id)?;
        let secs = done.took.as_secs_f64().max(1e-6);
        info!(
            data_dir = %dir.display(),
            member_id = %format_args!("{:x}", done.member_id),
            cluster_id = %format_args!("{:x}", done.cluster_id),
            versions = done.versions,
            leases = done.leases,
            members = done.members,
            revision = done.revision,
            compact_revision = done.compact_revision,
            applied_index = done.applied_index,
            commit_index = done.commit_index,
            replayed_entries = done.replayed,
            dropped_uncommitted = done.dropped,
            term = done.term,
            backend_bytes = done.backend_bytes,
            took = ?done.took,
            versions_per_sec = (done.versions as f64 / secs) as u64,
            mb_per_sec = format_args!("{:.1}", done.backend_bytes as f64 / 1e6 / secs),
            "imported etcd data directory {}",
            dir.display()
        );
    }
    Ok(())
}

fn is_fresh(log: &impl LogStore, data_dir: &std::path::Path) -> Result<bool, RunError> {
    let state = log
        .state()
        .map_err(|e| RunError::DataDir(format!("{}: {e}", data_dir.display())))?;
    Ok(state.last_index == 0 && state.hard_state.term == 0)
}

/// Binds every peer URL (`--listen-peer-urls`).
fn bind_peers(config: &Config) -> Result<Vec<(config::ListenUrl, BoundSocket)>, RunError> {
    config
        .listen_peer_urls
        .iter()
        .map(|url| {
            BoundSocket::bind(&url.addr)
                .map(|listener| (url.clone(), listener))
                .map_err(|error| RunError::Bind {
                    url: url.url.clone(),
                    error,
                })
        })
        .collect()
}

/// The process exit code for `run`'s result, logging the error if any.
pub fn exit_code(result: Result<(), RunError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Logging is up by the time `run` can fail; it writes to stderr.
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs as `--log-level`, `--log-format` and `--log-outputs` say: every
/// output gets every line. An output file that cannot be opened is
/// reported on stderr, which then stands in for it. A second call (tests)
/// keeps the first setup.
/// A log file that cannot be opened is an error, as in etcd; logging is
/// set up on stderr all the same, so the error can be said.
fn init_logging(logging: &config::Logging) -> Result<(), RunError> {
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::{BoxMakeWriter, MakeWriterExt};
    let mut writer: Option<BoxMakeWriter> = None;
    let mut failures = Vec::new();
    for output in &logging.outputs {
        let next = match output {
            config::LogOutput::Stderr => BoxMakeWriter::new(std::io::stderr),
            config::LogOutput::Stdout => BoxMakeWriter::new(std::io::stdout),
            config::LogOutput::File(path) => match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                Ok(file) => BoxMakeWriter::new(Arc::new(file)),
                Err(e) => {
                    failures.push(format!("cannot open log output {}: {e}", path.display()));
                    BoxMakeWriter::new(std::io::stderr)
                }
            },
        };
        writer = Some(match writer {
            None => next,
            Some(previous) => BoxMakeWriter::new(previous.and(next)),
        });
    }
    let writer = writer.unwrap_or_else(|| BoxMakeWriter::new(std::io::stderr));
    let ansi = logging.format == config::LogFormat::Console
        && logging.outputs == [config::LogOutput::Stderr]
        && std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(logging.level.as_str()))
        .with_writer(writer)
        .with_ansi(ansi);
    let _ = match logging.format {
        config::LogFormat::Json => builder.event_format(log_format::EtcdJson).try_init(),
        config::LogFormat::Console => builder.try_init(),
    };
    match failures.is_empty() {
        true => Ok(()),
        false => Err(RunError::LogOutput(failures.join("; "))),
    }
}

/// Creates the data directory if it is missing, private to this user as a
/// data directory should be.
fn create_data_dir(dir: &std::path::Path) -> Result<(), RunError> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .map_err(|e| RunError::DataDir(format!("{}: {e}", dir.display())))?;
    if !dir.is_dir() {
        return Err(RunError::DataDir(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    Ok(())
}
