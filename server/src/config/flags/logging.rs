//! Logging flags.

use super::{not_yet, wired, Flag, Group, Kind};

pub(super) const GROUP: Group = Group {
    title: "Logging",
    flags: FLAGS,
};

/// `--log-level`'s words.
pub(in crate::config) const LOG_LEVELS: &[&str] =
    &["debug", "info", "warn", "error", "panic", "fatal"];

const FLAGS: &[Flag] = &[
    wired(
        "logger",
        Kind::Choice(&["zap", "capnslog"]),
        "zap",
        "Currently only supports 'zap' for structured logging ('capnslog', etcd 3.4's, logs the \
         same way).",
    ),
    wired(
        "log-outputs",
        Kind::List,
        "default",
        "Specify 'stdout' or 'stderr' to skip journald logging even when running under systemd, \
         or list of comma separated output targets (file paths).",
    ),
    wired(
        "log-level",
        Kind::Choice(LOG_LEVELS),
        "info",
        "Configures log level. Only supports debug, info, warn, error, panic, or fatal.",
    ),
    wired(
        "log-format",
        Kind::Choice(&["json", "console"]),
        "json",
        "Configures log format. Only supports json, console.",
    ),
    not_yet(
        "enable-log-rotation",
        Kind::Switch,
        "false",
        "Enable log rotation of a single log-outputs file target.",
    ),
    not_yet(
        "log-rotation-config-json",
        Kind::Text,
        "{\"maxsize\": 100, \"maxage\": 0, \"maxbackups\": 0, \"localtime\": false, \"compress\": false}",
        "Configures log rotation if enabled with a JSON logger config.",
    ),
    not_yet("disable-log-sampling", Kind::Switch, "false", "Disable log sampling."),
];
