//! The gateway's paths: which gRPC method each one calls, and how.
//!
//! Design: one table, etcd 3.4's generated gateway files
//! (`etcdserverpb/gw/rpc.pb.gw.go`, `v3electionpb/gw`, `v3lockpb/gw`) read
//! into data. Every path is `POST`. Where two of etcd's methods share a
//! path (`/v3/maintenance/hash` is both `Hash` and `HashKV`), the one
//! grpc-gateway registers first wins, as in its mux. Paths etcd added
//! after 3.4 (`/v3/auth/status`, `/v3/maintenance/downgrade`) are served
//! too, since the gRPC methods are. Election and Lock are routed like the
//! rest: whichever of their services the gRPC router serves answers here.

use oxetcd_proto::etcdserverpb as pb;
use oxetcd_proto::{v3electionpb as election, v3lockpb as lock};

use super::codec::{request_json, response_json, RequestCodec, ResponseCodec};

/// How a method's messages travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One request, one response.
    Unary,
    /// One request, a stream of responses.
    ServerStream,
    /// A stream each way: the HTTP body is a sequence of JSON requests.
    /// With `ends_with_body`, the call's request stream ends when the body
    /// does (`LeaseKeepAlive` then answers what it got and ends); without,
    /// the call lives on until the client goes (a watch outlives the body
    /// that created it, as etcd's watch outlives its half-closed stream).
    Bidi { ends_with_body: bool },
}

/// One gateway path.
pub(crate) struct Route {
    /// The path below the API prefix (`kv/range` for `/v3/kv/range`).
    pub(crate) path: &'static str,
    /// The gRPC method it calls (`/etcdserverpb.KV/Range`).
    pub(crate) method: &'static str,
    pub(crate) shape: Shape,
    pub(crate) request: RequestCodec,
    pub(crate) response: ResponseCodec,
}

/// The prefixes the gateway is served under: etcd's `/v3/`, the
/// `/v3beta/` etcd 3.4 still rewrites to it, and 3.2's `/v3alpha/`, which
/// older clients (etcd3gw among them) pick for old servers.
pub(crate) const PREFIXES: &[&str] = &["/v3/", "/v3beta/", "/v3alpha/"];

/// The route for `path` below one of [`PREFIXES`]; `None` when `path` is
/// not the gateway's at all, `Some(None)` when it is under a prefix but
/// no method has it.
pub(crate) fn find(path: &str) -> Option<Option<&'static Route>> {
    let rest = PREFIXES
        .iter()
        .find_map(|prefix| path.strip_prefix(prefix))?;
    Some(ROUTES.iter().find(|route| route.path == rest))
}

const fn route<Q, A>(path: &'static str, method: &'static str, shape: Shape) -> Route
where
    Q: serde::de::DeserializeOwned + prost::Message,
    A: serde::Serialize + prost::Message + Default,
{
    Route {
        path,
        method,
        shape,
        request: request_json::<Q>,
        response: response_json::<A>,
    }
}

use Shape::{ServerStream, Unary};

