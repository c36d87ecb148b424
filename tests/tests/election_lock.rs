//! The Election and Lock services on both binaries, against Debian's etcd
//! 3.4: one sequence of calls — two lockers contending, a lease revoke
//! releasing a lock and an election, a whole Campaign / Observe / Proclaim
//! / Leader / Resign round, a lease expiring under a lock and an
//! election, cancelled waiters, a stale `LeaderKey`, an
//! unknown lease, and a user without permission on the prefix — is run on
//! each server and written down as a transcript (revisions, keys with
//! lease IDs as `L1`, `L2`… in grant order, error codes and messages). The
//! sequence asserts what must hold on any server as it goes (a waiter
//! waits, a cancelled waiter's key goes away); then oxetcd's transcript
//! must equal etcd's, line for line.

use std::future::Future;
use std::time::{Duration, Instant};

use oxetcd_proto::authpb::{permission, Permission};
use oxetcd_proto::etcdserverpb::auth_client::AuthClient;
use oxetcd_proto::etcdserverpb::kv_client::KvClient;
use oxetcd_proto::etcdserverpb::lease_client::LeaseClient;
use oxetcd_proto::etcdserverpb::{
    AuthEnableRequest, AuthRoleAddRequest, AuthRoleGrantPermissionRequest, AuthUserAddRequest,
    AuthUserGrantRoleRequest, AuthenticateRequest, LeaseGrantRequest, LeaseRevokeRequest,
    RangeRequest,
};
use oxetcd_proto::v3electionpb::election_client::ElectionClient;
use oxetcd_proto::v3electionpb::{
    CampaignRequest, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest, ResignRequest,
};
use oxetcd_proto::v3lockpb::lock_client::LockClient;
use oxetcd_proto::v3lockpb::{LockRequest, UnlockRequest};
use oxetcd_tests::{Server, ServerKind};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

/// Longest any one call may take (a waiter's call: once it is released).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a waiter is shown to keep waiting.
const STILL_WAITING: Duration = Duration::from_millis(300);

/// Longest a condition is polled for (a waiter queued, a key cleaned up).
const SETTLE_DEADLINE: Duration = Duration::from_secs(10);

/// Pause between polls.
const POLL: Duration = Duration::from_millis(20);

/// TTL of every lease granted here: long enough never to expire during
/// the run.
const LEASE_TTL_S: i64 = 120;

/// TTL of a lease left to expire: the shortest etcd grants by default.
const EXPIRING_TTL_S: i64 = 2;

/// A lease ID no server granted.
const UNKNOWN_LEASE: i64 = 0x7777;

#[test]
fn election_and_lock_answer_as_etcd() {
    let etcd = transcript(ServerKind::Etcd);
    for kind in [ServerKind::Oxetcd, ServerKind::OxetcdSmol] {
        let ours = transcript(kind);
        let mut differences = Vec::new();
        for i in 0..etcd.len().max(ours.len()) {
            let theirs = etcd.get(i).map_or("(none)", String::as_str);
            let mine = ours.get(i).map_or("(none)", String::as_str);
            if theirs != mine {
                differences.push(format!("  etcd:  {theirs}\n  {}: {mine}", kind.name()));
            }
        }
        assert!(
            differences.is_empty(),
            "{} answers unlike etcd:\n{}\n--- whole transcript ---\n{}",
            kind.name(),
            differences.join("\n"),
            ours.join("\n")
        );
    }
}

/// Runs the sequence on a fresh server of `kind`.
fn transcript(kind: ServerKind) -> Vec<String> {
    let server = Server::start(kind).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut run = Run::connect(server.endpoint()).await;
        run.lock_contention().await;
        run.revoke_releases().await;
        run.expiry_releases().await;
        run.election_round().await;
        run.cancelled_waiters().await;
        run.unknown_lease_and_missing_leader().await;
        run.auth().await;
        run.lines
    })
}

/// Clients of one server and what they saw.
struct Run {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    election: ElectionClient<Channel>,
    lock: LockClient<Channel>,
    auth: AuthClient<Channel>,
    /// Granted lease IDs, in order: lease `n` shows as `L{n+1}`.
    leases: Vec<i64>,
    lines: Vec<String>,
}

