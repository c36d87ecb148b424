//! Helpers for end-to-end tests of the oxetcd binaries with etcd's own
//! clients: running Debian's `etcdctl` against a server and normalising its
//! output so that answers from etcd and oxetcd can be compared byte for
//! byte. Servers are started with [`oxetcd_conformance::Server`].

pub mod etcdctl;
pub mod session;

pub use oxetcd_conformance::{Grpc, Server, ServerKind};
