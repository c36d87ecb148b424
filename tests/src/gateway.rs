//! A client of the JSON gateway for the tests: HTTP/1.1 `POST`s of JSON
//! bodies with hyper's client, each on its own connection, every wait
//! bounded. Streams (`/v3/watch`, `/v3/lease/keepalive`) are read line by
//! line as the server flushes them, and their request bodies can grow
//! while the answer streams.

use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

/// Longest a request (connect, send, whole answer) may take.
const REQUEST_DEADLINE: Duration = Duration::from_secs(20);

/// A gateway's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Answer {
    /// The body as JSON; panics (failing the test) when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
}

/// A client of one server's gateway.
pub struct JsonClient {
    runtime: tokio::runtime::Runtime,
    address: String,
}

impl JsonClient {
    /// A client of the server at `address` (`host:port`).
    pub fn new(address: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
        Self {
            runtime,
            address: address.to_owned(),
        }
    }

    /// `POST path` with `body`.
    pub fn post(&self, path: &str, body: &str) -> Answer {
        self.request("POST", path, body, &[])
    }

    /// A request with any method and extra headers.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Answer {
        let request = build(
            &self.address,
            method,
            path,
            headers,
            Full::new(Bytes::from(body.to_owned())),
        );
        let address = self.address.clone();
        self.runtime.block_on(async move {
            let answer = tokio::time::timeout(REQUEST_DEADLINE, async move {
                let response = send(&address, request).await?;
                let (parts, body) = response.into_parts();
                let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
                Ok::<_, String>(Answer {
                    status: parts.status.as_u16(),
                    content_type: content_type(&parts.headers),
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                })
            })
            .await;
            match answer {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => panic!("{path}: {e}"),
                Err(_) => panic!("{path}: no answer within {REQUEST_DEADLINE:?}"),
            }
        })
    }

    /// Opens a stream: `POST path` with `first` as the start of a body
    /// that [`JsonStream::send`] can add to.
    pub fn stream(&self, path: &str, first: &str, headers: &[(&str, &str)]) -> JsonStream {
        let (requests, body) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let _ = requests.send(Bytes::from(first.to_owned()));
        let body = StreamBody::new(futures_util::stream::unfold(body, |mut body| async move {
            let data = body.recv().await?;
            Some((Ok::<_, std::convert::Infallible>(Frame::data(data)), body))
        }));
        let request = build(&self.address, "POST", path, headers, body);
        let (lines, received) = mpsc::channel();
        let address = self.address.clone();
        let task = self.runtime.spawn(async move {
            let response = match send(&address, request).await {
                Ok(response) => response,
                Err(e) => {
                    let _ = lines.send(Line::Failed(e));
                    return;
                }
            };
            let _ = lines.send(Line::Status(response.status().as_u16()));
            let mut body = response.into_body();
            let mut pending = Vec::new();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let _ =
                        lines.send(Line::Text(String::from_utf8_lossy(&line).trim().to_owned()));
                }
            }
            if !pending.is_empty() {
                let _ = lines.send(Line::Text(String::from_utf8_lossy(&pending).into_owned()));
            }
            let _ = lines.send(Line::Ended);
        });
        JsonStream {
            requests: Some(requests),
            received,
            task,
        }
    }
}

enum Line {
    Status(u16),
    Text(String),
    Ended,
    Failed(String),
}

/// One open stream of the gateway; dropping it closes the connection.
pub struct JsonStream {
    requests: Option<tokio::sync::mpsc::UnboundedSender<Bytes>>,
    received: mpsc::Receiver<Line>,
    task: tokio::task::JoinHandle<()>,
}

impl JsonStream {
    /// Adds `json` to the request body.
    pub fn send(&self, json: &str) {
        if let Some(requests) = &self.requests {
            let _ = requests.send(Bytes::from(json.to_owned()));
        }
    }

    /// Ends the request body; the answer may go on.
    pub fn close_body(&mut self) {
        self.requests = None;
    }

    /// The HTTP status, once the server sent its headers.
    pub fn status(&self, within: Duration) -> Option<u16> {
        match self.received.recv_timeout(within) {
            Ok(Line::Status(status)) => Some(status),
            Ok(Line::Failed(e)) => panic!("stream failed: {e}"),
            _ => None,
        }
    }

    /// The next line of the answer within `within`; `None` when none
    /// came or the answer ended.
    pub fn next_line(&self, within: Duration) -> Option<String> {
        match self.received.recv_timeout(within) {
            Ok(Line::Text(line)) => Some(line),
            Ok(Line::Failed(e)) => panic!("stream failed: {e}"),
            _ => None,
        }
    }

    /// Whether the answer ended (rather than staying open) within `within`.
    pub fn ended(&self, within: Duration) -> bool {
        matches!(self.received.recv_timeout(within), Ok(Line::Ended))
    }
}

impl Drop for JsonStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn build<B>(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: B,
) -> http::Request<B> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, address)
        .header(http::header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(body)
        .unwrap_or_else(|e| panic!("request {method} {path}: {e}"))
}

async fn send<B>(
    address: &str,
    request: http::Request<B>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect {address}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

fn content_type(headers: &http::HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}
