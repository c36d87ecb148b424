//! `lease grant|revoke|timetolive|list|keep-alive`.

use std::time::Duration;

use clap::Subcommand;
use oxetcd_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseTimeToLiveRequest,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{exit, parse_decimal_i64, parse_hex_i64, Context, Failure};
use crate::client::lease;
use crate::error::{Error, LEASE_NOT_FOUND};
use crate::output::{Format, View};

/// Keepalive requests waiting to be sent; one is enough, the stream sends
/// them as soon as it can.
const KEEPALIVE_QUEUE_MAX: usize = 1;

/// `lease <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum LeaseCommand {
    /// Creates leases
    Grant {
        /// <ttl>
        args: Vec<String>,
    },
    /// Revokes leases
    Revoke {
        /// <leaseID>
        args: Vec<String>,
    },
    /// Get lease information
    Timetolive {
        /// Get keys attached to this lease
        #[arg(long)]
        keys: bool,
        /// <leaseID>
        args: Vec<String>,
    },
    /// List all active leases
    List,
    /// Keeps leases alive (renew)
    KeepAlive {
        /// Resets the keep-alive time to its original value and exits immediately
        #[arg(long)]
        once: bool,
        /// <leaseID>
        args: Vec<String>,
    },
}

fn lease_id(args: &[String], missing: &str) -> Result<i64, Failure> {
    if args.len() != 1 {
        return Err(Failure::bad_args(missing));
    }
    parse_hex_i64(&args[0])
        .map_err(|e| Failure::bad_args(format!("bad lease ID arg ({e}), expecting ID in Hex")))
}

/// `lease …`.
pub async fn lease_command(ctx: &Context, command: &LeaseCommand) -> Result<(), Failure> {
    match command {
        LeaseCommand::Grant { args } => {
            if args.len() != 1 {
                return Err(Failure::bad_args("lease grant command needs TTL argument"));
            }
            let ttl = parse_decimal_i64(&args[0])
                .map_err(|e| Failure::bad_args(format!("bad TTL ({e})")))?;
            let response = ctx
                .client
                .lease_grant(LeaseGrantRequest { ttl, id: 0 })
                .await
                .map_err(|e| Failure::error(format!("failed to grant lease ({e})")))?;
            ctx.print(&View::Grant(&response))
        }
        LeaseCommand::Revoke { args } => {
            let id = lease_id(args, "lease revoke command needs 1 argument")?;
            let response = ctx
                .client
                .lease_revoke(id)
                .await
                .map_err(|e| Failure::error(format!("failed to revoke lease ({e})")))?;
            ctx.print(&View::Revoke(id, &response))
        }
        LeaseCommand::Timetolive { keys, args } => {
            let id = lease_id(args, "lease timetolive command needs lease ID as argument")?;
            let response = ctx
                .client
                .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: *keys })
                .await
                .map_err(|e| Failure::new(exit::BAD_CONNECTION, e))?;
            ctx.print(&View::TimeToLive(&response, *keys))
        }
        LeaseCommand::List => {
            let response = ctx
                .client
                .lease_leases()
                .await
                .map_err(|e| Failure::new(exit::BAD_CONNECTION, e))?;
            ctx.print(&View::Leases(&response))
        }
        LeaseCommand::KeepAlive { once, args } => {
            let id = lease_id(args, "lease keep-alive command needs lease ID as argument")?;
            keep_alive(ctx, id, *once).await
        }
    }
}

/// Renews `id` every third of its TTL until it expires or is revoked
/// (or once, with `--once`), printing each answer.
async fn keep_alive(ctx: &Context, id: i64, once: bool) -> Result<(), Failure> {
    let failed = |e: Error| Failure::new(exit::BAD_CONNECTION, e);
    let deadline = Instant::now() + ctx.client.config().command_timeout;
    let (index, transport) = ctx.client.transport(deadline).await.map_err(failed)?;
    let (sender, mut receiver) = mpsc::channel(KEEPALIVE_QUEUE_MAX);
    let requests = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let _ = sender.try_send(LeaseKeepAliveRequest { id });
    let mut responses = match lease(transport).lease_keep_alive(requests).await {
        Ok(r) => r.into_inner(),
        Err(status) => {
            if crate::client::endpoint_failed(&status) {
                ctx.client.failed(index);
            }
            return Err(failed(Error::from_status(&status)));
        }
    };
    loop {
        let response = match responses.message().await {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(status) => return Err(failed(Error::from_status(&status))),
        };
        if response.ttl <= 0 {
            if once {
                return Err(failed(Error::Status {
                    code: tonic::Code::NotFound,
                    message: LEASE_NOT_FOUND.to_owned(),
                }));
            }
            break;
        }
        ctx.print(&View::KeepAlive(&response))?;
        if once {
            return Ok(());
        }
        let pause = Duration::from_secs(response.ttl as u64) / 3;
        tokio::time::sleep(pause.max(Duration::from_millis(500))).await;
        if sender.send(LeaseKeepAliveRequest { id }).await.is_err() {
            break;
        }
    }
    if ctx.printer.format == Format::Simple {
        println!("lease {id:016x} expired or revoked.");
    }
    Ok(())
}
