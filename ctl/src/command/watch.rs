//! `watch`: streams events until the server cancels the watch.
//!
//! A stream that breaks with `Unavailable` is re-created on the next
//! endpoint, resuming after the last revision seen, so a watcher survives
//! losing its member as etcd's client does. Any other error ends the watch
//! with etcdctl's "watch was canceled (…)".
//!
//! `watch -i` reads `watch …` and `progress` lines from stdin, each watch on
//! its own stream; like etcdctl it skips a line the server could refuse and
//! ends on one that could never make a watch, and on the end of its input
//! (exit 3). `watch KEY -- COMMAND ARGS` runs the command once per event
//! with `ETCD_WATCH_REVISION`, `ETCD_WATCH_EVENT_TYPE`, `ETCD_WATCH_KEY` and
//! `ETCD_WATCH_VALUE` (Go-quoted) in its environment; a failure ends the
//! watch with Go's description of it, as etcdctl's does.

use std::io::BufRead;

use clap::{Args, Parser};
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::kv::widen_range;
use super::txn::argify;
use super::{exit, Context, Failure};
use crate::client::watch as watch_client;
use crate::error::{Error, COMPACTED};
use crate::output::go::quote;
use crate::output::View;

/// Requests queued for one watch stream (the create and progress requests).
const WATCH_QUEUE_MAX: usize = 4;

/// etcdctl's error for a `--` with no command after it.
const SEPARATOR_WITHOUT_COMMAND: &str =
    "bad number of arguments (found separator --, but no commands)";

/// `watch [options] [key or prefix] [range_end] [--] [exec-command arg1 arg2 ...]`.
#[derive(Args, Clone, Debug, Default)]
pub struct WatchArgs {
    /// Interactive mode
    #[arg(short, long)]
    pub interactive: bool,
    /// Watch on a prefix if prefix is set
    #[arg(long)]
    pub prefix: bool,
    /// Revision to start watching
    #[arg(long, default_value_t = 0)]
    pub rev: i64,
    /// get the previous key-value pair before the event happens
    #[arg(long)]
    pub prev_kv: bool,
    /// [key or prefix] [range_end]
    pub args: Vec<String>,
    /// [exec-command arg1 arg2 ...], after `--`
    #[arg(last = true)]
    pub exec: Vec<String>,
}

/// One `watch …` line of `watch -i`.
#[derive(Parser)]
struct WatchLine {
    #[command(flatten)]
    args: WatchArgs,
}

/// `watch`.
pub async fn watch(ctx: &Context, a: &WatchArgs) -> Result<(), Failure> {
    let env_key = std::env::var("ETCDCTL_WATCH_KEY").unwrap_or_default();
    let env_range = std::env::var("ETCDCTL_WATCH_RANGE_END").unwrap_or_default();
    if env_key.is_empty() && !env_range.is_empty() {
        return Err(Failure::bad_args(format!(
            "ETCDCTL_WATCH_KEY is empty but got ETCDCTL_WATCH_RANGE_END={}",
            quote(env_range.as_bytes())
        )));
    }
    if a.interactive {
        return interactive(ctx, &env_key, &env_range).await;
    }
    // `watch foo --`: a separator with no command after it.
    if std::env::args().next_back().as_deref() == Some("--") {
        return Err(Failure::bad_args(SEPARATOR_WITHOUT_COMMAND));
    }
    let mut args = a.args.clone();
    if !env_key.is_empty() {
        if !args.is_empty() {
            return Err(Failure::bad_args(
                "bad number of arguments (found conflicting environment key)",
            ));
        }
        args.push(env_key);
        if !env_range.is_empty() {
            args.push(env_range);
        }
    }
    let create = create_request(&args, a)?;
    let (_progress, progress_receiver) = broadcast::channel(1);
    run(ctx, create, &a.exec, progress_receiver).await;
    Err(Failure::new(
        exit::INTERRUPTED,
        "watch is canceled by the server",
    ))
}

