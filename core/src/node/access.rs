//! Who may do what: the node's side of auth.
//!
//! Design. A request's credentials resolve at admission to an
//! [`AuthInfo`]. Reads and administration are checked at admission
//! (`check_admission`), against the applied auth store; a range is checked
//! again when it is served, against the state it reads. Writes carry the
//! user and the auth revision they were admitted under in their
//! proposal, and are checked at apply (`check_at_apply`), on every member
//! alike: a change to the auth store in between makes the write fail
//! with `revision of auth store is old`, as etcd's does. A watch is
//! checked when it is created, for read on its whole range. Entries the
//! leader proposes itself (lease expiry, checkpoints, attributes) carry
//! no user and are not checked.

use oxetcd_proto::etcdserverpb::WatchRequest;
use oxetcd_proto::oxetcdpb::proposal;

use super::Node;
use crate::auth::{Access, AuthInfo, AuthRead, AuthRequest, AuthStore, Credentials};
use crate::error::Error;
use crate::lease::Lessor;
use crate::storage::{KvStore, LogStore};
use crate::watch::{StreamId, WatchRegistry};
use crate::Request;

impl<L: LogStore, K: KvStore> Node<L, K> {
    /// The checks etcd makes before a request goes anywhere: reads of keys
    /// and of the auth store, and administration.
    pub(super) fn check_admission(&self, request: &Request, who: &AuthInfo) -> Result<(), Error> {
        let auth = &self.auth;
        match request {
            Request::Range(r) => auth.check(who, Access::Read, &r.key, &r.range_end),
            // The keys a lease carries are shown only to who may read them.
            Request::LeaseTimeToLive(r) if r.keys => self
                .lessor
                .keys(r.id)
                .unwrap_or_default()
                .iter()
                .try_for_each(|key| auth.check(who, Access::Read, key, &[])),
            Request::MemberAdd(_)
            | Request::MemberRemove(_)
            | Request::MemberUpdate(_)
            | Request::MemberPromote(_)
            | Request::MoveLeader(_)
            | Request::Downgrade(_) => auth.check_admin(who),
            Request::Auth(AuthRequest::Read(read)) => match read {
                AuthRead::Status | AuthRead::Password { .. } => Ok(()),
                AuthRead::UserGet(r) if r.name == who.user => Ok(()),
                AuthRead::RoleGet(r) if auth.has_role(who, &r.role) => Ok(()),
                AuthRead::UserGet(_)
                | AuthRead::RoleGet(_)
                | AuthRead::UserList
                | AuthRead::RoleList
                | AuthRead::Admin => auth.check_admin(who),
            },
            _ => Ok(()),
        }
    }

    /// A watch create needs read on its whole range; a refused one is
    /// answered on the stream as etcd answers it, and never registered.
    pub(super) fn handle_watch_request(
        &mut self,
        stream: StreamId,
        request: WatchRequest,
        credentials: &Credentials,
    ) {
        use oxetcd_proto::etcdserverpb::watch_request::RequestUnion;
        if let Some(RequestUnion::CreateRequest(create)) = &request.request_union {
            let checked = self.auth.resolve(credentials, self.now).and_then(|who| {
                self.auth
                    .check(&who, Access::Read, &create.key, &create.range_end)
            });
            if let Err(e) = checked {
                // etcd puts the gRPC error's text in the reason.
                let reason = format!(
                    "rpc error: code = {} desc = {}",
                    e.code().go_name(),
                    e.message()
                );
                return self
                    .with_watches(|_, cx| WatchRegistry::refuse_create(stream, &reason, cx));
            }
        }
        self.with_watches(|watches, cx| watches.handle_request(stream, request, cx));
    }
}

/// The checks etcd makes when a client's write is applied: keys written
/// (and read, with `prev_kv`), every key a transaction touches, the keys
/// of a lease a put attaches to or a revoke deletes, and administration
/// for auth changes.
pub(super) fn check_at_apply(
    auth: &AuthStore,
    lessor: &Lessor,
    request: &proposal::Request,
    who: &AuthInfo,
) -> Result<(), Error> {
    use oxetcd_proto::oxetcdpb::auth_change::Change;
    if !auth.enabled() {
        return Ok(());
    }
    let lease_keys = |lease: i64| -> Result<(), Error> {
        for key in lessor.keys(lease).unwrap_or_default() {
            auth.check(who, Access::Write, &key, &[])?;
        }
        Ok(())
    };
    match request {
        proposal::Request::Put(r) => {
            auth.check(who, Access::Write, &r.key, &[])?;
            lease_keys(r.lease)?;
            if r.prev_kv {
                auth.check(who, Access::Read, &r.key, &[])?;
            }
            Ok(())
        }
        proposal::Request::DeleteRange(r) => {
            auth.check(who, Access::Write, &r.key, &r.range_end)?;
            if r.prev_kv {
                auth.check(who, Access::Read, &r.key, &r.range_end)?;
            }
            Ok(())
        }
        proposal::Request::Txn(r) => auth.check_txn(who, r),
        proposal::Request::LeaseRevoke(r) => lease_keys(r.id),
        proposal::Request::Auth(change) => match &change.change {
            Some(Change::Authenticate(_)) | None => Ok(()),
            Some(_) => auth.check_admin(who),
        },
        _ => Ok(()),
    }
}
