//! The logging flags: `--logger`, `--log-outputs`, `--log-level` and
//! `--log-format`, with etcd's words and defaults.
//!
//! Design: [`Logging`] says what `init_logging` (in `lib.rs`) sets up and
//! nothing else; it never opens a file itself. etcd 3.4's `--debug` and
//! `--log-output` map onto these (`--debug` means `--log-level debug`
//! unless a level is given).

use std::path::PathBuf;

/// How the server logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    /// `--logger`: `zap` (etcd 3.5+) or 3.4's `capnslog`; both log the same
    /// way here.
    pub logger: String,
    /// `--log-level`.
    pub level: LogLevel,
    /// `--log-format`.
    pub format: LogFormat,
    /// `--log-outputs`, at least one.
    pub outputs: Vec<LogOutput>,
}

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
    /// etcd's `panic`: errors only, as `tracing` has no higher level.
    Panic,
    /// etcd's `fatal`: errors only, as `tracing` has no higher level.
    Fatal,
}

impl LogLevel {
    /// The level as a `tracing` filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error | Self::Panic | Self::Fatal => "error",
        }
    }

    /// The level for one of `--log-level`'s words (checked by the table).
    pub(super) fn from_word(word: &str) -> Self {
        match word {
            "debug" => Self::Debug,
            "warn" => Self::Warn,
            "error" => Self::Error,
            "panic" => Self::Panic,
            "fatal" => Self::Fatal,
            _ => Self::Info,
        }
    }
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object a line (etcd's default).
    Json,
    /// Human-readable lines.
    Console,
}

/// One of `--log-outputs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogOutput {
    /// `default` or `stderr`.
    Stderr,
    /// `stdout`.
    Stdout,
    /// A file to append to.
    File(PathBuf),
}

impl Logging {
    /// From the table's checked words.
    pub(super) fn new(logger: &str, level: &str, format: &str, outputs: &[String]) -> Self {
        let mut parsed: Vec<LogOutput> = Vec::new();
        for output in outputs {
            let output = match output.as_str() {
                "default" | "stderr" => LogOutput::Stderr,
                "stdout" => LogOutput::Stdout,
                path => LogOutput::File(PathBuf::from(path)),
            };
            if !parsed.contains(&output) {
                parsed.push(output);
            }
        }
        if parsed.is_empty() {
            parsed.push(LogOutput::Stderr);
        }
        Self {
            logger: logger.to_owned(),
            level: LogLevel::from_word(level),
            format: if format == "console" {
                LogFormat::Console
            } else {
                LogFormat::Json
            },
            outputs: parsed,
        }
    }
}
