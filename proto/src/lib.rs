//! Wire types for oxetcd.
//!
//! * The client API: etcd v3 gRPC messages and services under etcd's own
//!   protobuf package names ([`etcdserverpb`], [`mvccpb`], [`authpb`],
//!   [`v3electionpb`], [`v3lockpb`]), so existing etcd clients interoperate.
//!   Each service has a tonic server (`*_server`) and client (`*_client`)
//!   module, behind this crate's `server` and `client` features; `transport`
//!   adds the clients' `connect(..)`. Both sides encode with
//!   [`codec::ProtoCodec`]. Without them the crate is messages
//!   only and links no tonic, so the pure core stays free of the gRPC stack.
//! * The replicated log payload: [`oxetcdpb::Proposal`].
//! * Raft peer messages: [`eraftpb`], re-exported from `raft-proto`.
//!
//! With the `json` feature, the client API's messages also implement
//! serde's `Serialize` and `Deserialize` in the proto3 JSON mapping etcd's
//! JSON gateway speaks (proto field names, base64 bytes, 64-bit integers
//! as strings, defaults omitted; camelCase names and numbers as integers
//! accepted too).
//!
//! Everything here is generated at build time from the `.proto` files in
//! this crate's `proto/` folder, but for [`prefix_end`], the one rule of
//! the key space every client and server side shares.

pub use raft_proto::eraftpb;

#[cfg(any(feature = "server", feature = "client"))]
pub mod codec;

/// Keys, versions and watch events of the multi-version key space.
#[allow(clippy::all, clippy::pedantic)]
pub mod mvccpb {
    include!(concat!(env!("OUT_DIR"), "/mvccpb.rs"));
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/mvccpb.serde.rs"));
}

/// Users, roles and key permissions.
#[allow(clippy::all, clippy::pedantic)]
pub mod authpb {
    include!(concat!(env!("OUT_DIR"), "/authpb.rs"));
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/authpb.serde.rs"));
}

/// The main client API: KV, Watch, Lease, Cluster, Maintenance and Auth.
#[allow(clippy::all, clippy::pedantic)]
pub mod etcdserverpb {
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/etcdserverpb.serde.rs"));
}

/// oxetcd's own replicated-log payloads.
#[allow(clippy::all, clippy::pedantic)]
pub mod oxetcdpb {
    include!(concat!(env!("OUT_DIR"), "/oxetcdpb.rs"));
}

/// The leader-election service.
#[allow(clippy::all, clippy::pedantic)]
pub mod v3electionpb {
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.rs"));
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/v3electionpb.serde.rs"));
}

/// The distributed-lock service.
#[allow(clippy::all, clippy::pedantic)]
pub mod v3lockpb {
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.rs"));
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/v3lockpb.serde.rs"));
}

/// Encoded `google.protobuf.FileDescriptorSet` of every `.proto` file in this
/// crate, for gRPC reflection and JSON transcoding.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// The end of the range holding every key that starts with `prefix`, as
/// etcd's clients compute it (`GetPrefixRangeEnd`): the prefix with its
/// last byte below 0xff incremented and what follows dropped; `\0` (every
/// key from `prefix` on) when no such byte exists.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use crate::etcdserverpb::{
        request_op, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    };
    use crate::oxetcdpb::{proposal, Proposal};

    #[test]
    fn put_request_roundtrip() {
        let put = PutRequest {
            key: b"foo".to_vec(),
            value: b"bar".to_vec(),
            lease: 7,
            prev_kv: true,
            ignore_value: false,
            ignore_lease: true,
        };
        let bytes = put.encode_to_vec();
        assert_eq!(PutRequest::decode(bytes.as_slice()).unwrap(), put);
    }

    #[test]
    fn proposal_roundtrip() {
        let txn = TxnRequest {
            compare: vec![],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key: b"a".to_vec(),
                        range_end: b"b".to_vec(),
                        prev_kv: true,
                    },
                )),
            }],
            failure: vec![],
        };
        let proposal = Proposal {
            id: 42,
            request: Some(proposal::Request::Txn(txn)),
            user: "alice".into(),
            auth_revision: 7,
        };
        let bytes = proposal.encode_to_vec();
        assert_eq!(Proposal::decode(bytes.as_slice()).unwrap(), proposal);
    }

    #[test]
    fn range_request_decodes_etcd_wire_bytes() {
        // Field 1 (key, length-delimited): tag 0x0a, len 3, "foo".
        // Field 3 (limit, varint): tag 0x18, value 10.
        let wire = [0x0a, 0x03, b'f', b'o', b'o', 0x18, 0x0a];
        let req = RangeRequest::decode(&wire[..]).unwrap();
        assert_eq!(req.key, b"foo");
        assert_eq!(req.limit, 10);
        assert!(req.range_end.is_empty());
        assert_eq!(req.encode_to_vec(), wire);
    }

    #[test]
    fn file_descriptor_set_lists_every_file() {
        let fds = prost_types_free_decode(crate::FILE_DESCRIPTOR_SET);
        for name in [
            "mvccpb/kv.proto",
            "authpb/auth.proto",
            "etcdserverpb/rpc.proto",
            "oxetcdpb/internal.proto",
            "v3electionpb/v3election.proto",
            "v3lockpb/v3lock.proto",
        ] {
            assert!(fds.iter().any(|n| n == name), "{name} missing from {fds:?}");
        }
    }

    /// Reads the `name` of each `file` entry of a FileDescriptorSet without
    /// needing the descriptor types: `file` is field 1, `name` its field 1.
    fn prost_types_free_decode(bytes: &[u8]) -> Vec<String> {
        #[derive(Clone, PartialEq, prost::Message)]
        struct Set {
            #[prost(message, repeated, tag = "1")]
            file: Vec<File>,
        }
        #[derive(Clone, PartialEq, prost::Message)]
        struct File {
            #[prost(string, tag = "1")]
            name: String,
        }
        Set::decode(bytes)
            .unwrap()
            .file
            .into_iter()
            .map(|f| f.name)
            .collect()
    }
}
