//! Discovery at startup: a new member that was given `--discovery-token`
//! and `--discovery-endpoints` (v3 discovery) or `--discovery-srv` (DNS
//! SRV records) learns its initial cluster here, before anything else
//! starts.
//!
//! Design: v3 discovery's protocol is the core's
//! ([`oxetcd_core::discovery`]); this module only carries out its steps
//! with a [`client::Client`] of the discovery cluster — connecting again
//! after a failure — and sleeps its pauses on the runtime. SRV discovery
//! looks the records up ([`oxetcd_urls::srv`]) on a blocking thread and
//! names this member's own record as etcd does ([`srv`]). A member that
//! already has data (a restart) does not discover again: its cluster is
//! in its log.

mod client;
mod srv;

use futures_util::StreamExt;
use oxetcd_core::discovery::{Call, Discovery as Protocol, Event, Step};
use oxetcd_proto::mvccpb::event::EventType;
use tracing::{info, warn};

use crate::config::{Config, Discovery, V3Discovery};
use crate::runtime::{deadline_after, Runtime};
use client::{Client, WatchStream};

/// The initial cluster (`name=url,…`) discovery finds for this member, or
/// `None` when it is not asked to discover; an error says why it failed.
pub(crate) async fn initial_cluster<R: Runtime>(
    runtime: &R,
    config: &Config,
) -> Result<Option<String>, String> {
    let self_entry = config
        .initial_advertise_peer_urls
        .iter()
        .map(|url| format!("{}={url}", config.name))
        .collect::<Vec<_>>()
        .join(",");
    match &config.discovery {
        None => Ok(None),
        Some(Discovery::V3(settings)) => v3(runtime, settings, config.member_id(), &self_entry)
            .await
            .map(Some),
        Some(Discovery::Srv {
            domain,
            service_name,
        }) => srv::initial_cluster(runtime, config, domain, service_name)
            .await
            .map(Some),
    }
}

/// Runs v3 discovery for `member_id` registering `self_entry`.
async fn v3<R: Runtime>(
    runtime: &R,
    settings: &V3Discovery,
    member_id: u64,
    self_entry: &str,
) -> Result<String, String> {
    info!(
        token = %settings.token,
        endpoints = %settings.endpoints.join(","),
        "discovering the initial cluster"
    );
    let mut protocol = Protocol::new(&settings.token, member_id, self_entry);
    let mut client: Option<Client<R>> = None;
    let mut watch: Option<WatchStream> = None;
    let mut step = protocol.start();
    loop {
        let event = match step {
            Step::Done(cluster) => {
                info!(cluster = %cluster, "discovery found the initial cluster");
                return Ok(cluster);
            }
            Step::Failed(e) => return Err(e.to_string()),
            Step::Pause(pause) => {
                runtime.sleep_until(deadline_after(pause)).await;
                Event::Retry
            }
            Step::Wait => match watch.as_mut() {
                Some(stream) => watched(stream.next().await),
                None => Event::Failed,
            },
            Step::Send(call) => {
                if client.is_none() {
                    match Client::connect(runtime, settings).await {
                        Ok(connected) => client = Some(connected),
                        Err(e) => warn!(error = %e, "cannot reach the discovery service"),
                    }
                }
                match client.as_mut() {
                    None => Event::Failed,
                    Some(connected) => match send(connected, call, &mut watch).await {
                        Ok(event) => event,
                        Err(e) => {
                            warn!(error = %e, "discovery call failed; retrying");
                            client = None;
                            Event::Failed
                        }
                    },
                }
            }
        };
        if event == Event::Failed {
            watch = None;
        }
        step = protocol.handle(event);
    }
}

/// Makes `call`; a watch's stream is kept in `watch`.
async fn send<R: Runtime>(
    client: &mut Client<R>,
    call: Call,
    watch: &mut Option<WatchStream>,
) -> Result<Event, String> {
    Ok(match call {
        Call::Range(request) => {
            let response = client.range(request).await?;
            let revision = response.header.map_or(0, |h| h.revision);
            Event::Ranged(response.kvs, revision)
        }
        Call::Put(request) => {
            client.put(request).await?;
            Event::Registered
        }
        Call::Watch(create) => {
            let mut stream = client.watch(create).await?;
            let first = watched(stream.next().await);
            *watch = Some(stream);
            first
        }
    })
}

/// The key-values a watch response created or changed; a failure when the
/// watch ended, was cancelled or compacted.
fn watched(
    next: Option<Result<oxetcd_proto::etcdserverpb::WatchResponse, tonic::Status>>,
) -> Event {
    match next {
        Some(Ok(response)) if !response.canceled && response.compact_revision == 0 => {
            Event::Watched(
                response
                    .events
                    .into_iter()
                    .filter(|e| e.r#type() == EventType::Put)
                    .filter_map(|e| e.kv)
                    .collect(),
            )
        }
        _ => Event::Failed,
    }
}
