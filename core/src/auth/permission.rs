//! Whether a user may do what a request asks, by etcd's rules.
//!
//! Design. A role grants READ, WRITE or READWRITE on a key, a range
//! `[key, range_end)`, or everything from a key on (`range_end` "\0"). A
//! request needs one kind of access on one key or one range; it is
//! permitted when the union of the user's granted ranges of that kind
//! covers it (a point only needs to fall in one). The `root` role may do
//! anything. Checks are pure functions of the applied store, run at
//! admission and again at apply against the auth revision the request
//! was admitted under, so a change in between is honoured.

use oxetcd_proto::authpb::permission::Type as PermissionType;
use oxetcd_proto::authpb::{Role, User};
use oxetcd_proto::etcdserverpb::request_op::Request as Op;
use oxetcd_proto::etcdserverpb::{RequestOp, TxnRequest};

use super::{AuthStore, ROOT};
use crate::error::Error;

/// The kind of access a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading keys (ranges, compares, `prev_kv`, watches).
    Read,
    /// Writing keys (puts, deletes, a revoke's attached keys).
    Write,
}

/// Who a request comes from, once its credentials are resolved: the user
/// (empty: nobody) and the auth revision it was admitted under (0:
/// nobody).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthInfo {
    /// The user's name.
    pub user: String,
    /// The auth revision when the request was admitted.
    pub revision: u64,
}

impl AuthStore {
    /// etcd's check of one key (`range_end` empty) or one range: nothing is
    /// checked while auth is off.
    pub fn check(
        &self,
        who: &AuthInfo,
        access: Access,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), Error> {
        let Some(user) = self.checked_user(who)? else {
            return Ok(());
        };
        if has_root_role(user) || self.permits(user, access, key, range_end) {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }

    /// Every key a transaction touches, nested transactions included:
    /// compares and ranges need read, puts write, deletes write (and read
    /// with `prev_kv`).
    pub fn check_txn(&self, who: &AuthInfo, txn: &TxnRequest) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        for compare in &txn.compare {
            self.check(who, Access::Read, &compare.key, &compare.range_end)?;
        }
        txn.success
            .iter()
            .chain(&txn.failure)
            .try_for_each(|op| self.check_op(who, op))
    }

    fn check_op(&self, who: &AuthInfo, op: &RequestOp) -> Result<(), Error> {
        match &op.request {
            Some(Op::RequestRange(r)) => self.check(who, Access::Read, &r.key, &r.range_end),
            Some(Op::RequestPut(r)) => {
                self.check(who, Access::Write, &r.key, &[])?;
                if r.prev_kv {
                    self.check(who, Access::Read, &r.key, &[])?;
                }
                Ok(())
            }
            Some(Op::RequestDeleteRange(r)) => {
                if r.prev_kv {
                    self.check(who, Access::Read, &r.key, &r.range_end)?;
                }
                self.check(who, Access::Write, &r.key, &r.range_end)
            }
            Some(Op::RequestTxn(txn)) => self.check_txn(who, txn),
            None => Ok(()),
        }
    }

    /// Administration (users, roles, membership, maintenance) is for the
    /// holders of the root role.
    pub fn check_admin(&self, who: &AuthInfo) -> Result<(), Error> {
        if !self.enabled {
            return Ok(());
        }
        if who.user.is_empty() {
            return Err(Error::UserEmpty);
        }
        let user = self.users.get(&who.user).ok_or(Error::UserNotFound)?;
        if has_root_role(user) {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }

    /// Whether `who` holds `role` (a user may read its own roles).
    pub fn has_role(&self, who: &AuthInfo, role: &str) -> bool {
        self.users
            .get(&who.user)
            .is_some_and(|u| u.roles.iter().any(|r| r == role))
    }

    /// The user a key check concerns, after etcd's preconditions; `None`
    /// while auth is off.
    fn checked_user(&self, who: &AuthInfo) -> Result<Option<&User>, Error> {
        if !self.enabled {
            return Ok(None);
        }
        if who.revision == 0 {
            return Err(Error::UserEmpty);
        }
        if who.revision < self.revision {
            return Err(Error::AuthOldRevision);
        }
        self.users
            .get(&who.user)
            .map(Some)
            .ok_or(Error::PermissionDenied)
    }

    fn permits(&self, user: &User, access: Access, key: &[u8], range_end: &[u8]) -> bool {
        let roles = user.roles.iter().filter_map(|name| self.roles.get(name));
        let granted = granted_ranges(roles, access);
        if range_end.is_empty() {
            return granted.iter().any(|g| g.contains(key));
        }
        covers(granted, key, end_of(range_end))
    }
}

fn has_root_role(user: &User) -> bool {
    user.roles.iter().any(|r| r == ROOT)
}

/// A granted range `[start, end)`; `end` `None` is unbounded.
#[derive(Debug)]
struct Granted<'a> {
    start: &'a [u8],
    end: Option<Vec<u8>>,
}

