//! `/metrics`: etcd's metrics, with etcd's names, types, labels, units and
//! histogram buckets, in the Prometheus text format (0.0.4) etcd serves.
//!
//! Design:
//! - One [`Metrics`] per server: one registry and the handles of every
//!   family, made at start. It travels in an `Arc` with the driver's
//!   [`Handle`], so every service, the driver thread and the scrape reach
//!   the same one; nothing here is global.
//! - Recording never takes a lock. Counters, gauges and histograms are the
//!   `prometheus` crate's atomics, and every labelled series a request
//!   touches is resolved when the server starts (gRPC methods × codes,
//!   client API versions) or when a peer connects (per-peer series), never
//!   per request. Only the scrape gathers, which takes the registry's lock.
//! - What only the node knows (leader, proposals, keys, watchers, mvcc
//!   operation counts) is counted by the node as plain numbers
//!   (`oxetcd_core::NodeMetrics`); the driver thread publishes them into
//!   these families after each round ([`NodePublisher`]).
//! - Durations are measured where the work is done: the log writer's
//!   append (WAL fsync), the backend's commit (a hook on the store), the
//!   apply step (slow applies and compaction pauses), a received snapshot's
//!   install.
//! - The scrape runs on a blocking thread: it reads `/proc` (the process
//!   collector) and the backend file's size, then encodes.
//!
//! Where etcd and oxetcd differ: `etcd_mvcc_db_total_size_in_use_in_bytes`
//! is the bytes the stored versions and leases take (the figure the quota
//! is judged on, kept exactly by the backend), not bolt's pages in use;
//! `etcd_disk_wal_fsync_duration_seconds`
//! times the whole durable append of a batch (write and fsync, which
//! dominates); and peer round trips are timed from a heartbeat queued to
//! its answer read, not by a separate prober.

mod grpc;
mod listen;
mod node;

use std::path::PathBuf;

use bytes::Bytes;
use http::{header, StatusCode};
use http_body_util::Full;
use oxetcd_core::storage::KvStore;
use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use tonic::body::Body;

use crate::driver::Handle;

pub(crate) use grpc::{GrpcCall, GrpcMetrics, Received, GRPC_STATUS};
pub(crate) use listen::serve_metrics_urls;
pub(crate) use node::NodePublisher;

/// etcd's default backend quota (`--quota-backend-bytes` 0): 2 GiB.
const QUOTA_BACKEND_BYTES_DEFAULT: i64 = 2 * 1024 * 1024 * 1024;

/// An apply that takes longer than this is counted as slow: etcd's
/// `warnApplyDuration`.
pub(crate) const SLOW_APPLY: std::time::Duration = std::time::Duration::from_millis(100);

/// A scrape's text is usually this large or larger (about a thousand
/// series, most of them the gRPC methods × codes etcd pre-registers).
const SCRAPE_BYTES_INITIAL: usize = 128 * 1024;

/// What the metrics are made with.
#[derive(Clone, Debug, Default)]
pub struct MetricsSettings {
    /// This member's ID (`etcd_server_id`).
    pub member_id: u64,
    /// `--metrics extensive`: the gRPC handling-time histograms too.
    pub extensive: bool,
    /// `--quota-backend-bytes` (0: etcd's default; negative: none).
    pub quota_backend_bytes: i64,
    /// The backend's file, measured at each scrape; `None`: not measured.
    pub backend_file: Option<PathBuf>,
    /// Every feature gate: name, stage label, on
    /// (`etcd_server_feature_enabled`).
    pub feature_gates: Vec<(&'static str, &'static str, bool)>,
    /// The server version this member runs as (`etcd_server_version`);
    /// `None`: this build's.
    pub server_version: Option<oxetcd_core::version::Version>,
}

impl MetricsSettings {
    /// The settings `config` asks for.
    pub fn from_config(config: &crate::Config) -> Self {
        Self {
            member_id: config.member_id(),
            extensive: config.metrics_extensive,
            quota_backend_bytes: config.pending.quota_backend_bytes,
            backend_file: Some(
                config
                    .data_dir
                    .join(oxetcd_storage::MEMBER_DIR)
                    .join(oxetcd_storage::KV_FILE),
            ),
            feature_gates: config
                .feature_gates()
                .iter()
                .map(|(gate, on)| (gate.name, gate.stage.label(), on))
                .collect(),
            server_version: Some(config.server_version),
        }
    }
}

/// Every metric of one server, and the registry that gathers them.
pub struct Metrics {
    registry: Registry,
    /// Published from the node's numbers by the driver thread.
    pub(crate) node: node::NodeFamilies,
    pub(crate) grpc: GrpcMetrics,
    pub(crate) peers: PeerMetrics,
    /// One durable append of the raft log (write and fsync).
    pub(crate) wal_fsync: Histogram,
    /// One backend commit.
    pub(crate) backend_commit: Histogram,
    pub(crate) defrag_inflight: IntGauge,
    /// Installing a received snapshot into the backend.
    pub(crate) snap_db_save: Histogram,
    pub(crate) heartbeat_send_failures: IntCounter,
    pub(crate) slow_apply: IntCounter,
    /// The apply step that compacted, in milliseconds (etcd's pause and
    /// total are the same here: compaction runs inside one apply).
    pub(crate) compaction_pause_ms: Histogram,
    pub(crate) compaction_total_ms: Histogram,
    db_total_size: IntGauge,
    backend_file: Option<PathBuf>,
    server_version: oxetcd_core::version::Version,
}

