//! Simple tokens: who holds which token, until when.
//!
//! Design. The member that checked a user's password picks a random
//! token; the `Authenticate` change carries it through the log, so every
//! member learns it (as etcd's members do) and any of them accepts it.
//! A token lives for the token TTL after its last use. Tokens are not
//! stored: a restarted member forgets them, and their holders
//! authenticate again, as with etcd. Deleting a user or changing its
//! password ends its tokens; disabling auth ends all of them.

use std::time::Duration;

use hashbrown::HashMap;

use crate::Instant;

/// Tokens of one member.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SimpleTokens {
    by_token: HashMap<String, Held>,
    ttl: Duration,
}

#[derive(Clone, Debug, PartialEq)]
struct Held {
    user: String,
    expires: Instant,
}

/// Tokens kept at most; past it the ones closest to expiry go first.
const TOKENS_MAX: usize = 100_000;

impl Default for SimpleTokens {
    fn default() -> Self {
        Self::new(Duration::from_secs(300))
    }
}

impl SimpleTokens {
    /// No tokens; each lives `ttl` after its last use.
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            by_token: HashMap::new(),
            ttl,
        }
    }

    /// `token` is `user`'s from `now`.
    pub(super) fn assign(&mut self, token: String, user: &str, now: Instant) {
        if self.by_token.len() >= TOKENS_MAX {
            self.by_token.retain(|_, held| held.expires > now);
            if self.by_token.len() >= TOKENS_MAX {
                if let Some(soonest) = self
                    .by_token
                    .iter()
                    .min_by_key(|(_, held)| held.expires)
                    .map(|(token, _)| token.clone())
                {
                    self.by_token.remove(&soonest);
                }
            }
        }
        self.by_token.insert(
            token,
            Held {
                user: user.to_owned(),
                expires: now + self.ttl,
            },
        );
        debug_assert!(self.by_token.len() <= TOKENS_MAX);
    }

    /// The user holding `token` at `now`, whose life starts over; `None`
    /// for an unknown or expired token.
    pub(super) fn resolve(&mut self, token: &str, now: Instant) -> Option<String> {
        let held = self.by_token.get_mut(token)?;
        if held.expires <= now {
            self.by_token.remove(token);
            return None;
        }
        held.expires = now + self.ttl;
        Some(held.user.clone())
    }

    /// Ends every token of `user`.
    pub(super) fn invalidate_user(&mut self, user: &str) {
        self.by_token.retain(|_, held| held.user != user);
    }

    /// Ends every token.
    pub(super) fn clear(&mut self) {
        self.by_token.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_lives_for_the_ttl_after_its_last_use() {
        let mut tokens = SimpleTokens::new(Duration::from_secs(10));
        let t0 = Instant::ZERO;
        tokens.assign("t".into(), "alice", t0);
        assert_eq!(
            tokens.resolve("t", t0 + Duration::from_secs(9)).as_deref(),
            Some("alice")
        );
        assert_eq!(
            tokens.resolve("t", t0 + Duration::from_secs(18)).as_deref(),
            Some("alice"),
            "use renews it"
        );
        assert_eq!(tokens.resolve("t", t0 + Duration::from_secs(28)), None);
        assert_eq!(tokens.resolve("t", t0), None, "an expired token is gone");
        tokens.assign("u".into(), "bob", t0);
        tokens.invalidate_user("bob");
        assert_eq!(tokens.resolve("u", t0), None);
    }
}
