//! `check perf` and `check datascale`: etcdctl's checks of what a cluster
//! sustains, with its workload models, verdicts and words.
//!
//! Design: both are put workloads of the benchmark engine ([`crate::bench`])
//! under a prefix that must be empty at the start and is deleted at the
//! end (then compacted and defragmented with `--auto-compact` and
//! `--auto-defrag`). `perf` paces puts to the model's rate for its
//! duration and judges throughput, the slowest request and the spread;
//! `datascale` writes the model's count of keys and reports how much the
//! first endpoint's resident memory grew, read from its `/metrics`.

use std::time::Duration;

use clap::{Args, Subcommand};
use oxetcd_proto::etcdserverpb::{CompactionRequest, DeleteRangeRequest, RangeRequest};

use super::kv::prefix_end;
use super::{exit, Context, Failure};
use crate::bench::{self, Options, Report, Workload};
use crate::client::Client;

/// Longest the clean-up's deletion, compaction and defragmentation may
/// each take.
const CLEAN_UP_TIMEOUT: Duration = Duration::from_secs(300);

/// `check perf` and `check datascale`.
#[derive(Subcommand, Debug)]
pub enum CheckCommand {
    /// Check the performance of the etcd cluster
    Perf(CheckArgs),
    /// Check the memory usage of holding data for different workloads on a given server endpoint.
    Datascale(CheckArgs),
}

/// The flags both checks take.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The check's workload model. Accepted workloads: s(small), m(medium), l(large), xl(xLarge)
    #[arg(long, default_value = "s")]
    pub load: String,
    /// The prefix for writing the check's keys (default /etcdctl-check-perf/ or /etcdctl-check-datascale/)
    #[arg(long)]
    pub prefix: Option<String>,
    /// Compact storage with last revision after test is finished.
    #[arg(long)]
    pub auto_compact: bool,
    /// Defragment storage after test is finished.
    #[arg(long)]
    pub auto_defrag: bool,
}

/// A `check perf` model: puts per second, clients, seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerfModel {
    /// Puts per second asked for.
    pub limit: u32,
    /// Concurrent clients (each with its own connection).
    pub clients: usize,
    /// How long the check runs.
    pub duration: Duration,
}

/// A `check datascale` model: keys written and clients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DatascaleModel {
    /// Keys written.
    pub limit: u64,
    /// Concurrent clients.
    pub clients: usize,
}

/// The model `load` names (`s`, `small`, … `xl`, `xLarge`), as an index.
fn model_index(load: &str) -> Result<usize, Failure> {
    match load {
        "s" | "small" => Ok(0),
        "m" | "medium" => Ok(1),
        "l" | "large" => Ok(2),
        "xl" | "xLarge" => Ok(3),
        other => Err(Failure::new(
            exit::BAD_FEATURE,
            format!("unknown load option {other}"),
        )),
    }
}

/// etcdctl's perf models.
pub fn perf_model(load: &str) -> Result<PerfModel, Failure> {
    let (limit, clients) = [(150, 50), (1000, 200), (8000, 500), (15000, 1000)][model_index(load)?];
    Ok(PerfModel {
        limit,
        clients,
        duration: Duration::from_secs(60),
    })
}

/// etcdctl's datascale models (1 KiB per key-value).
pub fn datascale_model(load: &str) -> Result<DatascaleModel, Failure> {
    let (limit, clients) = [
        (10_000, 50),
        (100_000, 200),
        (1_000_000, 500),
        (3_000_000, 1000),
    ][model_index(load)?];
    Ok(DatascaleModel { limit, clients })
}

/// Runs `check perf` or `check datascale`.
pub async fn check(ctx: &Context, command: &CheckCommand) -> Result<(), Failure> {
    match command {
        CheckCommand::Perf(a) => {
            let prefix = a.prefix.as_deref().unwrap_or("/etcdctl-check-perf/");
            perf(ctx, perf_model(&a.load)?, prefix, a).await
        }
        CheckCommand::Datascale(a) => {
            let prefix = a.prefix.as_deref().unwrap_or("/etcdctl-check-datascale/");
            datascale(ctx, datascale_model(&a.load)?, prefix, a).await
        }
    }
}

/// `check perf` with `model`.
pub async fn perf(
    ctx: &Context,
    model: PerfModel,
    prefix: &str,
    a: &CheckArgs,
) -> Result<(), Failure> {
    ensure_empty(&ctx.client, prefix).await?;
    let options = Options {
        workload: Workload::Put,
        clients: model.clients,
        duration: Some(model.duration),
        key_prefix: prefix.as_bytes().to_vec(),
        key_size: 256,
        val_size: 1024,
        key_space_size: u64::MAX,
        rate: Some(f64::from(model.limit)),
        ..Options::default()
    };
    let report = load(ctx, options, model.clients).await?;
    clean_up(&ctx.client, prefix, a).await?;
    let mut ok = verdict_errors(&report);
    let rps = report.requests_per_second();
    if rps / f64::from(model.limit) <= 0.9 {
        println!("FAIL: Throughput too low: {} writes/s", rps as u64 + 1);
        ok = false;
    } else {
        println!("PASS: Throughput is {} writes/s", rps as u64 + 1);
    }
    let (slowest, stddev) = spread(&report);
    if slowest > 0.5 {
        println!("Slowest request took too long: {slowest:.6}s");
        ok = false;
    } else {
        println!("PASS: Slowest request took {slowest:.6}s");
    }
    if stddev > 0.1 {
        println!("Stddev too high: {stddev:.6}s");
        ok = false;
    } else {
        println!("PASS: Stddev is {stddev:.6}s");
    }
    if ok {
        println!("PASS");
        Ok(())
    } else {
        println!("FAIL");
        Err(Failure::silent(exit::ERROR))
    }
}

