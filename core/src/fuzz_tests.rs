//! Fuzzing what a node takes from outside: raft messages from peers, and
//! client requests as they come off the wire (protobuf bytes). Any bytes
//! give an error, a refusal or an answer, never a panic and never a node
//! that stops settling; every client request is answered.
//!
//! Each input runs on a fresh member, so a failure reproduces from its
//! bytes alone. Peer messages go to member 1 of a three-member cluster,
//! as the peer transport lets them through (from a member, to this one,
//! no snapshot outside a snapshot stream; anything else in them as sent),
//! then time moves on so the node's timers act on what the message left
//! behind; client requests go
//! to a single member that already holds a few keys and a lease.

use std::time::Duration;

use oxetcd_proto::eraftpb::{Entry, Message, MessageType};
use oxetcd_proto::etcdserverpb::{
    compare, request_op, CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest,
    LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use prost::Message as _;
use protobuf::Message as _;

use crate::auth::Credentials;
use crate::memory::{MemoryKv, MemoryLog};
use crate::testing::{Effect, Halt, Member};
use crate::{ClusterState, Config, InitialMember, Input, Instant, Request};

fn three_member_config() -> Config {
    let mut config = Config::single("m1");
    config.member_id = 1;
    config.cluster_id = 0xc1;
    config.initial_members = (1..=3)
        .map(|id| InitialMember {
            id,
            name: format!("m{id}"),
            peer_urls: vec![format!("http://m{id}:2380")],
        })
        .collect();
    config.initial_cluster_state = ClusterState::New;
    config
}

/// Drains the member, failing on a runaway node (storage errors are the
/// stores' own and fine here).
fn drain(member: &mut Member, now: Instant) -> Vec<Effect> {
    match member.drain(now) {
        Ok(effects) => effects,
        Err(Halt::Runaway) => panic!("the node did not settle"),
        Err(Halt::SnapshotMissing(index)) => panic!("asked to install snapshot {index}"),
        Err(Halt::Storage(_)) => Vec::new(),
    }
}

/// A member started on empty stores at time zero, its first outputs
/// carried out.
fn fresh(config: Config) -> Member {
    let mut member = Member::start(
        config,
        MemoryLog::default(),
        MemoryKv::default(),
        Instant::ZERO,
    )
    .expect("a member starts on empty stores");
    drain(&mut member, Instant::ZERO);
    member
}

fn message(kind: MessageType, from: u64, term: u64) -> Message {
    Message {
        msg_type: kind,
        to: 1,
        from,
        term,
        ..Default::default()
    }
}

fn peer_seeds() -> Vec<Vec<u8>> {
    let entry = |index, data: &[u8]| Entry {
        index,
        term: 2,
        data: data.to_vec().into(),
        ..Default::default()
    };
    let mut append = message(MessageType::MsgAppend, 2, 2);
    append.entries = vec![entry(1, b""), entry(2, b"\x0a\x00")].into();
    append.commit = 2;
    let mut heartbeat = message(MessageType::MsgHeartbeat, 2, 2);
    heartbeat.commit = 1;
    let mut vote = message(MessageType::MsgRequestVote, 3, 5);
    vote.index = 0;
    vote.log_term = 0;
    let pre_vote = message(MessageType::MsgRequestPreVote, 3, 6);
    let mut response = message(MessageType::MsgAppendResponse, 2, 1);
    response.index = 1;
    let read_index = message(MessageType::MsgReadIndexResp, 2, 2);
    let transfer = message(MessageType::MsgTimeoutNow, 2, 2);
    [
        append, heartbeat, vote, pre_vote, response, read_index, transfer,
    ]
    .iter()
    .map(|m| m.write_to_bytes().expect("a message encodes"))
    .collect()
}

#[test]
fn fuzz_peer_message_step() {
    let ran = oxetcd_fuzz::fuzz("peer-message", &peer_seeds(), |bytes| {
        let Ok(mut message) = Message::parse_from_bytes(bytes) else {
            return;
        };
        // What the peer transport lets through (see the server's
        // `decode_message`): from the connection's member, to this one,
        // and never a snapshot outside a snapshot stream.
        if message.msg_type == MessageType::MsgSnapshot {
            return;
        }
        message.to = 1;
        message.from = 2 + message.from % 2;
        let mut now = Instant::ZERO;
        let mut member = fresh(three_member_config());
        member.node.handle(now, Input::Peer(message));
        drain(&mut member, now);
        for _ in 0..3 {
            now = now + Duration::from_millis(600);
            member.node.handle_timeout(now);
            drain(&mut member, now);
        }
    });
    assert!(ran > 0);
}

/// A request of the kind `selector` names, decoded from `body`.
fn client_request(selector: u8, body: &[u8]) -> Option<Request> {
    Some(match selector % 8 {
        0 => Request::Range(RangeRequest::decode(body).ok()?),
        1 => Request::Put(PutRequest::decode(body).ok()?),
        2 => Request::DeleteRange(DeleteRangeRequest::decode(body).ok()?),
        3 => Request::Txn(TxnRequest::decode(body).ok()?),
        4 => Request::Compact(CompactionRequest::decode(body).ok()?),
        5 => Request::LeaseGrant(LeaseGrantRequest::decode(body).ok()?),
        6 => Request::LeaseRevoke(LeaseRevokeRequest::decode(body).ok()?),
        _ => Request::LeaseTimeToLive(LeaseTimeToLiveRequest::decode(body).ok()?),
    })
}

fn client_seeds() -> Vec<Vec<u8>> {
    let put = |key: &str, value: &str| PutRequest {
        key: key.into(),
        value: value.into(),
        prev_kv: true,
        ..Default::default()
    };
    let range = RangeRequest {
        key: b"a".to_vec(),
        range_end: b"z".to_vec(),
        limit: 2,
        revision: 2,
        sort_order: 1,
        sort_target: 2,
        ..Default::default()
    };
    let txn = TxnRequest {
        compare: vec![Compare {
            result: compare::CompareResult::Greater as i32,
            target: compare::CompareTarget::Version as i32,
            key: b"a".to_vec(),
            range_end: b"b".to_vec(),
            target_union: Some(compare::TargetUnion::Version(0)),
        }],
        success: vec![
            RequestOp {
                request: Some(request_op::Request::RequestPut(put("c", "1"))),
            },
            RequestOp {
                request: Some(request_op::Request::RequestTxn(TxnRequest::default())),
            },
        ],
        failure: vec![RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                DeleteRangeRequest {
                    key: b"a".to_vec(),
                    range_end: vec![0],
                    prev_kv: true,
                },
            )),
        }],
    };
    let with = |selector: u8, body: Vec<u8>| [vec![selector], body].concat();
    vec![
        with(0, range.encode_to_vec()),
        with(1, put("a", "2").encode_to_vec()),
        with(
            2,
            DeleteRangeRequest {
                key: b"a".to_vec(),
                range_end: b"c".to_vec(),
                prev_kv: true,
            }
            .encode_to_vec(),
        ),
        with(3, txn.encode_to_vec()),
        with(
            4,
            CompactionRequest {
                revision: 3,
                physical: true,
            }
            .encode_to_vec(),
        ),
        with(5, LeaseGrantRequest { ttl: 5, id: 9 }.encode_to_vec()),
        with(6, LeaseRevokeRequest { id: 7 }.encode_to_vec()),
        with(
            7,
            LeaseTimeToLiveRequest { id: 7, keys: true }.encode_to_vec(),
        ),
    ]
}

