//! Strings as Go's JSON encoders write them: etcd stores member records in
//! its bolt files as Go JSON and etcdctl prints Go JSON (`encoding/json`,
//! HTML-safe), and etcd logs through zap's JSON encoder (not HTML-safe),
//! so oxetcd's snapshot writer, oxetcdctl and its log lines all encode
//! strings here.

use std::fmt::Write as _;

/// A JSON string as `encoding/json` writes it: HTML-safe (`<`, `>`, `&`,
/// U+2028 and U+2029 escaped as `\u` sequences).
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    write(&mut out, text, true);
    out
}

/// Appends `text` as a JSON string; `html_safe` escapes `<`, `>`, `&`,
/// U+2028 and U+2029 too, as `encoding/json` does and zap does not.
pub fn write(out: &mut String, text: &str, html_safe: bool) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html_safe => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
