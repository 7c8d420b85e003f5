//! A worker's leases on its counters: budget the service has counted and no request of this
//! worker has used yet (a credit), which the worker admits requests against with no call.
//!
//! The rate limit API has no negative hits, so budget counted in the service stays counted; a
//! worker can only spend it itself. Two things leave it such budget: a reservation the answer
//! did not use up (settled), and a lease: a reservation call asking for more than the request
//! needs (a chunk), the surplus kept for the next requests on the same counter. A request whose
//! reservation the worker's credit covers is admitted locally; one it does not cover leases a
//! chunk sized from the worker's recent use of the counter, capped by a fraction of the limit
//! and of what the service last said remains, and exactly the request's own reservation once
//! little remains, after a refusal, or when the service says nothing (Limitador's own server).
//! Every admission is still backed by budget the service counted, so what it counts is never
//! less than what was admitted (docs/mesh-limits.md, "Leases").
//!
//! Credits are good in the window they were counted in only (until `until_ms`): carried into
//! the next window they would let it overshoot. Each operation is one map lookup.

use std::collections::HashMap;

use super::rls::Descriptor;

/// A lease covers about this long of the worker's recent use of its counter.
pub const LEASE_SPAN_MS: u64 = 1_000;
/// A lease is at most the limit's amount divided by this (what an idle worker can hold)...
pub const LEASE_AMOUNT_DIVISOR: u64 = 64;
/// ...and at most what the service last said remains divided by this, so leases shrink as the
/// budget runs out and the last of it is reserved request by request.
pub const LEASE_REMAINING_DIVISOR: u64 = 8;
/// Counters one worker keeps (identities are caller-chosen values).
const MAX_COUNTERS: usize = 4096;

#[derive(Debug, Default)]
pub struct Ledger {
    entries: HashMap<Descriptor, Entry>,
}

#[derive(Debug, Default)]
struct Entry {
    /// Positive: owed (sent when whole); negative: a credit.
    balance: f64,
    /// The credit is usable before this time (ms).
    until_ms: u64,
    /// What the service last said remains of the counter, until its window resets
    /// (`remaining_until_ms`); None when it did not say.
    remaining: Option<u64>,
    remaining_until_ms: u64,
    /// When the worker last asked for a lease on this counter, and the units its requests used
    /// of it since (reserved at admission, net of what settlement gave back).
    leased_ms: u64,
    used_since: u64,
}

/// How a reservation of `need` units is covered: `credit` units from the worker's credit (good
/// until `credit_until_ms`), and `hits` to ask the service for (0: admitted locally; more than
/// `need - credit`: a chunk, the surplus a credit once the service counted it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    pub credit: u64,
    pub credit_until_ms: u64,
    pub hits: u64,
}

impl Entry {
    /// Forgets what a window that is over taught: its credit and what it had left.
    fn expire(&mut self, now_ms: u64) {
        if self.balance < 0.0 && now_ms >= self.until_ms {
            self.balance = 0.0;
        }
        if now_ms >= self.remaining_until_ms {
            self.remaining = None;
        }
    }

    fn credit(&self) -> u64 {
        if self.balance <= -1.0 {
            (-self.balance).floor() as u64
        } else {
            0
        }
    }

    /// The units a lease asks for, this request's `need` included.
    fn chunk(&self, need: u64, amount: u64, now_ms: u64) -> u64 {
        // Without the service's count (Limitador's server says none), reserve exactly.
        let Some(remaining) = self.remaining else { return need };
        let elapsed = now_ms.saturating_sub(self.leased_ms).max(1);
        let recent = self.used_since.saturating_mul(LEASE_SPAN_MS) / elapsed;
        let cap = (amount / LEASE_AMOUNT_DIVISOR).min(remaining / LEASE_REMAINING_DIVISOR);
        recent.min(cap).max(need)
    }

    fn add(&mut self, units: f64, until_ms: u64) {
        if units < 0.0 {
            // A credit already held is of the same (current) window.
            self.until_ms = if self.balance < 0.0 { self.until_ms.max(until_ms) } else { until_ms };
        }
        self.balance += units;
    }
}

