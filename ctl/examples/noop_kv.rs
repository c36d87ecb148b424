//! A KV endpoint that answers every request at once with an empty
//! response, to measure how many requests per second `oxetcdctl bench` can
//! generate by itself (its own overhead, with no storage or consensus).
//!
//! ```text
//! cargo run --release -p oxetcd-ctl --example noop_kv -- 127.0.0.1:23999 &
//! oxetcdctl --endpoints 127.0.0.1:23999 bench put --clients 256 --conns 16 --total 200000
//! ```

use oxetcd_proto::etcdserverpb::kv_server::{Kv, KvServer};
use oxetcd_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, RangeStreamResponse, TxnRequest, TxnResponse,
};
use tonic::{Request, Response, Status};

struct Noop;

#[tonic::async_trait]
impl Kv for Noop {
    type RangeStreamStream = tonic::codegen::BoxStream<RangeStreamResponse>;

    async fn range(&self, _: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        Ok(Response::new(RangeResponse::default()))
    }

    async fn range_stream(
        &self,
        _: Request<RangeRequest>,
    ) -> Result<Response<Self::RangeStreamStream>, Status> {
        let last = RangeStreamResponse {
            range_response: Some(RangeResponse::default()),
        };
        Ok(Response::new(Box::pin(futures_util::stream::iter([Ok(
            last,
        )]))))
    }

    async fn put(&self, _: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        Ok(Response::new(PutResponse::default()))
    }

    async fn delete_range(
        &self,
        _: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        Ok(Response::new(DeleteRangeResponse::default()))
    }

    async fn txn(&self, _: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        Ok(Response::new(TxnResponse::default()))
    }

    async fn compact(
        &self,
        _: Request<CompactionRequest>,
    ) -> Result<Response<CompactionResponse>, Status> {
        Ok(Response::new(CompactionResponse::default()))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;

    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:23999".to_owned());
    let listener = tokio::net::TcpListener::bind(&address).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = TowerToHyperService::new(KvServer::new(Noop));
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
