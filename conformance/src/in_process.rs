//! The "core" target: a single-member `Node` over in-memory storage, driven
//! synchronously in the calling thread. No network, no threads, no clock:
//! time is a counter this driver advances itself.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use oxetcd_core::auth::{AuthRead, AuthRequest, AuthResponse, Credentials};
use oxetcd_core::memory::{MemoryKv, MemoryLog};
use oxetcd_core::testing::{Effect, Member};
use oxetcd_core::{Config, Error, Input, Instant, Request, RequestId, Response};
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, DowngradeRequest, DowngradeResponse, HashResponse, LeaseGrantRequest,
    LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    PutRequest, PutResponse, RangeRequest, RangeResponse, ResponseHeader, StatusResponse,
    TxnRequest, TxnResponse, WatchRequest, WatchResponse,
};

use oxetcd_proto::oxetcdpb::auth_change::Change;
use oxetcd_proto::oxetcdpb::AuthenticateChange;

use crate::auth_call::AuthCall;
use crate::target::{Failure, SUITE_QUOTA_BYTES, WATCH_PROGRESS_NOTIFY_INTERVAL};

/// Rounds of "drain outputs, then let time pass" before a request counts as
/// never answered. A single member elects itself within a few election
/// timeouts; this leaves a wide margin while still bounding a stuck node.
const ROUNDS_MAX: usize = 10_000;

/// How far virtual time moves when the node has no timer pending.
const IDLE_STEP: Duration = Duration::from_millis(10);

/// A node and its in-memory storage on the core's reference driver.
pub struct InProcess {
    member: Member,
    now: Instant,
    next_id: RequestId,
    answers: HashMap<RequestId, Result<Response, Failure>>,
    /// Responses of each watch stream not yet received, by stream number.
    watch_streams: Vec<VecDeque<WatchResponse>>,
    /// What every request is sent with.
    credentials: Credentials,
    /// Numbers the simple tokens this driver hands out.
    tokens_issued: u64,
}

impl InProcess {
    /// A fresh single-member node named `default`, as `etcd` with no flags.
    pub fn new() -> Result<Self, String> {
        let log = MemoryLog::default();
        let kv = MemoryKv::default();
        let now = Instant::ZERO;
        let config = Config {
            watch_progress_notify_interval: WATCH_PROGRESS_NOTIFY_INTERVAL,
            quota: oxetcd_core::alarm::Quota {
                limit_bytes: Some(SUITE_QUOTA_BYTES),
            },
            ..Config::single("default")
        };
        let member = Member::start(config, log, kv, now).map_err(|e| format!("Node::new: {e}"))?;
        Ok(Self {
            member,
            now,
            next_id: 1,
            answers: HashMap::new(),
            watch_streams: Vec::new(),
            credentials: Credentials::Anonymous,
            tokens_issued: 0,
        })
    }

    /// Makes every later request carry `token` (none: anonymous).
    pub fn set_token(&mut self, token: Option<String>) {
        self.credentials = token.map_or(Credentials::Anonymous, Credentials::Token);
    }

