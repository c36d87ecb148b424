//! A client for any etcd-compatible cluster: one connection at a time,
//! moved round-robin over the endpoints on failure.
//!
//! This is etcd 3.4's balancer, and deliberately nothing more: the client
//! keeps no health bookkeeping about endpoints. A request that cannot
//! connect, or that the server answers `Unavailable`, moves the client to the
//! next endpoint; repeatable requests (reads, and anything that provably
//! never left the client) are retried there until the command timeout runs
//! out. A mutation whose fate is unknown is not retried: its error is
//! returned, and the next request goes to the next endpoint.
//!
//! An endpoint counts as connected once it has answered: a dial ends with
//! a call of a method no server serves (the answer, `Unimplemented`, costs
//! the server nothing), or with `Authenticate` when there are credentials.
//! A process that accepts connections but never answers (stopped, hung)
//! is thus not mistaken for a live member. When the endpoint being dialled
//! has not answered within [`HEDGE_AFTER`], the others are dialled too and
//! the first to answer is used, as a gRPC client connected to all of them
//! sends to the first that is ready.
//!
//! TLS follows etcdctl: an `https://` endpoint is always dialled with TLS
//! and an `http://` one never; a bare `host:port` uses TLS when a TLS file
//! (`--cacert`, `--cert`, `--key`) is given or `--insecure-transport=false`.
//! The rustls configuration is built once, from the files, when the client
//! is made (so a missing file is reported before anything is dialled), and
//! every TLS endpoint shares it. A certificate that does not verify moves
//! the client on like any failed endpoint; when every endpoint of a round
//! failed that way, the error is reported at once rather than retried
//! until the deadline, since waiting cannot fix it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), oxetcd_ctl::Error> {
//! use oxetcd_ctl::client::{Client, Config};
//! use oxetcd_proto::etcdserverpb::PutRequest;
//!
//! let client = Client::new(Config::new(vec!["127.0.0.1:2379".into(), "127.0.0.1:22379".into()]))?;
//! let put = PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() };
//! let response = client.put(put).await?;
//! # let _ = response; Ok(()) }
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oxetcd_proto::etcdserverpb::auth_client::AuthClient;
use oxetcd_proto::etcdserverpb::cluster_client::ClusterClient;
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use oxetcd_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AuthDisableRequest, AuthDisableResponse, AuthEnableRequest,
    AuthEnableResponse, AuthRoleAddRequest, AuthRoleAddResponse, AuthRoleDeleteRequest,
    AuthRoleDeleteResponse, AuthRoleGetRequest, AuthRoleGetResponse,
    AuthRoleGrantPermissionRequest, AuthRoleGrantPermissionResponse, AuthRoleListRequest,
    AuthRoleListResponse, AuthRoleRevokePermissionRequest, AuthRoleRevokePermissionResponse,
    AuthStatusRequest, AuthStatusResponse, AuthUserAddRequest, AuthUserAddResponse,
    AuthUserChangePasswordRequest, AuthUserChangePasswordResponse, AuthUserDeleteRequest,
    AuthUserDeleteResponse, AuthUserGetRequest, AuthUserGetResponse, AuthUserGrantRoleRequest,
    AuthUserGrantRoleResponse, AuthUserListRequest, AuthUserListResponse,
    AuthUserRevokeRoleRequest, AuthUserRevokeRoleResponse, AuthenticateRequest, CompactionRequest,
    CompactionResponse, DefragmentRequest, DefragmentResponse, DeleteRangeRequest,
    DeleteRangeResponse, DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse,
    LeaseGrantRequest, LeaseGrantResponse, LeaseLeasesRequest, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse, MoveLeaderRequest, MoveLeaderResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, StatusRequest, StatusResponse, TxnRequest,
    TxnResponse,
};
use oxetcd_proto::v3electionpb::election_client::ElectionClient;
use oxetcd_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ResignRequest,
    ResignResponse,
};
use oxetcd_proto::v3lockpb::lock_client::LockClient;
use oxetcd_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use oxetcd_tls::rustls::ClientConfig;
use oxetcd_tls::ClientSettings;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

