//! `oxetcdctl`: the command-line client of oxetcd.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use oxetcd_ctl::bench::{self, Options, Workload};

#[derive(Parser)]
#[command(
    name = "oxetcdctl",
    version,
    about = "A command-line client for oxetcd and any etcd-compatible endpoint"
)]
struct Cli {
    /// gRPC endpoints, comma-separated.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "127.0.0.1:2379"
    )]
    endpoints: Vec<String>,
    /// Time to establish a connection.
    #[arg(long, global = true, default_value = "2s", value_parser = parse_duration)]
    dial_timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure request throughput and latency.
    Bench {
        #[command(subcommand)]
        workload: BenchWorkload,
        #[command(flatten)]
        common: BenchArgs,
    },
}

#[derive(Subcommand, Clone, Copy)]
enum BenchWorkload {
    /// Puts of `--val-size` bytes.
    Put,
    /// Ranges of one key.
    Range {
        /// `l` for linearizable, `s` for serializable.
        #[arg(long, default_value = "l")]
        consistency: char,
    },
}

#[derive(Args)]
struct BenchArgs {
    /// Concurrent request loops.
    #[arg(long, global = true, default_value_t = 1)]
    clients: usize,
    /// gRPC connections shared by the clients.
    #[arg(long, global = true, default_value_t = 1)]
    conns: usize,
    /// Requests in all.
    #[arg(long, global = true, default_value_t = 10_000)]
    total: u64,
    /// Run for a time instead of a count (e.g. 10s).
    #[arg(long, global = true, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Bytes per key.
    #[arg(long, global = true, default_value_t = 8)]
    key_size: usize,
    /// Bytes per value.
    #[arg(long, global = true, default_value_t = 8)]
    val_size: usize,
    /// Distinct keys.
    #[arg(long, global = true, default_value_t = 1)]
    key_space_size: u64,
    /// Walk keys in order.
    #[arg(long, global = true)]
    sequential_keys: bool,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((text, "s"), |at| text.split_at(at));
    let value: f64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?}"))?;
    let scale = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("bad duration unit in {text:?}")),
    };
    Ok(Duration::from_secs_f64(value * scale))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match cli.command {
            Command::Bench { workload, common } => {
                let workload = match workload {
                    BenchWorkload::Put => Workload::Put,
                    BenchWorkload::Range { consistency } => Workload::Range {
                        serializable: consistency == 's',
                    },
                };
                let channels =
                    match oxetcd_ctl::connect(&cli.endpoints, common.conns, cli.dial_timeout).await
                    {
                        Ok(c) => c,
                        Err(e) => {
                            eprintln!("Error: {e}");
                            return ExitCode::FAILURE;
                        }
                    };
                let report = bench::run(
                    channels,
                    Options {
                        workload,
                        clients: common.clients,
                        total: common.total,
                        duration: common.duration,
                        key_size: common.key_size,
                        val_size: common.val_size,
                        key_space_size: common.key_space_size,
                        sequential_keys: common.sequential_keys,
                    },
                )
                .await;
                print!("{}", report.summary());
                if report.latencies_us.is_empty() {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
        }
    })
}
