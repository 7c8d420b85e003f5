//! State shared between Envoy's workers, natively: process memory. The module is loaded once
//! per process, so a static map is what proxy-wasm's shared data is across a VM's workers: the
//! same compare-and-swap contract (`set` with a stale token fails with `CAS_MISMATCH`), no
//! serialization, no host call. Also the outbox of calls a stream leaves behind (settlements),
//! sent by the main thread's tick.

use crate::filters::fast_hash::FastMap;
use std::sync::{Mutex, MutexGuard, RwLock};

use crate::filters::host::CAS_MISMATCH;

/// A value and its CAS token (bumped on every write; never 0 once written).
type Entry = (Vec<u8>, u32);

static DATA: Mutex<Option<FastMap<String, Entry>>> = Mutex::new(None);

/// A call whose answer nobody waits for, made by the next tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Detached {
    pub cluster: String,
    pub service: String,
    pub method: String,
    pub message: Vec<u8>,
    pub timeout_ms: u32,
}

/// Calls waiting for the tick, at most this many (a stalled main thread cannot grow it).
pub const MAX_DETACHED: usize = 4096;

static OUTBOX: Mutex<Vec<Detached>> = Mutex::new(Vec::new());

/// A poisoned lock (a panic while holding it, caught at the hook) still guards valid data:
/// every write below is a single insert.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The value of `key` and its CAS token ((None, 0) when absent).
pub fn get(key: &str) -> (Option<Vec<u8>>, u32) {
    match lock(&DATA).as_ref().and_then(|m| m.get(key)) {
        Some((v, cas)) => (Some(v.clone()), *cas),
        None => (None, 0),
    }
}

/// Runs `read` on the value of `key` (None when absent) under the store's lock, without a copy.
pub fn read<R>(key: &str, read: impl FnOnce(Option<&[u8]>) -> R) -> R {
    let guard = lock(&DATA);
    read(guard.as_ref().and_then(|m| m.get(key)).map(|e| e.0.as_slice()))
}

/// Writes `key`; `cas` 0 writes unconditionally, otherwise only if nobody wrote since the read
/// that returned it. 0 on success, `CAS_MISMATCH` otherwise.
pub fn set(key: &str, value: &[u8], cas: u32) -> u32 {
    let mut guard = lock(&DATA);
    let map = guard.get_or_insert_with(FastMap::default);
    let current = map.get(key).map_or(0, |e| e.1);
    if cas != 0 && cas != current {
        return CAS_MISMATCH;
    }
    let next = current.wrapping_add(1).max(1);
    // Rewrites reuse the entry's key and buffer (health counters are rewritten on every
    // attempt's start and end).
    match map.get_mut(key) {
        Some(entry) => {
            entry.0.clear();
            entry.0.extend_from_slice(value);
            entry.1 = next;
        }
        None => {
            map.insert(key.to_string(), (value.to_vec(), next));
        }
    }
    0
}

/// Queues a detached call; false when the outbox is full.
pub fn detach(call: Detached) -> bool {
    let mut q = lock(&OUTBOX);
    if q.len() >= MAX_DETACHED {
        return false;
    }
    q.push(call);
    true
}

/// The live decision configurations' schedulers (addresses): a queued call wakes the main
/// thread's tick at once rather than at its next period. Read-locked while committing, so a
/// scheduler is never deleted (write-locked) under a worker's commit.
static WAKERS: RwLock<Vec<usize>> = RwLock::new(Vec::new());

pub fn add_waker(scheduler: usize) {
    WAKERS.write().unwrap_or_else(|e| e.into_inner()).push(scheduler);
}

pub fn remove_waker(scheduler: usize) {
    WAKERS.write().unwrap_or_else(|e| e.into_inner()).retain(|s| *s != scheduler);
}

/// Runs `f` with the scheduler to wake (None before any decision filter).
pub fn with_waker<R>(f: impl FnOnce(Option<usize>) -> R) -> R {
    let w = WAKERS.read().unwrap_or_else(|e| e.into_inner());
    f(w.last().copied())
}

/// Takes every queued call.
pub fn take_detached() -> Vec<Detached> {
    std::mem::take(&mut *lock(&OUTBOX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_swap_refuses_a_stale_token() {
        let key = "test/native/cas";
        assert_eq!(get(key), (None, 0));
        assert_eq!(set(key, b"a", 0), 0);
        let (v, cas) = get(key);
        assert_eq!(v.as_deref(), Some(&b"a"[..]));
        assert_ne!(cas, 0);
        assert_eq!(set(key, b"b", cas), 0);
        assert_eq!(set(key, b"c", cas), CAS_MISMATCH, "the token is stale after a write");
        assert_eq!(get(key).0.as_deref(), Some(&b"b"[..]));
        // A rewrite in place holds exactly the new bytes, longer or shorter.
        assert_eq!(set(key, b"longer", 0), 0);
        assert_eq!(get(key).0.as_deref(), Some(&b"longer"[..]));
        assert_eq!(set(key, b"s", get(key).1), 0);
        assert_eq!(get(key).0.as_deref(), Some(&b"s"[..]));
        // Read in place: the same bytes, and nothing for an absent key.
        assert_eq!(read(key, |v| v.map(<[u8]>::to_vec)), Some(b"s".to_vec()));
        assert!(read("test/native/absent", |v| v.is_none()));
    }

    #[test]
    fn workers_never_lose_an_increment() {
        let key = "test/native/counter";
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        loop {
                            let (v, cas) = get(key);
                            let n = v.map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                            if set(key, &(n + 1).to_le_bytes(), cas) == 0 {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(get(key).0.map(|b| u64::from_le_bytes(b.try_into().unwrap())), Some(2000));
    }

    #[test]
    fn the_outbox_is_bounded() {
        let call =
            Detached { cluster: "c".into(), service: "s".into(), method: "m".into(), message: vec![1], timeout_ms: 5 };
        assert!(detach(call.clone()));
        let taken = take_detached();
        assert!(taken.contains(&call));
        for _ in 0..MAX_DETACHED {
            detach(call.clone());
        }
        assert!(!detach(call));
        take_detached();
    }
}