impl Granted<'_> {
    fn contains(&self, key: &[u8]) -> bool {
        self.start <= key && self.end.as_deref().is_none_or(|end| key < end)
    }
}

/// A request's or a permission's range end: "\0" means unbounded.
fn end_of(range_end: &[u8]) -> Option<&[u8]> {
    (range_end != [0]).then_some(range_end)
}

/// The ranges `roles` grant for `access`; a permission on one key is the
/// range holding just that key.
fn granted_ranges<'a>(roles: impl Iterator<Item = &'a Role>, access: Access) -> Vec<Granted<'a>> {
    let wanted = |t: i32| match PermissionType::try_from(t) {
        Ok(PermissionType::Readwrite) => true,
        Ok(PermissionType::Read) => access == Access::Read,
        Ok(PermissionType::Write) => access == Access::Write,
        Err(_) => false,
    };
    roles
        .flat_map(|role| &role.key_permission)
        .filter(|p| wanted(p.perm_type))
        .map(|p| Granted {
            start: &p.key,
            end: if p.range_end.is_empty() {
                let mut next = p.key.clone();
                next.push(0);
                Some(next)
            } else {
                end_of(&p.range_end).map(<[u8]>::to_vec)
            },
        })
        .collect()
}

/// Whether the union of `granted` covers `[start, end)` (`end` `None`:
/// unbounded).
fn covers(mut granted: Vec<Granted<'_>>, start: &[u8], end: Option<&[u8]>) -> bool {
    granted.sort_by(|a, b| a.start.cmp(b.start));
    let mut reached: Vec<u8> = start.to_vec();
    for g in &granted {
        if g.start > reached.as_slice() {
            break;
        }
        match &g.end {
            None => return true,
            Some(g_end) if g_end.as_slice() > reached.as_slice() => reached.clone_from(g_end),
            Some(_) => {}
        }
        if end.is_some_and(|end| reached.as_slice() >= end) {
            return true;
        }
    }
    end.is_some_and(|end| reached.as_slice() >= end)
}

#[cfg(test)]
mod tests {
    use oxetcd_proto::authpb::Permission;

    use super::*;

    fn role(perms: &[(&str, &str, PermissionType)]) -> Role {
        Role {
            name: b"r".to_vec(),
            key_permission: perms
                .iter()
                .map(|(key, end, t)| Permission {
                    perm_type: *t as i32,
                    key: key.as_bytes().to_vec(),
                    range_end: end.as_bytes().to_vec(),
                })
                .collect(),
        }
    }

    fn permits(r: &Role, access: Access, key: &str, end: &str) -> bool {
        let granted = granted_ranges(std::iter::once(r), access);
        if end.is_empty() {
            granted.iter().any(|g| g.contains(key.as_bytes()))
        } else {
            covers(granted, key.as_bytes(), end_of(end.as_bytes()))
        }
    }

