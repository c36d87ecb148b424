//! The security matrix: every RPC that auth guards, called with every kind
//! of credential (none, a garbage token, a token left unused past the
//! token TTL, the token of a user deleted after it authenticated, and the
//! tokens of users granted read, write or a prefix, and root), gives the
//! same outcome on oxetcd as on Debian's etcd — the same gRPC code and
//! message when refused, a success when allowed. The same code drives both
//! servers, so the comparison is exact; a mismatch prints the whole table
//! of differences (`--nocapture` prints every cell). Where oxetcd answers
//! unlike etcd 3.4 — only `AuthStatus`, which 3.4 lacks — the cell is in
//! [`known_differences`] with oxetcd's answer, checked too. At the end no
//! plain-text password may be in oxetcd's data directory or in its log.
//!
//! A second, smaller matrix runs over TLS with `--client-cert-auth`: a
//! client presenting a certificate whose common name is a user acts as
//! that user when it sends no token, a token wins over the name, and a
//! name that is no user gets etcd's refusals — a few RPCs, each with the
//! certificates of a reader, of root and of a stranger, and with a
//! certificate and another user's token, compared with etcd the same way.

use std::path::Path;
use std::time::{Duration, Instant};

use oxetcd_ctl::connector::{Socket, TlsConnector};
use oxetcd_proto::authpb::{permission, Permission};
use oxetcd_proto::etcdserverpb::auth_client::AuthClient;
use oxetcd_proto::etcdserverpb::cluster_client::ClusterClient;
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use oxetcd_proto::etcdserverpb::watch_client::WatchClient;
use oxetcd_proto::etcdserverpb::{
    compare, request_op, watch_request, AuthEnableRequest, AuthRoleAddRequest,
    AuthRoleGrantPermissionRequest, AuthStatusRequest, AuthUserAddRequest, AuthUserDeleteRequest,
    AuthUserGrantRoleRequest, AuthUserListRequest, AuthenticateRequest, Compare,
    DeleteRangeRequest, HashKvRequest, LeaseGrantRequest, LeaseRevokeRequest, MemberListRequest,
    PutRequest, RangeRequest, RequestOp, SnapshotRequest, StatusRequest, TxnRequest,
    WatchCreateRequest, WatchRequest,
};
use oxetcd_tests::pki::{path_arg, Pki};
use oxetcd_tests::{Launch, Ports, Server, ServerKind};
use oxetcd_tls::test_pki::{NamedClient, TestPkiIn};
use oxetcd_tls::ClientSettings;
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// Longest any one call (or the first answer of a stream) may take; a hung
/// server fails its cell, not the whole run.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `--auth-token-ttl` of both servers: a simple token lives this long
/// after its last use. Each token of the matrix is used once per row, and
/// a row takes well under this.
const TOKEN_TTL_S: u64 = 5;

/// How long the expired token is left unused: past its TTL, and past the
/// second in which etcd sweeps expired tokens.
const TOKEN_EXPIRY_WAIT: Duration = Duration::from_secs(TOKEN_TTL_S + 2);

/// The users with passwords, and the role each is granted. `doomed` is
/// deleted after it authenticates. Every password is unique, so that a
/// search of the data directory and the log finds nothing else.
const USERS: [(&str, &str, &str); 5] = [
    ("root", "mx-root-pw-91c4d", "root"),
    ("reader", "mx-reader-pw-27ab3", "reader"),
    ("writer", "mx-writer-pw-5e0f8", "writer"),
    ("prefixer", "mx-prefixer-pw-c31d7", "prefixer"),
    ("doomed", "mx-doomed-pw-4b9e2", "reader"),
];

/// A wrong password, used only in a refused `Authenticate`.
const WRONG_PASSWORD: &str = "mx-wrong-pw-0d6a1";

/// A cell where oxetcd answers unlike Debian's etcd 3.4: what oxetcd
/// answers there, and why. Each is checked both ways: oxetcd must still
/// answer as listed, and a cell that comes to agree with etcd fails the
/// test until its entry is removed, so the list stays true.
struct KnownDifference {
    rpc: &'static str,
    credential: &'static str,
    oxetcd: &'static str,
    why: &'static str,
}

