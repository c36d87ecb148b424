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

use super::{key_bytes, Report, Shared, Workload, XorShift};

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
    let mut rng =
        XorShift(0x9E37_79B9_7F4A_7C15 ^ (client + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
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
                let puts: Vec<String> = (0..ops.max(1) as u64)
                    .map(|i| {
                        let key = key_bytes(
                            (n * ops as u64 + i) % shared.options.key_space_size.max(1),
                            shared.options.key_size,
                        );
                        format!(
                            r#"{{"request_put":{{"key":"{}","value":"{value}"}}}}"#,
                            STANDARD.encode(key)
                        )
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
