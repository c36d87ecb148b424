//! How Go's standard library spells values, for output that matches
//! etcdctl byte for byte: `%q` quoting, `time.Duration` strings,
//! `encoding/json` strings and go-humanize's byte sizes.

use std::fmt::Write as _;
use std::time::Duration;

/// `strconv.Quote` of a byte string: printable UTF-8 kept, the usual
/// backslash escapes, `\x..` for invalid bytes and control characters.
pub fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{b}' => out.push_str("\\v"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if c.is_control() => {
                    if (c as u32) < 0x10000 {
                        let _ = write!(out, "\\u{:04x}", c as u32);
                    } else {
                        let _ = write!(out, "\\U{:08x}", c as u32);
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out.push('"');
    out
}

/// `encoding/json`'s string encoding, HTML-safe as Go's default encoder is
/// (the one the bolt snapshot's member records use too).
pub use oxetcd_storage::go_json::string as json_string;

/// `time.Duration.String()`: `1.5ms`, `850µs`, `2m3.5s`, `0s`.
pub fn duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", fraction(nanos, 1_000_000));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = fraction((total_secs % 60) * 1_000_000_000 + sub, 1_000_000_000);
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / unit` with the remainder as decimals, trailing zeros dropped.
fn fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let rest = value % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let digits = unit.ilog10() as usize;
    let decimals = format!("{rest:0digits$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

/// go-humanize's `Bytes`: SI units, one decimal below 10 (`20 kB`, `1.2 MB`).
pub fn human_bytes(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if size < 10 {
        return format!("{size} B");
    }
    let exponent = ((size as f64).ln() / 1000f64.ln()).floor() as usize;
    let exponent = exponent.min(UNITS.len() - 1);
    let value = (size as f64 / 1000f64.powi(exponent as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exponent])
    } else {
        format!("{} {}", round_half_even(value), UNITS[exponent])
    }
}

/// Go's `%.0f`: round half to even.
fn round_half_even(value: f64) -> i64 {
    let floor = value.floor();
    let diff = value - floor;
    let floor = floor as i64;
    if diff > 0.5 || (diff == 0.5 && floor % 2 != 0) {
        floor + 1
    } else {
        floor
    }
}

/// Go's `%v` of a `[]string`: `[a b c]`.
pub fn string_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_strconv() {
        assert_eq!(quote(b"foo"), "\"foo\"");
        assert_eq!(quote(b"a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(quote(b"\x00\xff"), "\"\\x00\\xff\"");
        assert_eq!(quote("é".as_bytes()), "\"é\"");
    }

    #[test]
    fn durations_like_go() {
        assert_eq!(duration(Duration::from_nanos(1_346_298)), "1.346298ms");
        assert_eq!(duration(Duration::from_micros(850)), "850µs");
        assert_eq!(duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(duration(Duration::from_secs(125)), "2m5s");
        assert_eq!(duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(duration(Duration::ZERO), "0s");
    }

    #[test]
    fn sizes_like_humanize() {
        assert_eq!(human_bytes(20480), "20 kB");
        assert_eq!(human_bytes(5), "5 B");
        assert_eq!(human_bytes(1_234_567), "1.2 MB");
        assert_eq!(human_bytes(24_576), "25 kB");
    }

    #[test]
    fn json_strings_are_html_safe() {
        assert_eq!(
            json_string("a<b>&\"\n"),
            "\"a\\u003cb\\u003e\\u0026\\\"\\n\""
        );
    }
}