/// etcd 3.5's `AuthStatus`, which oxetcd serves and etcd 3.4 does not
/// (`Unimplemented`); a token is checked as for any request that goes
/// through consensus in 3.5, and no permission is needed.
const AUTH_STATUS_WHY: &str = "etcd 3.5's RPC; Debian's etcd 3.4 answers Unimplemented";

const INVALID_TOKEN: &str = "ERR Unauthenticated \"etcdserver: invalid auth token\"";

/// Every known difference, cell by cell.
fn known_differences() -> Vec<KnownDifference> {
    let mut known = Vec::new();
    let mut add = |rpc, credential, oxetcd, why| {
        known.push(KnownDifference {
            rpc,
            credential,
            oxetcd,
            why,
        });
    };
    for (credential, oxetcd) in [
        ("no token", "ok"),
        ("garbage token", INVALID_TOKEN),
        ("expired token", INVALID_TOKEN),
        ("deleted user", INVALID_TOKEN),
        ("reader", "ok"),
        ("writer", "ok"),
        ("prefixer", "ok"),
        ("root", "ok"),
    ] {
        add(AUTH_STATUS, credential, oxetcd, AUTH_STATUS_WHY);
    }
    known
}

/// The credentials a call is made with.
const CREDENTIALS: [&str; 8] = [
    "no token",
    "garbage token",
    "expired token",
    "deleted user",
    "reader",
    "writer",
    "prefixer",
    "root",
];

/// The calls of the matrix, in the order they are made.
const RPCS: [&str; 19] = [
    "Range a",
    "Range a serializable",
    "Range p/ prefix",
    "Put a",
    "Put a prev_kv",
    "Put p/x",
    "DeleteRange a",
    "Txn cmp a, put a",
    "Txn cmp a, put b",
    "Txn cmp p/x, put p/y",
    "Watch a",
    "Watch p/ prefix",
    "LeaseGrant",
    "LeaseRevoke (holds a)",
    "UserList",
    "MemberList",
    "Status",
    "HashKV",
    "Snapshot",
];

/// One more column, where etcd 3.4 has no such RPC: oxetcd's answers are
/// in [`known_differences`].
const AUTH_STATUS: &str = "AuthStatus";

/// What a call came to: `ok`, `ERR <code> <message>`, or for a watch
/// what its first response says.
type Outcome = String;

/// The gRPC clients of one server, on one channel.
struct Clients {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    lease: LeaseClient<Channel>,
    cluster: ClusterClient<Channel>,
    maintenance: MaintenanceClient<Channel>,
    auth: AuthClient<Channel>,
}

/// `message` with `token` (if any) in etcd's `token` metadata.
fn request<T>(token: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "token",
            MetadataValue::try_from(token).expect("ASCII token"),
        );
    }
    request
}

/// `ok`, or the status's code and message.
fn outcome<T>(answer: Result<T, tonic::Status>) -> Outcome {
    match answer {
        Ok(_) => "ok".to_owned(),
        Err(status) => format!("ERR {:?} {:?}", status.code(), status.message()),
    }
}

/// `call`, failing with `DeadlineExceeded` after [`CALL_TIMEOUT`].
async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(
                "client: no answer in time",
            ))
        })
}

fn put(key: &str, lease: i64, prev_kv: bool) -> PutRequest {
    PutRequest {
        key: key.as_bytes().to_vec(),
        value: b"v".to_vec(),
        lease,
        prev_kv,
        ..Default::default()
    }
}

/// A transaction: if `compared` is at version 1 or above (or not), put
/// `written`.
fn txn(compared: &str, written: &str) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Greater as i32,
            target: compare::CompareTarget::Version as i32,
            key: compared.as_bytes().to_vec(),
            target_union: Some(compare::TargetUnion::Version(0)),
            ..Default::default()
        }],
        success: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(put(written, 0, false))),
        }],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestPut(put(written, 0, false))),
        }],
    }
}

impl Clients {
    async fn connect(endpoint: &str) -> Self {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connects");
        Self::on(channel)
    }

