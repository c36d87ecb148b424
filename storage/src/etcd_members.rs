//! The members of an etcd 3.4 data directory, as etcd itself rebuilds them
//! at start: the v2 store in the newest raft snapshot, then the WAL's
//! committed entries after it.
//!
//! Design. etcd 3.4 keeps its membership in the v2 store, saved whole in
//! each `.snap` file as JSON (`Root.Children["0"].Children["members"]`,
//! one directory per member ID in hex holding `raftAttributes`
//! (`{"peerURLs":[…],"isLearner":…}`) and `attributes`
//! (`{"name":…,"clientURLs":[…]}`) as JSON string values), and replays the
//! log on it: conf changes carry the member's JSON in their context, and a
//! member publishes its name and client URLs with a v2 `PUT` of
//! `/0/members/<id>/attributes`. Its backend's `members` bucket is only a
//! copy, and not always a faithful one (etcdctl's `snapshot restore` keeps
//! the old cluster's members in it), so it is used only when this replay
//! is not possible ([`members`] returns `None`).

use oxetcd_proto::etcdserverpb::Member;
use prost::Message;
use raft_proto::eraftpb::{Entry, EntryType};
use serde_json::Value;

/// etcd's raftpb.ConfChange (its type numbers are not raft-rs's).
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ConfChangeProto {
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    #[prost(int32, tag = "2")]
    pub(crate) kind: i32,
    #[prost(uint64, tag = "3")]
    pub(crate) node_id: u64,
    #[prost(bytes = "vec", tag = "4")]
    pub(crate) context: Vec<u8>,
}

/// The fields of etcd's v2 `Request` that carry a member's attributes.
#[derive(Clone, PartialEq, Message)]
struct V2RequestProto {
    #[prost(string, tag = "2")]
    method: String,
    #[prost(string, tag = "3")]
    path: String,
    #[prost(string, tag = "4")]
    val: String,
}

/// The members after replaying `entries` (committed, in order, following
/// the snapshot) on the v2 store of the snapshot `snapshot_data` (none for
/// a log that starts at index 1). `None` when there is no membership to
/// rebuild this way: no snapshot and no entries from the log's start.
pub fn members(snapshot_data: Option<&[u8]>, entries: &[&Entry]) -> Option<Vec<Member>> {
    let mut members = match snapshot_data {
        Some(data) => from_v2_store(data)?,
        None => {
            if entries.first().map(|e| e.index) != Some(1) {
                return None;
            }
            Vec::new()
        }
    };
    for entry in entries {
        match entry.entry_type {
            EntryType::EntryConfChange => conf_change(&mut members, entry.data.as_ref()),
            EntryType::EntryNormal => attributes(&mut members, entry.data.as_ref()),
            EntryType::EntryConfChangeV2 => {}
        }
    }
    members.sort_by_key(|m| m.id);
    (!members.is_empty()).then_some(members)
}

