//! The oxetcd client library and the `oxetcdctl` commands built on it.
//!
//! [`Client`] holds one gRPC channel per endpoint and hands them out
//! round-robin; the benchmark in [`bench`] drives many concurrent requests
//! over a few connections.

pub mod bench;

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// An error that reaches the user: connecting failed, or the server
/// answered with a status (its message is etcd's).
#[derive(Debug)]
pub enum Error {
    /// An endpoint URL could not be parsed.
    BadEndpoint(String),
    /// No endpoint could be reached.
    Connect(String),
    /// The server answered with an error status.
    Status(tonic::Status),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadEndpoint(e) => write!(f, "bad endpoint: {e}"),
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Status(s) => write!(f, "{}", s.message()),
        }
    }
}

impl std::error::Error for Error {}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        Self::Status(s)
    }
}

/// Opens `conns` connections spread round-robin over `endpoints`.
pub async fn connect(
    endpoints: &[String],
    conns: usize,
    dial_timeout: Duration,
) -> Result<Vec<Channel>, Error> {
    if endpoints.is_empty() {
        return Err(Error::BadEndpoint("no endpoints given".into()));
    }
    let mut channels = Vec::with_capacity(conns);
    for i in 0..conns.max(1) {
        let url = with_scheme(&endpoints[i % endpoints.len()]);
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| Error::BadEndpoint(format!("{url}: {e}")))?
            .connect_timeout(dial_timeout)
            .tcp_nodelay(true);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Error::Connect(format!("{url}: {e}")))?;
        channels.push(channel);
    }
    Ok(channels)
}

/// etcd's tools accept `host:port` as well as URLs.
fn with_scheme(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    }
}
