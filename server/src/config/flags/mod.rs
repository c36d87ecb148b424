//! The flag table: every flag of etcd 3.4, 3.5, 3.6 and 3.7, grouped as
//! etcd's `--help` groups them.
//!
//! Design: one [`Flag`] row per flag says its name, value syntax
//! ([`Kind`]), default (as etcd prints it), help text, what oxetcd does
//! with it ([`Support`]) and whether a newer name replaces it
//! ([`Replacement`]). The parser, the `ETCD_*` variables, the config file,
//! `--help` and the tests all read this table; nothing else lists flags.
//! Each group lives in its own file. A flag's `ETCD_*` variable is its
//! name in upper case with `_` for `-` (`--data-dir`: `ETCD_DATA_DIR`).

mod clustering;
mod experimental;
mod legacy;
mod logging;
mod member;
mod monitoring;
mod security;

use std::time::Duration;

pub(super) use super::values::Kind;
/// etcd's default `--initial-cluster`, whose meaning depends on `--name`
/// (see `oxetcd_urls::parse_initial_cluster`).
pub(super) use oxetcd_urls::initial_cluster::DEFAULT_INITIAL_CLUSTER;

/// One flag.
#[derive(Debug)]
pub(super) struct Flag {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    /// The default, as etcd's help prints it.
    pub(super) default: &'static str,
    pub(super) help: &'static str,
    pub(super) support: Support,
    pub(super) replaced: Replacement,
}

/// What oxetcd does with a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Support {
    /// oxetcd does what the flag says.
    Wired,
    /// Accepted and stored; oxetcd behaves the same whatever the value
    /// (it always does what the flag turns on, or never needs it).
    Accepted,
    /// Stored in [`super::Config`] for later work; a value other than the
    /// default is logged as `not yet supported: --flag`. Only for flags
    /// whose feature can be missing without harm to data.
    NotYet,
    /// Refused unless left at its default: ignoring it could cost data or
    /// start something else than asked (a proxy, a discovery bootstrap).
    Refused(&'static str),
    /// A flag etcd itself ignores (its pre-3.0 flags); warned about.
    Ignored,
    /// Options that only say whether the process prints help or its
    /// version, or where the config file is.
    Command,
}

/// A newer way to say the same thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Replacement {
    /// None: this is the current name.
    None,
    /// etcd 3.6 dropped the `experimental-` prefix (or 3.5 renamed it):
    /// the value goes to this flag unless that one is given too.
    Flag(&'static str),
    /// etcd 3.6 turned the switch into this feature gate.
    Gate(&'static str),
    /// Deprecated with this message, no replacement.
    Deprecated(&'static str),
}

/// A titled group of flags, as `--help` shows them.
pub(super) struct Group {
    pub(super) title: &'static str,
    pub(super) flags: &'static [Flag],
}

/// Every group, in `--help` order.
pub(super) const GROUPS: &[Group] = &[
    member::GROUP,
    clustering::GROUP,
    security::GROUP,
    security::AUTH,
    logging::GROUP,
    monitoring::GROUP,
    experimental::GROUP,
    experimental::UNSAFE,
    legacy::V2,
    legacy::DEPRECATED,
    legacy::IGNORED,
    legacy::COMMANDS,
];

/// Every flag.
pub(super) fn all() -> impl Iterator<Item = &'static Flag> {
    GROUPS.iter().flat_map(|group| group.flags.iter())
}

/// The flag called `name`.
pub(super) fn find(name: &str) -> Option<&'static Flag> {
    all().find(|flag| flag.name == name)
}

/// A flag oxetcd implements.
const fn wired(name: &'static str, kind: Kind, default: &'static str, help: &'static str) -> Flag {
    row(name, kind, default, help, Support::Wired)
}

/// A flag whose value changes nothing in oxetcd.
const fn accepted(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Flag {
    row(name, kind, default, help, Support::Accepted)
}

/// A flag stored for later work.
const fn not_yet(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Flag {
    row(name, kind, default, help, Support::NotYet)
}

/// A flag refused unless left at its default, for `why`.
const fn refused(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
    why: &'static str,
) -> Flag {
    row(name, kind, default, help, Support::Refused(why))
}

/// etcd's old name of `plain`, same syntax and default.
const fn renamed(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    plain: &'static str,
) -> Flag {
    Flag {
        replaced: Replacement::Flag(plain),
        ..row(name, kind, default, "", Support::Wired)
    }
}

/// etcd 3.5's switch that 3.6 turned into feature gate `gate`.
const fn gated(
    name: &'static str,
    default: &'static str,
    gate: &'static str,
    help: &'static str,
) -> Flag {
    Flag {
        replaced: Replacement::Gate(gate),
        ..row(name, Kind::Switch, default, help, Support::Wired)
    }
}

const fn row(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    help: &'static str,
    support: Support,
) -> Flag {
    Flag {
        name,
        kind,
        default,
        help,
        support,
        replaced: Replacement::None,
    }
}

/// etcd's default `--snapshot-count` (3.6), also used when 0 is given.
pub(super) const SNAPSHOT_COUNT_DEFAULT: u64 = 10_000;

/// etcd's ceiling on `--election-timeout`, in milliseconds.
pub(super) const ELECTION_TIMEOUT_MS_MAX: u64 = 50_000;

/// etcd raises a shorter progress notify interval to this.
pub(super) const WATCH_PROGRESS_NOTIFY_INTERVAL_MIN: Duration = Duration::from_millis(100);