    /// Clients over TLS to `url`, verifying the server with `ca` and
    /// presenting `client`'s certificate.
    async fn connect_tls(url: &str, ca: &Path, client: &NamedClient) -> Self {
        let config = ClientSettings {
            ca_file: Some(ca.to_path_buf()),
            cert_file: Some(client.cert.clone()),
            key_file: Some(client.key.clone()),
            skip_verify: false,
        }
        .build()
        .expect("client TLS configuration");
        let channel = Endpoint::from_shared(url.to_owned())
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(2))
            .connect_with_connector(TlsConnector::new(config, Socket::tcp()))
            .await
            .expect("connects over TLS");
        Self::on(channel)
    }

    fn on(channel: Channel) -> Self {
        Self {
            kv: KvClient::new(channel.clone()),
            watch: WatchClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            cluster: ClusterClient::new(channel.clone()),
            maintenance: MaintenanceClient::new(channel.clone()),
            auth: AuthClient::new(channel),
        }
    }

    /// `Authenticate`: the token, or the outcome of the refusal.
    async fn authenticate(&mut self, name: &str, password: &str) -> Result<String, Outcome> {
        bounded(self.auth.authenticate(AuthenticateRequest {
            name: name.to_owned(),
            password: password.to_owned(),
        }))
        .await
        .map(|r| r.into_inner().token)
        .map_err(|status| outcome::<()>(Err(status)))
    }

    /// Users, roles and grants of the matrix, then auth enabled.
    async fn set_up(&mut self) {
        for (role, key, range_end, perm) in [
            ("root", "", "", None),
            ("reader", "a", "", Some(permission::Type::Read)),
            ("writer", "a", "", Some(permission::Type::Write)),
            ("prefixer", "p/", "p0", Some(permission::Type::Readwrite)),
        ] {
            let a = &mut self.auth;
            bounded(a.role_add(AuthRoleAddRequest { name: role.into() }))
                .await
                .expect("role added");
            if let Some(perm) = perm {
                bounded(a.role_grant_permission(AuthRoleGrantPermissionRequest {
                    name: role.into(),
                    perm: Some(Permission {
                        perm_type: perm as i32,
                        key: key.into(),
                        range_end: range_end.into(),
                    }),
                }))
                .await
                .expect("permission granted");
            }
        }
        for (name, password, role) in USERS {
            bounded(self.auth.user_add(AuthUserAddRequest {
                name: name.into(),
                password: password.into(),
                ..Default::default()
            }))
            .await
            .expect("user added");
            bounded(self.auth.user_grant_role(AuthUserGrantRoleRequest {
                user: name.into(),
                role: role.into(),
            }))
            .await
            .expect("role granted");
        }
        bounded(self.auth.auth_enable(AuthEnableRequest {}))
            .await
            .expect("auth enabled");
    }

    /// The first response of a watch of `key` (to `range_end`): whether it
    /// was created, canceled and why, or the stream's error.
    async fn watch(&mut self, token: Option<&str>, key: &str, range_end: &str) -> Outcome {
        let (sender, receiver) = mpsc::unbounded_channel();
        sender
            .send(WatchRequest {
                request_union: Some(watch_request::RequestUnion::CreateRequest(
                    WatchCreateRequest {
                        key: key.into(),
                        range_end: range_end.into(),
                        ..Default::default()
                    },
                )),
            })
            .expect("queued");
        let stream = UnboundedStream(receiver);
        let first = bounded(async {
            let mut responses = self.watch.watch(request(token, stream)).await?.into_inner();
            responses.message().await
        })
        .await;
        drop(sender);
        match first {
            Ok(Some(r)) => format!(
                "created={} canceled={} reason={:?}",
                r.created, r.canceled, r.cancel_reason
            ),
            Ok(None) => "stream ended".to_owned(),
            Err(status) => outcome::<()>(Err(status)),
        }
    }

    /// The first message of a snapshot, or the refusal.
    async fn snapshot(&mut self, token: Option<&str>) -> Outcome {
        outcome(
            bounded(async {
                let mut stream = self
                    .maintenance
                    .snapshot(request(token, SnapshotRequest {}))
                    .await?
                    .into_inner();
                stream.message().await
            })
            .await,
        )
    }

    /// Puts `a` and `p/x` as root, so every cell starts from them.
    async fn reset(&mut self, root: &str) {
        for key in ["a", "p/x"] {
            bounded(self.kv.put(request(Some(root), put(key, 0, false))))
                .await
                .expect("root puts");
        }
    }

    /// `rpc` with `token`; `root` sets up what the call needs.
    /// Revokes lease `id` with root's token.
    async fn revoke_as_root(&mut self, id: i64, root: &str) {
        bounded(
            self.lease
                .lease_revoke(request(Some(root), LeaseRevokeRequest { id })),
        )
        .await
        .expect("root revokes");
    }

    async fn call(&mut self, rpc: &str, token: Option<&str>, root: &str) -> Outcome {
        self.reset(root).await;
        let range = |key: &str, range_end: &str| RangeRequest {
            key: key.into(),
            range_end: range_end.into(),
            ..Default::default()
        };
        match rpc {
            "Range a" => outcome(bounded(self.kv.range(request(token, range("a", "")))).await),
            "Range a serializable" => {
                let serializable = RangeRequest {
                    serializable: true,
                    ..range("a", "")
                };
                outcome(bounded(self.kv.range(request(token, serializable))).await)
            }
            "Range p/ prefix" => {
                outcome(bounded(self.kv.range(request(token, range("p/", "p0")))).await)
            }
            "Put a" => outcome(bounded(self.kv.put(request(token, put("a", 0, false)))).await),
            "Put a prev_kv" => {
                outcome(bounded(self.kv.put(request(token, put("a", 0, true)))).await)
            }
            "Put p/x" => outcome(bounded(self.kv.put(request(token, put("p/x", 0, false)))).await),
            "DeleteRange a" => outcome(
                bounded(self.kv.delete_range(request(
                    token,
                    DeleteRangeRequest {
                        key: b"a".to_vec(),
                        ..Default::default()
                    },
                )))
                .await,
            ),
            "Txn cmp a, put a" => {
                outcome(bounded(self.kv.txn(request(token, txn("a", "a")))).await)
            }
            "Txn cmp a, put b" => {
                outcome(bounded(self.kv.txn(request(token, txn("a", "b")))).await)
            }
            "Txn cmp p/x, put p/y" => {
                outcome(bounded(self.kv.txn(request(token, txn("p/x", "p/y")))).await)
            }
            "Watch a" => self.watch(token, "a", "").await,
            "Watch p/ prefix" => self.watch(token, "p/", "p0").await,
            "LeaseGrant" => {
                let answer = bounded(
                    self.lease
                        .lease_grant(request(token, LeaseGrantRequest { ttl: 60, id: 0 })),
                )
                .await;
                if let Ok(granted) = &answer {
                    // Not left to expire during the run.
                    self.revoke_as_root(granted.get_ref().id, root).await;
                }
                outcome(answer)
            }
            "LeaseRevoke (holds a)" => {
                let id = bounded(
                    self.lease
                        .lease_grant(request(Some(root), LeaseGrantRequest { ttl: 60, id: 0 })),
                )
                .await
                .expect("root grants")
                .into_inner()
                .id;
                bounded(self.kv.put(request(Some(root), put("a", id, false))))
                    .await
                    .expect("root attaches a");
                let answer = bounded(
                    self.lease
                        .lease_revoke(request(token, LeaseRevokeRequest { id })),
                )
                .await;
                if answer.is_err() {
                    self.revoke_as_root(id, root).await;
                }
                outcome(answer)
            }
            "UserList" => {
                outcome(bounded(self.auth.user_list(request(token, AuthUserListRequest {}))).await)
            }
            "MemberList" => outcome(
                bounded(
                    self.cluster
                        .member_list(request(token, MemberListRequest::default())),
                )
                .await,
            ),
            "Status" => {
                outcome(bounded(self.maintenance.status(request(token, StatusRequest {}))).await)
            }
            "HashKV" => outcome(
                bounded(
                    self.maintenance
                        .hash_kv(request(token, HashKvRequest { revision: 0 })),
                )
                .await,
            ),
            "Snapshot" => self.snapshot(token).await,
            AUTH_STATUS => {
                outcome(bounded(self.auth.auth_status(request(token, AuthStatusRequest {}))).await)
            }
            other => panic!("no such RPC in the matrix: {other}"),
        }
    }
}