/// The peer transport's families, labelled per peer when it connects.
#[derive(Clone)]
pub struct PeerMetrics {
    /// This member's ID, as etcd labels it (hex).
    pub(crate) local: String,
    pub(crate) active_peers: IntGaugeVec,
    pub(crate) sent_bytes: IntCounterVec,
    pub(crate) received_bytes: IntCounterVec,
    pub(crate) round_trip: HistogramVec,
}

impl Metrics {
    /// Registers every family, with the values known at start set.
    pub fn new(settings: &MetricsSettings) -> Self {
        let registry = Registry::new();
        let r = Families(&registry);
        let member_id = format!("{:x}", settings.member_id);
        let version = r.gauge_vec(
            "etcd_server_version",
            "Which version is running. 1 for 'server_version' label with current version.",
            &["server_version"],
        );
        let server_version = settings
            .server_version
            .unwrap_or(oxetcd_core::version::SERVER_VERSION);
        version
            .with_label_values(&[server_version.to_string().as_str()])
            .set(1);
        let cluster_version = r.gauge_vec(
            "etcd_cluster_version",
            "Which version is running. 1 for 'cluster_version' label with current cluster version",
            &["cluster_version"],
        );
        // This member's own until the leader sets the cluster version.
        cluster_version
            .with_label_values(&[server_version.major_minor_string().as_str()])
            .set(1);
        let server_id = r.gauge_vec(
            "etcd_server_id",
            "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
            &["server_id"],
        );
        server_id.with_label_values(&[member_id.as_str()]).set(1);
        let features = r.gauge_vec(
            "etcd_server_feature_enabled",
            "Whether a feature gate is enabled (1) or not (0), by name and stage.",
            &["name", "stage"],
        );
        for (name, stage, on) in &settings.feature_gates {
            features
                .with_label_values(&[*name, *stage])
                .set(i64::from(*on));
        }
        let quota = r.gauge(
            "etcd_server_quota_backend_bytes",
            "Current backend storage quota size in bytes.",
        );
        // As etcd: the flag's value, the default for 0, and a disabled
        // quota's negative value as given.
        quota.set(match settings.quota_backend_bytes {
            0 => QUOTA_BACKEND_BYTES_DEFAULT,
            bytes => bytes,
        });
        let peers = PeerMetrics {
            local: member_id,
            active_peers: r.gauge_vec(
                "etcd_network_active_peers",
                "The current number of active peer connections.",
                &["Local", "Remote"],
            ),
            sent_bytes: r.counter_vec(
                "etcd_network_peer_sent_bytes_total",
                "The total number of bytes sent to peers.",
                &["To"],
            ),
            received_bytes: r.counter_vec(
                "etcd_network_peer_received_bytes_total",
                "The total number of bytes received from peers.",
                &["From"],
            ),
            round_trip: r.histogram_vec(
                "etcd_network_peer_round_trip_time_seconds",
                "Round-Trip-Time histogram between peers",
                buckets(0.0001, 16),
                &["To"],
            ),
        };
        r.register(prometheus::process_collector::ProcessCollector::for_self());
        Self {
            node: node::NodeFamilies::new(&r, cluster_version),
            grpc: GrpcMetrics::new(&r, settings.extensive),
            peers,
            wal_fsync: r.histogram(
                "etcd_disk_wal_fsync_duration_seconds",
                "The latency distributions of fsync called by WAL.",
                buckets(0.001, 14),
            ),
            backend_commit: r.histogram(
                "etcd_disk_backend_commit_duration_seconds",
                "The latency distributions of commit called by backend.",
                buckets(0.001, 14),
            ),
            defrag_inflight: r.gauge(
                "etcd_disk_defrag_inflight",
                "Whether or not defrag is active on the member. 1 means active, 0 means not.",
            ),
            snap_db_save: r.histogram(
                "etcd_snap_db_save_total_duration_seconds",
                "The total latency distributions of v3 snapshot save",
                buckets(0.1, 10),
            ),
            heartbeat_send_failures: r.counter(
                "etcd_server_heartbeat_send_failures_total",
                "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
            ),
            slow_apply: r.counter(
                "etcd_server_slow_apply_total",
                "The total number of slow apply requests (likely overloaded from slow disk).",
            ),
            compaction_pause_ms: r.histogram(
                "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
                "Bucketed histogram of db compaction pause duration.",
                buckets(1.0, 13),
            ),
            compaction_total_ms: r.histogram(
                "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
                "Bucketed histogram of db compaction total duration.",
                buckets(100.0, 14),
            ),
            db_total_size: r.gauge(
                "etcd_mvcc_db_total_size_in_bytes",
                "Total size of the underlying database physically allocated in bytes.",
            ),
            backend_file: settings.backend_file.clone(),
            server_version,
            registry,
        }
    }

