//! `endpoint health|status|hashkv`: each endpoint asked on its own
//! connection, or every member's client URLs with `--cluster`.

use std::time::Instant;

use clap::{Args, Subcommand};
use oxetcd_proto::etcdserverpb::RangeRequest;

use super::{Context, Failure};
use crate::output::{go, Health, View};

/// `endpoint <subcommand>`.
#[derive(Args, Clone, Debug)]
pub struct EndpointArgs {
    /// use all endpoints from the cluster member list
    #[arg(long, global = true)]
    pub cluster: bool,
    #[command(subcommand)]
    pub command: EndpointCommand,
}

/// The endpoint subcommands.
#[derive(Subcommand, Clone, Debug)]
pub enum EndpointCommand {
    /// Checks the healthiness of endpoints specified in `--endpoints` flag
    Health,
    /// Prints out the status of endpoints specified in `--endpoints` flag
    Status,
    /// Prints the KV history hash for each endpoint in --endpoints
    Hashkv {
        /// maximum revision to hash (default: all revisions)
        #[arg(long, default_value_t = 0)]
        rev: i64,
    },
}

/// `endpoint …`.
pub async fn endpoint(ctx: &Context, a: &EndpointArgs) -> Result<(), Failure> {
    let endpoints = endpoints(ctx, a.cluster).await?;
    match a.command {
        EndpointCommand::Health => health(ctx, &endpoints).await,
        EndpointCommand::Status => status(ctx, &endpoints).await,
        EndpointCommand::Hashkv { rev } => hash_kv(ctx, &endpoints, rev).await,
    }
}

/// The endpoints a per-member command addresses: `--endpoints`, or with
/// `--cluster` every member's client URLs.
pub async fn endpoints(ctx: &Context, cluster: bool) -> Result<Vec<String>, Failure> {
    if !cluster {
        return Ok(ctx.client.config().endpoints.clone());
    }
    let members = ctx.client.member_list(false).await.map_err(|e| {
        Failure::error(format!(
            "failed to fetch endpoints from etcd cluster member list: {e}"
        ))
    })?;
    Ok(members
        .members
        .into_iter()
        .flat_map(|m| m.client_ur_ls)
        .collect())
}

async fn health(ctx: &Context, endpoints: &[String]) -> Result<(), Failure> {
    let checks = endpoints.iter().map(|endpoint| async move {
        let client = match ctx.client.for_endpoint(endpoint) {
            Ok(c) => c,
            Err(e) => {
                return Health {
                    endpoint: endpoint.clone(),
                    health: false,
                    took: String::new(),
                    error: e.to_string(),
                }
            }
        };
        let started = Instant::now();
        let answer = client
            .range(RangeRequest {
                key: b"health".to_vec(),
                ..Default::default()
            })
            .await;
        let took = go::duration(started.elapsed());
        // Permission denied still proves the request went through raft.
        let error = match answer {
            Ok(_) => String::new(),
            Err(e) if e.is_etcd("etcdserver: permission denied") => String::new(),
            Err(e) => e.to_string(),
        };
        Health {
            endpoint: endpoint.clone(),
            health: error.is_empty(),
            took,
            error,
        }
    });
    let list = join_all(checks).await;
    ctx.print(&View::EndpointHealth(&list))?;
    if list.iter().any(|h| !h.error.is_empty()) {
        return Err(Failure::error("unhealthy cluster"));
    }
    Ok(())
}

async fn status(ctx: &Context, endpoints: &[String]) -> Result<(), Failure> {
    let mut list = Vec::new();
    let mut failed = false;
    for endpoint in endpoints {
        let answer = match ctx.client.for_endpoint(endpoint) {
            Ok(client) => client.status().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(status) => list.push((endpoint.clone(), status)),
            Err(e) => {
                failed = true;
                eprintln!("Failed to get the status of endpoint {endpoint} ({e})");
            }
        }
    }
    ctx.print(&View::EndpointStatus(&list))?;
    if failed {
        return Err(Failure::silent(super::exit::ERROR));
    }
    Ok(())
}

async fn hash_kv(ctx: &Context, endpoints: &[String], revision: i64) -> Result<(), Failure> {
    let mut list = Vec::new();
    let mut last_error = None;
    for endpoint in endpoints {
        let answer = match ctx.client.for_endpoint(endpoint) {
            Ok(client) => client.hash_kv(revision).await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(hash) => list.push((endpoint.clone(), hash)),
            Err(e) => {
                eprintln!("Failed to get the hash of endpoint {endpoint} ({e})");
                last_error = Some(e);
            }
        }
    }
    ctx.print(&View::EndpointHashKv(&list))?;
    match last_error {
        Some(e) => Err(Failure::error(e)),
        None => Ok(()),
    }
}

/// Runs the futures concurrently on this task and returns their outputs in
/// order.
pub(crate) async fn join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut set = Vec::new();
    for future in futures {
        set.push(Box::pin(future));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in set.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future completed"))
        .collect()
}