/// A channel's receiving end as the request stream of a watch; the
/// sender is kept until the first response, so the stream stays open.
struct UnboundedStream(mpsc::UnboundedReceiver<WatchRequest>);

impl tonic::codegen::tokio_stream::Stream for UnboundedStream {
    type Item = WatchRequest;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<WatchRequest>> {
        self.0.poll_recv(cx)
    }
}

/// Everything one server answered.
struct Answers {
    /// `Authenticate` cases by name.
    authenticate: Vec<(String, Outcome)>,
    /// `(rpc, credential) → outcome`, in [`RPCS`] × [`CREDENTIALS`] order,
    /// then [`AUTH_STATUS`] × [`CREDENTIALS`].
    cells: Vec<((String, String), Outcome)>,
}

/// The password of `user`, one of [`USERS`].
fn password(user: &str) -> &'static str {
    USERS
        .iter()
        .find(|(name, _, _)| *name == user)
        .map(|(_, password, _)| *password)
        .expect("a user of the matrix")
}

/// Sets `server` up and runs the whole matrix against it.
fn answers(server: &Server) -> Answers {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut clients = Clients::connect(server.endpoint()).await;
        clients.set_up().await;
        let mut authenticate = Vec::new();
        // A reader's token, left unused until it expires; every other
        // token is taken after.
        let expired = clients
            .authenticate("reader", password("reader"))
            .await
            .expect("reader authenticates");
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        let doomed = clients
            .authenticate("doomed", password("doomed"))
            .await
            .expect("doomed authenticates");
        let first_root = clients
            .authenticate("root", password("root"))
            .await
            .expect("root authenticates");
        bounded(clients.auth.user_delete(request(
            Some(&first_root),
            AuthUserDeleteRequest {
                name: "doomed".into(),
            },
        )))
        .await
        .expect("doomed deleted");
        // Tokens taken after the last change of users and roles: a token
        // from before it is refused as of an old auth revision.
        let mut tokens = std::collections::BTreeMap::new();
        for user in ["reader", "writer", "prefixer", "root"] {
            let answer = clients.authenticate(user, password(user)).await;
            let said = answer
                .clone()
                .map(|_| "ok".to_owned())
                .unwrap_or_else(|e| e);
            authenticate.push((format!("{user}, right password"), said));
            tokens.insert(user, answer.expect("authenticates"));
        }
        for (case, name, password) in [
            ("root, wrong password", "root", WRONG_PASSWORD),
            ("reader, wrong password", "reader", WRONG_PASSWORD),
            ("reader, empty password", "reader", ""),
            ("deleted user, its password", "doomed", password("doomed")),
            ("unknown user", "nobody", WRONG_PASSWORD),
        ] {
            let said = match clients.authenticate(name, password).await {
                Ok(_) => "ok".to_owned(),
                Err(refused) => refused,
            };
            authenticate.push((case.to_owned(), said));
        }
        let root = tokens["root"].clone();
        let mut cells = Vec::new();
        for rpc in RPCS.iter().chain([&AUTH_STATUS]) {
            for credential in CREDENTIALS {
                let token = match credential {
                    "no token" => None,
                    "garbage token" => Some("garbage.token.42".to_owned()),
                    "expired token" => Some(expired.clone()),
                    "deleted user" => Some(doomed.clone()),
                    user => Some(tokens[user].clone()),
                };
                let got = clients.call(rpc, token.as_deref(), &root).await;
                cells.push(((rpc.to_string(), credential.to_owned()), got));
            }
        }
        Answers {
            authenticate,
            cells,
        }
    })
}

