//! Value syntaxes shared by many flags, and the typed [`Value`] each
//! parses to.
//!
//! Design: a flag's [`Kind`] names its syntax — Go's booleans (`true`,
//! `f`, `1`, …), unsigned and signed integers, Go durations (`5m0s`,
//! `500ms`), byte sizes, comma lists, URL lists (`http`, `https`, `unix`,
//! `unixs`), `host:port`, one of a fixed set of words, etcd's feature gates
//! (`Name=true,Other=false`), auto-compaction retention and auth-token
//! specs — and [`Kind::parse`] turns text into a [`Value`] or an error that
//! names the flag. Every source (flag, `ETCD_*` variable, config file)
//! goes through it, so a value is checked the same way wherever it comes
//! from.

use std::collections::BTreeMap;
use std::time::Duration;

use super::gates::{parse_gates, FEATURE_GATES};
use super::urls::{check_url, split_list};
use super::ConfigError;
use crate::auth_token::{self, AuthTokenSpec};

/// A flag's value syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// A boolean; given alone on the command line, it means true.
    Switch,
    /// Any text (names, tokens, paths).
    Text,
    /// A non-negative integer.
    Uint,
    /// A non-negative integer that fits 32 bits.
    Uint32,
    /// A signed integer.
    Int,
    /// An integer above zero.
    Positive,
    /// A Go duration.
    Duration,
    /// A byte count: an integer, optionally with a unit (`KB`, `MiB`, …);
    /// negative is etcd's "off".
    Bytes,
    /// Comma-separated words.
    List,
    /// Comma-separated URLs.
    Urls,
    /// `host:port`.
    HostPort,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// `--feature-gates`: `Name=bool,...`.
    FeatureGates,
    /// `--auto-compaction-retention`: a duration, or a number (hours or
    /// revisions, by `--auto-compaction-mode`).
    Retention,
    /// `--auth-token`: `simple`, or `jwt,key=value,...`.
    AuthToken,
    /// `--initial-cluster`: `name=URL,...` (checked further against the
    /// member's own URLs).
    InitialCluster,
    /// A flag etcd accepts and ignores; a value is optional.
    Ignored,
}

/// A flag's parsed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A switch.
    Bool(bool),
    /// A count, size or millisecond value.
    Uint(u64),
    /// A signed number.
    Int(i64),
    /// A duration.
    Duration(Duration),
    /// Text, a path, or one word of a choice.
    Text(String),
    /// A list (URLs normalized).
    List(Vec<String>),
    /// Feature gates by name.
    Gates(BTreeMap<String, bool>),
}

impl Kind {
    /// Parses `text` given for `flag`.
    pub(super) fn parse(self, flag: &'static str, text: &str) -> Result<Value, ConfigError> {
        let number = |e: std::num::ParseIntError| invalid(flag, text, e.to_string());
        Ok(match self {
            Self::Switch => Value::Bool(parse_bool(flag, text)?),
            Self::Text | Self::Ignored => Value::Text(text.to_owned()),
            Self::Uint => Value::Uint(text.trim().parse().map_err(number)?),
            Self::Uint32 => Value::Uint(u64::from(text.trim().parse::<u32>().map_err(number)?)),
            Self::Int => Value::Int(text.trim().parse().map_err(number)?),
            Self::Positive => Value::Uint(parse_positive(flag, text)? as u64),
            Self::Duration => Value::Duration(parse_duration(flag, text)?),
            Self::Bytes => Value::Int(match text.trim().strip_prefix('-') {
                // In range: `parse_bytes` answers at most `i64::MAX`.
                Some(magnitude) => -(parse_bytes(flag, magnitude)? as i64),
                None => parse_bytes(flag, text)? as i64,
            }),
            Self::List => Value::List(split_list(text).map(str::to_owned).collect()),
            Self::Urls => Value::List(
                split_list(text)
                    .map(|url| check_url(flag, url))
                    .collect::<Result<_, _>>()?,
            ),
            Self::HostPort => Value::Text(parse_host_port(flag, text)?),
            Self::Choice(words) => Value::Text(parse_choice(flag, text, words)?),
            Self::FeatureGates => Value::Gates(parse_feature_gates(flag, text)?),
            Self::Retention => Value::Text(parse_retention(flag, text)?),
            Self::AuthToken => Value::Text(parse_auth_token(flag, text)?),
            Self::InitialCluster => Value::Text(parse_member_list(flag, text)?),
        })
    }
}

pub(super) fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

pub(super) fn parse_bool(flag: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(flag, value, "expected true or false")),
    }
}

pub(super) fn parse_positive(flag: &'static str, value: &str) -> Result<usize, ConfigError> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err(invalid(flag, value, "must be greater than zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(invalid(flag, value, e.to_string())),
    }
}

