//! One scenario suite, many targets.
//!
//! Every scenario in [`scenarios::ALL`] is written once against [`Target`],
//! asserts etcd's exact behaviour, and runs against:
//!
//! - the in-process core ([`InProcess`]: a `Node` over in-memory storage,
//!   driven synchronously — no network, no threads),
//! - the `oxetcd` and `oxetcd-smol` binaries over real sockets ([`Grpc`]),
//! - a real etcd (Debian's `etcd-server`), which proves the expectations are
//!   etcd's and not ours.
//!
//! Each scenario gets a fresh target, so it may assert absolute revisions.
//! The test files in `tests/` run the whole list against one kind of target
//! and fail with the names and messages of every scenario that failed.

mod auth_call;
mod grpc;
mod in_process;
mod launch;
mod runner;
pub mod scenarios;
mod target;

pub use auth_call::AuthCall;
pub use grpc::Grpc;
pub use in_process::InProcess;
pub use launch::{binary_path, free_port, Server, ServerKind};
pub use runner::{assert_all_pass, run_suite, Outcome};
pub use target::{http_request, Failure, Target};