/// Every file below `dir` holding `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    // Bounded: a data dir holds a handful of directories.
    for _ in 0..1_000 {
        let Some(dir) = stack.pop() else { break };
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .map(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
                .unwrap_or(false)
            {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// Cell by cell, where `got` (from `kind`) differs from etcd's
/// `expected`, or a known difference no longer holds; every cell is
/// printed.
fn differences(
    kind: ServerKind,
    expected: &[((String, String), Outcome)],
    got: &[((String, String), Outcome)],
    known: &[KnownDifference],
) -> String {
    let mut table = String::new();
    assert_eq!(expected.len(), got.len(), "{}: cells missing", kind.name());
    for ((key, want), (_, have)) in expected.iter().zip(got) {
        let (rpc, credential) = key;
        println!(
            "{:<12} {rpc:<22} {credential:<14} etcd: {want:<60} {}: {have}",
            kind.name(),
            kind.name()
        );
        if let Some(known) = known
            .iter()
            .find(|k| k.rpc == rpc && k.credential == credential)
        {
            if want == have || have != known.oxetcd {
                table += &format!(
                    "  {rpc:<22} {credential:<14} known difference no longer holds \
                     ({}): etcd: {want}, {}: {have}, listed: {}\n",
                    known.why,
                    kind.name(),
                    known.oxetcd
                );
            }
            continue;
        }
        if want != have {
            table += &format!(
                "  {rpc:<22} {credential:<14} etcd: {want}\n  {:<37} {}: {have}\n",
                "",
                kind.name()
            );
        }
    }
    table
}

#[test]
fn every_rpc_with_every_credential_as_etcd_answers() {
    let ttl = TOKEN_TTL_S.to_string();
    let token_ttl = ["--auth-token-ttl", ttl.as_str()];
    let started = Instant::now();
    let etcd = Server::start_flags(ServerKind::Etcd, &token_ttl).unwrap_or_else(|e| panic!("{e}"));
    let expected = answers(&etcd);
    drop(etcd);
    // The reference itself: its refusals are there, as etcd words them.
    let cell = |answers: &Answers, rpc: &str, credential: &str| {
        answers
            .cells
            .iter()
            .find(|((r, c), _)| r == rpc && c == credential)
            .map(|(_, o)| o.clone())
            .expect("a cell")
    };
    assert_eq!(cell(&expected, "Range a", "reader"), "ok");
    assert!(cell(&expected, "Range a", "writer").contains("permission denied"));
    assert!(cell(&expected, "Range a", "garbage token").contains("invalid auth token"));
    assert!(cell(&expected, "HashKV", "reader").contains("permission denied"));

    let known = known_differences();
    let mut failures = Vec::new();
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let server = Server::start_flags(kind, &token_ttl).unwrap_or_else(|e| panic!("{e}"));
        let got = answers(&server);
        let mut table = String::new();
        for ((case, want), (_, have)) in expected.authenticate.iter().zip(&got.authenticate) {
            println!(
                "{:<12} Authenticate {case:<28} etcd: {want:<60} {}: {have}",
                kind.name(),
                kind.name()
            );
            if want != have {
                table += &format!(
                    "  Authenticate {case:<28} etcd: {want}\n  {:<41} {}: {have}\n",
                    "",
                    kind.name()
                );
            }
        }
        table += &differences(kind, &expected.cells, &got.cells, &known);
        if !table.is_empty() {
            failures.push(format!("{} differs from etcd:\n{table}", kind.name()));
        }
        let log = server.log();
        for (_, password, _) in USERS.iter().chain([&("", WRONG_PASSWORD, "")]) {
            let leaks = files_holding(server.data_dir(), password.as_bytes());
            assert!(
                leaks.is_empty(),
                "{}: a password in plain text in {leaks:?}",
                kind.name()
            );
            assert!(
                !log.contains(password),
                "{}: a password in plain text in the log",
                kind.name()
            );
        }
    }
    println!("auth matrix ran in {:?}", started.elapsed());
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

// ---------------------------------------------------------------------
// Client certificates (`--client-cert-auth`).

/// The common names of the client certificates: two users, and a name no
/// user has.
const CERT_NAMES: [&str; 3] = ["reader", "root", "stranger"];

/// The credentials of the certificate matrix: a label, the common name of
/// the certificate presented, and whose token is sent too (if anyone's).
const CERT_CREDENTIALS: [(&str, &str, Option<&str>); 5] = [
    ("CN reader", "reader", None),
    ("CN root", "root", None),
    ("CN stranger", "stranger", None),
    ("CN reader+writer tk", "reader", Some("writer")),
    ("CN root+reader tk", "root", Some("reader")),
];

/// The calls of the certificate matrix: reads and writes of a key and a
/// prefix, a txn, a watch, an admin read and admin maintenance.
const CERT_RPCS: [&str; 9] = [
    "Range a",
    "Range a serializable",
    "Range p/ prefix",
    "Put a",
    "Txn cmp a, put a",
    "Watch a",
    "UserList",
    "MemberList",
    "HashKV",
];

/// Longest a TLS server may take to say it serves clients (its port
/// accepts connections before its certificates are loaded).
const TLS_READY_DEADLINE: Duration = Duration::from_secs(20);

/// What etcd and oxetcd log once they serve clients.
const READY_LINE: &str = "enabled capabilities for version";

/// Starts `kind` on an `https://` URL with `pki`'s server certificate,
/// client certificates verified against its CA (`--client-cert-auth`);
/// returns the server and its URL.
fn start_tls(kind: ServerKind, pki: &Pki, data: &Path) -> (Server, String) {
    let url = Ports::Kernel.https_url();
    let flags = [
        path_arg("cert-file", &pki.server_cert),
        path_arg("key-file", &pki.server_key),
        path_arg("trusted-ca-file", &pki.ca),
        "--client-cert-auth".to_owned(),
        format!("--auth-token-ttl={TOKEN_TTL_S}"),
    ];
    let server = Launch::new(
        kind,
        "default",
        &data.join(kind.name()),
        vec![url.clone()],
        Ports::Kernel.http_url(),
    )
    .flags(&flags)
    .start()
    .unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
    let started = Instant::now();
    while !server.log().contains(READY_LINE) {
        assert!(
            started.elapsed() < TLS_READY_DEADLINE,
            "{} never logged {READY_LINE:?}\n{}",
            kind.name(),
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, url)
}

/// Sets the server at `url` up (the matrix's users and roles, auth on)
/// and runs the certificate matrix against it.
fn cert_answers(url: &str, pki: &Pki) -> Vec<((String, String), Outcome)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut by_name = std::collections::BTreeMap::new();
        for name in CERT_NAMES {
            let client = pki.named_client(name).expect("a certificate per name");
            by_name.insert(name, Clients::connect_tls(url, &pki.ca, client).await);
        }
        let setup = by_name.get_mut("root").expect("root's clients");
        setup.set_up().await;
        let mut tokens = std::collections::BTreeMap::new();
        for user in ["root", "reader", "writer"] {
            let token = setup
                .authenticate(user, password(user))
                .await
                .expect("authenticates");
            tokens.insert(user, token);
        }
        let root = tokens["root"].clone();
        let mut cells = Vec::new();
        for rpc in CERT_RPCS {
            for (label, name, token_of) in CERT_CREDENTIALS {
                let token = token_of.map(|user| tokens[user].clone());
                let clients = by_name.get_mut(name).expect("clients per name");
                let got = clients.call(rpc, token.as_deref(), &root).await;
                cells.push(((rpc.to_owned(), label.to_owned()), got));
            }
        }
        cells
    })
}

#[test]
fn client_certificate_names_as_etcd_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki: Pki =
        TestPkiIn::write_with_clients(tempfile::tempdir().expect("temp dir"), &CERT_NAMES)
            .expect("test PKI");
    let (etcd, url) = start_tls(ServerKind::Etcd, &pki, dir.path());
    let expected = cert_answers(&url, &pki);
    drop(etcd);
    // The reference itself: a name acts as its user, a token wins.
    let cell = |rpc: &str, credential: &str| {
        expected
            .iter()
            .find(|((r, c), _)| r == rpc && c == credential)
            .map(|(_, o)| o.clone())
            .expect("a cell")
    };
    assert_eq!(cell("Range a", "CN reader"), "ok");
    assert!(cell("Put a", "CN reader").contains("permission denied"));
    assert_eq!(cell("Put a", "CN reader+writer tk"), "ok");
    assert!(cell("Put a", "CN root+reader tk").contains("permission denied"));
    assert_eq!(cell("UserList", "CN root"), "ok");

    let mut failures = Vec::new();
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let (server, url) = start_tls(kind, &pki, dir.path());
        let got = cert_answers(&url, &pki);
        let table = differences(kind, &expected, &got, &[]);
        if !table.is_empty() {
            failures.push(format!(
                "{} differs from etcd:\n{table}\n--- log ---\n{}",
                kind.name(),
                server.log_tail()
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
