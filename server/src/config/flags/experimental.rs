//! Feature gates, the flags etcd 3.6 promoted from `--experimental-*`
//! (each with its old name), and the unsafe flags.

use super::{accepted, gated, not_yet, refused, renamed, wired, Flag, Group, Kind};

pub(super) const GROUP: Group = Group {
    title: "Experimental distributed consensus and feature gates",
    flags: FLAGS,
};

pub(super) const UNSAFE: Group = Group {
    title: "Unsafe feature",
    flags: UNSAFE_FLAGS,
};

const FLAGS: &[Flag] = &[
    accepted(
        "feature-gates",
        Kind::FeatureGates,
        "",
        "Comma-separated list of feature gate enablement in the format of feature=true|false. \
         Options are:",
    ),
    wired(
        "corrupt-check-time",
        Kind::Duration,
        "0s",
        "Duration of time between cluster corruption check passes.",
    ),
    renamed(
        "experimental-corrupt-check-time",
        Kind::Duration,
        "0s",
        "corrupt-check-time",
    ),
    wired(
        "compact-hash-check-time",
        Kind::Duration,
        "1m0s",
        "Duration of time between leader checks followers compaction hashes.",
    ),
    renamed(
        "experimental-compact-hash-check-time",
        Kind::Duration,
        "1m0s",
        "compact-hash-check-time",
    ),
    not_yet(
        "compaction-batch-limit",
        Kind::Int,
        "1000",
        "Sets the maximum revisions deleted in each compaction batch.",
    ),
    renamed(
        "experimental-compaction-batch-limit",
        Kind::Int,
        "1000",
        "compaction-batch-limit",
    ),
    not_yet(
        "compaction-sleep-interval",
        Kind::Duration,
        "10ms",
        "Sets the sleep interval between each compaction batch.",
    ),
    renamed(
        "experimental-compaction-sleep-interval",
        Kind::Duration,
        "10ms",
        "compaction-sleep-interval",
    ),
    wired(
        "watch-progress-notify-interval",
        Kind::Duration,
        "10m0s",
        "Duration of periodic watch progress notifications.",
    ),
    renamed(
        "experimental-watch-progress-notify-interval",
        Kind::Duration,
        "10m0s",
        "watch-progress-notify-interval",
    ),
    wired(
        "warning-apply-duration",
        Kind::Duration,
        "100ms",
        "Time duration after which a warning is generated if request takes more time.",
    ),
    renamed(
        "experimental-warning-apply-duration",
        Kind::Duration,
        "100ms",
        "warning-apply-duration",
    ),
    wired(
        "warning-unary-request-duration",
        Kind::Duration,
        "300ms",
        "Time duration after which a warning is generated if a unary request takes more time.",
    ),
    renamed(
        "experimental-warning-unary-request-duration",
        Kind::Duration,
        "300ms",
        "warning-unary-request-duration",
    ),
    wired(
        "downgrade-check-time",
        Kind::Duration,
        "5s",
        "Duration of time between two downgrade status checks.",
    ),
    renamed(
        "experimental-downgrade-check-time",
        Kind::Duration,
        "5s",
        "downgrade-check-time",
    ),
    not_yet(
        "memory-mlock",
        Kind::Switch,
        "false",
        "Enable to enforce etcd pages (in particular bbolt) to stay in RAM.",
    ),
    renamed(
        "experimental-memory-mlock",
        Kind::Switch,
        "false",
        "memory-mlock",
    ),
    not_yet(
        "bootstrap-defrag-threshold-megabytes",
        Kind::Uint,
        "0",
        "Enable the defrag during etcd server bootstrap on condition that it will free at least \
         the provided threshold of disk space. Needs to be set to non-zero value to take effect.",
    ),
    renamed(
        "experimental-bootstrap-defrag-threshold-megabytes",
        Kind::Uint,
        "0",
        "bootstrap-defrag-threshold-megabytes",
    ),
    wired(
        "lease-checkpoint-interval",
        Kind::Duration,
        "5m0s",
        "How often the leader checkpoints the remaining TTL of leases longer than this (oxetcd).",
    ),
    renamed(
        "experimental-lease-checkpoint-interval",
        Kind::Duration,
        "5m0s",
        "lease-checkpoint-interval",
    ),
    gated(
        "experimental-initial-corrupt-check",
        "false",
        "InitialCorruptCheck",
        "Enable to check data corruption before serving any client/peer traffic.",
    ),
    gated(
        "experimental-compact-hash-check-enabled",
        "false",
        "CompactHashCheck",
        "Enable leader to periodically check followers compaction hashes.",
    ),
    gated(
        "experimental-enable-lease-checkpoint",
        "false",
        "LeaseCheckpoint",
        "Enable leader to send regular checkpoints to other members to prevent reset of remaining \
         TTL on leader change (oxetcd always does).",
    ),
    gated(
        "experimental-enable-lease-checkpoint-persist",
        "false",
        "LeaseCheckpointPersist",
        "Enable persisting remainingTTL to prevent indefinite auto-renewal of long lived leases \
         (oxetcd always does).",
    ),
    gated(
        "experimental-txn-mode-write-with-shared-buffer",
        "true",
        "TxnModeWriteWithSharedBuffer",
        "Enable the write transaction to use a shared buffer in its readonly check operations.",
    ),
    gated(
        "experimental-stop-grpc-service-on-defrag",
        "false",
        "StopGRPCServiceOnDefrag",
        "Enable etcd gRPC service to stop serving client requests on defragmentation.",
    ),
    not_yet(
        "experimental-wait-cluster-ready-timeout",
        Kind::Duration,
        "5s",
        "Maximum duration to wait for the cluster to be ready.",
    ),
];

const UNSAFE_FLAGS: &[Flag] = &[
    refused(
        "force-new-cluster",
        Kind::Switch,
        "false",
        "Force to create a new one member cluster.",
        "--force-new-cluster is not yet supported by oxetcd",
    ),
    not_yet(
        "unsafe-no-fsync",
        Kind::Switch,
        "false",
        "Disables fsync, unsafe, will cause data loss (oxetcd always syncs).",
    ),
    // oxetcd's own, for tests of rolling upgrades and downgrades: etcd has
    // no such flag.
    wired(
        "unsafe-run-as-version",
        Kind::Text,
        "",
        "Run as this server version (major.minor.patch, at most one minor below this \
         build's) instead of this build's: report it and publish it to the cluster. \
         For testing rolling upgrades and downgrades only.",
    ),
];