    /// One call of the `Auth` service, with the current token. Passwords
    /// are hashed and checked here, as the server that receives the call
    /// does, at [`BCRYPT_COST`].
    pub fn auth(&mut self, call: AuthCall) -> Result<AuthResponse, Failure> {
        use oxetcd_proto::etcdserverpb::{AuthDisableRequest, AuthEnableRequest};
        let request = match call {
            AuthCall::Enable => AuthRequest::Change(Change::Enable(AuthEnableRequest {})),
            AuthCall::Disable => AuthRequest::Change(Change::Disable(AuthDisableRequest {})),
            AuthCall::Status => AuthRequest::Read(AuthRead::Status),
            AuthCall::Authenticate(r) => return self.authenticate(r.name, r.password),
            AuthCall::UserAdd(mut r) => {
                let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
                let password = std::mem::take(&mut r.password);
                if !no_password {
                    r.hashed_password = hash(&password)?;
                }
                AuthRequest::Change(Change::UserAdd(r))
            }
            AuthCall::UserGet(r) => AuthRequest::Read(AuthRead::UserGet(r)),
            AuthCall::UserList => AuthRequest::Read(AuthRead::UserList),
            AuthCall::UserDelete(r) => AuthRequest::Change(Change::UserDelete(r)),
            AuthCall::UserChangePassword(mut r) => {
                let password = std::mem::take(&mut r.password);
                r.hashed_password = hash(&password)?;
                AuthRequest::Change(Change::UserChangePassword(r))
            }
            AuthCall::UserGrantRole(r) => AuthRequest::Change(Change::UserGrantRole(r)),
            AuthCall::UserRevokeRole(r) => AuthRequest::Change(Change::UserRevokeRole(r)),
            AuthCall::RoleAdd(r) => AuthRequest::Change(Change::RoleAdd(r)),
            AuthCall::RoleGet(r) => AuthRequest::Read(AuthRead::RoleGet(r)),
            AuthCall::RoleList => AuthRequest::Read(AuthRead::RoleList),
            AuthCall::RoleDelete(r) => AuthRequest::Change(Change::RoleDelete(r)),
            AuthCall::RoleGrantPermission(r) => AuthRequest::Change(Change::RoleGrantPermission(r)),
            AuthCall::RoleRevokePermission(r) => {
                AuthRequest::Change(Change::RoleRevokePermission(r))
            }
        };
        self.auth_request(request)
    }

    /// `Authenticate`: the stored hash is read and checked here, then the
    /// token is proposed, as the server does with simple tokens.
    fn authenticate(&mut self, name: String, password: String) -> Result<AuthResponse, Failure> {
        let read = AuthRequest::Read(AuthRead::Password { name: name.clone() });
        let stored = match self.auth_request_as(Credentials::Anonymous, read)? {
            AuthResponse::Password(stored) => stored,
            other => return Err(unexpected("password", &Response::Auth(other))),
        };
        if !bcrypt::verify(password, &stored.hash).unwrap_or(false) {
            return Err(failure(&Error::AuthFailed));
        }
        self.tokens_issued += 1;
        let token = format!("inprocesstoken.{}", self.tokens_issued);
        let change = Change::Authenticate(AuthenticateChange { name, token });
        self.auth_request_as(Credentials::Anonymous, AuthRequest::Change(change))
    }

    fn auth_request(&mut self, request: AuthRequest) -> Result<AuthResponse, Failure> {
        self.auth_request_as(self.credentials.clone(), request)
    }

    fn auth_request_as(
        &mut self,
        who: Credentials,
        request: AuthRequest,
    ) -> Result<AuthResponse, Failure> {
        let saved = std::mem::replace(&mut self.credentials, who);
        let answer = self.call(Request::Auth(request));
        self.credentials = saved;
        match answer? {
            Response::Auth(r) => Ok(r),
            other => Err(unexpected("auth", &other)),
        }
    }

    /// `KV.Range`.
    pub fn range(&mut self, request: RangeRequest) -> Result<RangeResponse, Failure> {
        match self.call(Request::Range(request))? {
            Response::Range(r) => Ok(r),
            other => Err(unexpected("range", &other)),
        }
    }

    /// `KV.Put`.
    pub fn put(&mut self, request: PutRequest) -> Result<PutResponse, Failure> {
        match self.call(Request::Put(request))? {
            Response::Put(r) => Ok(r),
            other => Err(unexpected("put", &other)),
        }
    }

    /// `KV.DeleteRange`.
    pub fn delete_range(
        &mut self,
        request: DeleteRangeRequest,
    ) -> Result<DeleteRangeResponse, Failure> {
        match self.call(Request::DeleteRange(request))? {
            Response::DeleteRange(r) => Ok(r),
            other => Err(unexpected("delete range", &other)),
        }
    }

