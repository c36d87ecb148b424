//! The one interface every scenario is written against.

use std::fmt;

use std::time::Duration;

use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, DowngradeRequest, DowngradeResponse, HashResponse, LeaseGrantRequest,
    LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    PutRequest, PutResponse, RangeRequest, RangeResponse, StatusResponse, TxnRequest, TxnResponse,
    WatchRequest, WatchResponse,
};

use oxetcd_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use oxetcd_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};

use oxetcd_core::auth::AuthResponse;

use crate::auth_call::AuthCall;
use crate::grpc::Grpc;
use crate::in_process::InProcess;
use crate::launch::{Server, ServerKind};

/// An error answer: the gRPC status code (as a number) and message, exactly
/// as a client sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// gRPC status code (3 = InvalidArgument, 11 = OutOfRange, …).
    pub code: i32,
    /// Status message, byte for byte.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code {} {:?}", self.code, self.message)
    }
}

/// Periodic watch progress notifications every half second instead of
/// etcd's ten minutes, so a scenario can wait for one; every target of the
/// suite runs with it (the in-process node through its config).
pub const WATCH_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_millis(500);

/// The backend quota of every target: small enough that a scenario fills
/// it in about a hundred puts, large enough that no other scenario comes
/// near it.
pub const SUITE_QUOTA_BYTES: u64 = 32 * 1024 * 1024;

/// Flags every server of the suite starts with, beyond its ports and data
/// dir: [`WATCH_PROGRESS_NOTIFY_INTERVAL`] and [`SUITE_QUOTA_BYTES`] under
/// etcd's flag names, and bcrypt's lowest cost (etcd's own tests run
/// with it too), so that each password hashed or checked costs about a
/// millisecond instead of tens.
pub const SUITE_FLAGS: [&str; 3] = [
    "--experimental-watch-progress-notify-interval=500ms",
    "--quota-backend-bytes=33554432",
    "--bcrypt-cost=4",
];

/// Something that answers etcd's KV and status calls: the in-process core
/// or a server over gRPC. A small enum rather than a trait object, so the
/// scenarios stay plain synchronous functions.
pub enum Target {
    /// A node driven in this thread.
    InProcess(Box<InProcess>),
    /// A server reached over gRPC (which may own the server process).
    Grpc(Box<Grpc>),
}

impl Target {
    /// A fresh single-member node in memory.
    pub fn in_process() -> Result<Self, String> {
        Ok(Self::InProcess(Box::new(InProcess::new()?)))
    }

    /// Starts a fresh server of `kind` on a temporary data dir, with
    /// [`SUITE_FLAGS`], and connects to it; the server is killed when the
    /// target is dropped.
    pub fn launch(kind: ServerKind) -> Result<Self, String> {
        let server = Server::start_flags(kind, &SUITE_FLAGS)?;
        let grpc = Grpc::connect(server.endpoint())
            .map_err(|e| format!("{e}\n--- {} log ---\n{}", kind.name(), server.log_tail()))?;
        Ok(Self::Grpc(Box::new(grpc.owning(server))))
    }

    /// Makes every later call carry `token` (`None`: no token), as etcd's
    /// clients send it (`token` metadata).
    pub fn set_token(&mut self, token: Option<&str>) {
        let token = token.map(str::to_owned);
        match self {
            Self::InProcess(t) => t.set_token(token),
            Self::Grpc(t) => t.set_token(token),
        }
    }

    /// One call of the `Auth` service, with the current token.
    pub fn auth(&mut self, call: AuthCall) -> Result<AuthResponse, Failure> {
        match self {
            Self::InProcess(t) => t.auth(call),
            Self::Grpc(t) => t.auth(call),
        }
    }

    /// True when the answers come from Debian's etcd (3.4), for the few
    /// steps where oxetcd deliberately answers as a later etcd does.
    pub fn is_etcd(&self) -> bool {
        match self {
            Self::InProcess(_) => false,
            Self::Grpc(t) => t.server().is_some_and(|s| s.kind() == ServerKind::Etcd),
        }
    }

