//! A blocking etcd v3 client: tonic over HTTP/2 on a private current-thread
//! runtime, so scenarios and test threads stay synchronous.

use std::future::Future;
use std::time::{Duration, Instant};

use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, StatusRequest, StatusResponse, TxnRequest,
    TxnResponse,
};
use tonic::transport::{Channel, Endpoint};

use crate::launch::Server;
use crate::target::Failure;

/// Longest a single call may take before it counts as failed; a hung
/// server must fail the scenario, not the whole run.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest to keep retrying the first connection and status call.
const CONNECT_DEADLINE: Duration = Duration::from_secs(20);

/// Pause between connection attempts.
const CONNECT_RETRY: Duration = Duration::from_millis(25);

/// A connected client (and, optionally, the server it talks to).
pub struct Grpc {
    kv: KvClient<Channel>,
    maintenance: MaintenanceClient<Channel>,
    // Dropped after the clients (field order), before the server.
    runtime: tokio::runtime::Runtime,
    server: Option<Server>,
}

impl Grpc {
    /// Connects to `endpoint` (`http://host:port`) and waits until a status
    /// call succeeds, retrying for up to [`CONNECT_DEADLINE`].
    pub fn connect(endpoint: &str) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        let endpoint = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| format!("endpoint {endpoint}: {e}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(CALL_TIMEOUT);
        let started = Instant::now();
        let mut last_error = String::new();
        while started.elapsed() < CONNECT_DEADLINE {
            let attempt = runtime.block_on(async {
                let channel = endpoint
                    .connect()
                    .await
                    .map_err(|e| format!("connect: {e:?}"))?;
                let mut maintenance = MaintenanceClient::new(channel.clone());
                tokio::time::timeout(CALL_TIMEOUT, maintenance.status(StatusRequest {}))
                    .await
                    .map_err(|_| "status: timed out".to_owned())?
                    .map_err(|e| format!("status: {e}"))?;
                Ok::<_, String>(channel)
            });
            match attempt {
                Ok(channel) => {
                    return Ok(Self {
                        kv: KvClient::new(channel.clone()),
                        maintenance: MaintenanceClient::new(channel),
                        runtime,
                        server: None,
                    })
                }
                Err(e) => last_error = e,
            }
            std::thread::sleep(CONNECT_RETRY);
        }
        Err(format!(
            "no successful status call within {CONNECT_DEADLINE:?}: {last_error}"
        ))
    }

    /// This client, now owning `server` (killed when the client drops).
    pub fn owning(mut self, server: Server) -> Self {
        self.server = Some(server);
        self
    }

    /// The server this client owns, if any.
    pub fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// `KV.Range`.
    pub fn range(&mut self, request: RangeRequest) -> Result<RangeResponse, Failure> {
        let mut kv = self.kv.clone();
        self.block_on(async move { kv.range(request).await })
    }

    /// `KV.Put`.
    pub fn put(&mut self, request: PutRequest) -> Result<PutResponse, Failure> {
        let mut kv = self.kv.clone();
        self.block_on(async move { kv.put(request).await })
    }

    /// `KV.DeleteRange`.
    pub fn delete_range(
        &mut self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Failure> {
        let mut kv = self.kv.clone();
        self.block_on(async move { kv.delete_range(request).await })
    }

    /// `KV.Txn`.
    pub fn txn(&mut self, request: TxnRequest) -> Result<TxnResponse, Failure> {
        let mut kv = self.kv.clone();
        self.block_on(async move { kv.txn(request).await })
    }

    /// `KV.Compact`.
    pub fn compact(&mut self, request: CompactionRequest) -> Result<CompactionResponse, Failure> {
        let mut kv = self.kv.clone();
        self.block_on(async move { kv.compact(request).await })
    }

    /// `Maintenance.Status`.
    pub fn status(&mut self) -> Result<StatusResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        self.block_on(async move { maintenance.status(StatusRequest {}).await })
    }

    fn block_on<T>(
        &self,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, Failure> {
        self.runtime.block_on(async {
            match tokio::time::timeout(CALL_TIMEOUT, call).await {
                Ok(Ok(response)) => Ok(response.into_inner()),
                Ok(Err(status)) => Err(Failure::new(
                    i32::from(status.code()),
                    status.message().to_owned(),
                )),
                Err(_) => Err(Failure::new(
                    4,
                    format!("client: no answer within {CALL_TIMEOUT:?}"),
                )),
            }
        })
    }
}
