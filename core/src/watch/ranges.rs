//! An id per distinct key range watched: watchers of the same range share
//! one, so a revision's fan-out asks whether a range holds the changed key
//! once per run of such watchers instead of comparing keys per watcher
//! (a stream of many watchers on one prefix is the common shape).
//!
//! Ids are never reused, so an id always names one range for as long as
//! any watcher holds it.

use std::collections::BTreeMap;

use super::WatchSpec;

/// Names one distinct `(key, range_end)` among live watchers.
pub(super) type RangeId = u64;

/// A watched range as [`WatchSpec`] holds it: first key and range end.
type Range = (Vec<u8>, Option<Vec<u8>>);

/// The ranges live watchers watch, each with its id and how many hold it.
#[derive(Debug, Default)]
pub(super) struct Ranges {
    ids: BTreeMap<Range, (RangeId, usize)>,
    next: RangeId,
}

impl Ranges {
    /// The id of `spec`'s range, for one more watcher.
    pub(super) fn acquire(&mut self, spec: &WatchSpec) -> RangeId {
        let next = &mut self.next;
        let (id, holders) = self.ids.entry(range_of(spec)).or_insert_with(|| {
            *next += 1;
            (*next, 0)
        });
        *holders += 1;
        *id
    }

    /// One watcher of `spec`'s range is gone.
    pub(super) fn release(&mut self, spec: &WatchSpec) {
        let range = range_of(spec);
        if let Some((_, holders)) = self.ids.get_mut(&range) {
            *holders -= 1;
            if *holders == 0 {
                self.ids.remove(&range);
            }
        }
    }

    /// Distinct ranges held.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The id `spec`'s range has, if any watcher holds it.
    pub(super) fn id_of(&self, spec: &WatchSpec) -> Option<RangeId> {
        self.ids.get(&range_of(spec)).map(|&(id, _)| id)
    }
}

fn range_of(spec: &WatchSpec) -> Range {
    (spec.key.clone(), spec.range_end.clone())
}

/// Whether a watcher's range holds the key, remembered for the last range
/// asked about: consecutive watchers of one range cost one comparison.
#[derive(Debug, Default)]
pub(super) struct Contains {
    last: Option<(RangeId, bool)>,
}

impl Contains {
    pub(super) fn check(&mut self, range: RangeId, spec: &WatchSpec, key: &[u8]) -> bool {
        match self.last {
            Some((last, inside)) if last == range => inside,
            _ => {
                let inside = spec.contains(key);
                self.last = Some((range, inside));
                inside
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(key: &str, end: Option<&str>) -> WatchSpec {
        WatchSpec {
            key: key.as_bytes().to_vec(),
            range_end: end.map(|e| e.as_bytes().to_vec()),
            no_put: false,
            no_delete: false,
            prev_kv: false,
            fragment: false,
        }
    }

    #[test]
    fn equal_ranges_share_an_id_until_the_last_holder_goes() {
        let mut ranges = Ranges::default();
        let a = ranges.acquire(&spec("a", Some("b")));
        assert_eq!(ranges.acquire(&spec("a", Some("b"))), a);
        let single = ranges.acquire(&spec("a", None));
        let open = ranges.acquire(&spec("a", Some("")));
        assert!(single != a && open != a && single != open);
        assert_eq!(ranges.len(), 3);
        ranges.release(&spec("a", Some("b")));
        assert_eq!(ranges.acquire(&spec("a", Some("b"))), a, "one holder left");
        ranges.release(&spec("a", Some("b")));
        ranges.release(&spec("a", Some("b")));
        assert_eq!(ranges.len(), 2);
        let again = ranges.acquire(&spec("a", Some("b")));
        assert!(again != a, "ids are not reused");
    }

    #[test]
    fn the_answer_is_kept_per_range_only() {
        let inside = spec("a", Some("c"));
        let outside = spec("x", Some("z"));
        let mut contains = Contains::default();
        assert!(contains.check(1, &inside, b"b"));
        assert!(contains.check(1, &inside, b"b"));
        assert!(!contains.check(2, &outside, b"b"));
        assert!(contains.check(1, &inside, b"b"));
    }
}