fn create_request(args: &[String], a: &WatchArgs) -> Result<WatchCreateRequest, Failure> {
    let Some(key) = args.first() else {
        return Err(Failure::bad_args("bad number of arguments"));
    };
    let mut create = WatchCreateRequest {
        key: key.as_bytes().to_vec(),
        start_revision: a.rev,
        prev_kv: a.prev_kv,
        ..Default::default()
    };
    if args.len() == 2 {
        if a.prefix {
            return Err(Failure::bad_args(
                "`range_end` and `--prefix` are mutually exclusive",
            ));
        }
        create.range_end = args[1].as_bytes().to_vec();
    }
    widen_range(&mut create.key, &mut create.range_end, a.prefix, false);
    Ok(create)
}

/// `watch -i`: reads `watch …` and `progress` lines from stdin.
async fn interactive(ctx: &Context, env_key: &str, env_range: &str) -> Result<(), Failure> {
    let (progress, _) = broadcast::channel::<()>(16);
    let (lines_sender, mut lines) = mpsc::channel::<std::io::Result<String>>(1);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut stdin = stdin.lock();
        loop {
            let mut line = String::new();
            let read = match stdin.read_line(&mut line) {
                // A last line without its newline is not a request: Go's
                // reader reports EOF with it, and etcdctl stops there.
                Ok(_) if !line.ends_with('\n') => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "EOF",
                )),
                Ok(_) => Ok(line),
                Err(e) => Err(e),
            };
            let stop = read.is_err();
            if lines_sender.blocking_send(read).is_err() || stop {
                return;
            }
        }
    });
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let line = match lines.recv().await {
            Some(Ok(line)) => line,
            Some(Err(e)) => {
                return Err(Failure::new(
                    exit::INVALID_INPUT,
                    format!("Error reading watch request line: {e}"),
                ))
            }
            None => return Ok(()),
        };
        let line = line.strip_suffix('\n').unwrap_or(&line).to_owned();
        let words = argify(&line)?;
        match words.first().map(String::as_str) {
            None => eprintln!("Invalid command: {line} (watch and progress supported)"),
            Some("watch") => {
                if words.len() < 2 && env_key.is_empty() {
                    eprintln!("Invalid command {line} (command type or key is not provided)");
                    continue;
                }
                // As etcdctl, a line whose flags or arguments could never
                // make a watch ends the session; one the server could
                // refuse is reported and skipped.
                if words.last().map(String::as_str) == Some("--") {
                    return Err(Failure::bad_args(SEPARATOR_WITHOUT_COMMAND));
                }
                let parsed = WatchLine::try_parse_from(&words)
                    .map_err(|e| Failure::bad_args(flag_error(&e)))?
                    .args;
                if parsed.exec.is_empty() {
                    if env_key.is_empty() && parsed.args.is_empty() {
                        return Err(Failure::bad_args("bad number of arguments"));
                    }
                    if !env_key.is_empty() && !parsed.args.is_empty() {
                        return Err(Failure::bad_args(
                            "bad number of arguments (found conflicting environment key)",
                        ));
                    }
                }
                let mut args = parsed.args.clone();
                if !env_key.is_empty() {
                    let mut with_env = vec![env_key.to_owned()];
                    if !env_range.is_empty() {
                        with_env.push(env_range.to_owned());
                    }
                    with_env.extend(args);
                    args = with_env;
                }
                match create_request(&args, &parsed) {
                    Ok(create) => {
                        let ctx = Context {
                            client: ctx.client.clone(),
                            printer: ctx.printer,
                            command_timeout_given: ctx.command_timeout_given,
                        };
                        let receiver = progress.subscribe();
                        tasks.spawn(async move {
                            run(&ctx, create, &parsed.exec, receiver).await;
                        });
                    }
                    Err(e) => {
                        eprintln!("Invalid command {line} ({})", e.message.unwrap_or_default())
                    }
                }
            }
            Some("progress") => {
                let _ = progress.send(());
            }
            Some(_) => eprintln!("Invalid command {line} (only support watch)"),
        }
    }
}

