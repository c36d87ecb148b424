//! One server process as a test plans it: which binary, its name and data
//! dir, the client URLs it serves, its peer listener, the cluster it
//! belongs to, and any further flags — turned into etcd's flags and
//! started as a [`Server`] (killed when dropped).
//!
//! Cluster members ([`crate::cluster`]), TLS servers on URLs a test chose,
//! and members started on restored snapshots all start here, so every
//! process-level test gives a server the same flags in the same order.

use std::path::{Path, PathBuf};

use oxetcd_conformance::{Server, ServerKind};

/// A server to start.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Which binary.
    pub kind: ServerKind,
    /// `--name`.
    pub name: String,
    /// `--data-dir`; kept when the server drops.
    pub data_dir: PathBuf,
    /// Served and advertised as given (`--listen-client-urls`,
    /// `--advertise-client-urls`); the first one's port is waited for.
    pub client_urls: Vec<String>,
    /// `--listen-peer-urls`.
    pub listen_peer_url: String,
    /// The cluster this server is a member of; `None` leaves etcd's
    /// defaults (a single member advertising `http://localhost:2380`).
    pub membership: Option<Membership>,
    /// Further flags, after the ones above (a flag given twice takes the
    /// later value).
    pub flags: Vec<String>,
}

/// How a member names itself to its cluster.
#[derive(Clone, Debug)]
pub struct Membership {
    /// `--initial-advertise-peer-urls`.
    pub advertise_peer_url: String,
    /// `--initial-cluster`.
    pub initial_cluster: String,
    /// `--initial-cluster-state`: `new` or `existing`.
    pub state: String,
    /// `--initial-cluster-token`.
    pub token: String,
}

impl Launch {
    /// `kind` named `name` on `data_dir`, serving `client_urls`, its peer
    /// listener at `listen_peer_url`; no cluster flags, no further flags.
    pub fn new(
        kind: ServerKind,
        name: &str,
        data_dir: &Path,
        client_urls: Vec<String>,
        listen_peer_url: String,
    ) -> Self {
        Self {
            kind,
            name: name.to_owned(),
            data_dir: data_dir.to_path_buf(),
            client_urls,
            listen_peer_url,
            membership: None,
            flags: Vec::new(),
        }
    }

    /// A member of the cluster `initial_cluster` (`token`) known to the
    /// others at `advertise_peer_url`, in `state`.
    pub fn member(
        mut self,
        advertise_peer_url: &str,
        initial_cluster: &str,
        state: &str,
        token: &str,
    ) -> Self {
        self.membership = Some(Membership {
            advertise_peer_url: advertise_peer_url.to_owned(),
            initial_cluster: initial_cluster.to_owned(),
            state: state.to_owned(),
            token: token.to_owned(),
        });
        self
    }

    /// `flags` added after the others.
    pub fn flags<S: AsRef<str>>(mut self, flags: &[S]) -> Self {
        self.flags
            .extend(flags.iter().map(|f| f.as_ref().to_owned()));
        self
    }

    /// The command line.
    pub fn args(&self) -> Vec<String> {
        let client_urls = self.client_urls.join(",");
        let mut args = vec![
            format!("--name={}", self.name),
            format!("--data-dir={}", self.data_dir.display()),
            format!("--listen-client-urls={client_urls}"),
            format!("--advertise-client-urls={client_urls}"),
            format!("--listen-peer-urls={}", self.listen_peer_url),
        ];
        if let Some(member) = &self.membership {
            args.extend([
                format!(
                    "--initial-advertise-peer-urls={}",
                    member.advertise_peer_url
                ),
                format!("--initial-cluster={}", member.initial_cluster),
                format!("--initial-cluster-state={}", member.state),
                format!("--initial-cluster-token={}", member.token),
            ]);
        }
        args.extend(self.flags.iter().cloned());
        args
    }

    /// Starts the server and waits until its first client URL accepts
    /// connections (or it logs that it is ready).
    pub fn start(&self) -> Result<Server, String> {
        let port = self
            .client_urls
            .first()
            .and_then(|url| url.rsplit(':').next())
            .and_then(|port| port.parse().ok())
            .ok_or("a client URL with a port is needed")?;
        Server::start_args(self.kind, port, &self.data_dir, &self.args())
    }
}
