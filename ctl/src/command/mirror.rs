//! `make-mirror`: copies a key space (or one prefix of it) into another
//! cluster and keeps it in step, as etcdctl's does.
//!
//! Design: the source is read at one revision in pages of 1,000 keys and
//! each key put at the destination (under the destination prefix); then a
//! watch from the next revision replays every change, the events of one
//! source revision as one destination txn, so the mirror never shows half
//! of a source transaction. The number of keys mirrored so far is printed
//! every 30 seconds. It runs until the watch fails, a destination write
//! fails, or the source compacts past the watch — errors, as in etcdctl.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use clap::Args;
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
use oxetcd_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
    WatchRequest,
};
use oxetcd_proto::mvccpb::event::EventType;

use super::kv::prefix_end;
use super::{Context, Failure};
use crate::client::{self, Client, Tls};
use crate::error::COMPACTED;

/// Keys read from the source per range, as etcd's mirror reads them.
const PAGE_KEYS: i64 = 1000;

/// How often the running count is printed.
const REPORT_EVERY: Duration = Duration::from_secs(30);

/// `make-mirror [options] <destination>`.
#[derive(Args, Debug)]
pub struct MakeMirrorArgs {
    /// The destination cluster's endpoint
    #[arg(value_name = "destination")]
    pub destination: Vec<String>,
    /// Key-value prefix to mirror
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// destination prefix to mirror a prefix to a different prefix in the destination cluster
    #[arg(long, default_value = "")]
    pub dest_prefix: String,
    /// mirror key-values to the root of the destination cluster
    #[arg(long)]
    pub no_dest_prefix: bool,
    /// Identify secure client using this TLS certificate file for the destination cluster
    #[arg(long)]
    pub dest_cert: Option<String>,
    /// Identify secure client using this TLS key file
    #[arg(long)]
    pub dest_key: Option<String>,
    /// Verify certificates of TLS enabled secure servers using this CA bundle
    #[arg(long)]
    pub dest_cacert: Option<String>,
    /// Disable transport security for client connections
    #[arg(long, action = clap::ArgAction::Set, num_args = 0..=1, default_value_t = true, default_missing_value = "true")]
    pub dest_insecure_transport: bool,
}

/// Runs the mirror until it fails.
pub async fn make_mirror(ctx: &Context, a: &MakeMirrorArgs) -> Result<(), Failure> {
    let [destination] = a.destination.as_slice() else {
        return Err(Failure::bad_args(
            "make-mirror takes one destination argument",
        ));
    };
    if a.no_dest_prefix && !a.dest_prefix.is_empty() {
        return Err(Failure::bad_args(
            "`--dest-prefix` and `--no-dest-prefix` cannot be set at the same time, choose one",
        ));
    }
    let dest_prefix = if a.no_dest_prefix || !a.dest_prefix.is_empty() {
        a.dest_prefix.clone()
    } else {
        a.prefix.clone()
    };
    let mut config = ctx.client.config().clone();
    config.endpoints = vec![destination.clone()];
    config.credentials = None;
    config.tls = Tls {
        ca_cert: a.dest_cacert.as_ref().map(Into::into),
        cert: a.dest_cert.as_ref().map(Into::into),
        key: a.dest_key.as_ref().map(Into::into),
        insecure_skip_verify: false,
        insecure_transport: a.dest_insecure_transport,
    };
    let dest = Client::new(config).map_err(Failure::bad_args)?;
    let mirror = Mirror {
        source: &ctx.client,
        dest: &dest,
        prefix: a.prefix.as_bytes(),
        dest_prefix: dest_prefix.as_bytes(),
        total: Arc::new(AtomicI64::new(0)),
    };
    let total = mirror.total.clone();
    let reporter = tokio::spawn(async move {
        loop {
            tokio::time::sleep(REPORT_EVERY).await;
            println!("{}", total.load(Ordering::Relaxed));
        }
    });
    let result = mirror.run().await;
    reporter.abort();
    result.map_err(Failure::error)
}

/// One mirror's state.
struct Mirror<'a> {
    source: &'a Client,
    dest: &'a Client,
    prefix: &'a [u8],
    dest_prefix: &'a [u8],
    total: Arc<AtomicI64>,
}

