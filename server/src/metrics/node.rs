//! The node's numbers as etcd's families: registered here, published by
//! the driver thread after each round.

use std::sync::{Arc, Mutex};

use oxetcd_core::version::Version;
use oxetcd_core::NodeMetrics;
use prometheus::{IntCounter, IntGauge, IntGaugeVec};

use super::Families;

/// The families only the node can fill.
#[derive(Clone)]
pub(crate) struct NodeFamilies {
    has_leader: IntGauge,
    is_leader: IntGauge,
    is_learner: IntGauge,
    leader_changes: IntCounter,
    proposals_committed: IntGauge,
    proposals_applied: IntGauge,
    proposals_pending: IntGauge,
    proposals_failed: IntCounter,
    slow_read_indexes: IntCounter,
    read_indexes_failed: IntCounter,
    /// etcd 3.4 to 3.6 name it `etcd_debugging_server_lease_expired_total`;
    /// `etcd_server_lease_expired_total` is kept beside it with the same
    /// count.
    lease_expired: [IntCounter; 2],
    puts: IntCounter,
    deletes: IntCounter,
    ranges: IntCounter,
    txns: IntCounter,
    keys: IntGauge,
    watchers: IntGauge,
    slow_watchers: IntGauge,
    watch_streams: IntGauge,
    bytes_in_use: IntGauge,
    /// `etcd_cluster_version`: one label, the cluster version's
    /// `major.minor`, at 1.
    cluster_version_gauge: IntGaugeVec,
    /// The cluster version as last published, for `/version`.
    pub(super) cluster_version: Arc<Mutex<Option<Version>>>,
}

impl NodeFamilies {
    /// Counts a range answered without the node (`etcd_mvcc_range_total`).
    pub(crate) fn count_range(&self) {
        self.ranges.inc();
    }

    pub(super) fn new(r: &Families<'_>, cluster_version_gauge: IntGaugeVec) -> Self {
        let lease_help = "The total number of expired leases.";
        Self {
            has_leader: r.gauge(
                "etcd_server_has_leader",
                "Whether or not a leader exists. 1 is existence, 0 is not.",
            ),
            is_leader: r.gauge(
                "etcd_server_is_leader",
                "Whether or not this member is a leader. 1 if is, 0 otherwise.",
            ),
            is_learner: r.gauge(
                "etcd_server_is_learner",
                "Whether or not this member is a learner. 1 if is, 0 otherwise.",
            ),
            leader_changes: r.counter(
                "etcd_server_leader_changes_seen_total",
                "The number of leader changes seen.",
            ),
            proposals_committed: r.gauge(
                "etcd_server_proposals_committed_total",
                "The total number of consensus proposals committed.",
            ),
            proposals_applied: r.gauge(
                "etcd_server_proposals_applied_total",
                "The total number of consensus proposals applied.",
            ),
            proposals_pending: r.gauge(
                "etcd_server_proposals_pending",
                "The current number of pending proposals to commit.",
            ),
            proposals_failed: r.counter(
                "etcd_server_proposals_failed_total",
                "The total number of failed proposals seen.",
            ),
            slow_read_indexes: r.counter(
                "etcd_server_slow_read_indexes_total",
                "The total number of pending read indexes not in sync with leader's or timed out read index requests.",
            ),
            read_indexes_failed: r.counter(
                "etcd_server_read_indexes_failed_total",
                "The total number of failed read indexes seen.",
            ),
            lease_expired: [
                r.counter("etcd_debugging_server_lease_expired_total", lease_help),
                r.counter("etcd_server_lease_expired_total", lease_help),
            ],
            puts: r.counter(
                "etcd_mvcc_put_total",
                "Total number of puts seen by this member.",
            ),
            deletes: r.counter(
                "etcd_mvcc_delete_total",
                "Total number of deletes seen by this member.",
            ),
            ranges: r.counter(
                "etcd_mvcc_range_total",
                "Total number of ranges seen by this member.",
            ),
            txns: r.counter(
                "etcd_mvcc_txn_total",
                "Total number of txns seen by this member.",
            ),
            keys: r.gauge("etcd_debugging_mvcc_keys_total", "Total number of keys."),
            watchers: r.gauge(
                "etcd_debugging_mvcc_watcher_total",
                "Total number of watchers.",
            ),
            slow_watchers: r.gauge(
                "etcd_debugging_mvcc_slow_watcher_total",
                "Total number of unsynced slow watchers.",
            ),
            watch_streams: r.gauge(
                "etcd_debugging_mvcc_watch_stream_total",
                "Total number of watch streams.",
            ),
            bytes_in_use: r.gauge(
                "etcd_mvcc_db_total_size_in_use_in_bytes",
                "Total size of the underlying database logically in use in bytes.",
            ),
            cluster_version_gauge,
            cluster_version: Arc::default(),
        }
    }
}

/// Publishes the node's numbers; owned by the driver thread, which alone
/// calls it, so it can remember what it published last and add only the
/// difference to each counter.
pub(crate) struct NodePublisher {
    families: NodeFamilies,
    last: NodeMetrics,
}

impl NodePublisher {
    pub(crate) fn new(families: NodeFamilies) -> Self {
        Self {
            families,
            last: NodeMetrics::default(),
        }
    }

    /// Publishes `now`; a round that changed nothing costs one compare.
    pub(crate) fn publish(&mut self, now: NodeMetrics) {
        if now == self.last {
            return;
        }
        let f = &self.families;
        let last = &self.last;
        let add = |counter: &IntCounter, now: u64, last: u64| {
            if now > last {
                counter.inc_by(now - last);
            }
        };
        let set =
            |gauge: &IntGauge, value: u64| gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        set(&f.has_leader, now.has_leader.into());
        set(&f.is_leader, now.is_leader.into());
        set(&f.is_learner, now.is_learner.into());
        add(
            &f.leader_changes,
            now.leader_changes_seen,
            last.leader_changes_seen,
        );
        set(&f.proposals_committed, now.proposals_committed);
        set(&f.proposals_applied, now.proposals_applied);
        set(&f.proposals_pending, now.proposals_pending);
        add(
            &f.proposals_failed,
            now.proposals_failed,
            last.proposals_failed,
        );
        add(
            &f.slow_read_indexes,
            now.slow_read_indexes,
            last.slow_read_indexes,
        );
        add(
            &f.read_indexes_failed,
            now.read_indexes_failed,
            last.read_indexes_failed,
        );
        for counter in &f.lease_expired {
            add(counter, now.leases_expired, last.leases_expired);
        }
        add(&f.puts, now.puts, last.puts);
        add(&f.deletes, now.deletes, last.deletes);
        add(&f.ranges, now.ranges, last.ranges);
        add(&f.txns, now.txns, last.txns);
        set(&f.keys, now.keys);
        set(&f.watchers, now.watchers);
        set(&f.slow_watchers, now.slow_watchers);
        set(&f.watch_streams, now.watch_streams);
        set(&f.bytes_in_use, now.bytes_in_use);
        if let Some(version) = now
            .cluster_version
            .filter(|_| now.cluster_version != last.cluster_version)
        {
            f.cluster_version_gauge.reset();
            f.cluster_version_gauge
                .with_label_values(&[version.major_minor_string().as_str()])
                .set(1);
            // A poisoned lock only means a reader panicked; the value is a
            // plain copy, still whole.
            let mut shown = f.cluster_version.lock().unwrap_or_else(|e| e.into_inner());
            *shown = Some(version);
        }
        self.last = now;
    }
}