/// `check datascale` with `model`.
pub async fn datascale(
    ctx: &Context,
    model: DatascaleModel,
    prefix: &str,
    a: &CheckArgs,
) -> Result<(), Failure> {
    ensure_empty(&ctx.client, prefix).await?;
    let endpoint = ctx
        .client
        .config()
        .endpoints
        .first()
        .cloned()
        .unwrap_or_default();
    let before = resident_bytes(&ctx.client, &endpoint)
        .await
        .ok_or_else(|| {
            println!(
                "FAIL: Could not read process_resident_memory_bytes before the put operations."
            );
            Failure::silent(exit::ERROR)
        })?;
    println!(
        "Start data scale check for work load [{} key-value pairs, 1024 bytes per key-value, {} \
         concurrent clients].",
        model.limit, model.clients
    );
    let options = Options {
        workload: Workload::Put,
        clients: model.clients,
        total: model.limit,
        key_prefix: prefix.as_bytes().to_vec(),
        key_size: 512,
        val_size: 512,
        key_space_size: u64::MAX,
        ..Options::default()
    };
    let report = load(ctx, options, model.clients).await?;
    let after = resident_bytes(&ctx.client, &endpoint)
        .await
        .ok_or_else(|| {
            println!(
                "FAIL: Could not read process_resident_memory_bytes after the put operations."
            );
            Failure::silent(exit::ERROR)
        })?;
    clean_up(&ctx.client, prefix, a).await?;
    if !verdict_errors(&report) {
        return Err(Failure::silent(exit::ERROR));
    }
    let used_mb = (after - before) / (1024.0 * 1024.0);
    println!("PASS: Approximate system memory used : {used_mb:.2} MB.");
    Ok(())
}

/// Refuses a prefix that already holds keys, in etcdctl's words.
async fn ensure_empty(client: &Client, prefix: &str) -> Result<(), Failure> {
    let found = client
        .range(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            limit: 1,
            ..Default::default()
        })
        .await
        .map_err(Failure::error)?;
    if found.kvs.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        exit::INVALID_INPUT,
        format!("prefix {prefix:?} has keys. Delete with etcdctl del --prefix {prefix} first"),
    ))
}

/// Runs `options` over `connections` connections to the endpoints.
async fn load(ctx: &Context, mut options: Options, connections: usize) -> Result<Report, Failure> {
    let config = ctx.client.config();
    let channels = crate::connect(config, connections)
        .await
        .map_err(Failure::error)?;
    if config.credentials.is_some() {
        options.token = ctx
            .client
            .token_for(&channels[0])
            .await
            .map_err(Failure::error)?;
    }
    Ok(bench::run(channels, options).await)
}

/// Deletes the check's keys; then compacts and defragments if asked. Not
/// bounded by the command timeout: deleting many keys takes what it
/// takes (etcdctl gives it no deadline either).
async fn clean_up(client: &Client, prefix: &str, a: &CheckArgs) -> Result<(), Failure> {
    let mut config = client.config().clone();
    config.command_timeout = config.command_timeout.max(CLEAN_UP_TIMEOUT);
    let client = &Client::new(config).map_err(Failure::error)?;
    let deleted = client
        .delete_range(DeleteRangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..Default::default()
        })
        .await
        .map_err(Failure::error)?;
    if a.auto_compact {
        let revision = deleted.header.map_or(0, |h| h.revision);
        client
            .compact(CompactionRequest {
                revision,
                physical: true,
            })
            .await
            .map_err(Failure::error)?;
        println!("compacted revision {revision}");
    }
    if a.auto_defrag {
        for endpoint in &client.config().endpoints {
            let member = client.for_endpoint(endpoint).map_err(Failure::error)?;
            match member.defragment().await {
                Ok(_) => println!("Finished defragmenting etcd member[{endpoint}]"),
                Err(e) => eprintln!("Failed to defragment etcd member[{endpoint}] ({e})"),
            }
        }
    }
    Ok(())
}

/// Prints the failed requests, etcdctl's way; true when there were none.
fn verdict_errors(report: &Report) -> bool {
    if report.errors == 0 {
        return true;
    }
    println!("FAIL: too many errors");
    println!(
        "FAIL: ERROR({}) -> {}",
        report.first_error.as_deref().unwrap_or("unknown"),
        report.errors
    );
    false
}

/// The slowest request and the standard deviation of all, in seconds.
fn spread(report: &Report) -> (f64, f64) {
    let latencies: Vec<f64> = report
        .samples
        .iter()
        .map(|s| f64::from(s.latency_us) / 1e6)
        .collect();
    if latencies.is_empty() {
        return (0.0, 0.0);
    }
    let n = latencies.len() as f64;
    let mean = latencies.iter().sum::<f64>() / n;
    let variance = latencies.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / n;
    let slowest = latencies.iter().copied().fold(0.0, f64::max);
    (slowest, variance.sqrt())
}

/// The `process_resident_memory_bytes` `endpoint` reports on `/metrics`.
async fn resident_bytes(client: &Client, endpoint: &str) -> Option<f64> {
    let text = client.metrics(endpoint).await.ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("process_resident_memory_bytes "))
        .and_then(|value| value.trim().parse().ok())
}
