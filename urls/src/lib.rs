//! etcd's member URLs: the syntax of every URL flag, `--initial-cluster`,
//! and the member and cluster IDs derived from them.
//!
//! Design: a member's ID is a hash of its normalized peer URLs
//! ([`oxetcd_core::ids`]), so whatever reads those URLs must read them
//! alike, or the same flags would name different members. Two programs
//! read them: the server, from its flags at startup, and `oxetcdctl
//! snapshot restore`, which checks a new member's flags as the server will
//! before it writes the member's data directory. Both use this crate; it
//! is its own crate so that `oxetcdctl` need not link the server for it.
//!
//! - [`url`]: `http://host:port`, `https://host:port`, and the `unix://`
//!   and `unixs://` socket URLs, normalized; comma lists of them.
//! - [`initial_cluster`]: `--initial-cluster`, checked against the
//!   member's own advertised peer URLs as etcd checks it at bootstrap, and
//!   the IDs of its members and of the cluster.
//!
//! - [`srv`]: DNS SRV lookups, where `--discovery-srv` finds members and
//!   oxetcdctl's `--discovery-srv` its endpoints.
//!
//! Everything but [`srv`]'s lookups is a pure function of its arguments.
//! A bad value is an [`InvalidValue`] that names the flag, the value and
//! what is wrong.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod initial_cluster;
pub mod srv;
pub mod url;

use std::fmt;

pub use initial_cluster::{cluster_id, member_id, parse_initial_cluster, InitialMember};
pub use url::{check_url, parse_url, parse_urls, split_list, Target, Url};

/// A flag whose value does not parse, or breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidValue {
    /// The flag's name, without dashes.
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

impl InvalidValue {
    /// `value`, given for `flag`, is wrong for `reason`.
    pub fn new(flag: &'static str, value: &str, reason: impl Into<String>) -> Self {
        Self {
            flag,
            value: value.to_owned(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            flag,
            value,
            reason,
        } = self;
        write!(f, "invalid value {value:?} for flag --{flag}: {reason}")
    }
}

impl std::error::Error for InvalidValue {}
