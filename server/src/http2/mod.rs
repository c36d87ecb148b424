//! oxetcd's own HTTP/2 server side for the client port: frames, HPACK and one
//! connection's state machine, all sans-io.
//!
//! Design: gRPC over HTTP/2 is nearly all this server speaks, and a
//! general-purpose HTTP/2 stack spent more on a small unary call than the
//! call itself (a task and channels per stream, a lock per frame, a copy
//! of every frame to gather writes). Here [`frame`] reads and writes
//! frames, [`hpack`] compresses header blocks, and [`connection`] keeps
//! one connection's streams, windows and settings: bytes and responses in,
//! events and bytes out. `serve::http2` drives it on a socket, answering
//! each stream inside the connection's task.

pub(crate) mod connection;

pub use connection::UNANSWERED_RESETS_MAX;
pub(crate) mod frame;
pub(crate) mod hpack;
mod output;
