//! Member and cluster IDs, derived the way etcd derives them, so that the
//! same flags give the same IDs on every restart and on every member.
//!
//! A member's ID is the first eight bytes (big-endian) of the SHA-1 of its
//! sorted peer URLs concatenated, followed by the cluster token when one is
//! given. The cluster ID is the first eight bytes of the SHA-1 of the sorted
//! member IDs, each as eight big-endian bytes.

use sha1::{Digest, Sha1};

/// etcd's default `--initial-cluster-token`.
pub const DEFAULT_CLUSTER_TOKEN: &str = "etcd-cluster";

/// The ID of a member with these peer URLs in a cluster with this token.
pub fn member_id(peer_urls: &[&str], token: &str) -> u64 {
    salted_member_id(peer_urls, token, None)
}

/// The ID `member add` gives a member with these peer URLs. etcd salts it
/// with the time, so a member added again at the same URLs after a
/// removal never gets the removed one's ID; the salt here is the log index
/// the addition is proposed at, which grows as the time does and keeps
/// the core free of clocks. The new member learns it from the cluster.
pub fn added_member_id(peer_urls: &[&str], token: &str, salt: u64) -> u64 {
    salted_member_id(peer_urls, token, Some(salt))
}

fn salted_member_id(peer_urls: &[&str], token: &str, salt: Option<u64>) -> u64 {
    let mut urls: Vec<&str> = peer_urls.to_vec();
    urls.sort_unstable();
    let mut hasher = Sha1::new();
    for url in urls {
        hasher.update(url.as_bytes());
    }
    hasher.update(token.as_bytes());
    if let Some(salt) = salt {
        hasher.update(salt.to_string().as_bytes());
    }
    first_u64(&hasher.finalize())
}

/// The ID of a cluster made of these members.
pub fn cluster_id(member_ids: &[u64]) -> u64 {
    let mut ids = member_ids.to_vec();
    ids.sort_unstable();
    let mut hasher = Sha1::new();
    for id in ids {
        hasher.update(id.to_be_bytes());
    }
    first_u64(&hasher.finalize())
}

fn first_u64(digest: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A default single-member etcd (`--name default`, peer URL
    /// `http://localhost:2380`, token `etcd-cluster`) reports these IDs.
    #[test]
    fn default_member_matches_etcd() {
        let member = member_id(&["http://localhost:2380"], DEFAULT_CLUSTER_TOKEN);
        assert_eq!(format!("{member:x}"), "8e9e05c52164694d");
        assert_eq!(format!("{:x}", cluster_id(&[member])), "cdf818194e3a8c32");
    }

    #[test]
    fn added_members_get_a_new_id_each_time() {
        let urls = ["http://127.0.0.1:2380"];
        let first = added_member_id(&urls, DEFAULT_CLUSTER_TOKEN, 10);
        let again = added_member_id(&urls, DEFAULT_CLUSTER_TOKEN, 20);
        assert_ne!(first, again);
        assert_ne!(first, member_id(&urls, DEFAULT_CLUSTER_TOKEN));
        assert_eq!(first, added_member_id(&urls, DEFAULT_CLUSTER_TOKEN, 10));
    }
}