    /// `KV.Range`.
    pub fn range(&mut self, request: RangeRequest) -> Result<RangeResponse, Failure> {
        match self {
            Self::InProcess(t) => t.range(request),
            Self::Grpc(t) => t.range(request),
        }
    }

    /// `KV.Put`.
    pub fn put(&mut self, request: PutRequest) -> Result<PutResponse, Failure> {
        match self {
            Self::InProcess(t) => t.put(request),
            Self::Grpc(t) => t.put(request),
        }
    }

    /// `KV.DeleteRange`.
    pub fn delete_range(
        &mut self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Failure> {
        match self {
            Self::InProcess(t) => t.delete_range(request),
            Self::Grpc(t) => t.delete_range(request),
        }
    }

    /// `KV.Txn`.
    pub fn txn(&mut self, request: TxnRequest) -> Result<TxnResponse, Failure> {
        match self {
            Self::InProcess(t) => t.txn(request),
            Self::Grpc(t) => t.txn(request),
        }
    }

    /// `KV.Compact`.
    pub fn compact(&mut self, request: CompactionRequest) -> Result<CompactionResponse, Failure> {
        match self {
            Self::InProcess(t) => t.compact(request),
            Self::Grpc(t) => t.compact(request),
        }
    }

    /// `Maintenance.Status`. The in-process node answers only the raft
    /// fields; version and sizes are the server's.
    pub fn status(&mut self) -> Result<StatusResponse, Failure> {
        match self {
            Self::InProcess(t) => t.status(),
            Self::Grpc(t) => t.status(),
        }
    }

    /// A plain HTTP/1.1 GET of `path` on the client port: the status code
    /// and the body; `None` for the in-process node, which has no HTTP.
    pub fn http_get(&self, path: &str) -> Option<Result<(u16, String), String>> {
        match self {
            Self::InProcess(_) => None,
            Self::Grpc(t) => t.server().map(|s| http_get(&s.address(), path)),
        }
    }

    /// `Maintenance.Downgrade`.
    pub fn downgrade(&mut self, request: DowngradeRequest) -> Result<DowngradeResponse, Failure> {
        match self {
            Self::InProcess(t) => t.downgrade(request),
            Self::Grpc(t) => t.downgrade(request),
        }
    }

    /// `Maintenance.Hash`.
    pub fn hash(&mut self) -> Result<HashResponse, Failure> {
        match self {
            Self::InProcess(t) => t.hash(),
            Self::Grpc(t) => t.hash(),
        }
    }

    /// `Maintenance.Alarm`.
    pub fn alarm(&mut self, request: AlarmRequest) -> Result<AlarmResponse, Failure> {
        match self {
            Self::InProcess(t) => t.alarm(request),
            Self::Grpc(t) => t.alarm(request),
        }
    }

    /// `Maintenance.Defragment`; the in-process store has nothing to give
    /// back.
    pub fn defragment(&mut self) -> Result<(), Failure> {
        match self {
            Self::InProcess(_) => Ok(()),
            Self::Grpc(t) => t.defragment().map(|_| ()),
        }
    }

    /// `Lease.LeaseGrant`.
    pub fn lease_grant(
        &mut self,
        request: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, Failure> {
        match self {
            Self::InProcess(t) => t.lease_grant(request),
            Self::Grpc(t) => t.lease_grant(request),
        }
    }

    /// `Lease.LeaseRevoke`.
    pub fn lease_revoke(
        &mut self,
        request: LeaseRevokeRequest,
    ) -> Result<LeaseRevokeResponse, Failure> {
        match self {
            Self::InProcess(t) => t.lease_revoke(request),
            Self::Grpc(t) => t.lease_revoke(request),
        }
    }

    /// One round trip on a fresh `Lease.LeaseKeepAlive` stream.
    pub fn lease_keep_alive(
        &mut self,
        request: LeaseKeepAliveRequest,
    ) -> Result<LeaseKeepAliveResponse, Failure> {
        match self {
            Self::InProcess(t) => t.lease_keep_alive(request),
            Self::Grpc(t) => t.lease_keep_alive(request),
        }
    }

    /// `Lease.LeaseTimeToLive`.
    pub fn lease_time_to_live(
        &mut self,
        request: LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, Failure> {
        match self {
            Self::InProcess(t) => t.lease_time_to_live(request),
            Self::Grpc(t) => t.lease_time_to_live(request),
        }
    }

    /// `Lease.LeaseLeases`.
    pub fn lease_leases(&mut self) -> Result<LeaseLeasesResponse, Failure> {
        match self {
            Self::InProcess(t) => t.lease_leases(),
            Self::Grpc(t) => t.lease_leases(),
        }
    }

    /// `Election.Campaign` (a server's: the core has no Election service).
    pub fn campaign(&mut self, request: CampaignRequest) -> Result<CampaignResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3electionpb.Election")),
            Self::Grpc(t) => t.campaign(request),
        }
    }

    /// `Election.Proclaim`.
    pub fn proclaim(&mut self, request: ProclaimRequest) -> Result<ProclaimResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3electionpb.Election")),
            Self::Grpc(t) => t.proclaim(request),
        }
    }

    /// `Election.Leader`.
    pub fn leader(&mut self, request: LeaderRequest) -> Result<LeaderResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3electionpb.Election")),
            Self::Grpc(t) => t.leader(request),
        }
    }

    /// `Election.Resign`.
    pub fn resign(&mut self, request: ResignRequest) -> Result<ResignResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3electionpb.Election")),
            Self::Grpc(t) => t.resign(request),
        }
    }

    /// `Lock.Lock` (a server's: the core has no Lock service).
    pub fn lock(&mut self, request: LockRequest) -> Result<LockResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3lockpb.Lock")),
            Self::Grpc(t) => t.lock(request),
        }
    }

    /// `Lock.Unlock`.
    pub fn unlock(&mut self, request: UnlockRequest) -> Result<UnlockResponse, Failure> {
        match self {
            Self::InProcess(_) => Err(server_only("v3lockpb.Lock")),
            Self::Grpc(t) => t.unlock(request),
        }
    }

    /// Opens a `Watch` stream (lazily: the call starts with its first
    /// request); returns its number for [`Target::watch_send`].
    pub fn watch_open(&mut self) -> usize {
        match self {
            Self::InProcess(t) => t.watch_open(),
            Self::Grpc(t) => t.watch_open(),
        }
    }

    /// Sends one request on a watch stream.
    pub fn watch_send(&mut self, stream: usize, request: WatchRequest) -> Result<(), Failure> {
        match self {
            Self::InProcess(t) => t.watch_send(stream, request),
            Self::Grpc(t) => t.watch_send(stream, request),
        }
    }

    /// The next response on a watch stream, or `None` if none comes within
    /// `wait` (virtual time for the in-process core).
    pub fn watch_recv(
        &mut self,
        stream: usize,
        wait: Duration,
    ) -> Result<Option<WatchResponse>, Failure> {
        match self {
            Self::InProcess(t) => t.watch_recv(stream, wait),
            Self::Grpc(t) => t.watch_recv(stream, wait),
        }
    }

    /// Lets time pass (virtually for the in-process core).
    pub fn sleep(&mut self, duration: Duration) {
        match self {
            Self::InProcess(t) => t.sleep(duration),
            Self::Grpc(_) => std::thread::sleep(duration),
        }
    }

    /// True when the answers come from a server process (which fills in
    /// version and database sizes in status).
    pub fn is_server(&self) -> bool {
        matches!(self, Self::Grpc(_))
    }
}

/// What the in-process core answers for a service only the server has
/// (the Election and Lock services are clients of the node, built in the
/// server): gRPC's `Unimplemented`, as for any unknown service.
fn server_only(service: &str) -> Failure {
    Failure::new(12, format!("unknown service {service}"))
}

/// Longest an HTTP answer may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(15);

fn http_get(address: &str, path: &str) -> Result<(u16, String), String> {
    http_request(address, "GET", path)
}

/// One HTTP/1.1 request with `method` and no body to `address`: the
/// status code and the body. What arrived before an error or the close is
/// the answer.
pub fn http_request(address: &str, method: &str, path: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(address).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(HTTP_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    socket
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let _ = socket.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status line in {text:?}"))?;
    Ok((code, body.to_owned()))
}