    #[test]
    fn a_range_is_permitted_only_when_the_grants_cover_all_of_it() {
        use PermissionType::{Read, Readwrite, Write};
        let r = role(&[("a", "c", Read), ("c", "e", Readwrite), ("x", "", Write)]);
        assert!(permits(&r, Access::Read, "b", ""));
        assert!(permits(&r, Access::Read, "a", "e"), "two grants joined");
        assert!(!permits(&r, Access::Read, "a", "f"));
        assert!(!permits(&r, Access::Write, "a", "d"));
        assert!(permits(&r, Access::Write, "c", "e"));
        assert!(permits(&r, Access::Write, "x", ""));
        assert!(
            permits(&r, Access::Write, "x", "x\0"),
            "a point is its own range"
        );
        assert!(!permits(&r, Access::Write, "x", "y"));
        assert!(!permits(&r, Access::Read, "x", ""));
        assert!(
            !permits(&r, Access::Read, "a", "\0"),
            "from-key needs an open grant"
        );
        let open = role(&[("k", "\0", Read)]);
        assert!(permits(&open, Access::Read, "k", "\0"));
        assert!(permits(&open, Access::Read, "z", ""));
        assert!(!permits(&open, Access::Read, "j", "\0"));
        assert!(!permits(&open, Access::Read, "a", "b"));
    }

    /// Keys of at most two bytes over a three-letter alphabet; with "\0"
    /// appended, every point a grant or a request can start or end at is
    /// in [`universe`].
    fn short_key(g: &mut quickcheck::Gen) -> Vec<u8> {
        let len = usize::from(u8::arbitrary(g) % 3);
        (0..len)
            .map(|_| *g.choose(&[0u8, b'a', b'b']).unwrap_or(&b'a'))
            .collect()
    }

    /// Every key of at most three bytes over the same alphabet.
    fn universe() -> Vec<Vec<u8>> {
        let mut all = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..3 {
            last = last
                .iter()
                .flat_map(|k| {
                    [0u8, b'a', b'b'].map(|c| {
                        let mut next = k.clone();
                        next.push(c);
                        next
                    })
                })
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    use quickcheck::Arbitrary;

    #[derive(Clone, Debug)]
    struct Case {
        perms: Vec<(Vec<u8>, Vec<u8>, i32)>,
        key: Vec<u8>,
        end: Vec<u8>,
        write: bool,
    }

    impl Arbitrary for Case {
        fn arbitrary(g: &mut quickcheck::Gen) -> Self {
            let end = |g: &mut quickcheck::Gen| match u8::arbitrary(g) % 4 {
                0 => Vec::new(),
                1 => vec![0],
                _ => short_key(g),
            };
            let perms = (0..u8::arbitrary(g) % 4)
                .map(|_| (short_key(g), end(g), i32::from(u8::arbitrary(g) % 3)))
                .collect();
            Self {
                perms,
                key: short_key(g),
                end: end(g),
                write: bool::arbitrary(g),
            }
        }
    }

    /// The permission rules against a model that checks every key of a
    /// finite universe holding every boundary: a request is permitted
    /// exactly when each key it names lies in some grant of its kind.
    #[test]
    fn permissions_agree_with_a_key_by_key_model() {
        fn agrees(case: Case) -> bool {
            let role = Role {
                name: b"r".to_vec(),
                key_permission: case
                    .perms
                    .iter()
                    .map(|(key, end, t)| oxetcd_proto::authpb::Permission {
                        perm_type: *t,
                        key: key.clone(),
                        range_end: end.clone(),
                    })
                    .collect(),
            };
            let access = if case.write {
                Access::Write
            } else {
                Access::Read
            };
            let grants = |k: &[u8]| {
                case.perms.iter().any(|(key, end, t)| {
                    let kind_ok = *t == PermissionType::Readwrite as i32
                        || (*t == PermissionType::Read as i32) != case.write;
                    let inside = if end.is_empty() {
                        k == key.as_slice()
                    } else {
                        key.as_slice() <= k && (end.as_slice() == [0] || k < end.as_slice())
                    };
                    kind_ok && inside
                })
            };
            let model = if case.end.is_empty() {
                grants(&case.key)
            } else {
                universe().iter().all(|k| {
                    let asked = case.key.as_slice() <= k.as_slice()
                        && (case.end.as_slice() == [0] || k.as_slice() < case.end.as_slice());
                    !asked || grants(k)
                })
            };
            let key = String::from_utf8_lossy(&case.key).into_owned();
            let end = String::from_utf8_lossy(&case.end).into_owned();
            // Non-UTF-8 keys never arise here: the alphabet is ASCII.
            model == permits(&role, access, &key, &end)
        }
        quickcheck::QuickCheck::new()
            .tests(2_000)
            .quickcheck(agrees as fn(Case) -> bool);
    }
}