fn urls(json: &Value, field: &str) -> Vec<String> {
    json.get(field)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The members of a v2 store saved as JSON.
fn from_v2_store(data: &[u8]) -> Option<Vec<Member>> {
    let store: Value = serde_json::from_slice(data).ok()?;
    let dirs = store
        .get("Root")?
        .get("Children")?
        .get("0")?
        .get("Children")?
        .get("members")?
        .get("Children")?
        .as_object()?;
    let mut members = Vec::new();
    for (hex, node) in dirs {
        let id = u64::from_str_radix(hex, 16).ok()?;
        let value = |name: &str| -> Option<Value> {
            let text = node.get("Children")?.get(name)?.get("Value")?.as_str()?;
            serde_json::from_str(text).ok()
        };
        let raft = value("raftAttributes")?;
        let attrs = value("attributes").unwrap_or(Value::Null);
        members.push(Member {
            id,
            name: attrs
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            peer_ur_ls: urls(&raft, "peerURLs"),
            client_ur_ls: urls(&attrs, "clientURLs"),
            is_learner: raft
                .get("isLearner")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }
    Some(members)
}

fn conf_change(members: &mut Vec<Member>, data: &[u8]) {
    let Ok(change) = ConfChangeProto::decode(data) else {
        return;
    };
    let context: Value = serde_json::from_slice(&change.context).unwrap_or(Value::Null);
    let at = members.iter().position(|m| m.id == change.node_id);
    match (change.kind, at) {
        // AddNode of a learner: its promotion.
        (0, Some(at)) => members[at].is_learner = false,
        // AddNode, AddLearnerNode.
        (0 | 3, None) => members.push(Member {
            id: change.node_id,
            name: context
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            peer_ur_ls: urls(&context, "peerURLs"),
            client_ur_ls: urls(&context, "clientURLs"),
            is_learner: change.kind == 3,
        }),
        // RemoveNode.
        (1, Some(at)) => {
            members.remove(at);
        }
        // UpdateNode: new peer URLs.
        (2, Some(at)) => members[at].peer_ur_ls = urls(&context, "peerURLs"),
        _ => {}
    }
}

/// A v2 `PUT /0/members/<id>/attributes`: the member's name and client
/// URLs. Anything else (v3 requests have a header, field 100, which this
/// message does not know; a v3 request never decodes with a `PUT` of such
/// a path) changes no member.
fn attributes(members: &mut [Member], data: &[u8]) {
    let Ok(request) = V2RequestProto::decode(data) else {
        return;
    };
    if request.method != "PUT" {
        return;
    }
    let Some(hex) = request
        .path
        .strip_prefix("/0/members/")
        .and_then(|rest| rest.strip_suffix("/attributes"))
    else {
        return;
    };
    let Ok(id) = u64::from_str_radix(hex, 16) else {
        return;
    };
    let Ok(attrs) = serde_json::from_str::<Value>(&request.val) else {
        return;
    };
    if let Some(member) = members.iter_mut().find(|m| m.id == id) {
        member.name = attrs
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        member.client_ur_ls = urls(&attrs, "clientURLs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, entry_type: EntryType, data: Vec<u8>) -> Entry {
        Entry {
            index,
            term: 1,
            entry_type,
            data: data.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_log_from_the_start_builds_the_members() {
        let add = |id: u64, kind: i32, context: &str| {
            ConfChangeProto {
                id: 0,
                kind,
                node_id: id,
                context: context.as_bytes().to_vec(),
            }
            .encode_to_vec()
        };
        let publish = V2RequestProto {
            method: "PUT".into(),
            path: "/0/members/a/attributes".into(),
            val: r#"{"name":"m1","clientURLs":["http://c:1"]}"#.into(),
        }
        .encode_to_vec();
        let entries = [
            entry(
                1,
                EntryType::EntryConfChange,
                add(10, 0, r#"{"id":10,"peerURLs":["http://p:1"]}"#),
            ),
            entry(
                2,
                EntryType::EntryConfChange,
                add(
                    11,
                    3,
                    r#"{"id":11,"peerURLs":["http://p:2"],"isLearner":true}"#,
                ),
            ),
            entry(3, EntryType::EntryNormal, publish),
            entry(4, EntryType::EntryConfChange, add(11, 0, "")),
            entry(5, EntryType::EntryConfChange, add(10, 1, "")),
        ];
        let refs: Vec<&Entry> = entries.iter().collect();
        let got = members(None, &refs[..3]).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "m1");
        assert_eq!(got[0].client_ur_ls, vec!["http://c:1"]);
        assert!(got[1].is_learner);
        let got = members(None, &refs).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, 11);
        assert!(!got[0].is_learner);
        // A log that does not start at 1, without a snapshot: not rebuilt.
        assert!(members(None, &refs[1..]).is_none());
    }

    #[test]
    fn the_v2_store_of_a_snapshot_holds_the_members() {
        let store = r#"{"Root":{"Path":"/","Children":{"0":{"Path":"/0","Children":{
            "members":{"Path":"/0/members","Children":{"8e9e05c52164694d":{"Children":{
            "raftAttributes":{"Value":"{\"peerURLs\":[\"http://localhost:2380\"]}"},
            "attributes":{"Value":"{\"name\":\"default\",\"clientURLs\":[\"http://localhost:2379\"]}"}
            }}}}}}}}}"#;
        let got = members(Some(store.as_bytes()), &[]).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, 0x8e9e05c52164694d);
        assert_eq!(got[0].name, "default");
        assert_eq!(got[0].peer_ur_ls, vec!["http://localhost:2380"]);
        assert!(members(Some(b"not json"), &[]).is_none());
    }
}