/// Every gateway path, in grpc-gateway's registration order.
pub(crate) static ROUTES: &[Route] = &[
    route::<pb::RangeRequest, pb::RangeResponse>("kv/range", "/etcdserverpb.KV/Range", Unary),
    route::<pb::PutRequest, pb::PutResponse>("kv/put", "/etcdserverpb.KV/Put", Unary),
    route::<pb::DeleteRangeRequest, pb::DeleteRangeResponse>(
        "kv/deleterange",
        "/etcdserverpb.KV/DeleteRange",
        Unary,
    ),
    route::<pb::TxnRequest, pb::TxnResponse>("kv/txn", "/etcdserverpb.KV/Txn", Unary),
    route::<pb::CompactionRequest, pb::CompactionResponse>(
        "kv/compaction",
        "/etcdserverpb.KV/Compact",
        Unary,
    ),
    route::<pb::WatchRequest, pb::WatchResponse>(
        "watch",
        "/etcdserverpb.Watch/Watch",
        Shape::Bidi {
            ends_with_body: false,
        },
    ),
    route::<pb::LeaseGrantRequest, pb::LeaseGrantResponse>(
        "lease/grant",
        "/etcdserverpb.Lease/LeaseGrant",
        Unary,
    ),
    route::<pb::LeaseRevokeRequest, pb::LeaseRevokeResponse>(
        "lease/revoke",
        "/etcdserverpb.Lease/LeaseRevoke",
        Unary,
    ),
    route::<pb::LeaseRevokeRequest, pb::LeaseRevokeResponse>(
        "kv/lease/revoke",
        "/etcdserverpb.Lease/LeaseRevoke",
        Unary,
    ),
    route::<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>(
        "lease/keepalive",
        "/etcdserverpb.Lease/LeaseKeepAlive",
        Shape::Bidi {
            ends_with_body: true,
        },
    ),
    route::<pb::LeaseTimeToLiveRequest, pb::LeaseTimeToLiveResponse>(
        "lease/timetolive",
        "/etcdserverpb.Lease/LeaseTimeToLive",
        Unary,
    ),
    route::<pb::LeaseTimeToLiveRequest, pb::LeaseTimeToLiveResponse>(
        "kv/lease/timetolive",
        "/etcdserverpb.Lease/LeaseTimeToLive",
        Unary,
    ),
    route::<pb::LeaseLeasesRequest, pb::LeaseLeasesResponse>(
        "lease/leases",
        "/etcdserverpb.Lease/LeaseLeases",
        Unary,
    ),
    route::<pb::LeaseLeasesRequest, pb::LeaseLeasesResponse>(
        "kv/lease/leases",
        "/etcdserverpb.Lease/LeaseLeases",
        Unary,
    ),
    route::<pb::MemberAddRequest, pb::MemberAddResponse>(
        "cluster/member/add",
        "/etcdserverpb.Cluster/MemberAdd",
        Unary,
    ),
    route::<pb::MemberRemoveRequest, pb::MemberRemoveResponse>(
        "cluster/member/remove",
        "/etcdserverpb.Cluster/MemberRemove",
        Unary,
    ),
    route::<pb::MemberUpdateRequest, pb::MemberUpdateResponse>(
        "cluster/member/update",
        "/etcdserverpb.Cluster/MemberUpdate",
        Unary,
    ),
    route::<pb::MemberListRequest, pb::MemberListResponse>(
        "cluster/member/list",
        "/etcdserverpb.Cluster/MemberList",
        Unary,
    ),
    route::<pb::MemberPromoteRequest, pb::MemberPromoteResponse>(
        "cluster/member/promote",
        "/etcdserverpb.Cluster/MemberPromote",
        Unary,
    ),
    route::<pb::AlarmRequest, pb::AlarmResponse>(
        "maintenance/alarm",
        "/etcdserverpb.Maintenance/Alarm",
        Unary,
    ),
    route::<pb::StatusRequest, pb::StatusResponse>(
        "maintenance/status",
        "/etcdserverpb.Maintenance/Status",
        Unary,
    ),
    route::<pb::DefragmentRequest, pb::DefragmentResponse>(
        "maintenance/defragment",
        "/etcdserverpb.Maintenance/Defragment",
        Unary,
    ),
    // etcd registers HashKV at this path too, after Hash: Hash answers.
    route::<pb::HashRequest, pb::HashResponse>(
        "maintenance/hash",
        "/etcdserverpb.Maintenance/Hash",
        Unary,
    ),
    route::<pb::SnapshotRequest, pb::SnapshotResponse>(
        "maintenance/snapshot",
        "/etcdserverpb.Maintenance/Snapshot",
        ServerStream,
    ),
    route::<pb::MoveLeaderRequest, pb::MoveLeaderResponse>(
        "maintenance/transfer-leadership",
        "/etcdserverpb.Maintenance/MoveLeader",
        Unary,
    ),
    // etcd 3.5+.
    route::<pb::DowngradeRequest, pb::DowngradeResponse>(
        "maintenance/downgrade",
        "/etcdserverpb.Maintenance/Downgrade",
        Unary,
    ),
    route::<pb::AuthEnableRequest, pb::AuthEnableResponse>(
        "auth/enable",
        "/etcdserverpb.Auth/AuthEnable",
        Unary,
    ),
    route::<pb::AuthDisableRequest, pb::AuthDisableResponse>(
        "auth/disable",
        "/etcdserverpb.Auth/AuthDisable",
        Unary,
    ),
    // etcd 3.5+.
    route::<pb::AuthStatusRequest, pb::AuthStatusResponse>(
        "auth/status",
        "/etcdserverpb.Auth/AuthStatus",
        Unary,
    ),
    route::<pb::AuthenticateRequest, pb::AuthenticateResponse>(
        "auth/authenticate",
        "/etcdserverpb.Auth/Authenticate",
        Unary,
    ),
    route::<pb::AuthUserAddRequest, pb::AuthUserAddResponse>(
        "auth/user/add",
        "/etcdserverpb.Auth/UserAdd",
        Unary,
    ),
    route::<pb::AuthUserGetRequest, pb::AuthUserGetResponse>(
        "auth/user/get",
        "/etcdserverpb.Auth/UserGet",
        Unary,
    ),
    route::<pb::AuthUserListRequest, pb::AuthUserListResponse>(
        "auth/user/list",
        "/etcdserverpb.Auth/UserList",
        Unary,
    ),
    route::<pb::AuthUserDeleteRequest, pb::AuthUserDeleteResponse>(
        "auth/user/delete",
        "/etcdserverpb.Auth/UserDelete",
        Unary,
    ),
    route::<pb::AuthUserChangePasswordRequest, pb::AuthUserChangePasswordResponse>(
        "auth/user/changepw",
        "/etcdserverpb.Auth/UserChangePassword",
        Unary,
    ),
    route::<pb::AuthUserGrantRoleRequest, pb::AuthUserGrantRoleResponse>(
        "auth/user/grant",
        "/etcdserverpb.Auth/UserGrantRole",
        Unary,
    ),
    route::<pb::AuthUserRevokeRoleRequest, pb::AuthUserRevokeRoleResponse>(
        "auth/user/revoke",
        "/etcdserverpb.Auth/UserRevokeRole",
        Unary,
    ),
    route::<pb::AuthRoleAddRequest, pb::AuthRoleAddResponse>(
        "auth/role/add",
        "/etcdserverpb.Auth/RoleAdd",
        Unary,
    ),
    route::<pb::AuthRoleGetRequest, pb::AuthRoleGetResponse>(
        "auth/role/get",
        "/etcdserverpb.Auth/RoleGet",
        Unary,
    ),
    route::<pb::AuthRoleListRequest, pb::AuthRoleListResponse>(
        "auth/role/list",
        "/etcdserverpb.Auth/RoleList",
        Unary,
    ),
    route::<pb::AuthRoleDeleteRequest, pb::AuthRoleDeleteResponse>(
        "auth/role/delete",
        "/etcdserverpb.Auth/RoleDelete",
        Unary,
    ),
    route::<pb::AuthRoleGrantPermissionRequest, pb::AuthRoleGrantPermissionResponse>(
        "auth/role/grant",
        "/etcdserverpb.Auth/RoleGrantPermission",
        Unary,
    ),
    route::<pb::AuthRoleRevokePermissionRequest, pb::AuthRoleRevokePermissionResponse>(
        "auth/role/revoke",
        "/etcdserverpb.Auth/RoleRevokePermission",
        Unary,
    ),
    route::<lock::LockRequest, lock::LockResponse>("lock/lock", "/v3lockpb.Lock/Lock", Unary),
    route::<lock::UnlockRequest, lock::UnlockResponse>(
        "lock/unlock",
        "/v3lockpb.Lock/Unlock",
        Unary,
    ),
    route::<election::CampaignRequest, election::CampaignResponse>(
        "election/campaign",
        "/v3electionpb.Election/Campaign",
        Unary,
    ),
    route::<election::ProclaimRequest, election::ProclaimResponse>(
        "election/proclaim",
        "/v3electionpb.Election/Proclaim",
        Unary,
    ),
    route::<election::LeaderRequest, election::LeaderResponse>(
        "election/leader",
        "/v3electionpb.Election/Leader",
        Unary,
    ),
    route::<election::LeaderRequest, election::LeaderResponse>(
        "election/observe",
        "/v3electionpb.Election/Observe",
        ServerStream,
    ),
    route::<election::ResignRequest, election::ResignResponse>(
        "election/resign",
        "/v3electionpb.Election/Resign",
        Unary,
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_under_every_prefix() {
        for prefix in PREFIXES {
            let route = find(&format!("{prefix}kv/range")).unwrap().unwrap();
            assert_eq!(route.method, "/etcdserverpb.KV/Range");
        }
        assert!(find("/v3/kv/nothing").unwrap().is_none());
        assert!(find("/v4/kv/range").is_none());
        assert!(find("/health").is_none());
    }

    #[test]
    fn each_path_is_routed_once_and_streams_are_marked() {
        for (i, route) in ROUTES.iter().enumerate() {
            assert!(
                ROUTES[..i].iter().all(|other| other.path != route.path),
                "{} twice",
                route.path
            );
        }
        let shape = |path: &str| find(&format!("/v3/{path}")).unwrap().unwrap().shape;
        assert_eq!(
            shape("watch"),
            Shape::Bidi {
                ends_with_body: false
            }
        );
        assert_eq!(
            shape("lease/keepalive"),
            Shape::Bidi {
                ends_with_body: true
            }
        );
        assert_eq!(shape("election/observe"), Shape::ServerStream);
        assert_eq!(shape("maintenance/snapshot"), Shape::ServerStream);
        assert_eq!(shape("maintenance/hash"), Shape::Unary);
        assert_eq!(
            find("/v3/maintenance/hash").unwrap().unwrap().method,
            "/etcdserverpb.Maintenance/Hash"
        );
    }
}
