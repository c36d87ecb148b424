//! The KV workloads over the JSON gateway instead of gRPC: each client
//! keeps one HTTP/1.1 connection and `POST`s etcd's JSON (base64 keys and
//! values) to `/v3/kv/put`, `/v3/kv/range` or `/v3/kv/txn`, back to back,
//! as an etcd3gw-style client would. Plaintext only; the token, if any,
//! goes in `Authorization`.

use std::sync::Arc;
use std::time::Instant;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::{Report, Shared, Workload, XorShift};

/// One client's loop against the gateway at `address` (`host:port`).
pub(super) async fn kv_loop(address: String, client: u64, shared: Arc<Shared>) -> Report {
    let mut report = Report::default();
    let mut sender = match connect(&address).await {
        Ok(sender) => sender,
        Err(e) => {
            report.error(e);
            return report;
        }
    };
    let mut rng = XorShift::for_client(client);
    let value = STANDARD.encode(vec![b'v'; shared.options.val_size]);
    while let Some(n) = shared.claim().await {
        let key = STANDARD.encode(shared.key(n, &mut rng));
        let (path, body) = match shared.options.workload {
            Workload::Put => (
                "/v3/kv/put",
                format!(r#"{{"key":"{key}","value":"{value}"}}"#),
            ),
            Workload::Range { serializable } => (
                "/v3/kv/range",
                format!(r#"{{"key":"{key}","serializable":{serializable}}}"#),
            ),
            Workload::TxnPut { ops } => {
                let puts: Vec<String> = shared
                    .txn_keys(n, ops)
                    .map(|key| {
                        let key = STANDARD.encode(key);
                        format!(r#"{{"request_put":{{"key":"{key}","value":"{value}"}}}}"#)
                    })
                    .collect();
                (
                    "/v3/kv/txn",
                    format!(r#"{{"success":[{}]}}"#, puts.join(",")),
                )
            }
            Workload::Watch { .. } | Workload::LeaseKeepalive => {
                report.error("only put, range and txn-put run over the gateway");
                return report;
            }
        };
        let mut request = http::Request::post(path)
            .header(http::header::HOST, address.as_str())
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(token) = &shared.options.token {
            request = request.header(http::header::AUTHORIZATION, token.as_bytes());
        }
        let request = match request.body(Full::new(Bytes::from(body))) {
            Ok(request) => request,
            Err(e) => {
                report.error(e.to_string());
                return report;
            }
        };
        let sent = Instant::now();
        let answer = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
            }
        };
        match answer.await {
            Ok(()) => report.samples.push(shared.sample(sent)),
            Err(e) => {
                report.error(e);
                // The connection may be gone: start a new one.
                match connect(&address).await {
                    Ok(fresh) => sender = fresh,
                    Err(e) => {
                        report.error(e);
                        return report;
                    }
                }
            }
        }
    }
    report
}

async fn connect(
    address: &str,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect {address}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}
