//! From an endpoint, as etcd's tools take it, to a connection: a bare
//! `host:port` or a URL (`http`, `https`, `unix`, `unixs`) becomes the URI
//! tonic is given and the socket the connectors open ([`dial_target`]);
//! [`connect`] opens a gRPC channel over it, plaintext or TLS; and
//! [`Client::metrics`] reads a member's `/metrics` over the same
//! connectors (`check datascale`).

use std::io;
use std::sync::Arc;

use oxetcd_tls::rustls::ClientConfig;
use tonic::transport::{Channel, Endpoint};

use crate::client::Client;
use crate::connector::{PlainConnector, Socket, TlsConnector};
use crate::Error;

/// etcd's tools accept `host:port` as well as URLs; a bare address gets
/// `https://` when it is dialled with TLS.
pub fn endpoint_url(endpoint: &str, secure: bool) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else if secure {
        format!("https://{endpoint}")
    } else {
        format!("http://{endpoint}")
    }
}

impl Client {
    /// The text `endpoint` serves at `/metrics` (HTTP/1.1, over TLS as the
    /// endpoint's gRPC calls are), bounded by the command timeout.
    pub async fn metrics(&self, endpoint: &str) -> Result<String, Error> {
        use http_body_util::BodyExt;
        let secure = self.config().tls.secures(endpoint);
        let (url, socket) = dial_target(endpoint, secure)?;
        let uri: http::Uri = url
            .parse()
            .map_err(|e| Error::BadEndpoint(format!("{endpoint}: {e}")))?;
        let request = http::Request::get("/metrics")
            .header(
                http::header::HOST,
                uri.authority().map_or("localhost", |a| a.as_str()),
            )
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| Error::Protocol(e.to_string()))?;
        let fetch = async {
            let response = match (secure, self.tls_config()) {
                (true, Some(tls)) => {
                    let io = tower_service::Service::call(
                        &mut TlsConnector::new(tls.clone(), socket),
                        uri,
                    )
                    .await?;
                    // The TLS configuration offers h2 only (gRPC).
                    get_h2(io, request).await?
                }
                _ => {
                    let io = tower_service::Service::call(&mut PlainConnector(socket), uri).await?;
                    get(io, request).await?
                }
            };
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(io::Error::other)?;
            Ok::<_, io::Error>(String::from_utf8_lossy(&body.to_bytes()).into_owned())
        };
        tokio::time::timeout(self.config().command_timeout, fetch)
            .await
            .map_err(|_| Error::Protocol(format!("{endpoint}: /metrics timed out")))?
            .map_err(|e| Error::Protocol(format!("{endpoint}: {e}")))
    }
}

/// One HTTP/1.1 request over `io`.
async fn get<IO>(
    io: IO,
    request: http::Request<http_body_util::Empty<bytes::Bytes>>,
) -> io::Result<http::Response<hyper::body::Incoming>>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut send, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(connection);
    send.send_request(request).await.map_err(io::Error::other)
}

/// One HTTP/2 request over `io`.
async fn get_h2<IO>(
    io: IO,
    request: http::Request<http_body_util::Empty<bytes::Bytes>>,
) -> io::Result<http::Response<hyper::body::Incoming>>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut send, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .map_err(io::Error::other)?;
    tokio::spawn(connection);
    send.send_request(request).await.map_err(io::Error::other)
}

/// Whether `endpoint` is a `unix:` or `unixs:` socket URL.
pub(crate) fn is_unix(endpoint: &str) -> bool {
    let lower = endpoint.get(..6).unwrap_or(endpoint).to_ascii_lowercase();
    lower.starts_with("unix:") || lower.starts_with("unixs:")
}

/// The URI tonic is given for `endpoint`, and the socket the connection
/// opens: for a `unix://` or `unixs://` endpoint a stand-in URI (tonic
/// wants one; it only names the scheme) and the socket's path, as etcd
/// reads it (see `oxetcd_urls`).
pub fn dial_target(endpoint: &str, secure: bool) -> Result<(String, Socket), Error> {
    if !is_unix(endpoint) {
        return Ok((endpoint_url(endpoint, secure), Socket::tcp()));
    }
    let url = oxetcd_urls::parse_url("endpoints", endpoint)
        .map_err(|e| Error::BadEndpoint(format!("{endpoint}: {}", e.reason)))?;
    let oxetcd_urls::Target::Unix(path) = url.target else {
        return Err(Error::BadEndpoint(format!("{endpoint}: not a unix socket")));
    };
    let scheme = if secure { "https" } else { "http" };
    Ok((format!("{scheme}://localhost"), Socket::unix(path.into())))
}

/// Opens a channel to `endpoint` through `socket`: over TLS with `tls`,
/// else plaintext.
pub async fn connect(
    endpoint: &Endpoint,
    tls: Option<&Arc<ClientConfig>>,
    socket: Socket,
) -> Result<Channel, tonic::transport::Error> {
    match tls {
        None if !socket.is_unix() => endpoint.connect().await,
        None => {
            endpoint
                .connect_with_connector(PlainConnector(socket))
                .await
        }
        Some(tls) => {
            endpoint
                .connect_with_connector(TlsConnector::new(tls.clone(), socket))
                .await
        }
    }
}