/// A Go duration (`time.ParseDuration`): a sequence of decimal numbers,
/// each with an optional fraction and a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), as in "5m0s" or "1.5s"; a bare "0" is zero. Negative
/// durations are refused: no flag of ours takes one.
pub(crate) fn parse_duration(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
    const DURATION_EXPECTED: &str = "expected a duration like 500ms or 5m0s";
    let text = value.trim();
    let text = text.strip_prefix('+').unwrap_or(text);
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.starts_with('-') {
        return Err(invalid(flag, value, DURATION_EXPECTED));
    }
    let mut rest = text;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(number_len);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(invalid(flag, value, "missing unit in duration")),
            other => return Err(invalid(flag, value, format!("unknown unit {other:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(invalid(flag, value, DURATION_EXPECTED));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole
                .parse()
                .map_err(|_| invalid(flag, value, "duration out of range"))?
        };
        let mut nanos = whole.saturating_mul(unit_nanos);
        let mut scale = unit_nanos;
        for digit in fraction.bytes().take(30) {
            scale /= 10;
            nanos = nanos.saturating_add(u128::from(digit - b'0') * scale);
        }
        total_nanos = total_nanos.saturating_add(nanos);
        rest = tail;
    }
    // Go's durations stop at about 292 years.
    if total_nanos > i64::MAX as u128 {
        return Err(invalid(flag, value, "duration out of range"));
    }
    Ok(Duration::from_nanos(total_nanos as u64))
}

/// A byte count: digits, optionally followed by a unit — `B`, decimal
/// `KB`/`MB`/`GB`/`TB` or binary `KiB`/`MiB`/`GiB`/`TiB` (etcd itself takes
/// plain numbers only).
pub(super) fn parse_bytes(flag: &'static str, value: &str) -> Result<u64, ConfigError> {
    let text = value.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| {
        invalid(
            flag,
            value,
            "expected a number of bytes like 8589934592 or 8GiB",
        )
    })?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        other => return Err(invalid(flag, value, format!("unknown byte unit {other:?}"))),
    };
    number
        .checked_mul(scale)
        .filter(|n| i64::try_from(*n).is_ok())
        .ok_or_else(|| invalid(flag, value, "byte count out of range"))
}

fn parse_host_port(flag: &'static str, value: &str) -> Result<String, ConfigError> {
    let text = value.trim();
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(text.to_owned())
        }
        _ => Err(invalid(flag, value, "expected host:port")),
    }
}

/// One of `words`, compared without case; the word as the table spells it.
/// An empty value is allowed where the default is empty.
fn parse_choice(flag: &'static str, value: &str, words: &[&str]) -> Result<String, ConfigError> {
    let text = value.trim();
    if text.is_empty() && super::flags::find(flag).is_some_and(|f| f.default.is_empty()) {
        return Ok(String::new());
    }
    words
        .iter()
        .find(|w| w.eq_ignore_ascii_case(text))
        .map(|w| (*w).to_owned())
        .ok_or_else(|| invalid(flag, value, format!("expected one of {}", words.join(", "))))
}

/// etcd's `--feature-gates`: `Name=bool` pairs, names from
/// [`FEATURE_GATES`], with its error words.
fn parse_feature_gates(
    flag: &'static str,
    value: &str,
) -> Result<BTreeMap<String, bool>, ConfigError> {
    parse_gates(FEATURE_GATES, value).map_err(|reason| invalid(flag, value, reason))
}

/// `--auto-compaction-retention`: a Go duration, or a non-negative number
/// (hours in periodic mode, revisions in revision mode).
fn parse_retention(flag: &'static str, value: &str) -> Result<String, ConfigError> {
    let text = value.trim();
    if text.parse::<u64>().is_ok() || parse_duration(flag, text).is_ok() {
        Ok(text.to_owned())
    } else {
        Err(invalid(
            flag,
            value,
            "expected a duration like 1h or a number (hours, or revisions)",
        ))
    }
}

/// `--auth-token`: `simple`, or `jwt` with `key=value` options, split as
/// etcd splits it (`crate::auth_token` owns the syntax); a `ttl` option
/// must be a Go duration. Key files are read when the server starts.
fn parse_auth_token(flag: &'static str, value: &str) -> Result<String, ConfigError> {
    let text = value.trim();
    let spec = AuthTokenSpec::parse(text).map_err(|reason| invalid(flag, value, reason))?;
    if let Some(ttl) = spec.option(auth_token::OPTION_TTL) {
        parse_duration(flag, ttl)?;
    }
    Ok(text.to_owned())
}

/// `name=URL` pairs; the URLs are checked, membership rules come later.
fn parse_member_list(flag: &'static str, value: &str) -> Result<String, ConfigError> {
    for pair in split_list(value) {
        let Some((_, url)) = pair.split_once('=') else {
            return Err(invalid(flag, value, format!("{pair:?} is not name=URL")));
        };
        check_url(flag, url.trim())?;
    }
    Ok(value.to_owned())
}
