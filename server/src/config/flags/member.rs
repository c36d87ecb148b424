//! Member flags: this member's name, storage, raft timing, limits and
//! listeners.

use super::{accepted, not_yet, renamed, wired, Flag, Group, Kind};

pub(super) const GROUP: Group = Group {
    title: "Member",
    flags: FLAGS,
};

const FLAGS: &[Flag] = &[
    wired("name", Kind::Text, "default", "Human-readable name for this member."),
    wired("data-dir", Kind::Text, "${name}.etcd", "Path to the data directory."),
    not_yet("wal-dir", Kind::Text, "", "Path to the dedicated wal directory."),
    wired(
        "snapshot-count",
        Kind::Uint,
        "10000",
        "Number of committed transactions to trigger a snapshot to disk.",
    ),
    wired(
        "snapshot-catchup-entries",
        Kind::Positive,
        "5000",
        "Number of entries for a slow follower to catch up after compacting the raft storage entries.",
    ),
    renamed("experimental-snapshot-catchup-entries", Kind::Positive, "5000", "snapshot-catchup-entries"),
    wired(
        "heartbeat-interval",
        Kind::Uint,
        "100",
        "Time (in milliseconds) of a heartbeat interval.",
    ),
    wired(
        "election-timeout",
        Kind::Uint,
        "1000",
        "Time (in milliseconds) for an election to timeout.",
    ),
    accepted(
        "initial-election-tick-advance",
        Kind::Switch,
        "true",
        "Whether to fast-forward initial election ticks on boot (oxetcd never does, so a \
         restarted member cannot disrupt a leader).",
    ),
    wired(
        "listen-peer-urls",
        Kind::Urls,
        "http://localhost:2380",
        "List of URLs to listen on for peer traffic.",
    ),
    wired(
        "listen-client-urls",
        Kind::Urls,
        "http://localhost:2379",
        "List of URLs to listen on for client grpc traffic and http as long as \
         --listen-client-http-urls is not specified.",
    ),
    not_yet(
        "listen-client-http-urls",
        Kind::Urls,
        "",
        "List of URLs to listen on for http only client traffic.",
    ),
    not_yet(
        "max-wals",
        Kind::Uint,
        "5",
        "Maximum number of wal files to retain (0 is unlimited).",
    ),
    wired(
        "quota-backend-bytes",
        Kind::Bytes,
        "0",
        "Sets the maximum size (in bytes) that the backend database may consume; 0 means the \
         default 2GiB, a negative value disables the quota.",
    ),
    accepted(
        "backend-bbolt-freelist-type",
        Kind::Choice(&["array", "map"]),
        "array",
        "The freelist type of bbolt (oxetcd's backend is redb, which has no such choice).",
    ),
    renamed(
        "experimental-backend-bbolt-freelist-type",
        Kind::Choice(&["array", "map"]),
        "array",
        "backend-bbolt-freelist-type",
    ),
    not_yet(
        "backend-batch-interval",
        Kind::Duration,
        "0s",
        "The maximum time before commit the backend transaction.",
    ),
    not_yet(
        "backend-batch-limit",
        Kind::Int,
        "0",
        "The maximum operations before commit the backend transaction.",
    ),
    wired(
        "max-txn-ops",
        Kind::Positive,
        "128",
        "Maximum number of operations permitted in a transaction.",
    ),
    wired(
        "max-request-bytes",
        Kind::Positive,
        "1572864",
        "Maximum client request size in bytes the server will accept.",
    ),
    wired(
        "max-concurrent-streams",
        Kind::Uint32,
        "4294967295",
        "Maximum concurrent streams that each client can open at a time.",
    ),
    not_yet(
        "grpc-keepalive-min-time",
        Kind::Duration,
        "5s",
        "Minimum duration interval that a client should wait before pinging server.",
    ),
    not_yet(
        "grpc-keepalive-interval",
        Kind::Duration,
        "2h0m0s",
        "Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).",
    ),
    not_yet(
        "grpc-keepalive-timeout",
        Kind::Duration,
        "20s",
        "Additional duration of wait before closing a non-responsive connection (0 to disable).",
    ),
    not_yet(
        "socket-reuse-port",
        Kind::Switch,
        "false",
        "Enable to set socket option SO_REUSEPORT on listeners allowing rebinding of a port already in use.",
    ),
    not_yet(
        "socket-reuse-address",
        Kind::Switch,
        "false",
        "Enable to set socket option SO_REUSEADDR on listeners allowing binding to an address in TIME_WAIT state.",
    ),
    not_yet(
        "raft-read-timeout",
        Kind::Duration,
        "5s",
        "Read timeout set on each rafthttp connection.",
    ),
    not_yet(
        "raft-write-timeout",
        Kind::Duration,
        "5s",
        "Write timeout set on each rafthttp connection.",
    ),
    wired(
        "max-learners",
        Kind::Positive,
        "1",
        "Sets the maximum number of learners that can be available in the cluster membership.",
    ),
];
