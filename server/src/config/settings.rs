//! Every flag's parsed value, and the typed settings of features oxetcd
//! does not have yet.
//!
//! Design: [`Settings`] holds a [`Value`] for every flag of the table —
//! given or default — so nothing a user says is lost, and code that wires
//! a feature later reads it from one place. [`Pending`] gives the
//! settings the next features need their own types (bytes, durations, an
//! auto-compaction mode and retention). Neither changes what the server
//! does today; `parse` logs `not yet supported: --flag` for a value that
//! differs from the default.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::values::{invalid, parse_duration, Value};
use super::ConfigError;

/// Every flag's value, by flag name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<&'static str, Value>,
    given: BTreeSet<&'static str>,
}

impl Settings {
    /// The value of `flag` (its default when not given); `None` for a
    /// name that is not a flag.
    pub fn get(&self, flag: &str) -> Option<&Value> {
        self.values.get(flag)
    }

    /// Whether `flag` was given (by a flag, a variable or the file).
    pub fn is_given(&self, flag: &str) -> bool {
        self.given.contains(flag)
    }

    pub(super) fn insert(&mut self, flag: &'static str, value: Value, given: bool) {
        self.values.insert(flag, value);
        if given {
            self.given.insert(flag);
        }
    }

    pub(super) fn bool(&self, flag: &str) -> bool {
        matches!(self.get(flag), Some(Value::Bool(true)))
    }

    pub(super) fn uint(&self, flag: &str) -> u64 {
        match self.get(flag) {
            Some(Value::Uint(n)) => *n,
            _ => 0,
        }
    }

    pub(super) fn int(&self, flag: &str) -> i64 {
        match self.get(flag) {
            Some(Value::Int(n)) => *n,
            _ => 0,
        }
    }

    pub(super) fn duration(&self, flag: &str) -> Duration {
        match self.get(flag) {
            Some(Value::Duration(d)) => *d,
            _ => Duration::ZERO,
        }
    }

    pub(super) fn text(&self, flag: &str) -> String {
        match self.get(flag) {
            Some(Value::Text(text)) => text.clone(),
            _ => String::new(),
        }
    }

    pub(super) fn list(&self, flag: &str) -> Vec<String> {
        match self.get(flag) {
            Some(Value::List(list)) => list.clone(),
            _ => Vec::new(),
        }
    }
}

/// Settings of features oxetcd does not have yet, in the types their
/// implementation will want.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// `--quota-backend-bytes` (0: etcd's default of 2 GiB; negative: no
    /// quota). Wired: the node's quota (`alarm::Quota`) is built from it.
    pub quota_backend_bytes: i64,
    /// `--auto-compaction-mode` and `--auto-compaction-retention` (wired:
    /// the node's compactor runs on it).
    pub auto_compaction: AutoCompaction,
    /// `--grpc-keepalive-min-time`.
    pub grpc_keepalive_min_time: Duration,
    /// `--grpc-keepalive-interval` (zero: off).
    pub grpc_keepalive_interval: Duration,
    /// `--grpc-keepalive-timeout` (zero: off).
    pub grpc_keepalive_timeout: Duration,
    /// `--enable-pprof`.
    pub enable_pprof: bool,
    /// `--feature-gates`, with etcd 3.5's switches that became gates
    /// folded in; only the gates given.
    pub feature_gates: BTreeMap<String, bool>,
    /// `--corrupt-check-time` (zero: off; wired: the periodic corruption
    /// check).
    pub corrupt_check_time: Duration,
    /// `--compact-hash-check-time` (wired: the compact hash check, when
    /// its gate is on).
    pub compact_hash_check_time: Duration,
}

/// `--auto-compaction-mode` with its retention: the core compactor's own
/// type, so the server hands it over unchanged.
pub use oxetcd_core::compactor::AutoCompaction;

/// `--bcrypt-cost` bounds (Go's bcrypt).
const BCRYPT_COST_MIN: u64 = 4;
const BCRYPT_COST_MAX: u64 = 31;

/// `--bcrypt-cost`, checked against Go's bcrypt bounds.
pub(super) fn bcrypt_cost(settings: &Settings) -> Result<u32, ConfigError> {
    let cost = settings.uint("bcrypt-cost");
    if !(BCRYPT_COST_MIN..=BCRYPT_COST_MAX).contains(&cost) {
        return Err(invalid(
            "bcrypt-cost",
            &cost.to_string(),
            format!("must be between {BCRYPT_COST_MIN} and {BCRYPT_COST_MAX}"),
        ));
    }
    Ok(cost as u32)
}

impl Pending {
    pub(super) fn new(
        settings: &Settings,
        feature_gates: BTreeMap<String, bool>,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            quota_backend_bytes: settings.int("quota-backend-bytes"),
            auto_compaction: auto_compaction(
                &settings.text("auto-compaction-mode"),
                &settings.text("auto-compaction-retention"),
            )?,
            grpc_keepalive_min_time: settings.duration("grpc-keepalive-min-time"),
            grpc_keepalive_interval: settings.duration("grpc-keepalive-interval"),
            grpc_keepalive_timeout: settings.duration("grpc-keepalive-timeout"),
            enable_pprof: settings.bool("enable-pprof"),
            feature_gates,
            corrupt_check_time: settings.duration("corrupt-check-time"),
            compact_hash_check_time: settings.duration("compact-hash-check-time"),
        })
    }
}

/// etcd's reading of the retention: in periodic mode a bare number is
/// hours, in revision mode it must be a number.
fn auto_compaction(mode: &str, retention: &str) -> Result<AutoCompaction, ConfigError> {
    const FLAG: &str = "auto-compaction-retention";
    let number = retention.parse::<u64>().ok();
    if number == Some(0) {
        return Ok(AutoCompaction::Off);
    }
    match (mode, number) {
        ("revision", Some(n)) => Ok(AutoCompaction::Revision(n)),
        ("revision", None) => Err(invalid(
            FLAG,
            retention,
            "--auto-compaction-mode revision needs a number of revisions",
        )),
        (_, Some(hours)) => Ok(AutoCompaction::Periodic(Duration::from_secs(
            hours.saturating_mul(3600),
        ))),
        (_, None) => match parse_duration(FLAG, retention)? {
            d if d.is_zero() => Ok(AutoCompaction::Off),
            d => Ok(AutoCompaction::Periodic(d)),
        },
    }
}