    /// Every family in the text format; reads `/proc` and the backend
    /// file, so it belongs on a blocking thread.
    pub fn encode(&self) -> Vec<u8> {
        if let Some(size) = self
            .backend_file
            .as_ref()
            .and_then(|path| std::fs::metadata(path).ok())
            .map(|meta| i64::try_from(meta.len()).unwrap_or(i64::MAX))
        {
            self.db_total_size.set(size);
        }
        let mut text = Vec::with_capacity(SCRAPE_BYTES_INITIAL);
        // Encoding into a Vec fails only on a family the registry already
        // validated; an empty answer is the worst outcome.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut text) {
            tracing::error!(error = %e, "encoding the metrics failed");
        }
        text
    }

    /// The server version this member runs as.
    pub fn server_version(&self) -> oxetcd_core::version::Version {
        self.server_version
    }

    /// The cluster version as the node last applied it; `None` until the
    /// leader first set it.
    pub fn cluster_version(&self) -> Option<oxetcd_core::version::Version> {
        let shown = self
            .node
            .cluster_version
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *shown
    }

    /// Times one backend commit (the storage's commit hook).
    pub fn observe_backend_commit(&self, took: std::time::Duration) {
        self.backend_commit.observe(took.as_secs_f64());
    }
}

/// Answers `GET /metrics`: every family, gathered on a blocking thread.
pub(crate) async fn scrape<K: KvStore>(handle: &Handle<K>) -> http::Response<Body> {
    let metrics = handle.metrics().clone();
    let text = handle
        .run_blocking(move || Ok(metrics.encode()))
        .await
        .unwrap_or_default();
    let mut response = http::Response::new(Body::new(Full::new(Bytes::from(text))));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(prometheus::TEXT_FORMAT),
    );
    response
}

/// Registers families on one registry. A name registered twice is a bug
/// in this module's table, caught by its tests.
pub(crate) struct Families<'a>(&'a Registry);

impl Families<'_> {
    fn register(&self, collector: impl Collector + 'static) {
        if let Err(e) = self.0.register(Box::new(collector)) {
            panic!("metric registered twice or malformed: {e}");
        }
    }

    pub(crate) fn counter(&self, name: &str, help: &str) -> IntCounter {
        let counter = IntCounter::with_opts(Opts::new(name, help)).expect("a valid counter");
        self.register(counter.clone());
        counter
    }

    pub(crate) fn gauge(&self, name: &str, help: &str) -> IntGauge {
        let gauge = IntGauge::with_opts(Opts::new(name, help)).expect("a valid gauge");
        self.register(gauge.clone());
        gauge
    }

    pub(crate) fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        let vec = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid counter");
        self.register(vec.clone());
        vec
    }

    pub(crate) fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        let vec = IntGaugeVec::new(Opts::new(name, help), labels).expect("a valid gauge");
        self.register(vec.clone());
        vec
    }

    pub(crate) fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        let opts = HistogramOpts::new(name, help).buckets(buckets);
        let histogram = Histogram::with_opts(opts).expect("a valid histogram");
        self.register(histogram.clone());
        histogram
    }

    pub(crate) fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(buckets);
        let vec = HistogramVec::new(opts, labels).expect("a valid histogram");
        self.register(vec.clone());
        vec
    }
}

/// Go's `prometheus.ExponentialBuckets(start, 2, count)`, as etcd sizes
/// its histograms.
fn buckets(start: f64, count: usize) -> Vec<f64> {
    exponential_buckets(start, 2.0, count).expect("positive start and count")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_registers_once_and_encodes() {
        let metrics = Metrics::new(&MetricsSettings {
            member_id: 0x8e9e05c52164694d,
            feature_gates: vec![("InitialCorruptCheck", "ALPHA", true), ("Done", "", false)],
            ..Default::default()
        });
        let text = String::from_utf8(metrics.encode()).unwrap();
        assert!(text.contains("# TYPE etcd_server_leader_changes_seen_total counter\n"));
        assert!(text.contains("etcd_server_id{server_id=\"8e9e05c52164694d\"} 1\n"));
        assert!(text.contains(
            "etcd_server_feature_enabled{name=\"InitialCorruptCheck\",stage=\"ALPHA\"} 1\n"
        ));
        assert!(text.contains("etcd_server_feature_enabled{name=\"Done\",stage=\"\"} 0\n"));
        assert!(text.contains("etcd_cluster_version{cluster_version=\"3.6\"} 1\n"));
        assert!(text.contains("etcd_server_quota_backend_bytes 2147483648\n"));
        assert!(text.contains("etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.001\"} 0\n"));
        assert!(!text.contains("grpc_server_handling_seconds"));
        let extensive = Metrics::new(&MetricsSettings {
            extensive: true,
            ..Default::default()
        });
        let text = String::from_utf8(extensive.encode()).unwrap();
        assert!(text.contains("# TYPE grpc_server_handling_seconds histogram\n"));
    }
}