mod calls;

use crate::dial::is_unix;
pub use crate::dial::{connect, dial_target, endpoint_url};
use crate::error::{Error, AUTH_NOT_ENABLED, INVALID_AUTH_TOKEN};
pub use calls::{auth, cluster, election, kv, lease, lock, maintenance, watch};

/// Pause before walking the endpoint list again once every endpoint has
/// failed, so a cluster that is down is not hammered until the deadline.
const ROUND_BACKOFF: Duration = Duration::from_millis(100);

/// How long a dial may go unanswered before the other endpoints are
/// dialled beside it.
const HEDGE_AFTER: Duration = Duration::from_millis(100);

/// A method no server serves: its answer proves the server is up.
const READINESS_PROBE: &str = "/oxetcd.Readiness/Probe";

/// Responses can be large (a range over the whole key space); etcd's client
/// accepts any size the server is willing to send.
const RESPONSE_BYTES_MAX: usize = usize::MAX;

/// How to reach the cluster. Defaults are etcdctl's.
#[derive(Clone, Debug)]
pub struct Config {
    /// `host:port` or URLs; tried in order, round-robin.
    pub endpoints: Vec<String>,
    /// Longest one connection attempt may take.
    pub dial_timeout: Duration,
    /// Longest one request may take, retries and reconnections included.
    pub command_timeout: Duration,
    /// Interval of HTTP/2 keepalive pings.
    pub keepalive_time: Duration,
    /// How long to wait for a ping's answer before dropping the connection.
    pub keepalive_timeout: Duration,
    /// Transport security files; see [`Tls`].
    pub tls: Tls,
    /// User name and password, when the cluster has authentication on.
    pub credentials: Option<Credentials>,
}

impl Config {
    /// etcdctl's defaults for these endpoints.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            dial_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(5),
            keepalive_time: Duration::from_secs(2),
            keepalive_timeout: Duration::from_secs(6),
            tls: Tls::default(),
            credentials: None,
        }
    }
}

/// etcdctl's TLS flags. See the module documentation for which endpoints
/// they apply to.
#[derive(Clone, Debug)]
pub struct Tls {
    /// `--cacert`: CA bundle to verify servers with (default: the
    /// system's CAs).
    pub ca_cert: Option<PathBuf>,
    /// `--cert`: client certificate.
    pub cert: Option<PathBuf>,
    /// `--key`: client key.
    pub key: Option<PathBuf>,
    /// `--insecure-skip-tls-verify`: accept any server certificate on TLS
    /// endpoints (the server must still hold its key); meaningless on
    /// plaintext ones.
    pub insecure_skip_verify: bool,
    /// `--insecure-transport`: bare `host:port` endpoints may be
    /// plaintext when no TLS file is given (etcdctl's default, true).
    pub insecure_transport: bool,
}

impl Default for Tls {
    /// No TLS files; plaintext allowed, as etcdctl's defaults.
    fn default() -> Self {
        Self {
            ca_cert: None,
            cert: None,
            key: None,
            insecure_skip_verify: false,
            insecure_transport: true,
        }
    }
}

impl Tls {
    fn files_given(&self) -> bool {
        self.ca_cert.is_some() || self.cert.is_some() || self.key.is_some()
    }

    /// Whether `endpoint` is dialled with TLS.
    pub fn secures(&self, endpoint: &str) -> bool {
        if let Some((scheme, _)) = endpoint
            .split_once(':')
            .filter(|_| endpoint.contains("://"))
        {
            scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("unixs")
        } else if is_unix(endpoint) {
            endpoint
                .get(..6)
                .is_some_and(|p| p.eq_ignore_ascii_case("unixs:"))
        } else {
            self.files_given() || !self.insecure_transport
        }
    }

