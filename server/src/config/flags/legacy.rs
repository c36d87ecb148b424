//! etcd's v2 API and v2 proxy flags, flags deprecated or removed since 3.4,
//! the pre-3.0 flags etcd ignores, and the command options.

use super::{not_yet, refused, row, Flag, Group, Kind, Replacement, Support};

pub(super) const V2: Group = Group {
    title: "v2 Proxy (removed in etcd v3.6)",
    flags: V2_FLAGS,
};

pub(super) const DEPRECATED: Group = Group {
    title: "Deprecated",
    flags: DEPRECATED_FLAGS,
};

/// Not shown by `--help`, as etcd does not show them.
pub(super) const IGNORED: Group = Group {
    title: "",
    flags: IGNORED_FLAGS,
};

/// `--help`, `--version` and `--config-file`, shown in the usage lines.
pub(super) const COMMANDS: Group = Group {
    title: "",
    flags: COMMAND_FLAGS,
};

/// Why `--enable-v2` and `--experimental-enable-v2v3` are refused: etcd
/// 3.6 removed the v2 API, and oxetcd never served it.
pub(in crate::config) const NO_V2: &str =
    "the v2 API was removed in etcd v3.6 and oxetcd does not serve it";

const V2_FLAGS: &[Flag] = &[
    refused(
        "enable-v2",
        Kind::Switch,
        "false",
        "Accept etcd V2 client requests.",
        NO_V2,
    ),
    refused(
        "experimental-enable-v2v3",
        Kind::Text,
        "",
        "v3 prefix for serving emulated v2 state.",
        NO_V2,
    ),
    Flag {
        replaced: Replacement::Deprecated(
            "--v2-deprecation is deprecated and scheduled for removal in v3.8. The default value \
             is enforced, ignoring user input.",
        ),
        ..row(
            "v2-deprecation",
            Kind::Choice(&["not-yet", "write-only", "write-only-drop-data", "gone"]),
            "write-only",
            "v2store deprecation stage.",
            Support::Accepted,
        )
    },
    refused(
        "proxy",
        Kind::Choice(&["off", "readonly", "on"]),
        "off",
        "Proxy mode setting ('off', 'readonly' or 'on').",
        "the v2 proxy was removed in etcd v3.6 and oxetcd does not run as one",
    ),
    not_yet(
        "proxy-failure-wait",
        Kind::Uint,
        "5000",
        "Time (in milliseconds) an endpoint will be held in a failed state.",
    ),
    not_yet(
        "proxy-refresh-interval",
        Kind::Uint,
        "30000",
        "Time (in milliseconds) of the endpoints refresh interval.",
    ),
    not_yet(
        "proxy-dial-timeout",
        Kind::Uint,
        "1000",
        "Time (in milliseconds) for a dial to timeout.",
    ),
    not_yet(
        "proxy-write-timeout",
        Kind::Uint,
        "5000",
        "Time (in milliseconds) for a write to timeout.",
    ),
    not_yet(
        "proxy-read-timeout",
        Kind::Uint,
        "0",
        "Time (in milliseconds) for a read to timeout.",
    ),
];

const DEPRECATED_FLAGS: &[Flag] = &[
    Flag {
        replaced: Replacement::Deprecated(
            "--max-snapshots is deprecated in 3.6 and will be decommissioned in 3.7.",
        ),
        ..row(
            "max-snapshots",
            Kind::Uint,
            "5",
            "Maximum number of snapshot files to retain (0 is unlimited).",
            Support::Accepted,
        )
    },
    Flag {
        replaced: Replacement::Deprecated(
            "--debug is deprecated since etcd v3.5; use '--log-level=debug' instead.",
        ),
        ..row(
            "debug",
            Kind::Switch,
            "false",
            "Enable debug-level logging (when --log-level is not given).",
            Support::Wired,
        )
    },
    Flag {
        replaced: Replacement::Flag("log-outputs"),
        ..row("log-output", Kind::List, "default", "", Support::Wired)
    },
    Flag {
        replaced: Replacement::Deprecated(
            "--log-package-levels is deprecated since etcd v3.5; use '--log-level' instead.",
        ),
        ..row(
            "log-package-levels",
            Kind::Text,
            "",
            "Specify a particular log level for each etcd package.",
            Support::NotYet,
        )
    },
];

const fn ignored(name: &'static str) -> Flag {
    row(name, Kind::Ignored, "", "", Support::Ignored)
}

const IGNORED_FLAGS: &[Flag] = &[
    ignored("cluster-active-size"),
    ignored("cluster-remove-delay"),
    ignored("cluster-sync-interval"),
    ignored("config"),
    ignored("force"),
    ignored("max-result-buffer"),
    ignored("max-retry-attempts"),
    ignored("peer-heartbeat-interval"),
    ignored("peer-election-timeout"),
    ignored("retry-interval"),
    ignored("snapshot"),
    ignored("v"),
    ignored("vv"),
];

const COMMAND_FLAGS: &[Flag] = &[
    row(
        "config-file",
        Kind::Text,
        "",
        "Path to the server configuration file. Note that if a configuration file is provided, \
         other command line flags and environment variables will be ignored.",
        Support::Command,
    ),
    row(
        "version",
        Kind::Switch,
        "false",
        "Print the version and exit.",
        Support::Command,
    ),
    row(
        "help",
        Kind::Switch,
        "false",
        "Show the help information and exit.",
        Support::Command,
    ),
];