impl Mirror<'_> {
    async fn run(&self) -> Result<(), crate::Error> {
        let revision = self.copy_base().await?;
        self.follow(revision + 1).await
    }

    /// The range mirrored: the prefix, or every key.
    fn range(&self) -> (Vec<u8>, Vec<u8>) {
        if self.prefix.is_empty() {
            (vec![0], vec![0])
        } else {
            (self.prefix.to_vec(), prefix_end(self.prefix))
        }
    }

    /// `key` with the source prefix's first occurrence replaced by the
    /// destination prefix (etcdctl's `strings.Replace(key, prefix, dest, 1)`).
    fn dest_key(&self, key: &[u8]) -> Vec<u8> {
        let at = if self.prefix.is_empty() {
            Some(0)
        } else {
            key.windows(self.prefix.len())
                .position(|w| w == self.prefix)
        };
        match at {
            None => key.to_vec(),
            Some(at) => [&key[..at], self.dest_prefix, &key[at + self.prefix.len()..]].concat(),
        }
    }

    /// Copies every key at the current revision; returns that revision.
    async fn copy_base(&self) -> Result<i64, crate::Error> {
        let now = self
            .source
            .range(RangeRequest {
                key: b"foo".to_vec(),
                ..Default::default()
            })
            .await?;
        let revision = now.header.map_or(0, |h| h.revision);
        let (mut key, range_end) = self.range();
        loop {
            let page = self
                .source
                .range(RangeRequest {
                    key: key.clone(),
                    range_end: range_end.clone(),
                    limit: PAGE_KEYS,
                    revision,
                    ..Default::default()
                })
                .await?;
            for kv in &page.kvs {
                self.dest
                    .put(PutRequest {
                        key: self.dest_key(&kv.key),
                        value: kv.value.clone(),
                        ..Default::default()
                    })
                    .await?;
                self.total.fetch_add(1, Ordering::Relaxed);
            }
            match page.kvs.last() {
                Some(last) if page.more => key = [last.key.as_slice(), &[0]].concat(),
                _ => return Ok(revision),
            }
        }
    }

    /// Replays the source's changes from `start_revision` on, one txn per
    /// source revision.
    async fn follow(&self, start_revision: i64) -> Result<(), crate::Error> {
        let (key, range_end) = self.range();
        let create = WatchCreateRequest {
            key,
            range_end,
            start_revision,
            ..Default::default()
        };
        let deadline = Instant::now() + self.source.config().command_timeout;
        let (_, transport) = self.source.transport(deadline).await?;
        let first = WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        };
        // The request stream stays open: closing it ends the watch.
        let requests = futures_util::StreamExt::chain(
            futures_util::stream::once(std::future::ready(first)),
            futures_util::stream::pending(),
        );
        let mut stream = client::watch(transport)
            .watch(requests)
            .await
            .map_err(|s| crate::Error::from_status(&s))?
            .into_inner();
        while let Some(response) = stream
            .message()
            .await
            .map_err(|s| crate::Error::from_status(&s))?
        {
            if response.compact_revision != 0 {
                return Err(crate::Error::Protocol(COMPACTED.to_owned()));
            }
            if response.canceled {
                return Err(crate::Error::Protocol(response.cancel_reason));
            }
            let mut ops = Vec::new();
            let mut last_revision = 0;
            for event in response.events {
                let kind = event.r#type();
                let Some(kv) = event.kv else { continue };
                if last_revision != 0 && kv.mod_revision > last_revision {
                    self.apply(std::mem::take(&mut ops)).await?;
                }
                last_revision = kv.mod_revision;
                let key = self.dest_key(&kv.key);
                ops.push(match kind {
                    EventType::Put => Op::RequestPut(PutRequest {
                        key,
                        value: kv.value,
                        ..Default::default()
                    }),
                    EventType::Delete => Op::RequestDeleteRange(DeleteRangeRequest {
                        key,
                        ..Default::default()
                    }),
                });
                self.total.fetch_add(1, Ordering::Relaxed);
            }
            if !ops.is_empty() {
                self.apply(ops).await?;
            }
        }
        Err(crate::Error::Protocol("watch closed".to_owned()))
    }

    /// One destination txn of `ops`.
    async fn apply(&self, ops: Vec<Op>) -> Result<(), crate::Error> {
        let success = ops
            .into_iter()
            .map(|request| RequestOp {
                request: Some(request),
            })
            .collect();
        self.dest
            .txn(TxnRequest {
                success,
                ..Default::default()
            })
            .await
            .map(|_| ())
    }
}
