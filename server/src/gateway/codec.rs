//! JSON ↔ protobuf for one message type, and gRPC's message framing.
//!
//! Design: the route table holds plain function pointers
//! ([`RequestCodec`], [`ResponseCodec`]) instantiated per message type, so
//! the gateway's dispatch is data, not a match per method. JSON is the
//! proto3 mapping generated for the prost messages (`oxetcd-proto`'s `json`
//! feature); nothing here writes JSON by hand. Parsing takes the first
//! JSON value of a buffer and says how many bytes it used, as Go's
//! `json.Decoder` does for grpc-gateway: a unary body's trailing bytes are
//! ignored, and a stream's body is a sequence of values.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What parsing the front of a buffer found.
#[derive(Debug, PartialEq)]
pub(crate) enum Parsed {
    /// One message, protobuf-encoded, and the bytes of the buffer it used.
    Message { proto: Bytes, used: usize },
    /// Only whitespace so far.
    Empty,
    /// The value is not complete yet: more bytes may finish it.
    Incomplete,
    /// Not a JSON encoding of the message; the decoder's words.
    Invalid(String),
}

/// Parses the first JSON value of a buffer into a request message.
pub(crate) type RequestCodec = fn(&[u8]) -> Parsed;

/// Turns one protobuf-encoded response message into its JSON.
pub(crate) type ResponseCodec = fn(&[u8]) -> Result<Vec<u8>, String>;

/// [`RequestCodec`] for `T`.
pub(crate) fn request_json<T: DeserializeOwned + Message>(buffer: &[u8]) -> Parsed {
    let mut values = serde_json::Deserializer::from_slice(buffer).into_iter::<T>();
    match values.next() {
        None => Parsed::Empty,
        Some(Ok(message)) => Parsed::Message {
            proto: Bytes::from(message.encode_to_vec()),
            used: values.byte_offset(),
        },
        Some(Err(e)) if e.is_eof() => Parsed::Incomplete,
        Some(Err(e)) => without_nulls::<T>(buffer).unwrap_or(Parsed::Invalid(e.to_string())),
    }
}

/// The first value of `buffer` parsed again with its `null` fields left
/// out: protobuf's JSON mapping (and so grpc-gateway) reads `null` as the
/// field's default, which the generated deserializers accept only for
/// message fields. Tried only when the direct parse failed, so the usual
/// request is parsed once.
fn without_nulls<T: DeserializeOwned + Message>(buffer: &[u8]) -> Option<Parsed> {
    let mut values = serde_json::Deserializer::from_slice(buffer).into_iter::<serde_json::Value>();
    let mut value = values.next()?.ok()?;
    if !drop_nulls(&mut value) {
        return None;
    }
    let message = T::deserialize(value).ok()?;
    Some(Parsed::Message {
        proto: Bytes::from(message.encode_to_vec()),
        used: values.byte_offset(),
    })
}

/// Removes every object member whose value is `null`, at any depth;
/// whether it removed any.
fn drop_nulls(value: &mut serde_json::Value) -> bool {
    match value {
        serde_json::Value::Object(members) => {
            let before = members.len();
            members.retain(|_, member| !member.is_null());
            let mut dropped = members.len() != before;
            for member in members.values_mut() {
                dropped |= drop_nulls(member);
            }
            dropped
        }
        serde_json::Value::Array(items) => {
            let mut dropped = false;
            for item in items {
                dropped |= drop_nulls(item);
            }
            dropped
        }
        _ => false,
    }
}

/// [`ResponseCodec`] for `T`.
pub(crate) fn response_json<T: Message + Default + Serialize>(
    proto: &[u8],
) -> Result<Vec<u8>, String> {
    let message = T::decode(proto).map_err(|e| e.to_string())?;
    serde_json::to_vec(&message).map_err(|e| e.to_string())
}

/// Length of gRPC's message prefix: a compression flag and a big-endian
/// `u32` length.
const PREFIX_BYTES: usize = 5;

/// One message framed as gRPC sends it (uncompressed).
pub(crate) fn frame(proto: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(PREFIX_BYTES + proto.len());
    framed.put_u8(0);
    // The node refuses messages far below 4 GiB; a longer one is cut to a
    // length the server will refuse as too large, never wrapped.
    framed.put_u32(u32::try_from(proto.len()).unwrap_or(u32::MAX));
    framed.put_slice(proto);
    framed.freeze()
}

/// Splits a gRPC response body back into messages as its bytes arrive.
#[derive(Default)]
pub(crate) struct Deframer {
    buffer: BytesMut,
}