    /// The rustls configuration for `endpoints`: `None` when none of them
    /// is dialled with TLS and no TLS file is given (etcdctl loads given
    /// files even then, and so reports a bad one).
    pub fn client_config(&self, endpoints: &[String]) -> Result<Option<Arc<ClientConfig>>, Error> {
        if !self.files_given() && !endpoints.iter().any(|e| self.secures(e)) {
            return Ok(None);
        }
        let settings = ClientSettings {
            ca_file: self.ca_cert.clone(),
            cert_file: self.cert.clone(),
            key_file: self.key.clone(),
            skip_verify: self.insecure_skip_verify,
        };
        settings
            .build()
            .map(Some)
            .map_err(|e| Error::Tls(e.to_string()))
    }
}

/// A user and password for etcd's `Authenticate`.
#[derive(Clone, Debug)]
pub struct Credentials {
    /// User name.
    pub user: String,
    /// Password; `None` to ask for it on stdin ([`crate::prompt`]) when
    /// the client first connects, as etcdctl's `--user name` does: after
    /// the command has checked its arguments and asked its own questions.
    pub password: Option<String>,
}

/// The gRPC transport every typed client in this module runs over: a
/// channel plus the auth token, when there is one.
pub type Transport = InterceptedService<Channel, Token>;

/// Adds etcd's `token` metadata to every call made over a transport, unary
/// or streaming, once authenticated. Clones share the token, so a new one
/// (after the server forgot the old) reaches every transport of the
/// connection from its next call on.
#[derive(Clone, Debug, Default)]
pub struct Token(Arc<Mutex<Option<MetadataValue<Ascii>>>>);

impl Token {
    fn set(&self, token: Option<MetadataValue<Ascii>>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = token;
    }
}

impl Interceptor for Token {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let token = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(token) = token {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

/// A cluster client. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    config: Arc<Config>,
    /// The TLS configuration every TLS endpoint shares.
    tls: Option<Arc<ClientConfig>>,
    state: Arc<Mutex<State>>,
    /// The answer to the password prompt, once asked; shared with the
    /// clients [`Client::for_endpoint`] makes, so it is asked only once.
    asked_password: Arc<OnceCell<String>>,
}

/// Which endpoint is in use, and its connection once made.
struct State {
    current: usize,
    connection: Option<Connection>,
    /// Why the server refused the credentials, once it has.
    refusal: Option<Error>,
}

/// A connection to one endpoint, and the token it authenticated with.
#[derive(Clone)]
struct Connection {
    index: usize,
    channel: Channel,
    token: Token,
}

impl Connection {
    fn transport(&self) -> Transport {
        InterceptedService::new(self.channel.clone(), self.token.clone())
    }
}

impl Client {
    /// A client for `config`. Connects lazily, on the first request, so
    /// that a dead first endpoint costs no more than one dial timeout.
    pub fn new(config: Config) -> Result<Self, Error> {
        let tls = config.tls.client_config(&config.endpoints)?;
        Self::with_tls(config, tls, Arc::default())
    }

