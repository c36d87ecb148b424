//! Reading passwords from stdin as etcdctl does.
//!
//! A prompt is etcdctl's (speakeasy's): the prompt on stdout, the answer
//! read up to a newline and trimmed of surrounding white space, then a
//! newline on stdout. When stdin is a terminal its echo is off while the
//! answer is typed (through `stty`, as speakeasy does); when it is not (a
//! pipe, which is how etcd's end-to-end tests drive etcdctl) lines are read
//! as they come, and nothing is said about the terminal.
//!
//! Ctrl-C while echo is off would leave the terminal silent, so the first
//! prompt on a terminal takes over SIGINT for the rest of the process: echo
//! is turned back on, and the process exits as etcdctl does then.
//!
//! This module never reads past the line (or word) it asks for, so a second
//! prompt, or a command reading stdin afterwards, finds the rest.

use std::io::{BufRead, IsTerminal, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Once;

/// Exit code after Ctrl-C at a prompt: etcdctl's `os.Exit(-1)`.
const INTERRUPTED_EXIT: i32 = 255;

/// Asks for a password with `prompt`. The error is the reason the answer
/// could not be read.
pub async fn password(prompt: &str) -> Result<String, String> {
    {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(prompt.as_bytes());
        let _ = stdout.flush();
    }
    let echo_off = std::io::stdin().is_terminal().then(EchoOff::start);
    let line = tokio::task::spawn_blocking(read_line)
        .await
        .map_err(|e| e.to_string())
        .and_then(|line| line.map_err(|e| format!("failed during password entry: {e}")));
    drop(echo_off);
    println!();
    Ok(line?.trim().to_owned())
}

/// Go's `fmt.Scanf("%s", &word)` on stdin, which is how etcdctl reads a
/// password with `--interactive=false`: spaces and tabs skipped, then
/// everything up to the next white space. A newline (or the end of input)
/// before any word gives the empty word, as Go's error there leaves it.
pub async fn word() -> String {
    tokio::task::spawn_blocking(scan_word)
        .await
        .unwrap_or_default()
}

fn read_line() -> std::io::Result<String> {
    let mut bytes = Vec::new();
    std::io::stdin().lock().read_until(b'\n', &mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn scan_word() -> String {
    let mut word = Vec::new();
    let stdin = std::io::stdin().lock();
    for byte in stdin.bytes() {
        match byte {
            Ok(b' ' | b'\t' | b'\r') if word.is_empty() => {}
            Ok(b) if b.is_ascii_whitespace() => break,
            Ok(b) => word.push(b),
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&word).into_owned()
}

/// The terminal's echo, off while this lives.
struct EchoOff;

impl EchoOff {
    fn start() -> Self {
        static INTERRUPTS: Once = Once::new();
        INTERRUPTS.call_once(|| {
            tokio::spawn(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    set_echo(true);
                    println!();
                    std::process::exit(INTERRUPTED_EXIT);
                }
            });
        });
        set_echo(false);
        Self
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        set_echo(true);
    }
}

/// `stty echo` or `stty -echo` on stdin. A failure leaves echo as it was,
/// which costs only privacy on screen; speakeasy ignores it too.
fn set_echo(on: bool) {
    let _ = Command::new("stty")
        .arg(if on { "echo" } else { "-echo" })
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