impl Deframer {
    /// Adds bytes of the body.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    /// The next whole message, if one has arrived. The server never
    /// compresses (the gateway asks for no encoding), so the flag is not
    /// read.
    pub(crate) fn next_message(&mut self) -> Option<Bytes> {
        if self.buffer.len() < PREFIX_BYTES {
            return None;
        }
        let length = u32::from_be_bytes([
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ]);
        let length = usize::try_from(length).ok()?;
        if self.buffer.len() < PREFIX_BYTES + length {
            return None;
        }
        self.buffer.advance(PREFIX_BYTES);
        Some(self.buffer.split_to(length).freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::{PutRequest, RangeResponse, ResponseHeader};
    use oxetcd_proto::mvccpb::KeyValue;

    fn put(parsed: Parsed) -> (PutRequest, usize) {
        match parsed {
            Parsed::Message { proto, used } => (PutRequest::decode(proto).unwrap(), used),
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn requests_take_both_name_styles_and_int64_both_ways() {
        let (snake, _) = put(request_json::<PutRequest>(
            br#"{"key":"Zm9v","value":"YmFy","lease":"7","prev_kv":true}"#,
        ));
        let (camel, _) = put(request_json::<PutRequest>(
            br#"{"key":"Zm9v","value":"YmFy","lease":7,"prevKv":true}"#,
        ));
        let expected = PutRequest {
            key: b"foo".to_vec(),
            value: b"bar".to_vec(),
            lease: 7,
            prev_kv: true,
            ..Default::default()
        };
        assert_eq!(snake, expected);
        assert_eq!(camel, expected);
    }

    #[test]
    fn null_is_the_default_as_in_protobufs_json_mapping() {
        let (request, used) = put(request_json::<PutRequest>(
            br#"{"key":"Zm9v","value":null,"lease":null,"prev_kv":null} {"key":"YQ=="}"#,
        ));
        assert_eq!(
            request,
            PutRequest {
                key: b"foo".to_vec(),
                ..Default::default()
            }
        );
        assert_eq!(used, 55);
        let txn = request_json::<oxetcd_proto::etcdserverpb::TxnRequest>(
            br#"{"success":[{"request_put":{"key":"Zm9v","lease":null}}]}"#,
        );
        assert!(matches!(txn, Parsed::Message { .. }), "{txn:?}");
        // A null that is not what breaks the parse changes nothing.
        assert!(matches!(
            request_json::<PutRequest>(br#"{"key":5,"value":null}"#),
            Parsed::Invalid(_)
        ));
    }

    #[test]
    fn unknown_fields_are_ignored_as_grpc_gateway_does() {
        let (request, _) = put(request_json::<PutRequest>(
            br#"{"key":"Zm9v","no_such_field":{"a":[1]}}"#,
        ));
        assert_eq!(request.key, b"foo");
    }

    #[test]
    fn a_buffer_is_read_one_value_at_a_time() {
        let body = br#" {"key":"YQ=="} {"key":"Yg=="}"#;
        let (first, used) = put(request_json::<PutRequest>(body));
        assert_eq!(first.key, b"a");
        let (second, _) = put(request_json::<PutRequest>(&body[used..]));
        assert_eq!(second.key, b"b");
        assert_eq!(request_json::<PutRequest>(b"  \n"), Parsed::Empty);
        assert_eq!(
            request_json::<PutRequest>(br#"{"key":"#),
            Parsed::Incomplete
        );
        assert!(matches!(
            request_json::<PutRequest>(b"{key}"),
            Parsed::Invalid(_)
        ));
        assert!(matches!(
            request_json::<PutRequest>(br#"{"key":5}"#),
            Parsed::Invalid(_)
        ));
    }

    #[test]
    fn responses_are_etcds_json() {
        let response = RangeResponse {
            header: Some(ResponseHeader {
                cluster_id: 14841639068965178418,
                member_id: 10276657743932975437,
                revision: 2,
                raft_term: 2,
            }),
            kvs: vec![KeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 2,
                version: 1,
                value: b"bar".to_vec(),
                lease: 0,
            }],
            more: false,
            count: 1,
        };
        let json = response_json::<RangeResponse>(&response.encode_to_vec()).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            concat!(
                r#"{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"2","raft_term":"2"},"#,
                r#""kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}"#
            )
        );
    }

    #[test]
    fn frames_round_trip() {
        let mut deframer = Deframer::default();
        let framed = frame(b"hello");
        deframer.push(&framed[..3]);
        assert_eq!(deframer.next_message(), None);
        deframer.push(&framed[3..]);
        deframer.push(&frame(b""));
        assert_eq!(deframer.next_message().as_deref(), Some(&b"hello"[..]));
        assert_eq!(deframer.next_message().as_deref(), Some(&b""[..]));
        assert_eq!(deframer.next_message(), None);
    }
}