impl Run {
    async fn connect(endpoint: &str) -> Self {
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .expect("endpoint")
            .connect_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connects");
        Self {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel.clone()),
            election: ElectionClient::new(channel.clone()),
            lock: LockClient::new(channel.clone()),
            auth: AuthClient::new(channel),
            leases: Vec::new(),
            lines: Vec::new(),
        }
    }

    fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    async fn grant(&mut self, token: Option<&str>) -> i64 {
        let id = bounded(self.lease.lease_grant(with_token(
            token,
            LeaseGrantRequest {
                ttl: LEASE_TTL_S,
                id: 0,
            },
        )))
        .await
        .expect("lease granted")
        .into_inner()
        .id;
        self.leases.push(id);
        id
    }

    async fn revoke(&mut self, id: i64) {
        bounded(self.lease.lease_revoke(LeaseRevokeRequest { id }))
            .await
            .expect("lease revoked");
    }

    /// `key` with each granted lease's hex ID replaced by its label.
    fn show_key(&self, key: &[u8]) -> String {
        let mut text = String::from_utf8_lossy(key).into_owned();
        for (i, id) in self.leases.iter().enumerate() {
            if let Some((prefix, hex)) = text.rsplit_once('/') {
                if hex == format!("{id:x}") {
                    text = format!("{prefix}/L{}", i + 1);
                }
            }
        }
        text
    }

    fn show_leader_key(&self, leader: &LeaderKey) -> String {
        let lease = self
            .leases
            .iter()
            .position(|id| *id == leader.lease)
            .map_or_else(|| leader.lease.to_string(), |i| format!("L{}", i + 1));
        format!(
            "leader name={} key={} rev={} lease={lease}",
            String::from_utf8_lossy(&leader.name),
            self.show_key(&leader.key),
            leader.rev
        )
    }

    fn show_leader(&self, response: &LeaderResponse) -> String {
        let revision = response.header.as_ref().map_or(0, |h| h.revision);
        match &response.kv {
            Some(kv) => format!(
                "rev {revision} kv {}={} c{} m{} v{}",
                self.show_key(&kv.key),
                String::from_utf8_lossy(&kv.value),
                kv.create_revision,
                kv.mod_revision,
                kv.version
            ),
            None => format!("rev {revision} no kv"),
        }
    }

    /// How many keys are under `prefix` (`prefix` ends in `/`).
    async fn keys_under(&mut self, prefix: &str) -> i64 {
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        bounded(self.kv.range(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            count_only: true,
            ..Default::default()
        }))
        .await
        .expect("range")
        .into_inner()
        .count
    }

    /// Polls until `prefix` holds `count` keys; panics past the deadline.
    async fn settle(&mut self, prefix: &str, count: i64) {
        let deadline = Instant::now() + SETTLE_DEADLINE;
        loop {
            let now = self.keys_under(prefix).await;
            if now == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{prefix}: {now} keys, waited for {count}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn lock_call(&self, name: &str, lease: i64) -> Result<(i64, Vec<u8>), tonic::Status> {
        let mut lock = self.lock.clone();
        let response = lock
            .lock(LockRequest {
                name: name.as_bytes().to_vec(),
                lease,
            })
            .await?
            .into_inner();
        Ok((revision(&response.header), response.key))
    }

    async fn campaign_call(
        &self,
        name: &str,
        lease: i64,
        value: &str,
    ) -> Result<(i64, LeaderKey), tonic::Status> {
        let mut election = self.election.clone();
        let response = election
            .campaign(CampaignRequest {
                name: name.as_bytes().to_vec(),
                lease,
                value: value.as_bytes().to_vec(),
            })
            .await?
            .into_inner();
        Ok((
            revision(&response.header),
            response.leader.expect("a campaign answers its leader key"),
        ))
    }

    /// Two lockers of one name: the second waits until the first unlocks.
    async fn lock_contention(&mut self) {
        let first = self.grant(None).await;
        let second = self.grant(None).await;
        let (rev, key1) = bounded(self.lock_call("lk", first)).await.expect("locked");
        self.note(format!("lock lk: rev {rev} key {}", self.show_key(&key1)));

        let waiter = tokio::spawn(bounded_owned(self.lock_call_owned("lk", second)));
        self.settle("lk/", 2).await;
        tokio::time::sleep(STILL_WAITING).await;
        assert!(!waiter.is_finished(), "the second locker must wait");

        let unlocked = bounded(self.lock.unlock(UnlockRequest { key: key1 }))
            .await
            .expect("unlocked");
        self.note(format!(
            "unlock: rev {}",
            revision(&unlocked.get_ref().header)
        ));
        let (rev, key2) = waiter.await.expect("task").expect("second locker locks");
        self.note(format!(
            "second lock lk: rev {rev} key {}",
            self.show_key(&key2)
        ));
        bounded(self.lock.unlock(UnlockRequest { key: key2 }))
            .await
            .expect("unlocked");
        self.settle("lk/", 0).await;
    }

    fn lock_call_owned(
        &self,
        name: &'static str,
        lease: i64,
    ) -> impl Future<Output = Result<(i64, Vec<u8>), tonic::Status>> + Send + 'static {
        let mut lock = self.lock.clone();
        async move {
            let response = lock
                .lock(LockRequest {
                    name: name.as_bytes().to_vec(),
                    lease,
                })
                .await?
                .into_inner();
            Ok((revision(&response.header), response.key))
        }
    }

    fn campaign_call_owned(
        &self,
        name: &'static str,
        lease: i64,
        value: &'static str,
    ) -> impl Future<Output = Result<(i64, LeaderKey), tonic::Status>> + Send + 'static {
        let mut election = self.election.clone();
        async move {
            let response = election
                .campaign(CampaignRequest {
                    name: name.as_bytes().to_vec(),
                    lease,
                    value: value.as_bytes().to_vec(),
                })
                .await?
                .into_inner();
            Ok((
                revision(&response.header),
                response.leader.unwrap_or_default(),
            ))
        }
    }

    /// Revoking the holder's lease hands a lock and an election on.
    async fn revoke_releases(&mut self) {
        let holder = self.grant(None).await;
        let waiter_lease = self.grant(None).await;
        bounded(self.lock_call("rl", holder)).await.expect("locked");
        let waiter = tokio::spawn(bounded_owned(self.lock_call_owned("rl", waiter_lease)));
        self.settle("rl/", 2).await;
        tokio::time::sleep(STILL_WAITING).await;
        assert!(!waiter.is_finished(), "the locker must wait");
        self.revoke(holder).await;
        let (rev, key) = waiter.await.expect("task").expect("locks after revoke");
        self.note(format!(
            "lock after revoke: rev {rev} key {}",
            self.show_key(&key)
        ));

        let leader = self.grant(None).await;
        let candidate = self.grant(None).await;
        bounded(self.campaign_call("re", leader, "a"))
            .await
            .expect("elected");
        let waiter = tokio::spawn(bounded_owned(
            self.campaign_call_owned("re", candidate, "b"),
        ));
        self.settle("re/", 2).await;
        tokio::time::sleep(STILL_WAITING).await;
        assert!(!waiter.is_finished(), "the candidate must wait");
        self.revoke(leader).await;
        let (rev, key) = waiter.await.expect("task").expect("elected after revoke");
        self.note(format!(
            "campaign after revoke: rev {rev} {}",
            self.show_leader_key(&key)
        ));
        let now = bounded(self.election.leader(LeaderRequest {
            name: b"re".to_vec(),
        }))
        .await
        .expect("a leader");
        self.note(format!("leader re: {}", self.show_leader(now.get_ref())));
    }

    /// A lease left to expire hands on the lock and the election it held,
    /// both at the revision of its expiry.
    async fn expiry_releases(&mut self) {
        let expiring = bounded(self.lease.lease_grant(LeaseGrantRequest {
            ttl: EXPIRING_TTL_S,
            id: 0,
        }))
        .await
        .expect("lease granted")
        .into_inner()
        .id;
        self.leases.push(expiring);
        let waiter_lease = self.grant(None).await;
        bounded(self.lock_call("xl", expiring))
            .await
            .expect("locked");
        bounded(self.campaign_call("xe", expiring, "old"))
            .await
            .expect("elected");
        let locker = tokio::spawn(bounded_owned(self.lock_call_owned("xl", waiter_lease)));
        self.settle("xl/", 2).await;
        let candidate = tokio::spawn(bounded_owned(self.campaign_call_owned(
            "xe",
            waiter_lease,
            "new",
        )));
        self.settle("xe/", 2).await;
        let (rev, key) = locker.await.expect("task").expect("locks after expiry");
        self.note(format!(
            "lock after expiry: rev {rev} key {}",
            self.show_key(&key)
        ));
        let (rev, key) = candidate
            .await
            .expect("task")
            .expect("elected after expiry");
        self.note(format!(
            "campaign after expiry: rev {rev} {}",
            self.show_leader_key(&key)
        ));
    }

    /// Campaign, Observe, Proclaim, Leader, a second candidate, Resign,
    /// a stale Proclaim, and no leader at the end.
    async fn election_round(&mut self) {
        let first = self.grant(None).await;
        let second = self.grant(None).await;
        let (rev, key1) = bounded(self.campaign_call("el", first, "v1"))
            .await
            .expect("elected");
        self.note(format!(
            "campaign el: rev {rev} {}",
            self.show_leader_key(&key1)
        ));

        let mut observe = bounded(self.election.observe(LeaderRequest {
            name: b"el".to_vec(),
        }))
        .await
        .expect("observing")
        .into_inner();
        self.observed(&mut observe, "first").await;

        let proclaimed = bounded(self.election.proclaim(ProclaimRequest {
            leader: Some(key1.clone()),
            value: b"v2".to_vec(),
        }))
        .await
        .expect("proclaimed");
        self.note(format!(
            "proclaim v2: rev {}",
            revision(&proclaimed.get_ref().header)
        ));
        self.observed(&mut observe, "after proclaim").await;
        let leader = bounded(self.election.leader(LeaderRequest {
            name: b"el".to_vec(),
        }))
        .await
        .expect("a leader");
        self.note(format!("leader el: {}", self.show_leader(leader.get_ref())));

        let waiter = tokio::spawn(bounded_owned(self.campaign_call_owned("el", second, "w1")));
        self.settle("el/", 2).await;
        tokio::time::sleep(STILL_WAITING).await;
        assert!(!waiter.is_finished(), "the second candidate must wait");
        let resigned = bounded(self.election.resign(ResignRequest {
            leader: Some(key1.clone()),
        }))
        .await
        .expect("resigned");
        self.note(format!(
            "resign: rev {}",
            revision(&resigned.get_ref().header)
        ));
        let (rev, key2) = waiter.await.expect("task").expect("second elected");
        self.note(format!(
            "second campaign el: rev {rev} {}",
            self.show_leader_key(&key2)
        ));
        self.observed(&mut observe, "after resign").await;

        let stale = bounded(self.election.proclaim(ProclaimRequest {
            leader: Some(key1.clone()),
            value: b"v3".to_vec(),
        }))
        .await;
        self.note(format!("stale proclaim: {}", outcome(&stale)));
        let stale = bounded(self.election.resign(ResignRequest { leader: Some(key1) })).await;
        self.note(format!("stale resign: {}", outcome(&stale)));

        bounded(self.election.proclaim(ProclaimRequest {
            leader: Some(key2.clone()),
            value: b"w2".to_vec(),
        }))
        .await
        .expect("proclaimed");
        self.observed(&mut observe, "second leader proclaims").await;
        bounded(self.election.resign(ResignRequest { leader: Some(key2) }))
            .await
            .expect("resigned");
        let none = bounded(self.election.leader(LeaderRequest {
            name: b"el".to_vec(),
        }))
        .await;
        self.note(format!("leader after resign: {}", outcome(&none)));

        // With no leader, Observe waits for the next candidate.
        let third = self.grant(None).await;
        bounded(self.campaign_call("el", third, "x1"))
            .await
            .expect("elected");
        self.observed(&mut observe, "new candidate").await;
    }

    /// The next leader `observe` reports, noted.
    async fn observed(&mut self, observe: &mut Streaming<LeaderResponse>, when: &str) {
        let next = tokio::time::timeout(CALL_TIMEOUT, observe.message())
            .await
            .unwrap_or_else(|_| panic!("observe {when}: nothing in time"))
            .unwrap_or_else(|e| panic!("observe {when}: {e}"))
            .unwrap_or_else(|| panic!("observe {when}: the stream ended"));
        self.note(format!("observe {when}: {}", self.show_leader(&next)));
    }

    /// A waiting Campaign or Lock whose client gives up leaves no key.
    async fn cancelled_waiters(&mut self) {
        let holder = self.grant(None).await;
        let quitter = self.grant(None).await;
        bounded(self.campaign_call("ce", holder, "h"))
            .await
            .expect("elected");
        let given_up =
            tokio::time::timeout(STILL_WAITING, self.campaign_call("ce", quitter, "q")).await;
        assert!(given_up.is_err(), "the second candidate must wait");
        self.settle("ce/", 1).await;
        let left = self.keys_under("ce/").await;
        self.note(format!("cancelled campaign: {left} key left"));

        bounded(self.lock_call("cl", holder)).await.expect("locked");
        let given_up = tokio::time::timeout(STILL_WAITING, self.lock_call("cl", quitter)).await;
        assert!(given_up.is_err(), "the second locker must wait");
        self.settle("cl/", 1).await;
        let left = self.keys_under("cl/").await;
        self.note(format!("cancelled lock: {left} key left"));
    }

    /// Calls naming a lease nobody granted, and calls without a leader key.
    async fn unknown_lease_and_missing_leader(&mut self) {
        let campaign = bounded(self.campaign_call("ul", UNKNOWN_LEASE, "v")).await;
        self.note(format!("campaign unknown lease: {}", outcome(&campaign)));
        let lock = bounded(self.lock_call("ul", UNKNOWN_LEASE)).await;
        self.note(format!("lock unknown lease: {}", outcome(&lock)));
        let proclaim = bounded(self.election.proclaim(ProclaimRequest {
            leader: None,
            value: b"v".to_vec(),
        }))
        .await;
        self.note(format!("proclaim without leader: {}", outcome(&proclaim)));
        let resign = bounded(self.election.resign(ResignRequest { leader: None })).await;
        self.note(format!("resign without leader: {}", outcome(&resign)));
        let unlock = bounded(self.lock.unlock(UnlockRequest { key: Vec::new() })).await;
        self.note(format!("unlock empty key: {}", outcome(&unlock)));
    }

    /// With auth on, a user whose role covers only `allowed/` may lock
    /// and campaign there and nowhere else.
    async fn auth(&mut self) {
        for (user, role, perm) in [
            ("root", "root", None),
            ("limited", "limited", Some("allowed/")),
        ] {
            bounded(self.auth.role_add(AuthRoleAddRequest { name: role.into() }))
                .await
                .expect("role added");
            if let Some(prefix) = perm {
                bounded(
                    self.auth
                        .role_grant_permission(AuthRoleGrantPermissionRequest {
                            name: role.into(),
                            perm: Some(Permission {
                                perm_type: permission::Type::Readwrite as i32,
                                key: prefix.into(),
                                range_end: "allowed0".into(),
                            }),
                        }),
                )
                .await
                .expect("permission granted");
            }
            bounded(self.auth.user_add(AuthUserAddRequest {
                name: user.into(),
                password: format!("{user}-pw"),
                ..Default::default()
            }))
            .await
            .expect("user added");
            bounded(self.auth.user_grant_role(AuthUserGrantRoleRequest {
                user: user.into(),
                role: role.into(),
            }))
            .await
            .expect("role granted");
        }
        bounded(self.auth.auth_enable(AuthEnableRequest {}))
            .await
            .expect("auth enabled");
        let token = bounded(self.auth.authenticate(AuthenticateRequest {
            name: "limited".into(),
            password: "limited-pw".into(),
        }))
        .await
        .expect("authenticated")
        .into_inner()
        .token;
        let token = Some(token.as_str());
        let lease = self.grant(token).await;

        for name in ["allowed", "denied"] {
            let lock = bounded(self.lock.lock(with_token(
                token,
                LockRequest {
                    name: name.into(),
                    lease,
                },
            )))
            .await;
            self.note(format!("lock {name} as limited: {}", outcome(&lock)));
            if let Ok(locked) = lock {
                let unlock = bounded(self.lock.unlock(with_token(
                    token,
                    UnlockRequest {
                        key: locked.into_inner().key,
                    },
                )))
                .await;
                self.note(format!("unlock {name} as limited: {}", outcome(&unlock)));
            }
            let campaign = bounded(self.election.campaign(with_token(
                token,
                CampaignRequest {
                    name: name.into(),
                    lease,
                    value: b"v".to_vec(),
                },
            )))
            .await;
            self.note(format!(
                "campaign {name} as limited: {}",
                outcome(&campaign)
            ));
            let leader = bounded(
                self.election
                    .leader(with_token(token, LeaderRequest { name: name.into() })),
            )
            .await;
            self.note(format!("leader {name} as limited: {}", outcome(&leader)));
            let anonymous = bounded(self.lock.lock(LockRequest {
                name: name.into(),
                lease,
            }))
            .await;
            self.note(format!(
                "lock {name} without a token: {}",
                outcome(&anonymous)
            ));
        }
    }
}

/// The revision of a header.
fn revision(header: &Option<oxetcd_proto::etcdserverpb::ResponseHeader>) -> i64 {
    header.as_ref().map_or(0, |h| h.revision)
}

/// `ok`, or the status's code and message.
fn outcome<T>(answer: &Result<T, tonic::Status>) -> String {
    match answer {
        Ok(_) => "ok".to_owned(),
        Err(status) => format!("ERR {:?} {:?}", status.code(), status.message()),
    }
}

/// `message` with `token` (if any) in etcd's `token` metadata.
fn with_token<T>(token: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request.metadata_mut().insert(
            "token",
            MetadataValue::try_from(token).expect("ASCII token"),
        );
    }
    request
}

/// `call`, failing with `DeadlineExceeded` after [`CALL_TIMEOUT`].
async fn bounded<T>(
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(
                "client: no answer in time",
            ))
        })
}

/// [`bounded`] for a spawned call.
async fn bounded_owned<T>(
    call: impl Future<Output = Result<T, tonic::Status>> + Send + 'static,
) -> Result<T, tonic::Status> {
    bounded(call).await
}
