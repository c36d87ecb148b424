//! Profiling and monitoring flags, and distributed tracing.

use super::{not_yet, renamed, wired, Flag, Group, Kind};

pub(super) const GROUP: Group = Group {
    title: "Profiling and monitoring",
    flags: FLAGS,
};

const FLAGS: &[Flag] = &[
    not_yet(
        "enable-pprof",
        Kind::Switch,
        "false",
        "Enable runtime profiling data via HTTP server. Address is at client URL + \"/debug/pprof/\"",
    ),
    wired(
        "metrics",
        Kind::Choice(&["basic", "extensive"]),
        "basic",
        "Set level of detail for exported metrics, specify 'extensive' to include server side \
         grpc histogram metrics.",
    ),
    wired(
        "listen-metrics-urls",
        Kind::Urls,
        "",
        "List of URLs to listen on for the metrics and health endpoints.",
    ),
    not_yet(
        "enable-grpc-gateway",
        Kind::Switch,
        "true",
        "Enable GRPC gateway (oxetcd always serves it).",
    ),
    not_yet(
        "enable-distributed-tracing",
        Kind::Switch,
        "false",
        "Enable distributed tracing using OpenTelemetry Tracing.",
    ),
    not_yet(
        "distributed-tracing-address",
        Kind::HostPort,
        "localhost:4317",
        "Address for distributed tracing used for OpenTelemetry Tracing.",
    ),
    not_yet(
        "distributed-tracing-service-name",
        Kind::Text,
        "etcd",
        "Configures service name for distributed tracing to be used to define service name for \
         OpenTelemetry Tracing.",
    ),
    not_yet(
        "distributed-tracing-instance-id",
        Kind::Text,
        "",
        "Configures service instance ID for distributed tracing; unique per etcd instance.",
    ),
    not_yet(
        "distributed-tracing-sampling-rate",
        Kind::Int,
        "0",
        "Number of samples to collect per million spans for OpenTelemetry Tracing.",
    ),
    renamed("experimental-enable-distributed-tracing", Kind::Switch, "false", "enable-distributed-tracing"),
    renamed(
        "experimental-distributed-tracing-address",
        Kind::HostPort,
        "localhost:4317",
        "distributed-tracing-address",
    ),
    renamed(
        "experimental-distributed-tracing-service-name",
        Kind::Text,
        "etcd",
        "distributed-tracing-service-name",
    ),
    renamed(
        "experimental-distributed-tracing-instance-id",
        Kind::Text,
        "",
        "distributed-tracing-instance-id",
    ),
    renamed(
        "experimental-distributed-tracing-sampling-rate",
        Kind::Int,
        "0",
        "distributed-tracing-sampling-rate",
    ),
];
