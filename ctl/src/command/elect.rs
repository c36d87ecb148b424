//! `elect <election-name> [proposal]`: etcdctl's `elect`, on the
//! `v3electionpb.Election` service.
//!
//! With a proposal: campaigns under a lease of etcdctl's session TTL (a
//! [`Session`]), waiting until elected, prints the leader key (as `get`
//! would), then leads until SIGINT or SIGTERM and resigns before exiting.
//! With `-l` and no proposal: prints each leader as the election's
//! `Observe` stream reports it, until a signal.

use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse};
use oxetcd_proto::v3electionpb::CampaignRequest;

use super::interrupt::Interrupt;
use super::lock::CANCELED;
use super::session::Session;
use super::{Context, Failure};
use crate::output::View;

/// etcd's session TTL, which etcdctl's `elect` campaigns under.
const SESSION_TTL_S: i64 = 60;

/// `elect [options] <election-name> [proposal]`.
#[derive(clap::Args, Clone, Debug)]
pub struct ElectArgs {
    /// observation mode
    #[arg(short = 'l', long)]
    pub listen: bool,
    /// <election-name> [proposal]
    pub args: Vec<String>,
}

/// `elect …`.
pub async fn elect(ctx: &Context, a: &ElectArgs) -> Result<(), Failure> {
    match (a.args.as_slice(), a.listen) {
        ([name], true) => observe(ctx, name).await,
        ([_], false) => Err(Failure::bad_args("no proposal argument but -l not set")),
        ([name, proposal], false) => campaign(ctx, name, proposal).await,
        ([_, _], true) => Err(Failure::bad_args("proposal given but -l is set")),
        _ => Err(Failure::bad_args(
            "elect takes one election name argument and an optional proposal argument",
        )),
    }
}

/// Prints every leader until a signal; the stream ending first is
/// etcdctl's `elect: observer lost`.
async fn observe(ctx: &Context, name: &str) -> Result<(), Failure> {
    let mut interrupt = Interrupt::install()?;
    let mut leaders = tokio::select! {
        observed = ctx.client.observe(name.as_bytes().to_vec()) => {
            observed.map_err(Failure::error)?
        }
        () = interrupt.recv() => return Ok(()),
    };
    loop {
        let next = tokio::select! {
            next = leaders.message() => next,
            () = interrupt.recv() => return Ok(()),
        };
        let Ok(Some(leader)) = next else {
            return Err(Failure::error("elect: observer lost"));
        };
        let shown = RangeResponse {
            header: leader.header,
            kvs: leader.kv.into_iter().collect(),
            ..Default::default()
        };
        ctx.print(&View::Get(&shown))?;
    }
}

/// Campaigns, prints the leader key once elected, leads until a signal,
/// then resigns.
async fn campaign(ctx: &Context, name: &str, proposal: &str) -> Result<(), Failure> {
    let mut interrupt = Interrupt::install()?;
    let mut session = Session::new(&ctx.client, SESSION_TTL_S)
        .await
        .map_err(Failure::error)?;
    let request = CampaignRequest {
        name: name.as_bytes().to_vec(),
        lease: session.lease(),
        value: proposal.as_bytes().to_vec(),
    };
    let elected = tokio::select! {
        elected = ctx.client.campaign(request) => elected.map_err(Failure::error)?,
        () = interrupt.recv() => return Err(Failure::error(CANCELED)),
    };
    let leader = elected.leader.unwrap_or_default();
    let got = ctx
        .client
        .range(RangeRequest {
            key: leader.key.clone(),
            ..Default::default()
        })
        .await
        .map_err(Failure::error)?;
    ctx.print(&View::Get(&got))?;

    tokio::select! {
        () = interrupt.recv() => {}
        () = session.lost() => return Err(Failure::error("elect: session expired")),
    }
    ctx.client
        .resign(leader)
        .await
        .map(|_| ())
        .map_err(Failure::error)
}
