//! Clustering flags: how the member finds and forms its cluster.

use super::{not_yet, refused, wired, Flag, Group, Kind, DEFAULT_INITIAL_CLUSTER};

pub(super) const GROUP: Group = Group {
    title: "Clustering",
    flags: FLAGS,
};

/// Why v2 discovery is refused rather than ignored: a member told to
/// discover its cluster would otherwise bootstrap a cluster of its own.
const NO_V2_DISCOVERY: &str = "v2 discovery (--discovery URL) is not supported, as in etcd 3.6; \
                               use --discovery-token and --discovery-endpoints (v3 discovery)";

const FLAGS: &[Flag] = &[
    wired(
        "initial-advertise-peer-urls",
        Kind::Urls,
        "http://localhost:2380",
        "List of this member's peer URLs to advertise to the rest of the cluster.",
    ),
    wired(
        "initial-cluster",
        Kind::InitialCluster,
        DEFAULT_INITIAL_CLUSTER,
        "Initial cluster configuration for bootstrapping.",
    ),
    wired(
        "initial-cluster-state",
        Kind::Choice(&["new", "existing"]),
        "new",
        "Initial cluster state ('new' when bootstrapping a new cluster or 'existing' when adding \
         new members to an existing cluster).",
    ),
    wired(
        "initial-cluster-token",
        Kind::Text,
        oxetcd_core::ids::DEFAULT_CLUSTER_TOKEN,
        "Initial cluster token for the etcd cluster during bootstrap.",
    ),
    wired(
        "advertise-client-urls",
        Kind::Urls,
        "http://localhost:2379",
        "List of this member's client URLs to advertise to the public.",
    ),
    refused(
        "discovery",
        Kind::Text,
        "",
        "Discovery URL used to bootstrap the cluster (v2 discovery).",
        NO_V2_DISCOVERY,
    ),
    not_yet(
        "discovery-fallback",
        Kind::Choice(&["exit", "proxy"]),
        "proxy",
        "Expected behavior ('exit' or 'proxy') when discovery services fails.",
    ),
    not_yet(
        "discovery-proxy",
        Kind::Text,
        "",
        "HTTP proxy to use for traffic to discovery service.",
    ),
    wired(
        "discovery-srv",
        Kind::Text,
        "",
        "DNS srv domain used to bootstrap the cluster.",
    ),
    wired(
        "discovery-srv-name",
        Kind::Text,
        "",
        "Suffix to the dns srv name queried when bootstrapping.",
    ),
    wired(
        "discovery-endpoints",
        Kind::List,
        "",
        "V3 discovery: List of gRPC endpoints of the discovery service.",
    ),
    wired(
        "discovery-token",
        Kind::Text,
        "",
        "V3 discovery: discovery token for the etcd cluster to be bootstrapped.",
    ),
    wired(
        "discovery-dial-timeout",
        Kind::Duration,
        "2s",
        "V3 discovery: dial timeout for client connections.",
    ),
    wired(
        "discovery-request-timeout",
        Kind::Duration,
        "5s",
        "V3 discovery: timeout for discovery requests (excluding dial timeout).",
    ),
    wired(
        "discovery-keepalive-time",
        Kind::Duration,
        "2s",
        "V3 discovery: keepalive time for client connections.",
    ),
    wired(
        "discovery-keepalive-timeout",
        Kind::Duration,
        "6s",
        "V3 discovery: keepalive timeout for client connections.",
    ),
    wired(
        "discovery-insecure-transport",
        Kind::Switch,
        "true",
        "V3 discovery: disable transport security for client connections.",
    ),
    wired(
        "discovery-insecure-skip-tls-verify",
        Kind::Switch,
        "false",
        "V3 discovery: skip server certificate verification.",
    ),
    wired(
        "discovery-cert",
        Kind::Text,
        "",
        "V3 discovery: identify secure client using this TLS certificate file.",
    ),
    wired(
        "discovery-key",
        Kind::Text,
        "",
        "V3 discovery: identify secure client using this TLS key file.",
    ),
    wired(
        "discovery-cacert",
        Kind::Text,
        "",
        "V3 discovery: verify certificates of TLS-enabled secure servers using this CA bundle.",
    ),
    wired(
        "discovery-user",
        Kind::Text,
        "",
        "V3 discovery: username[:password] for authentication.",
    ),
    wired(
        "discovery-password",
        Kind::Text,
        "",
        "V3 discovery: password for authentication.",
    ),
    not_yet(
        "strict-reconfig-check",
        Kind::Switch,
        "true",
        "Reject reconfiguration requests that would cause quorum loss.",
    ),
    not_yet(
        "pre-vote",
        Kind::Switch,
        "true",
        "Enable the raft Pre-Vote algorithm (oxetcd always runs it).",
    ),
    wired(
        "auto-compaction-retention",
        Kind::Retention,
        "0",
        "Auto compaction retention for mvcc key value store. 0 means disable auto compaction.",
    ),
    wired(
        "auto-compaction-mode",
        Kind::Choice(&["periodic", "revision"]),
        "periodic",
        "Interpret 'auto-compaction-retention' one of: periodic|revision. 'periodic' for duration \
         based retention, defaulting to hours if no time unit is provided (e.g. '5m'). 'revision' \
         for revision number based retention.",
    ),
];
