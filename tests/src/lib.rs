//! The harness of the process-level tests: servers and clusters of the
//! oxetcd binaries (and Debian's etcd, the reference) started as real
//! processes on 127.0.0.1, and etcd's own clients run against them.
//!
//! - [`launch`]: one server's flags and start ([`Launch`]); the process is
//!   a [`Server`], killed when dropped.
//! - [`cluster`]: multi-member clusters ([`Cluster`], [`ClusterOptions`]):
//!   plaintext or TLS peers, mixed binaries, members added and restarted.
//! - [`ports`]: where ports come from ([`Ports`]).
//! - [`proxy`]: fault-injecting proxies in front of members' peer ports
//!   ([`proxy::PeerProxies`]): links cut, black-holed, one-way or slow.
//! - [`history_load`]: concurrent clients recorded as a history while a
//!   fault strikes, then checked for linearizability and an exact watch.
//! - [`pki`]: the test PKI and the TLS flags that name its files.
//! - [`process`]: a guard for processes a test spawns itself.
//! - [`etcdctl`]: running Debian's `etcdctl` (or `oxetcdctl`) and
//!   normalising its output so answers from etcd and oxetcd compare byte
//!   for byte; [`session`] compares whole command sequences.
//! - [`gateway`]: a client of the JSON gateway ([`gateway::JsonClient`]).
//! - [`probe`]: what members say through etcdctl: leader, IDs, values.

pub mod cluster;
pub mod etcdctl;
pub mod gateway;
pub mod history_load;
pub mod launch;
pub mod pki;
pub mod ports;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod session;

pub use cluster::{Cluster, ClusterOptions, Member};
pub use launch::Launch;
pub use oxetcd_conformance::{binary_path, Grpc, Server, ServerKind};
pub use ports::Ports;
