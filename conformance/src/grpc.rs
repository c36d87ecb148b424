//! A blocking etcd v3 client: tonic over HTTP/2 on a private current-thread
//! runtime, so scenarios and test threads stay synchronous.

use std::future::Future;
use std::time::{Duration, Instant};

use std::pin::Pin;
use std::task::{Context, Poll};

use oxetcd_core::auth::AuthResponse;
use oxetcd_proto::etcdserverpb::auth_client::AuthClient;
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AuthDisableRequest, AuthEnableRequest, AuthRoleListRequest,
    AuthStatusRequest, AuthUserListRequest, CompactionRequest, CompactionResponse,
    DefragmentRequest, DefragmentResponse, DeleteRangeRequest, DeleteRangeResponse,
    DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse, PutRequest, PutResponse, RangeRequest,
    RangeResponse, StatusRequest, StatusResponse, TxnRequest, TxnResponse, WatchRequest,
    WatchResponse,
};
use oxetcd_proto::v3electionpb::election_client::ElectionClient;
use oxetcd_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use oxetcd_proto::v3lockpb::lock_client::LockClient;
use oxetcd_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

use crate::auth_call::AuthCall;
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
    lease: LeaseClient<Channel>,
    watch: WatchClient<Channel>,
    election: ElectionClient<Channel>,
    lock: LockClient<Channel>,
    auth: AuthClient<Channel>,
    /// The token every call carries (`token` metadata), if any.
    token: Option<String>,
    watch_streams: Vec<WatchStream>,
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
                        lease: LeaseClient::new(channel.clone()),
                        watch: WatchClient::new(channel.clone()),
                        election: ElectionClient::new(channel.clone()),
                        lock: LockClient::new(channel.clone()),
                        auth: AuthClient::new(channel.clone()),
                        token: None,
                        watch_streams: Vec::new(),
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

    /// Makes every later call carry `token` (none: anonymous).
    pub fn set_token(&mut self, token: Option<String>) {
        self.token = token;
    }

    /// `message` as a request carrying the current token.
    fn authorized<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = self.token.as_deref().and_then(|t| t.parse().ok()) {
            request.metadata_mut().insert("token", token);
        }
        request
    }

    /// One call of the `Auth` service, with the current token.
    pub fn auth(&mut self, call: AuthCall) -> Result<AuthResponse, Failure> {
        let mut auth = self.auth.clone();
        macro_rules! call {
            ($method:ident, $request:expr, $variant:ident) => {{
                let request = self.authorized($request);
                self.block_on(async move { auth.$method(request).await })
                    .map(AuthResponse::$variant)
            }};
        }
        match call {
            AuthCall::Enable => call!(auth_enable, AuthEnableRequest {}, Enable),
            AuthCall::Disable => call!(auth_disable, AuthDisableRequest {}, Disable),
            AuthCall::Status => call!(auth_status, AuthStatusRequest {}, Status),
            AuthCall::Authenticate(r) => call!(authenticate, r, Authenticate),
            AuthCall::UserAdd(r) => call!(user_add, r, UserAdd),
            AuthCall::UserGet(r) => call!(user_get, r, UserGet),
            AuthCall::UserList => call!(user_list, AuthUserListRequest {}, UserList),
            AuthCall::UserDelete(r) => call!(user_delete, r, UserDelete),
            AuthCall::UserChangePassword(r) => {
                call!(user_change_password, r, UserChangePassword)
            }
            AuthCall::UserGrantRole(r) => call!(user_grant_role, r, UserGrantRole),
            AuthCall::UserRevokeRole(r) => call!(user_revoke_role, r, UserRevokeRole),
            AuthCall::RoleAdd(r) => call!(role_add, r, RoleAdd),
            AuthCall::RoleGet(r) => call!(role_get, r, RoleGet),
            AuthCall::RoleList => call!(role_list, AuthRoleListRequest {}, RoleList),
            AuthCall::RoleDelete(r) => call!(role_delete, r, RoleDelete),
            AuthCall::RoleGrantPermission(r) => {
                call!(role_grant_permission, r, RoleGrantPermission)
            }
            AuthCall::RoleRevokePermission(r) => {
                call!(role_revoke_permission, r, RoleRevokePermission)
            }
        }
    }

    /// `KV.Range`.
    pub fn range(&mut self, request: RangeRequest) -> Result<RangeResponse, Failure> {
        let mut kv = self.kv.clone();
        let request = self.authorized(request);
        self.block_on(async move { kv.range(request).await })
    }

    /// `KV.Put`.
    pub fn put(&mut self, request: PutRequest) -> Result<PutResponse, Failure> {
        let mut kv = self.kv.clone();
        let request = self.authorized(request);
        self.block_on(async move { kv.put(request).await })
    }

    /// `KV.DeleteRange`.
    pub fn delete_range(
        &mut self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Failure> {
        let mut kv = self.kv.clone();
        let request = self.authorized(request);
        self.block_on(async move { kv.delete_range(request).await })
    }

    /// `KV.Txn`.
    pub fn txn(&mut self, request: TxnRequest) -> Result<TxnResponse, Failure> {
        let mut kv = self.kv.clone();
        let request = self.authorized(request);
        self.block_on(async move { kv.txn(request).await })
    }

    /// `KV.Compact`.
    pub fn compact(&mut self, request: CompactionRequest) -> Result<CompactionResponse, Failure> {
        let mut kv = self.kv.clone();
        let request = self.authorized(request);
        self.block_on(async move { kv.compact(request).await })
    }

    /// `Maintenance.Status`.
    pub fn status(&mut self) -> Result<StatusResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(StatusRequest {});
        self.block_on(async move { maintenance.status(request).await })
    }

    /// `Maintenance.Downgrade`.
    pub fn downgrade(&mut self, request: DowngradeRequest) -> Result<DowngradeResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(request);
        self.block_on(async move { maintenance.downgrade(request).await })
    }

    /// `Maintenance.Alarm`.
    pub fn alarm(&mut self, request: AlarmRequest) -> Result<AlarmResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(request);
        self.block_on(async move { maintenance.alarm(request).await })
    }

    /// `Maintenance.Defragment`.
    pub fn defragment(&mut self) -> Result<DefragmentResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(DefragmentRequest {});
        self.block_on(async move { maintenance.defragment(request).await })
    }

    /// `Maintenance.Hash`.
    pub fn hash(&mut self) -> Result<HashResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(HashRequest {});
        self.block_on(async move { maintenance.hash(request).await })
    }

    /// `Maintenance.HashKV`.
    pub fn hash_kv(&mut self, revision: i64) -> Result<HashKvResponse, Failure> {
        let mut maintenance = self.maintenance.clone();
        let request = self.authorized(HashKvRequest { revision });
        self.block_on(async move { maintenance.hash_kv(request).await })
    }

    /// `Lease.LeaseGrant`.
    pub fn lease_grant(
        &mut self,
        request: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, Failure> {
        let mut lease = self.lease.clone();
        let request = self.authorized(request);
        self.block_on(async move { lease.lease_grant(request).await })
    }

    /// `Lease.LeaseRevoke`.
    pub fn lease_revoke(
        &mut self,
        request: LeaseRevokeRequest,
    ) -> Result<LeaseRevokeResponse, Failure> {
        let mut lease = self.lease.clone();
        let request = self.authorized(request);
        self.block_on(async move { lease.lease_revoke(request).await })
    }

    /// One round trip on a fresh keep-alive stream.
    pub fn lease_keep_alive(
        &mut self,
        request: LeaseKeepAliveRequest,
    ) -> Result<LeaseKeepAliveResponse, Failure> {
        let mut lease = self.lease.clone();
        let (sender, receiver) = unbounded_channel();
        let _ = sender.send(request);
        let request = self.authorized(Requests(receiver));
        let mut responses = self.block_on(async move { lease.lease_keep_alive(request).await })?;
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(CALL_TIMEOUT, responses.message()).await });
        drop(sender);
        match answer {
            Ok(Ok(Some(response))) => Ok(response),
            Ok(Ok(None)) => Err(Failure::new(2, "keep-alive stream ended")),
            Ok(Err(status)) => Err(Failure::new(
                i32::from(status.code()),
                status.message().to_owned(),
            )),
            Err(_) => Err(Failure::new(4, "client: no keep-alive answer")),
        }
    }

    /// `Lease.LeaseTimeToLive`.
    pub fn lease_time_to_live(
        &mut self,
        request: LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, Failure> {
        let mut lease = self.lease.clone();
        let request = self.authorized(request);
        self.block_on(async move { lease.lease_time_to_live(request).await })
    }

    /// `Lease.LeaseLeases`.
    pub fn lease_leases(&mut self) -> Result<LeaseLeasesResponse, Failure> {
        let mut lease = self.lease.clone();
        let request = self.authorized(LeaseLeasesRequest {});
        self.block_on(async move { lease.lease_leases(request).await })
    }

    /// `Election.Campaign`.
    pub fn campaign(&mut self, request: CampaignRequest) -> Result<CampaignResponse, Failure> {
        let mut election = self.election.clone();
        let request = self.authorized(request);
        self.block_on(async move { election.campaign(request).await })
    }

    /// `Election.Proclaim`.
    pub fn proclaim(&mut self, request: ProclaimRequest) -> Result<ProclaimResponse, Failure> {
        let mut election = self.election.clone();
        let request = self.authorized(request);
        self.block_on(async move { election.proclaim(request).await })
    }

    /// `Election.Leader`.
    pub fn leader(&mut self, request: LeaderRequest) -> Result<LeaderResponse, Failure> {
        let mut election = self.election.clone();
        let request = self.authorized(request);
        self.block_on(async move { election.leader(request).await })
    }

    /// `Election.Resign`.
    pub fn resign(&mut self, request: ResignRequest) -> Result<ResignResponse, Failure> {
        let mut election = self.election.clone();
        let request = self.authorized(request);
        self.block_on(async move { election.resign(request).await })
    }

    /// `Lock.Lock`.
    pub fn lock(&mut self, request: LockRequest) -> Result<LockResponse, Failure> {
        let mut lock = self.lock.clone();
        let request = self.authorized(request);
        self.block_on(async move { lock.lock(request).await })
    }

    /// `Lock.Unlock`.
    pub fn unlock(&mut self, request: UnlockRequest) -> Result<UnlockResponse, Failure> {
        let mut lock = self.lock.clone();
        let request = self.authorized(request);
        self.block_on(async move { lock.unlock(request).await })
    }

    /// A new watch stream; the call starts with its first request (etcd
    /// sends the response headers only with the first response).
    pub fn watch_open(&mut self) -> usize {
        let (sender, receiver) = unbounded_channel();
        self.watch_streams.push(WatchStream {
            sender,
            receiver: Some(receiver),
            responses: None,
        });
        self.watch_streams.len() - 1
    }

    /// Sends one request on a watch stream.
    pub fn watch_send(&mut self, stream: usize, request: WatchRequest) -> Result<(), Failure> {
        let Some(watch) = self.watch_streams.get_mut(stream) else {
            return Err(Failure::new(13, format!("no watch stream {stream}")));
        };
        watch
            .sender
            .send(request)
            .map_err(|_| Failure::new(1, "watch stream closed"))?;
        if let Some(receiver) = watch.receiver.take() {
            let mut client = self.watch.clone();
            let request = self.authorized(Requests(receiver));
            let responses = self.block_on(async move { client.watch(request).await })?;
            if let Some(watch) = self.watch_streams.get_mut(stream) {
                watch.responses = Some(responses);
            }
        }
        Ok(())
    }

    /// The next response on a watch stream, or `None` within `wait`.
    pub fn watch_recv(
        &mut self,
        stream: usize,
        wait: Duration,
    ) -> Result<Option<WatchResponse>, Failure> {
        let Some(responses) = self
            .watch_streams
            .get_mut(stream)
            .and_then(|w| w.responses.as_mut())
        else {
            return Err(Failure::new(
                13,
                format!("watch stream {stream} not started"),
            ));
        };
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(wait, responses.message()).await });
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(status)) => Err(Failure::new(
                i32::from(status.code()),
                status.message().to_owned(),
            )),
            Err(_) => Ok(None),
        }
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

/// One client watch stream.
struct WatchStream {
    sender: UnboundedSender<WatchRequest>,
    /// Taken when the call starts.
    receiver: Option<UnboundedReceiver<WatchRequest>>,
    responses: Option<Streaming<WatchResponse>>,
}

/// A channel's receiving end as the request stream of a call.
struct Requests<T>(UnboundedReceiver<T>);

impl<T> Stream for Requests<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}