    fn with_tls(
        config: Config,
        tls: Option<Arc<ClientConfig>>,
        asked_password: Arc<OnceCell<String>>,
    ) -> Result<Self, Error> {
        if config.endpoints.is_empty() {
            return Err(Error::BadEndpoint("no endpoints given".into()));
        }
        for endpoint in &config.endpoints {
            let (url, _) = dial_target(endpoint, config.tls.secures(endpoint))?;
            Endpoint::from_shared(url)
                .map_err(|e| Error::BadEndpoint(format!("{endpoint}: {e}")))?;
        }
        Ok(Self {
            config: Arc::new(config),
            tls,
            state: Arc::new(Mutex::new(State {
                current: 0,
                connection: None,
                refusal: None,
            })),
            asked_password,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The TLS configuration of the endpoints dialled with TLS, if any.
    pub(crate) fn tls_config(&self) -> Option<&Arc<ClientConfig>> {
        self.tls.as_ref()
    }

    /// A client for one of the endpoints only (status, hash and defrag
    /// address members one by one), with the same settings.
    pub fn for_endpoint(&self, endpoint: &str) -> Result<Self, Error> {
        let mut config = (*self.config).clone();
        config.endpoints = vec![endpoint.to_owned()];
        let tls = match &self.tls {
            Some(tls) => Some(tls.clone()),
            None => config.tls.client_config(&config.endpoints)?,
        };
        Self::with_tls(config, tls, self.asked_password.clone())
    }

    /// The endpoint requests go to now.
    pub fn current_endpoint(&self) -> String {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.config.endpoints[state.current].clone()
    }

    /// The connection to the current endpoint, connecting (and moving on
    /// from endpoints that refuse) until `deadline`. Returns the endpoint's
    /// index with it, for [`Client::failed`].
    ///
    /// A password prompt on the way does not count against `deadline`.
    pub async fn transport(&self, deadline: Instant) -> Result<(usize, Transport), Error> {
        let asking = Instant::now();
        let deadline = if self.ask_password().await? {
            deadline + asking.elapsed()
        } else {
            deadline
        };
        let mut last = None;
        let mut failures_in_round = 0;
        // Whether every failure of this round was a TLS verification one.
        let mut only_tls_failures = true;
        loop {
            let index = {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(connection) = &state.connection {
                    return Ok((connection.index, connection.transport()));
                }
                state.current
            };
            if Instant::now() >= deadline {
                return Err(Error::DeadlineExceeded { last });
            }
            let dial = tokio::time::timeout_at(deadline, self.dial_hedged(index)).await;
            match dial {
                Ok(Ok(connection)) => {
                    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    if state.current == index && state.connection.is_none() {
                        state.current = connection.index;
                        state.connection = Some(connection.clone());
                    }
                    return Ok((connection.index, connection.transport()));
                }
                Ok(Err(e)) => {
                    // Wrong credentials are final; anything else is the
                    // endpoint's problem, and the next one may do better.
                    if matches!(e, Error::Status { .. }) {
                        return Err(e);
                    }
                    only_tls_failures &= matches!(e, Error::Tls(_));
                    last = Some(e.to_string());
                    self.failed(index);
                    failures_in_round += 1;
                    if failures_in_round >= self.config.endpoints.len() {
                        if only_tls_failures {
                            return Err(e);
                        }
                        only_tls_failures = true;
                        failures_in_round = 0;
                        tokio::time::sleep_until(deadline.min(Instant::now() + ROUND_BACKOFF))
                            .await;
                    }
                }
                Err(_) => return Err(Error::DeadlineExceeded { last }),
            }
        }
    }

    /// Reports that the endpoint at `index` failed: drop its connection and
    /// move to the next endpoint (unless someone already moved on).
    pub fn failed(&self, index: usize) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.current == index {
            state.current = (index + 1) % self.config.endpoints.len();
            state.connection = None;
        }
    }

    /// Dials the endpoint at `index`; if it has not answered within
    /// [`HEDGE_AFTER`], dials the others too and takes the first that
    /// answers. When none does, the error is `index`'s.
    async fn dial_hedged(&self, index: usize) -> Result<Connection, Error> {
        use futures_util::stream::{FuturesUnordered, StreamExt as _};
        let mut dials = FuturesUnordered::new();
        dials.push(self.dial(index));
        if let Ok(Some(result)) = tokio::time::timeout(HEDGE_AFTER, dials.next()).await {
            return result;
        }
        let count = self.config.endpoints.len();
        for other in (1..count).map(|k| (index + k) % count) {
            dials.push(self.dial(other));
        }
        let mut first_error = None;
        while let Some(result) = dials.next().await {
            match result {
                Ok(connection) => return Ok(connection),
                // Refused credentials are final, wherever they came from.
                Err(e @ Error::Status { .. }) => return Err(e),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.unwrap_or_else(|| {
            Error::Protocol(format!("{}: no answer", self.config.endpoints[index]))
        }))
    }

    async fn dial(&self, index: usize) -> Result<Connection, Error> {
        let endpoint = &self.config.endpoints[index];
        let tls = if self.config.tls.secures(endpoint) {
            // Built in `new` whenever an endpoint is a TLS one.
            let Some(tls) = &self.tls else {
                return Err(Error::Tls(format!("{endpoint}: no TLS configuration")));
            };
            Some(tls)
        } else {
            None
        };
        let (uri, socket) = dial_target(endpoint, tls.is_some())?;
        let url = match socket.is_unix() {
            true => endpoint.clone(),
            false => uri.clone(),
        };
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| Error::BadEndpoint(format!("{url}: {e}")))?
            .connect_timeout(self.config.dial_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(self.config.keepalive_time)
            .keep_alive_timeout(self.config.keepalive_timeout);
        let channel =
            tokio::time::timeout(self.config.dial_timeout, connect(&endpoint, tls, socket))
                .await
                .map_err(|_| Error::Protocol(format!("{url}: dial timeout")))?
                .map_err(|e| dial_error(&url, &e))?;
        let token = Token::default();
        let answered = async {
            if self.config.credentials.is_some() {
                self.authenticate(&channel, &token).await
            } else {
                probe(&channel, &url).await
            }
        };
        tokio::time::timeout(self.config.dial_timeout, answered)
            .await
            .map_err(|_| Error::Protocol(format!("{url}: no answer within the dial timeout")))??;
        Ok(Connection {
            index,
            channel,
            token,
        })
    }

    /// Asks for the password if the credentials lack one and it has not
    /// been asked yet; true when it asked.
    async fn ask_password(&self) -> Result<bool, Error> {
        let needed = self
            .config
            .credentials
            .as_ref()
            .is_some_and(|c| c.password.is_none());
        if !needed || self.asked_password.initialized() {
            return Ok(false);
        }
        self.asked_password
            .get_or_try_init(|| async {
                crate::prompt::password("Password: ")
                    .await
                    .map_err(Error::Protocol)
            })
            .await?;
        Ok(true)
    }

    /// Exchanges the credentials, if any, for a token on `channel` and
    /// hands it to `token`. Without credentials, or when the cluster has
    /// auth off, calls go without a token.
    async fn authenticate(&self, channel: &Channel, token: &Token) -> Result<(), Error> {
        let Some(credentials) = &self.config.credentials else {
            return Ok(());
        };
        let mut auth = AuthClient::new(channel.clone());
        let answer = auth
            .authenticate(AuthenticateRequest {
                name: credentials.user.clone(),
                password: credentials
                    .password
                    .clone()
                    .or_else(|| self.asked_password.get().cloned())
                    .unwrap_or_default(),
            })
            .await;
        let value = match answer {
            Ok(response) => Some(
                response
                    .into_inner()
                    .token
                    .parse()
                    .map_err(|_| Error::Protocol("server sent an unusable token".into()))?,
            ),
            // etcd's client carries on without a token when auth is off.
            Err(status) if status.message() == AUTH_NOT_ENABLED => None,
            Err(status) if status.code() == tonic::Code::Unavailable => {
                return Err(Error::Protocol(status.message().to_owned()))
            }
            Err(status) => {
                let refusal = Error::from_status(&status);
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.refusal = Some(refusal.clone());
                return Err(refusal);
            }
        };
        token.set(value);
        Ok(())
    }

    /// The token the credentials get on `channel` (asking for the password
    /// first when it was not given), for callers that make their own
    /// channels, as the benchmark does; `None` without credentials or
    /// with auth off.
    pub async fn token_for(
        &self,
        channel: &Channel,
    ) -> Result<Option<MetadataValue<Ascii>>, Error> {
        self.ask_password().await?;
        let token = Token::default();
        self.authenticate(channel, &token).await?;
        let value = token.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(value)
    }

    /// The server's answer when it refused the credentials (a wrong
    /// password, an unknown user), if it has: etcdctl reports that as a
    /// failure to connect, whatever the command.
    pub fn credentials_refused(&self) -> Option<Error> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.refusal.clone()
    }

    /// True when the server refused `status`'s call for a token it no
    /// longer knows (it restarted, or the token expired) and credentials
    /// can get a new one.
    pub fn token_refused(&self, status: &tonic::Status) -> bool {
        self.config.credentials.is_some()
            && status.code() == tonic::Code::Unauthenticated
            && status.message() == INVALID_AUTH_TOKEN
    }

    /// Authenticates again on the connection to the endpoint at `index`, so
    /// its next calls carry a fresh token. Nothing to do when that
    /// connection is gone: the next one authenticates as it is made.
    pub async fn refresh_token(&self, index: usize) -> Result<(), Error> {
        let connection = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.connection.clone().filter(|c| c.index == index)
        };
        match connection {
            Some(c) => self.authenticate(&c.channel, &c.token).await,
            None => Ok(()),
        }
    }

    /// Runs one unary call with failover: `call` gets a transport and sends
    /// the request. `repeatable` says whether the request may be sent again
    /// after a failure that might have reached the server. A call refused
    /// for a stale token is sent once more after authenticating again, as
    /// etcd's client does (the server refused it unread, so even a write
    /// is safe to resend).
    pub async fn unary<T, F, Fut>(&self, repeatable: bool, mut call: F) -> Result<T, Error>
    where
        F: FnMut(Transport) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.ask_password().await?;
        let deadline = Instant::now() + self.config.command_timeout;
        let mut last = None;
        let mut failures_in_round = 0;
        let mut token_refreshed = false;
        loop {
            let (index, transport) = match self.transport(deadline).await {
                Ok(t) => t,
                Err(Error::DeadlineExceeded { last: dial }) => {
                    return Err(Error::DeadlineExceeded {
                        last: dial.or(last),
                    })
                }
                Err(e) => return Err(e),
            };
            let status = match tokio::time::timeout_at(deadline, call(transport)).await {
                Err(_) => return Err(Error::DeadlineExceeded { last }),
                Ok(Ok(response)) => return Ok(response.into_inner()),
                Ok(Err(status)) => status,
            };
            if !token_refreshed && self.token_refused(&status) {
                token_refreshed = true;
                self.refresh_token(index).await?;
                continue;
            }
            if !endpoint_failed(&status) {
                return Err(Error::from_status(&status));
            }
            self.failed(index);
            if !repeatable && !never_sent(&status) {
                return Err(Error::from_status(&status));
            }
            last = Some(status.message().to_owned());
            failures_in_round += 1;
            if failures_in_round >= self.config.endpoints.len() {
                failures_in_round = 0;
                tokio::time::sleep_until(deadline.min(Instant::now() + ROUND_BACKOFF)).await;
            }
        }
    }
}

/// Whether the server behind `channel` answers: a call of
/// [`READINESS_PROBE`], which it answers `Unimplemented` without doing
/// anything.
async fn probe(channel: &Channel, url: &str) -> Result<(), Error> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| Error::Protocol(format!("{url}: {e}")))?;
    let path = http::uri::PathAndQuery::from_static(READINESS_PROBE);
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    match grpc.unary(tonic::Request::new(()), path, codec).await {
        Ok(_) => Ok(()),
        Err(status) if status.code() == tonic::Code::Unimplemented => Ok(()),
        Err(status) => Err(Error::Protocol(format!("{url}: {}", status.message()))),
    }
}

