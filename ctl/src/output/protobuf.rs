//! The `protobuf` format: the response's wire encoding, for the responses
//! etcdctl prints that way (the ones that are protobuf messages).

use oxetcd_proto::etcdserverpb::{AuthUserAddResponse, WatchResponse};
use prost::Message;

use super::View;

pub(super) fn render(view: &View<'_>) -> Option<Vec<u8>> {
    Some(match *view {
        View::Get(r) => r.encode_to_vec(),
        View::Put(r) => r.encode_to_vec(),
        View::Del(r) => r.encode_to_vec(),
        View::Txn(r) => r.encode_to_vec(),
        // etcdctl re-encodes the client's watch response: header, events,
        // compact revision and the two flags, nothing else.
        View::Watch(r) => WatchResponse {
            header: Some(r.header.unwrap_or_default()),
            events: r.events.clone(),
            compact_revision: r.compact_revision,
            canceled: r.canceled,
            created: r.created,
            ..Default::default()
        }
        .encode_to_vec(),
        View::MemberAdd { response, .. } => response.encode_to_vec(),
        View::MemberRemove(_, r) => r.encode_to_vec(),
        View::MemberUpdate(_, r) => r.encode_to_vec(),
        View::MemberList(r) => r.encode_to_vec(),
        View::Alarm(r) => r.encode_to_vec(),
        View::MoveLeader { response, .. } => response.encode_to_vec(),
        View::AuthStatus(r) => r.encode_to_vec(),
        // Every header-only auth response has this one encoding.
        View::AuthChange(_, header) => AuthUserAddResponse {
            header: header.cloned(),
        }
        .encode_to_vec(),
        View::UserGet(_, r) => r.encode_to_vec(),
        View::UserList(r) => r.encode_to_vec(),
        View::RoleGet(_, r) => r.encode_to_vec(),
        View::RoleList(r) => r.encode_to_vec(),
        _ => return None,
    })
}