    /// `KV.Txn`.
    pub fn txn(&mut self, request: TxnRequest) -> Result<TxnResponse, Failure> {
        match self.call(Request::Txn(request))? {
            Response::Txn(r) => Ok(r),
            other => Err(unexpected("txn", &other)),
        }
    }

    /// `KV.Compact`.
    pub fn compact(&mut self, request: CompactionRequest) -> Result<CompactionResponse, Failure> {
        match self.call(Request::Compact(request))? {
            Response::Compact(r) => Ok(r),
            other => Err(unexpected("compact", &other)),
        }
    }

    /// `Maintenance.Downgrade`.
    pub fn downgrade(&mut self, request: DowngradeRequest) -> Result<DowngradeResponse, Failure> {
        match self.call(Request::Downgrade(request))? {
            Response::Downgrade(r) => Ok(r),
            other => Err(unexpected("downgrade", &other)),
        }
    }

    /// `Maintenance.Status` (raft fields only).
    pub fn status(&mut self) -> Result<StatusResponse, Failure> {
        match self.call(Request::Status)? {
            Response::Status(r) => Ok(r),
            other => Err(unexpected("status", &other)),
        }
    }

    /// `Maintenance.Hash`, computed on the member's backend as the server
    /// computes it.
    pub fn hash(&mut self) -> Result<HashResponse, Failure> {
        use oxetcd_core::storage::KvStore as _;
        let view = self
            .member
            .kv
            .read()
            .map_err(|e| failure(&Error::Storage(e)))?;
        let (hash, revision) =
            oxetcd_storage::bolt::hash::hash_backend(&view).map_err(|e| failure(&e))?;
        Ok(HashResponse {
            header: Some(ResponseHeader {
                revision,
                ..Default::default()
            }),
            hash,
        })
    }

    /// `Maintenance.Alarm`.
    pub fn alarm(&mut self, request: AlarmRequest) -> Result<AlarmResponse, Failure> {
        match self.call(Request::Alarm(request))? {
            Response::Alarm(r) => Ok(r),
            other => Err(unexpected("alarm", &other)),
        }
    }

    /// `Lease.LeaseGrant`.
    pub fn lease_grant(
        &mut self,
        request: LeaseGrantRequest,
    ) -> Result<LeaseGrantResponse, Failure> {
        match self.call(Request::LeaseGrant(request))? {
            Response::LeaseGrant(r) => Ok(r),
            other => Err(unexpected("lease grant", &other)),
        }
    }

    /// `Lease.LeaseRevoke`.
    pub fn lease_revoke(
        &mut self,
        request: LeaseRevokeRequest,
    ) -> Result<LeaseRevokeResponse, Failure> {
        match self.call(Request::LeaseRevoke(request))? {
            Response::LeaseRevoke(r) => Ok(r),
            other => Err(unexpected("lease revoke", &other)),
        }
    }

    /// One keep-alive.
    pub fn lease_keep_alive(
        &mut self,
        request: LeaseKeepAliveRequest,
    ) -> Result<LeaseKeepAliveResponse, Failure> {
        match self.call(Request::LeaseKeepAlive(request))? {
            Response::LeaseKeepAlive(r) => Ok(r),
            other => Err(unexpected("lease keep-alive", &other)),
        }
    }

