//! One stable sort for the whole crate.
//!
//! `slice::sort_by` is compiled once per comparator closure, and each copy of std's stable sort
//! is 6-15 KB of Wasm; a dozen call sites made sorting 11 % of the module. Here the merge runs
//! on indices with a `dyn` comparator (one compiled copy in all), and only the small in-place
//! permutation is per element type. The lists sorted here are short (a model's endpoints, a
//! task's models): the two small allocations cost less than the comparisons.

use std::cmp::Ordering;

/// Sorts `v` by `cmp`, keeping equal elements in their order (like `slice::sort_by`),
/// in O(n log n) comparisons.
pub fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    let order = {
        let items: &[T] = v;
        stable_order(items.len(), &mut |i, j| match (items.get(i), items.get(j)) {
            (Some(a), Some(b)) => cmp(a, b),
            _ => Ordering::Equal,
        })
    };
    permute(v, order);
}

/// `sort_by` comparing `key(element)`.
pub fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(v, |a, b| key(a).cmp(&key(b)));
}

/// The stable sorted order of `0..n` under `cmp`: `order[k]` is the index of the element that
/// belongs at position `k`. Bottom-up merge sort.
#[inline(never)]
fn stable_order(n: usize, cmp: &mut dyn FnMut(usize, usize) -> Ordering) -> Vec<usize> {
    let mut from: Vec<usize> = (0..n).collect();
    let mut to: Vec<usize> = Vec::with_capacity(n);
    let mut width = 1;
    while width < n {
        to.clear();
        for run in from.chunks(2 * width) {
            let (left, right) = run.split_at(width.min(run.len()));
            let (mut l, mut r) = (left.iter().peekable(), right.iter().peekable());
            loop {
                // Ties take the left run's element: that keeps the sort stable.
                let take_left = match (l.peek(), r.peek()) {
                    (Some(&&a), Some(&&b)) => cmp(a, b) != Ordering::Greater,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                let next = if take_left { l.next() } else { r.next() };
                to.extend(next.copied());
            }
        }
        std::mem::swap(&mut from, &mut to);
        width = width.saturating_mul(2);
    }
    from
}

/// Rearranges `v` so that the new `v[k]` is the old `v[order[k]]`: one pass over each cycle
/// of the permutation, O(n) swaps. `order` must be a permutation of `0..v.len()`.
#[inline(never)]
fn permute<T>(v: &mut [T], mut order: Vec<usize>) {
    for start in 0..order.len() {
        let mut cur = start;
        while let Some(slot) = order.get_mut(cur) {
            let next = std::mem::replace(slot, cur);
            if next == cur || next == start {
                break;
            }
            if next < v.len() && cur < v.len() {
                v.swap(cur, next);
            }
            cur = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::Lcg;

    #[test]
    fn matches_std_stable_sort_on_random_inputs() {
        let mut rng = Lcg(7);
        for n in 0..70 {
            for _ in 0..20 {
                // Few distinct keys: many ties, so stability is exercised.
                let mut v: Vec<(u64, usize)> = (0..n).map(|i| ((rng.next() * 5.0) as u64, i)).collect();
                let mut expected = v.clone();
                expected.sort_by_key(|p| p.0);
                sort_by(&mut v, |a, b| a.0.cmp(&b.0));
                assert_eq!(v, expected, "n = {n}");
            }
        }
    }

    #[test]
    fn sort_by_key_and_non_copy_elements() {
        let mut v: Vec<String> = ["pear", "fig", "apple", "kiwi", "fig"].iter().map(|s| s.to_string()).collect();
        sort_by_key(&mut v, |s| s.len());
        assert_eq!(v, ["fig", "fig", "pear", "kiwi", "apple"]);
        sort_by(&mut v, |a, b| b.cmp(a));
        assert_eq!(v, ["pear", "kiwi", "fig", "fig", "apple"]);
    }

    #[test]
    fn inconsistent_comparators_still_give_a_permutation() {
        // NaN-like comparators may not be a total order; the result must still hold every element.
        let mut rng = Lcg(3);
        let mut v: Vec<usize> = (0..40).collect();
        sort_by(&mut v, |_, _| match (rng.next() * 3.0) as u8 {
            0 => Ordering::Less,
            1 => Ordering::Equal,
            _ => Ordering::Greater,
        });
        let mut seen = v.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..40).collect::<Vec<_>>());
    }
}
