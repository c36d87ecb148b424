//! A lease kept alive for as long as a command runs: what `lock` and
//! `elect` hold their keys under (etcd's `concurrency.Session`).
//!
//! Design. [`Session::new`] grants the lease and starts a task that
//! renews it every third of its TTL, as etcd's client does, reopening the
//! keep-alive stream after a failure for as long as the lease may still
//! be alive. [`Session::lost`] resolves once the lease is gone (expired,
//! revoked, or not renewed in time). Dropping the session stops the
//! renewals; the lease then expires on its own, as etcdctl's does when it
//! exits.

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{lease, Client};
use crate::Error;

/// Keep-alive requests waiting to be sent; one is enough.
const KEEPALIVE_QUEUE_MAX: usize = 1;

/// Pause before reopening a keep-alive stream that failed.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// The shortest pause between renewals, for leases of a second or two.
const RENEW_PAUSE_MIN: Duration = Duration::from_millis(100);

/// A lease renewed in the background.
pub struct Session {
    id: i64,
    lost: oneshot::Receiver<()>,
    renewals: JoinHandle<()>,
}

impl Session {
    /// Grants a lease of `ttl` seconds and starts renewing it.
    pub async fn new(client: &Client, ttl: i64) -> Result<Self, Error> {
        let granted = client.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await?;
        let (lost_sender, lost) = oneshot::channel();
        let renewals = tokio::spawn(renew(client.clone(), granted.id, granted.ttl, lost_sender));
        Ok(Self {
            id: granted.id,
            lost,
            renewals,
        })
    }

    /// The lease's ID.
    pub fn lease(&self) -> i64 {
        self.id
    }

    /// Resolves once the lease is gone.
    pub async fn lost(&mut self) {
        // A dropped sender means the task ended: the lease is gone too.
        let _ = (&mut self.lost).await;
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.renewals.abort();
    }
}

/// Renews lease `id` until it is gone, then says so on `lost`.
async fn renew(client: Client, id: i64, ttl: i64, lost: oneshot::Sender<()>) {
    let mut alive_until = Instant::now() + seconds(ttl);
    while Instant::now() < alive_until {
        match renew_on_one_stream(&client, id, &mut alive_until).await {
            Renewals::LeaseGone => break,
            Renewals::StreamFailed => {
                tokio::time::sleep_until(alive_until.min(Instant::now() + RETRY_PAUSE)).await;
            }
        }
    }
    let _ = lost.send(());
}

/// Why renewals on one stream stopped.
enum Renewals {
    LeaseGone,
    StreamFailed,
}

/// Renews `id` on one keep-alive stream; each answer moves `alive_until`.
async fn renew_on_one_stream(client: &Client, id: i64, alive_until: &mut Instant) -> Renewals {
    let Ok((index, transport)) = client.transport(*alive_until).await else {
        return Renewals::StreamFailed;
    };
    let (sender, mut receiver) = mpsc::channel(KEEPALIVE_QUEUE_MAX);
    let requests = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let _ = sender.try_send(LeaseKeepAliveRequest { id });
    let mut client_of_lease = lease(transport);
    let opened = tokio::time::timeout_at(*alive_until, client_of_lease.lease_keep_alive(requests));
    let mut responses = match opened.await {
        Ok(Ok(responses)) => responses.into_inner(),
        Ok(Err(status)) => {
            if crate::client::endpoint_failed(&status) {
                client.failed(index);
            }
            return Renewals::StreamFailed;
        }
        Err(_) => return Renewals::StreamFailed,
    };
    loop {
        let answer = match tokio::time::timeout_at(*alive_until, responses.message()).await {
            Ok(Ok(Some(answer))) => answer,
            Ok(Ok(None) | Err(_)) | Err(_) => return Renewals::StreamFailed,
        };
        if answer.ttl <= 0 {
            return Renewals::LeaseGone;
        }
        *alive_until = Instant::now() + seconds(answer.ttl);
        tokio::time::sleep((seconds(answer.ttl) / 3).max(RENEW_PAUSE_MIN)).await;
        if sender.send(LeaseKeepAliveRequest { id }).await.is_err() {
            return Renewals::StreamFailed;
        }
    }
}

fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}