    /// `Lease.LeaseTimeToLive`.
    pub fn lease_time_to_live(
        &mut self,
        request: LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse, Failure> {
        match self.call(Request::LeaseTimeToLive(request))? {
            Response::LeaseTimeToLive(r) => Ok(r),
            other => Err(unexpected("lease time-to-live", &other)),
        }
    }

    /// `Lease.LeaseLeases`.
    pub fn lease_leases(&mut self) -> Result<LeaseLeasesResponse, Failure> {
        match self.call(Request::LeaseLeases)? {
            Response::LeaseLeases(r) => Ok(r),
            other => Err(unexpected("lease leases", &other)),
        }
    }

    /// A new watch stream.
    pub fn watch_open(&mut self) -> usize {
        self.watch_streams.push(VecDeque::new());
        self.watch_streams.len() - 1
    }

    /// Feeds a watch request and runs what it causes.
    pub fn watch_send(&mut self, stream: usize, request: WatchRequest) -> Result<(), Failure> {
        if stream >= self.watch_streams.len() {
            return Err(Failure::new(13, format!("no watch stream {stream}")));
        }
        self.member.node.handle(
            self.now,
            Input::Watch {
                stream: stream as u64,
                request,
                credentials: self.credentials.clone(),
            },
        );
        self.drain()
    }

    /// The next response of a stream, letting up to `wait` of virtual time
    /// pass while there is none.
    pub fn watch_recv(
        &mut self,
        stream: usize,
        wait: Duration,
    ) -> Result<Option<WatchResponse>, Failure> {
        self.drain()?;
        if let Some(response) = self.pop_watched(stream) {
            return Ok(Some(response));
        }
        self.sleep(wait);
        Ok(self.pop_watched(stream))
    }

    /// Lets `duration` of virtual time pass, firing timers on the way.
    pub fn sleep(&mut self, duration: Duration) {
        let until = self.now + duration;
        for _ in 0..ROUNDS_MAX {
            let _ = self.drain();
            match self.member.node.poll_timeout() {
                Some(deadline) if deadline <= until => {
                    self.now = self.now.max(deadline);
                    self.member.node.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = until;
        self.member.node.handle_timeout(self.now);
        let _ = self.drain();
    }

    fn pop_watched(&mut self, stream: usize) -> Option<WatchResponse> {
        self.watch_streams.get_mut(stream)?.pop_front()
    }

    /// Feeds one request, then drains outputs and lets virtual time pass
    /// until it is answered (bounded by [`ROUNDS_MAX`]).
    fn call(&mut self, request: Request) -> Result<Response, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        self.member.node.handle(
            self.now,
            Input::Client(id, request, self.credentials.clone()),
        );
        for _ in 0..ROUNDS_MAX {
            self.drain()?;
            if let Some(answer) = self.answers.remove(&id) {
                return answer;
            }
            self.now = match self.member.node.poll_timeout() {
                Some(deadline) if deadline > self.now => deadline,
                _ => self.now + IDLE_STEP,
            };
            self.member.node.handle_timeout(self.now);
        }
        Err(Failure::new(
            4,
            format!("in-process node did not answer request {id} within {ROUNDS_MAX} rounds"),
        ))
    }

    /// Executes every pending output on the reference driver and keeps
    /// what comes out of it.
    fn drain(&mut self) -> Result<(), Failure> {
        let effects = self
            .member
            .drain(self.now)
            .map_err(|e| Failure::new(13, format!("etcdserver: {e}")))?;
        for effect in effects {
            match effect {
                Effect::Answer(id, answer) => {
                    self.answers.insert(id, answer.map_err(|e| failure(&e)));
                }
                Effect::Watch(stream, response) => {
                    if let Some(queue) = self.watch_streams.get_mut(stream as usize) {
                        queue.push_back(response);
                    }
                }
                // A single member has no one to send to; ranges here all
                // go through the node.
                Effect::Send(_) | Effect::SendSnapshot { .. } | Effect::DirectReads(_) => {}
            }
        }
        Ok(())
    }
}

/// bcrypt's cost for the in-process node's passwords: etcd's minimum,
/// as the servers of the suite run with (`--bcrypt-cost`).
pub const BCRYPT_COST: u32 = 4;

fn hash(password: &str) -> Result<String, Failure> {
    bcrypt::hash(password, BCRYPT_COST).map_err(|e| Failure::new(13, format!("bcrypt: {e}")))
}

fn failure(e: &Error) -> Failure {
    Failure::new(e.code() as i32, e.message())
}

fn unexpected(call: &str, response: &Response) -> Failure {
    Failure::new(13, format!("{call} answered with {response:?}"))
}