/// The error for a failed dial of `url`: [`Error::Tls`] when TLS failed it
/// (a certificate that does not verify, an alert from the server), else
/// [`Error::Protocol`] with the whole chain of causes.
pub fn dial_error(url: &str, error: &tonic::transport::Error) -> Error {
    match tls_failure(error) {
        Some(cause) => Error::Tls(format!("{url}: tls: {cause}")),
        None => Error::Protocol(format!("{url}: {}", error_chain(error))),
    }
}

/// The TLS failure (a certificate that does not verify, an alert from the
/// server) behind a failed dial, if that is what failed it.
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = Some(error);
    while let Some(error) = source {
        if let Some(cause) = error
            .downcast_ref::<std::io::Error>()
            .and_then(oxetcd_tls::tls_cause)
        {
            return Some(cause.to_string());
        }
        source = error.source();
    }
    None
}

/// True when `status` says the endpoint, not the request, failed: the
/// server answered `Unavailable`, or the client's transport broke. tonic
/// reports a dropped connection as `Unknown: transport error` or, when the
/// connection's worker is gone, `Cancelled: operation was canceled`; the
/// statuses it makes itself carry their cause as a source, ones decoded
/// from a server never do.
pub fn endpoint_failed(status: &tonic::Status) -> bool {
    use tonic::Code;
    let client_made = std::error::Error::source(status).is_some();
    status.code() == Code::Unavailable
        || (client_made && matches!(status.code(), Code::Unknown | Code::Cancelled))
}