/// Runs one watch until it is cancelled, printing every response.
async fn run(
    ctx: &Context,
    mut create: WatchCreateRequest,
    exec: &[String],
    mut progress: broadcast::Receiver<()>,
) {
    loop {
        let deadline = Instant::now() + ctx.client.config().command_timeout;
        let (index, transport) = match ctx.client.transport(deadline).await {
            Ok(t) => t,
            Err(e) => {
                eprintln!("watch was canceled ({e})");
                return;
            }
        };
        let (sender, mut receiver) = mpsc::channel(WATCH_QUEUE_MAX);
        let _ = sender.try_send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create.clone())),
        });
        let mut request = tonic::Request::new(futures_util::stream::poll_fn(move |cx| {
            receiver.poll_recv(cx)
        }));
        // etcd's WithRequireLeader: the server cancels the stream if it
        // loses its leader instead of leaving the watcher silently stale.
        request.metadata_mut().insert(
            "hasleader",
            tonic::metadata::MetadataValue::from_static("true"),
        );
        let mut stream = match watch_client(transport).watch(request).await {
            Ok(s) => s.into_inner(),
            Err(status) if crate::client::endpoint_failed(&status) => {
                ctx.client.failed(index);
                continue;
            }
            Err(status) => {
                eprintln!("watch was canceled ({})", Error::from_status(&status));
                return;
            }
        };
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                Ok(()) = progress.recv() => {
                    let _ = sender.try_send(WatchRequest {
                        request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
                    });
                    continue;
                }
            };
            match message {
                Ok(Some(response)) => {
                    if handle(ctx, &response, exec) {
                        return;
                    }
                    if !response.events.is_empty() {
                        let revision = response.header.as_ref().map_or(0, |h| h.revision);
                        create.start_revision = revision + 1;
                    }
                }
                Ok(None) => {
                    ctx.client.failed(index);
                    break;
                }
                Err(status) if crate::client::endpoint_failed(&status) => {
                    ctx.client.failed(index);
                    break;
                }
                Err(status) => {
                    eprintln!("watch was canceled ({})", Error::from_status(&status));
                    return;
                }
            }
        }
    }
}