#[test]
fn fuzz_client_request_apply() {
    let ran = oxetcd_fuzz::fuzz("client-request", &client_seeds(), |bytes| {
        let Some((&selector, body)) = bytes.split_first() else {
            return;
        };
        let Some(request) = client_request(selector, body) else {
            return;
        };
        let now = Instant::ZERO;
        let mut member = fresh(Config::single("fuzz"));
        // A few keys (one on a lease) to act on.
        let setup = [
            Request::LeaseGrant(LeaseGrantRequest { ttl: 60, id: 7 }),
            Request::Put(PutRequest {
                key: b"a".to_vec(),
                value: b"1".to_vec(),
                ..Default::default()
            }),
            Request::Put(PutRequest {
                key: b"b".to_vec(),
                value: b"2".to_vec(),
                lease: 7,
                ..Default::default()
            }),
        ];
        for (id, request) in setup.into_iter().enumerate() {
            member.node.handle(
                now,
                Input::Client(id as u64 + 1, request, Credentials::Anonymous),
            );
            drain(&mut member, now);
        }
        let id = 100;
        member
            .node
            .handle(now, Input::Client(id, request, Credentials::Anonymous));
        let answered = drain(&mut member, now)
            .iter()
            .any(|e| matches!(e, Effect::Answer(answered, _) if *answered == id));
        assert!(answered, "the request was answered");
    });
    assert!(ran > 0);
}
