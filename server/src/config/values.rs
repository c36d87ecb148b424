//! Value syntaxes shared by many flags: Go's booleans and durations,
//! positive counts, log levels.

use std::time::Duration;

use super::ConfigError;

/// `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// The default.
    Info,
    /// Warnings and errors.
    Warn,
    /// Errors only.
    Error,
}

impl LogLevel {
    /// The level as a `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
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
pub(super) fn parse_duration(flag: &'static str, value: &str) -> Result<Duration, ConfigError> {
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

pub(super) fn parse_log_level(value: &str) -> Result<LogLevel, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        _ => Err(invalid(
            "log-level",
            value,
            "expected debug, info, warn or error",
        )),
    }
}
