//! The unary `KV.Range`, encoded so that a large answer does not sit in
//! memory twice.
//!
//! Design: encoding a response whole into a buffer grown by doubling, while
//! the response's key-values are still held, briefly needs about 3N for a
//! range of N bytes. [`encode_draining`] reserves the exact encoded size
//! once and then moves the key-values into it one by one, freeing each as
//! it is written, so the peak stays near N. Ranges are answered with it by
//! the router's unary path (`super::unary`); those that path hands to
//! tonic come to [`RangeServer`], which serves the one method through
//! tonic with [`RangeCodec`], the same encoding (every other KV method
//! goes to the generated server). The call itself is [`KvService`]'s,
//! unchanged; only the encoding differs. A response encodes its header,
//! `more` and `count` before its key-values, which every protobuf reader
//! accepts (fields may come in any order).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use oxetcd_core::storage::KvStore;
use oxetcd_proto::etcdserverpb::kv_server::Kv;
use oxetcd_proto::etcdserverpb::{RangeRequest, RangeResponse};
use prost::Message;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::codegen::{BoxFuture, Service, StdError};
use tonic::Status;
use tonic_prost::ProstDecoder;

use super::kv::KvService;

/// `kvs`' field number in `RangeResponse`.
const KVS_FIELD: u32 = 2;

/// Serves `KV.Range` with [`RangeCodec`].
pub(crate) struct RangeServer<K: KvStore> {
    service: Arc<KvService<K>>,
    max_decoding_message_size: usize,
}

impl<K: KvStore> Clone for RangeServer<K> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            max_decoding_message_size: self.max_decoding_message_size,
        }
    }
}

impl<K: KvStore> RangeServer<K> {
    /// Serves `service`'s ranges, decoding requests up to
    /// `max_decoding_message_size` bytes.
    pub(crate) fn new(service: Arc<KvService<K>>, max_decoding_message_size: usize) -> Self {
        Self {
            service,
            max_decoding_message_size,
        }
    }
}

impl<K: KvStore, B> Service<http::Request<B>> for RangeServer<K>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = RangeCall(self.service.clone());
        let max_decoding = self.max_decoding_message_size;
        Box::pin(async move {
            // Responses are as large as the data asked for, as in etcd.
            let mut grpc = tonic::server::Grpc::new(RangeCodec)
                .apply_max_message_size_config(Some(max_decoding), Some(usize::MAX));
            Ok(grpc.unary(call, request).await)
        })
    }
}

/// One call of the method.
struct RangeCall<K: KvStore>(Arc<KvService<K>>);

impl<K: KvStore> Service<tonic::Request<RangeRequest>> for RangeCall<K> {
    type Response = tonic::Response<RangeResponse>;
    type Error = Status;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<RangeRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { Kv::range(&*service, request).await })
    }
}

/// Decodes `RangeRequest`s; encodes `RangeResponse`s with
/// [`RangeEncoder`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RangeCodec;

impl Codec for RangeCodec {
    type Encode = RangeResponse;
    type Decode = RangeRequest;
    type Encoder = RangeEncoder;
    type Decoder = ProstDecoder<RangeRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        RangeEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Encodes a `RangeResponse` into a buffer reserved at its exact size,
/// freeing each key-value once it is written.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RangeEncoder;

impl Encoder for RangeEncoder {
    type Item = RangeResponse;
    type Error = Status;

    fn encode(&mut self, item: RangeResponse, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        encode_draining(item, dst, EncodeBuf::reserve);
        Ok(())
    }
}

/// Writes `response` into `dst`, after `reserve`ing its exact size: its
/// other fields, then its key-values one by one, each dropped once written.
pub(crate) fn encode_draining<B: bytes::BufMut>(
    mut response: RangeResponse,
    dst: &mut B,
    reserve: impl FnOnce(&mut B, usize),
) {
    let kvs = std::mem::take(&mut response.kvs);
    let kvs_len: usize = kvs
        .iter()
        .map(|kv| prost::encoding::message::encoded_len(KVS_FIELD, kv))
        .sum();
    reserve(dst, response.encoded_len() + kvs_len);
    response.encode_raw(dst);
    for kv in kvs {
        prost::encoding::message::encode(KVS_FIELD, &kv, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxetcd_proto::etcdserverpb::ResponseHeader;
    use oxetcd_proto::mvccpb::KeyValue;

    #[test]
    fn the_draining_encoding_decodes_to_the_same_response() {
        let response = RangeResponse {
            header: Some(ResponseHeader {
                revision: 42,
                ..Default::default()
            }),
            kvs: (0..100)
                .map(|i| KeyValue {
                    key: format!("key/{i}").into_bytes(),
                    value: vec![b'v'; i],
                    create_revision: i as i64,
                    ..Default::default()
                })
                .collect(),
            more: true,
            count: 1000,
        };
        let mut buffer = bytes::BytesMut::new();
        encode_draining(response.clone(), &mut buffer, bytes::BytesMut::reserve);
        assert_eq!(buffer.len(), response.encoded_len());
        assert_eq!(RangeResponse::decode(buffer.freeze()).unwrap(), response);
    }
}
