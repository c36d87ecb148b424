//! `watch`: streams events until the server cancels the watch.
//!
//! A stream that breaks with `Unavailable` is re-created on the next
//! endpoint, resuming after the last revision seen, so a watcher survives
//! losing its member as etcd's client does. Any other error ends the watch
//! with etcdctl's "watch was canceled (…)".

use std::io::BufRead;

use clap::{Args, Parser};
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::kv::prefix_end;
use super::txn::argify;
use super::{exit, Context, Failure};
use crate::client::watch as watch_client;
use crate::error::{Error, COMPACTED};
use crate::output::go::quote;
use crate::output::View;

/// Requests queued for one watch stream (the create and progress requests).
const WATCH_QUEUE_MAX: usize = 4;

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
    if a.prefix {
        if key.is_empty() {
            create.key = vec![0];
            create.range_end = vec![0];
        } else {
            create.range_end = prefix_end(key.as_bytes());
        }
    }
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
                Ok(0) => Err(std::io::Error::new(
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
                let parsed = WatchLine::try_parse_from(&words)
                    .map_err(|e| Failure::bad_args(e.to_string().trim_end()))?
                    .args;
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
                Ok(s) => Some(s.to_string()),
                Err(e) => Some(e.to_string()),
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