impl Ledger {
    /// The counter's entry, made when there is room (full: the entries holding under one unit
    /// either way make room first).
    fn entry(&mut self, descriptor: &Descriptor, now_ms: u64) -> Option<&mut Entry> {
        if !self.entries.contains_key(descriptor) {
            if self.entries.len() >= MAX_COUNTERS {
                self.entries.retain(|_, e| e.balance.abs() >= 1.0);
            }
            if self.entries.len() >= MAX_COUNTERS {
                return None;
            }
            self.entries.insert(descriptor.clone(), Entry::default());
        }
        let e = self.entries.get_mut(descriptor)?;
        e.expire(now_ms);
        Some(e)
    }

    /// Covers a reservation of `need` units on a counter whose limit is `amount`: from the
    /// credit when it holds `need`, else with all of the credit and a lease for the rest.
    pub fn lease(&mut self, descriptor: &Descriptor, need: u64, amount: u64, now_ms: u64) -> Lease {
        let Some(e) = self.entry(descriptor, now_ms) else { return Lease { hits: need, ..Lease::default() } };
        let held = e.credit();
        if held >= need {
            e.balance += need as f64;
            e.used_since = e.used_since.saturating_add(need);
            return Lease { credit: need, credit_until_ms: e.until_ms, hits: 0 };
        }
        let chunk = e.chunk(need, amount, now_ms);
        e.balance += held as f64;
        e.leased_ms = now_ms;
        e.used_since = need;
        Lease { credit: held, credit_until_ms: if held > 0 { e.until_ms } else { 0 }, hits: chunk - held }
    }

    /// The service counted a call on this counter and said `remaining` is left until
    /// `until_ms` (the window's reset); `surplus` units of it (a chunk beyond the request's
    /// reservation) are the worker's credit until then.
    pub fn counted(
        &mut self,
        descriptor: &Descriptor,
        surplus: u64,
        remaining: Option<u32>,
        until_ms: u64,
        now_ms: u64,
    ) {
        let Some(e) = self.entry(descriptor, now_ms) else { return };
        if let Some(r) = remaining {
            e.remaining = Some(u64::from(r));
            e.remaining_until_ms = until_ms;
        }
        if surplus > 0 && now_ms < until_ms {
            e.add(-(surplus as f64), until_ms);
        }
    }

    /// The service refused a lease on this counter: leases are exact until its window resets.
    pub fn refused(&mut self, descriptor: &Descriptor, until_ms: u64, now_ms: u64) {
        if let Some(e) = self.entry(descriptor, now_ms) {
            e.remaining = Some(0);
            e.remaining_until_ms = until_ms;
        }
    }

    /// Gives back credit a reservation took and did not keep (it was refused, or failed).
    pub fn give_back(&mut self, descriptor: &Descriptor, credit: u64, until_ms: u64, now_ms: u64) {
        if credit == 0 || now_ms >= until_ms {
            return;
        }
        if let Some(e) = self.entry(descriptor, now_ms) {
            e.add(-(credit as f64), until_ms);
            e.used_since = e.used_since.saturating_sub(credit);
        }
    }

    /// Settles a request: `units` is what it used less what it reserved. Less is a credit
    /// until `until_ms` (dropped once that window is over); more is owed, taken from the
    /// credit first. Returns the whole units owed now, to be sent (fractions wait).
    pub fn settle(&mut self, descriptor: &Descriptor, units: f64, until_ms: u64, now_ms: u64) -> u32 {
        if !units.is_finite() || units == 0.0 {
            return 0;
        }
        let Some(e) = self.entry(descriptor, now_ms) else {
            return if units >= 1.0 { units.min(f64::from(u32::MAX)) as u32 } else { 0 };
        };
        e.used_since = if units < 0.0 {
            e.used_since.saturating_sub((-units) as u64)
        } else {
            e.used_since.saturating_add(units as u64)
        };
        if units < 0.0 && now_ms >= until_ms {
            return 0;
        }
        e.add(units, until_ms);
        if e.balance < 1.0 {
            return 0;
        }
        let whole = e.balance.floor().min(f64::from(u32::MAX));
        e.balance -= whole;
        whole as u32
    }

    /// The credit held for a counter now (tests, and what a refusal gives back).
    pub fn credit(&mut self, descriptor: &Descriptor, now_ms: u64) -> u64 {
        self.entries.get_mut(descriptor).map_or(0, |e| {
            e.expire(now_ms);
            e.credit()
        })
    }
}