/// Prints one response; true when the watch is over.
fn handle(ctx: &Context, response: &WatchResponse, exec: &[String]) -> bool {
    if response.created && response.events.is_empty() && !response.canceled {
        return false;
    }
    if response.canceled {
        let reason = if response.compact_revision != 0 {
            COMPACTED.to_owned()
        } else if !response.cancel_reason.is_empty() {
            Error::Status {
                code: tonic::Code::FailedPrecondition,
                message: response.cancel_reason.clone(),
            }
            .to_string()
        } else {
            "etcdserver: mvcc: required revision is a future revision".to_owned()
        };
        eprintln!("watch was canceled ({reason})");
    }
    let progress_notify = response.events.is_empty()
        && !response.canceled
        && response.compact_revision == 0
        && response.header.as_ref().is_some_and(|h| h.revision != 0);
    if progress_notify {
        println!(
            "progress notify: {}",
            response.header.as_ref().map_or(0, |h| h.revision)
        );
    }
    if let Err(failure) = ctx.print(&View::Watch(response)) {
        eprintln!("Error: {}", failure.message.unwrap_or_default());
        std::process::exit(failure.code);
    }
    if let Some((program, args)) = exec.split_first() {
        for event in &response.events {
            let kv = event.kv.clone().unwrap_or_default();
            let status = std::process::Command::new(program)
                .args(args)
                .env(
                    "ETCD_WATCH_REVISION",
                    response
                        .header
                        .as_ref()
                        .map_or(0, |h| h.revision)
                        .to_string(),
                )
                .env(
                    "ETCD_WATCH_EVENT_TYPE",
                    quote(crate::output::event_name(event.r#type).as_bytes()),
                )
                .env("ETCD_WATCH_KEY", quote(&kv.key))
                .env("ETCD_WATCH_VALUE", quote(&kv.value))
                .status();
            let failed = match status {
                Ok(s) if s.success() => None,
                Ok(s) => Some(go_exit_status(s)),
                Err(e) => Some(go_spawn_error(program, &e)),
            };
            if let Some(why) = failed {
                let words: Vec<String> = exec.iter().map(|w| quote(w.as_bytes())).collect();
                eprintln!("command [{}] error ({why})", words.join(" "));
                std::process::exit(exit::ERROR);
            }
        }
    }
    response.canceled
}

/// Go's text for a command that ran and failed (`*exec.ExitError`):
/// `exit status 1`, `signal: killed`.
pub(crate) fn go_exit_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    let Some(signal) = status.signal() else {
        return status.to_string();
    };
    // Go's names for the signals a command is likely to die of.
    let name = match signal {
        1 => "hangup".to_owned(),
        2 => "interrupt".to_owned(),
        3 => "quit".to_owned(),
        4 => "illegal instruction".to_owned(),
        5 => "trace/breakpoint trap".to_owned(),
        6 => "aborted".to_owned(),
        7 => "bus error".to_owned(),
        8 => "floating point exception".to_owned(),
        9 => "killed".to_owned(),
        10 => "user defined signal 1".to_owned(),
        11 => "segmentation fault".to_owned(),
        12 => "user defined signal 2".to_owned(),
        13 => "broken pipe".to_owned(),
        14 => "alarm clock".to_owned(),
        15 => "terminated".to_owned(),
        other => format!("signal {other}"),
    };
    let core = if status.core_dumped() {
        " (core dumped)"
    } else {
        ""
    };
    format!("signal: {name}{core}")
}

/// Go's text for a command that could not start: a bare name is looked up
/// in `$PATH` first (`exec: "x": executable file not found in $PATH`), a
/// path fails in the exec itself (`fork/exec /x: no such file or
/// directory`).
pub(crate) fn go_spawn_error(program: &str, error: &std::io::Error) -> String {
    use std::io::ErrorKind;
    if !program.contains('/')
        && matches!(
            error.kind(),
            ErrorKind::NotFound | ErrorKind::PermissionDenied
        )
    {
        return format!(
            "exec: {}: executable file not found in $PATH",
            quote(program.as_bytes())
        );
    }
    let why = match error.raw_os_error() {
        Some(2) => "no such file or directory".to_owned(),
        Some(8) => "exec format error".to_owned(),
        Some(13) => "permission denied".to_owned(),
        Some(20) => "not a directory".to_owned(),
        _ => {
            let text = error.to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            text.to_lowercase()
        }
    };
    format!("fork/exec {program}: {why}")
}

/// pflag's message for a flag a `watch -i` line does not know, or clap's
/// own first line for anything else.
fn flag_error(error: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) {
            let flag = arg.split('=').next().unwrap_or(arg);
            return match flag.strip_prefix("--") {
                Some(_) => format!("unknown flag: {flag}"),
                None => {
                    let short = flag.trim_start_matches('-').chars().next().unwrap_or('-');
                    format!("unknown shorthand flag: '{short}' in {flag}")
                }
            };
        }
    }
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_owned()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    #[test]
    fn command_failures_read_as_go_prints_them() {
        assert_eq!(
            go_exit_status(ExitStatus::from_raw(1 << 8)),
            "exit status 1"
        );
        assert_eq!(go_exit_status(ExitStatus::from_raw(9)), "signal: killed");
        assert_eq!(
            go_exit_status(ExitStatus::from_raw(15)),
            "signal: terminated"
        );
        let missing = std::io::Error::from_raw_os_error(2);
        assert_eq!(
            go_spawn_error("nope", &missing),
            "exec: \"nope\": executable file not found in $PATH"
        );
        assert_eq!(
            go_spawn_error("/x/nope", &missing),
            "fork/exec /x/nope: no such file or directory"
        );
    }
}