/// True when `status` was made by the client because no connection could
/// be opened, so the request cannot have reached any server and is safe to
/// send elsewhere even if it is a write.
fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        if error.to_string().contains("tcp connect error") {
            return true;
        }
        source = error.source();
    }
    false
}

/// An error with its causes, `a: b: c`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_endpoints_use_tls() {
        let mut tls = Tls::default();
        assert!(tls.secures("https://a:1"));
        assert!(tls.secures("HTTPS://a:1"));
        assert!(!tls.secures("http://a:1"));
        assert!(!tls.secures("a:1"));
        tls.insecure_skip_verify = true;
        assert!(!tls.secures("a:1"), "skipping verification asks for no TLS");
        tls.insecure_transport = false;
        assert!(tls.secures("a:1"));
        let tls = Tls {
            ca_cert: Some("ca.pem".into()),
            ..Tls::default()
        };
        assert!(tls.secures("a:1"));
        assert!(!tls.secures("http://a:1"), "http:// stays plaintext");
        assert_eq!(endpoint_url("a:1", true), "https://a:1");
        assert_eq!(endpoint_url("a:1", false), "http://a:1");
        assert_eq!(endpoint_url("http://a:1", true), "http://a:1");
        assert!(!tls.secures("unix:///run/a.sock"));
        assert!(tls.secures("unixs:///run/a.sock"));
        assert!(tls.secures("UNIXS:a.sock"));
        assert!(!tls.secures("unix:"));
        let (uri, socket) = dial_target("unixs:///run/a.sock", true).unwrap();
        assert_eq!(uri, "https://localhost");
        assert!(socket.is_unix());
        assert!(!dial_target("a:1", false).unwrap().1.is_unix());
        assert!(dial_target("unix://", false).is_err());
    }

    #[test]
    fn tls_files_are_read_when_the_client_is_made() {
        let mut config = Config::new(vec!["http://127.0.0.1:2379".into()]);
        config.tls.ca_cert = Some("/nonexistent/ca.pem".into());
        let error = Client::new(config).err().expect("refused");
        assert!(matches!(error, Error::Tls(_)), "{error}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "{error}");
        // Plaintext endpoints need no TLS configuration.
        let mut config = Config::new(vec!["127.0.0.1:2379".into()]);
        config.tls.insecure_skip_verify = true;
        let client = Client::new(config).expect("client");
        assert!(client.tls.is_none());
        // An https:// endpoint with verification skipped needs no file.
        let mut config = Config::new(vec!["https://127.0.0.1:2379".into()]);
        config.tls.insecure_skip_verify = true;
        let client = Client::new(config).expect("client");
        assert!(client.tls.is_some());
        let one = client.for_endpoint("https://127.0.0.1:1").expect("one");
        assert!(Arc::ptr_eq(
            one.tls.as_ref().expect("tls"),
            client.tls.as_ref().expect("tls")
        ));
    }

    #[test]
    fn failures_move_round_robin() {
        let config = Config::new(vec!["a:1".into(), "b:2".into(), "c:3".into()]);
        let client = Client::new(config).expect("client");
        assert_eq!(client.current_endpoint(), "a:1");
        client.failed(0);
        assert_eq!(client.current_endpoint(), "b:2");
        // A stale report about an endpoint no longer in use changes nothing.
        client.failed(0);
        assert_eq!(client.current_endpoint(), "b:2");
        client.failed(1);
        client.failed(2);
        assert_eq!(client.current_endpoint(), "a:1");
    }

    #[tokio::test]
    async fn a_dead_cluster_ends_at_the_command_timeout() {
        let mut config = Config::new(vec!["127.0.0.1:1".into()]);
        config.command_timeout = Duration::from_millis(300);
        let client = Client::new(config).expect("client");
        let started = std::time::Instant::now();
        let error = client
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .expect_err("nothing listens on port 1");
        assert_eq!(error.to_string(), "context deadline exceeded");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
