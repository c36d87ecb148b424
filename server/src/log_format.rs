//! `--log-format json` lines as etcd writes them (its zap encoder), so log
//! shippers and scripts that parse etcd's logs read oxetcd's unchanged:
//!
//! ```text
//! {"level":"info","ts":"2026-11-24T16:46:35.123456Z","caller":"oxetcd_server","msg":"…","member-id":"…"}
//! ```
//!
//! Design. One [`tracing_subscriber::fmt::FormatEvent`]: etcd's four keys
//! first (level in lower case, an RFC 3339 UTC timestamp, the caller — our
//! module path where zap names a file and line — and the message), then
//! the event's fields with etcd's hyphenated names (`member_id` becomes
//! `member-id`), strings quoted and escaped, numbers and booleans bare.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// etcd's JSON log line.
pub(crate) struct EtcdJson;

impl<S, N> FormatEvent<S, N> for EtcdJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _cx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut ts = String::new();
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = String::with_capacity(160 + fields.rest.len());
        line.push_str("{\"level\":\"");
        line.push_str(level(meta.level()));
        line.push_str("\",\"ts\":");
        string(&mut line, &ts);
        line.push_str(",\"caller\":");
        string(&mut line, meta.target());
        line.push_str(",\"msg\":");
        string(&mut line, &fields.message);
        line.push_str(&fields.rest);
        line.push_str("}\n");
        writer.write_str(&line)
    }
}

fn level(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG | Level::TRACE => "debug",
    }
}

/// The message, and every other field already written as `,"key":value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Fields {
    fn key(&mut self, field: &Field) {
        self.rest.push(',');
        string(&mut self.rest, &field.name().replace('_', "-"));
        self.rest.push(':');
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
            return;
        }
        self.key(field);
        string(&mut self.rest, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = write!(self.rest, "{value}");
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        self.record_str(field, &text);
    }
}

/// Appends `text` as a JSON string, as zap writes it.
fn string(out: &mut String, text: &str) {
    oxetcd_storage::go_json::write(out, text, false);
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_have_etcds_keys_and_hyphenated_fields() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .event_format(EtcdJson)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(
                member_id = %"8e9e05c52164694d",
                applied_index = 7u64,
                ok = true,
                "rejected connection from \"127.0.0.1:9\""
            );
        });
        let text = String::from_utf8(lines.0.lock().expect("lock").clone()).expect("utf-8");
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["msg"], "rejected connection from \"127.0.0.1:9\"");
        assert_eq!(line["member-id"], "8e9e05c52164694d");
        assert_eq!(line["applied-index"], 7);
        assert_eq!(line["ok"], true);
        assert!(line["caller"].as_str().is_some_and(|c| !c.is_empty()));
        let ts = line["ts"].as_str().expect("ts");
        assert!(ts.ends_with('Z') && ts.contains('T'), "{ts}");
        assert!(text.starts_with("{\"level\":\"warn\",\"ts\":"), "{text}");
    }
}
