//! `--initial-cluster` and the raft timing flags, checked as etcd checks
//! them at bootstrap. The initial cluster itself is parsed by
//! `oxetcd_urls`, which `oxetcdctl snapshot restore` shares.

use super::flags::ELECTION_TIMEOUT_MS_MAX;
use super::values::invalid;
use super::ConfigError;

pub(super) use oxetcd_urls::parse_initial_cluster;
pub use oxetcd_urls::InitialMember;

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    New,
    /// Join a cluster that already runs (after `member add`).
    Existing,
}

/// `--heartbeat-interval` and `--election-timeout`, with etcd's rules: both
/// positive, the timeout at least five heartbeats and at most 50 s.
pub(super) fn parse_raft_timing(
    heartbeat: &str,
    election: &str,
) -> Result<(u64, u64), ConfigError> {
    let positive = |flag: &'static str, value: &str| match value.trim().parse::<u64>() {
        Ok(0) => Err(invalid(flag, value, "must be greater than zero")),
        Ok(n) => Ok(n),
        Err(e) => Err(invalid(flag, value, e.to_string())),
    };
    let heartbeat_ms = positive("heartbeat-interval", heartbeat)?;
    let election_ms = positive("election-timeout", election)?;
    if heartbeat_ms.saturating_mul(5) > election_ms {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] should be at least as 5 times as \
                 --heartbeat-interval[{heartbeat_ms}ms]"
            ),
        ));
    }
    if election_ms > ELECTION_TIMEOUT_MS_MAX {
        return Err(invalid(
            "election-timeout",
            election,
            format!(
                "--election-timeout[{election_ms}ms] is too long, and should be set less than \
                 {ELECTION_TIMEOUT_MS_MAX}ms"
            ),
        ));
    }
    Ok((heartbeat_ms, election_ms))
}
