//! Time as the node sees it: a value handed in with every input.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A monotonic instant, in nanoseconds since an origin the runtime chose.
/// Traces replay by value because the node never reads a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);

    /// An instant `nanos` after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(nanos))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

/// A duration as Go prints one (`1h0m0s`, `1.5s`, `626.521µs`), for log
/// fields that etcd writes with zap's duration encoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nanos = self.0.as_nanos();
        match nanos {
            0 => f.write_str("0s"),
            1..=999 => write!(f, "{nanos}ns"),
            1_000..=999_999 => write_fraction(f, nanos, 1_000, "µs"),
            1_000_000..=999_999_999 => write_fraction(f, nanos, 1_000_000, "ms"),
            _ => {
                let secs = self.0.as_secs();
                let (hours, minutes) = (secs / 3600, secs % 3600 / 60);
                if hours > 0 {
                    write!(f, "{hours}h")?;
                }
                if hours > 0 || minutes > 0 {
                    write!(f, "{minutes}m")?;
                }
                let rest =
                    u128::from(secs % 60) * 1_000_000_000 + u128::from(self.0.subsec_nanos());
                write_fraction(f, rest, 1_000_000_000, "s")
            }
        }
    }
}

/// `value / unit` with its fraction's significant digits, then `suffix`.
fn write_fraction(
    f: &mut std::fmt::Formatter<'_>,
    value: u128,
    unit: u128,
    suffix: &str,
) -> std::fmt::Result {
    let (whole, fraction) = (value / unit, value % unit);
    if fraction == 0 {
        return write!(f, "{whole}{suffix}");
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    write!(f, "{whole}.{}{suffix}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(5), "5ns"),
            (Duration::from_nanos(626_521), "626.521µs"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_micros(1_500), "1.5ms"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_nanos(1_014_970_818), "1.014970818s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(24 * 3600 + 1), "24h0m1s"),
        ];
        for (d, go) in cases {
            assert_eq!(GoDuration(d).to_string(), go, "{d:?}");
        }
    }
}
