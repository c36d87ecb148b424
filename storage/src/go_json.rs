//! Strings as Go's `encoding/json` writes them: etcd stores member
//! records in its bolt files as Go JSON, and etcdctl prints Go JSON, so
//! both oxetcd's snapshot writer and oxetcdctl encode strings this way.

use std::fmt::Write as _;

/// A JSON string, HTML-safe as Go's default encoder makes it (`<`, `>`,
/// `&`, U+2028 and U+2029 escaped as `\u` sequences).
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
