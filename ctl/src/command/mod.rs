//! The `oxetcdctl` commands: etcdctl's names, flags, messages and exit
//! codes, built on [`crate::client`] and printed through [`crate::output`].
//!
//! A command returns `Err(Failure)` instead of exiting, so the binary owns
//! the process exit and the commands stay testable.

pub mod auth;
pub mod check;
pub mod elect;
pub mod endpoint;
pub mod interrupt;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod member;
pub mod mirror;
pub mod role;
pub mod session;
pub mod txn;
pub mod user;
pub mod watch;

use std::fmt;
use std::io::Write;

use crate::client::Client;
use crate::output::{Printer, View};
use crate::Error;

/// etcdctl's exit codes.
pub mod exit {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// The request failed.
    pub const ERROR: i32 = 1;
    /// The connection failed (etcdctl uses it for lease streams too).
    pub const BAD_CONNECTION: i32 = 2;
    /// Malformed input on stdin (`txn`, `watch -i`).
    pub const INVALID_INPUT: i32 = 3;
    /// A valid flag with an unsupported value (`-w table` for `get`).
    pub const BAD_FEATURE: i32 = 4;
    /// A stream ended (`watch` cancelled by the server, `snapshot save`).
    pub const INTERRUPTED: i32 = 5;
    /// A local file could not be written.
    pub const IO: i32 = 6;
    /// Wrong arguments.
    pub const BAD_ARGS: i32 = 128;
}

/// How a command failed: the exit code, and the message printed as
/// `Error: <message>` (none when the command already reported on stderr).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Process exit code.
    pub code: i32,
    /// Printed after `Error: `.
    pub message: Option<String>,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: i32, message: impl fmt::Display) -> Self {
        Self {
            code,
            message: Some(message.to_string()),
        }
    }

    /// Wrong arguments (exit 128).
    pub fn bad_args(message: impl fmt::Display) -> Self {
        Self::new(exit::BAD_ARGS, message)
    }

    /// A request error (exit 1).
    pub fn error(error: impl fmt::Display) -> Self {
        Self::new(exit::ERROR, error)
    }

    /// Exit with `code`, the details already printed.
    pub fn silent(code: i32) -> Self {
        Self {
            code,
            message: None,
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::error(error)
    }
}

/// What every command gets: the client and the printer.
pub struct Context {
    /// The cluster client built from the global flags.
    pub client: Client,
    /// `-w`, `--hex`.
    pub printer: Printer,
    /// Whether `--command-timeout` was given (`snapshot save` has no
    /// timeout unless it was).
    pub command_timeout_given: bool,
}

impl Context {
    /// Prints `view` with the context's printer.
    pub fn print(&self, view: &View<'_>) -> Result<(), Failure> {
        print_with(&self.printer, view)
    }
}

/// Prints `view` with `printer`: stdout and stderr as rendered, or etcdctl's
/// "<format> not supported as output format" (exit 4).
pub fn print_with(printer: &Printer, view: &View<'_>) -> Result<(), Failure> {
    let rendered = printer
        .render(view)
        .map_err(|e| Failure::new(exit::BAD_FEATURE, e))?;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&rendered.stdout);
    let _ = stdout.flush();
    if !rendered.stderr.is_empty() {
        let _ = std::io::stderr().write_all(rendered.stderr.as_bytes());
    }
    Ok(())
}

/// etcdctl's check of a command's arguments: exactly `count` of them, or
/// `message` (exit 128).
pub fn expect_args(args: &[String], count: usize, message: &str) -> Result<(), Failure> {
    if args.len() == count {
        Ok(())
    } else {
        Err(Failure::bad_args(message))
    }
}

/// The one argument (a user or role name) a command takes, or `message`
/// (exit 128).
pub fn one_arg<'a>(args: &'a [String], message: &str) -> Result<&'a str, Failure> {
    expect_args(args, 1, message)?;
    Ok(&args[0])
}

/// Go's `strconv.ParseBool`, for boolean flags given a value
/// (`--interactive=false`).
pub fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing {}: invalid syntax",
            crate::output::go::quote(text.as_bytes())
        )),
    }
}

/// Go's `strconv.ParseInt(text, 16, 64)` error text, for etcdctl's
/// messages about lease and member IDs.
pub fn parse_hex_i64(text: &str) -> Result<i64, String> {
    parse_hex(text, 63).map(|v| v as i64).map_err(|why| {
        format!(
            "strconv.ParseInt: parsing {}: {why}",
            crate::output::go::quote(text.as_bytes())
        )
    })
}

/// Go's `strconv.ParseUint(text, 16, 64)`.
pub fn parse_hex_u64(text: &str) -> Result<u64, String> {
    parse_hex(text, 64).map_err(|why| {
        format!(
            "strconv.ParseUint: parsing {}: {why}",
            crate::output::go::quote(text.as_bytes())
        )
    })
}

fn parse_hex(text: &str, bits: u32) -> Result<u64, &'static str> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) if bits == 63 => (true, rest),
        _ => (
            false,
            text.strip_prefix('+')
                .filter(|_| bits == 63)
                .unwrap_or(text),
        ),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("invalid syntax");
    }
    let value = u64::from_str_radix(digits, 16).map_err(|_| "value out of range")?;
    if bits == 63 {
        let limit = if negative {
            1u64 << 63
        } else {
            (1u64 << 63) - 1
        };
        if value > limit {
            return Err("value out of range");
        }
        return Ok(if negative {
            (value as i64).wrapping_neg() as u64
        } else {
            value
        });
    }
    Ok(value)
}

/// Go's `strconv.ParseInt(text, 10, 64)` error text.
pub fn parse_decimal_i64(text: &str) -> Result<i64, String> {
    text.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!(
            "strconv.ParseInt: parsing {}: {why}",
            crate::output::go::quote(text.as_bytes())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_parse_like_go() {
        assert_eq!(parse_hex_i64("694da1fce6b4050b"), Ok(0x694da1fce6b4050b));
        assert_eq!(
            parse_hex_i64("xyz"),
            Err("strconv.ParseInt: parsing \"xyz\": invalid syntax".to_owned())
        );
        assert_eq!(
            parse_hex_i64("ffffffffffffffff"),
            Err("strconv.ParseInt: parsing \"ffffffffffffffff\": value out of range".to_owned())
        );
        assert_eq!(parse_hex_u64("8e9e05c52164694d"), Ok(0x8e9e05c52164694d));
    }
}
