//! Per-endpoint live statistics over a rolling window, in a fixed-size binary record that the
//! host keeps in proxy-wasm shared data (one key per endpoint, updated with compare-and-swap so
//! every worker sees the same numbers).
//!
//! Window: 15 buckets of 20 s (5 minutes). A bucket is reused when its epoch has passed, so old
//! data decays without a sweeper and the record never grows.

use crate::protocol::outcome::Outcome;
use crate::routing::health::{EndpointHealth, Percentiles};

pub const BUCKET_MS: u64 = 20_000;
pub const BUCKETS: usize = 15;

/// Upper bounds of the TTFT histogram bins, milliseconds (last bin is open).
pub const TTFT_BOUNDS_MS: [u32; 11] = [50, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, u32::MAX];
/// Upper bounds of the output-throughput histogram bins, tokens/s.
pub const TPS_BOUNDS: [u32; 10] = [5, 10, 20, 40, 80, 160, 320, 640, 1_280, u32::MAX];

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Bucket {
    epoch: u32,
    attempts: u32,
    successes: u32,
    failures: u32,
    rate_limited: u32,
    ttft: [u32; 11],
    tps: [u32; 10],
    /// Usage of successful attempts that reported it: tokens, and what they cost at the
    /// endpoint's catalog prices (micro-USD), so the effective price is measured, not listed.
    prompt_tokens: u32,
    completion_tokens: u32,
    cost_micro_usd: u32,
    usage_reports: u32,
    /// Responses judged for quality, and the bad ones (malformed tool calls, empty answers);
    /// the tool-call subset separately.
    judged: u32,
    bad: u32,
    tool_judged: u32,
    tool_bad: u32,
}

const BUCKET_WORDS: usize = 5 + 11 + 10 + 8;
const HEADER_WORDS: usize = 1 + 2 + 2 + 1 + 1 + 2 + 2 + 1;
/// A learned capacity grows back by one in-flight attempt per this long without a 429.
pub const CAP_REGROW_MS: u64 = 5_000;
pub const RECORD_BYTES: usize = 4 * (HEADER_WORDS + BUCKETS * BUCKET_WORDS);
/// Byte offset of `in_flight` in an encoded record (after consecutive_failures and two u64s).
const IN_FLIGHT_AT: usize = 4 * (1 + 2 + 2);

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EndpointStats {
    buckets: [Bucket; BUCKETS],
    consecutive_failures: u32,
    /// The run of consecutive failures counts until then (last failure + outage window).
    failure_run_until_ms: u64,
    cooldown_until_ms: u64,
    in_flight: u32,
    /// Learned capacity: attempts in flight (the refused one included) at which the endpoint
    /// answers 429; 0 = not learned. Grows back after `cap_set_ms` (see `CAP_REGROW_MS`).
    cap_in_flight: u32,
    cap_set_ms: u64,
    /// When the current run of consecutive failures began (its first failure was recorded). A
    /// success of an attempt sent before then was in flight when the endpoint started failing:
    /// it says nothing about the endpoint now and does not end the run.
    run_began_ms: u64,
    /// Of the attempts in flight, those sent before the current run began (not suspect).
    stale_in_flight: u32,
}

/// One finished attempt.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Finished {
    pub outcome: Outcome,
    /// When the attempt was sent (ms), if known.
    pub started_ms: Option<u64>,
    pub ttft_ms: Option<u32>,
    pub tokens_per_s: Option<f64>,
    pub retry_after_s: Option<u32>,
    pub usage: Option<Usage>,
}

/// Token usage a provider reported for one answer, priced at the endpoint's catalog prices.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
}

fn add(slot: &mut u32, v: u64) {
    *slot = slot.saturating_add(v.min(u64::from(u32::MAX)) as u32);
}

fn bin(bounds: &[u32], v: u32) -> usize {
    bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len().saturating_sub(1))
}

/// Value reported for a histogram quantile: the middle of the bin that holds it.
fn quantile(hist: &[u32], bounds: &[u32], q: f64) -> Option<f64> {
    let total: u64 = hist.iter().map(|&c| u64::from(c)).sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    for (i, &c) in hist.iter().enumerate() {
        seen += u64::from(c);
        if seen >= rank {
            let lo = if i == 0 { 0 } else { bounds.get(i - 1).copied().unwrap_or(0) };
            let hi = bounds.get(i).copied().unwrap_or(u32::MAX);
            return Some(if hi == u32::MAX { f64::from(lo) * 1.5 } else { (f64::from(lo) + f64::from(hi)) / 2.0 });
        }
    }
    None
}

impl EndpointStats {
    fn epoch(now_ms: u64) -> u32 {
        (now_ms / BUCKET_MS) as u32
    }

    fn bucket_mut(&mut self, now_ms: u64) -> Option<&mut Bucket> {
        let epoch = Self::epoch(now_ms);
        let b = self.buckets.get_mut(epoch as usize % BUCKETS)?;
        if b.epoch != epoch {
            *b = Bucket { epoch, ..Bucket::default() };
        }
        Some(b)
    }

    fn live(&self, now_ms: u64) -> impl Iterator<Item = &Bucket> {
        let now = Self::epoch(now_ms);
        self.buckets.iter().filter(move |b| b.epoch <= now && now - b.epoch < BUCKETS as u32 && b.attempts > 0)
    }

    pub fn start(&mut self) {
        self.in_flight = self.in_flight.saturating_add(1);
    }

    /// `start` (`up`) or `unstart` applied to an encoded record in place: the in-flight count
    /// is one word of the header, so an attempt's start neither decodes nor re-encodes the
    /// 2 KB record. False (nothing changed) if `bytes` is not a record.
    pub fn step_in_flight(bytes: &mut [u8], up: bool) -> bool {
        if bytes.len() != RECORD_BYTES {
            return false;
        }
        let Some(word) = bytes.get_mut(IN_FLIGHT_AT..IN_FLIGHT_AT + 4) else { return false };
        let mut v = [0u8; 4];
        v.copy_from_slice(word);
        let n = u32::from_le_bytes(v);
        let n = if up { n.saturating_add(1) } else { n.saturating_sub(1) };
        word.copy_from_slice(&n.to_le_bytes());
        true
    }

    /// Takes back a `start` whose attempt was never sent.
    pub fn unstart(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    pub fn finish(&mut self, now_ms: u64, f: Finished, outage_window_ms: u64) {
        if f.outcome == Outcome::RateLimited {
            // The load at which the endpoint refuses: the lowest in-flight count a 429 came at
            // (a burst's simultaneous refusals would overstate it); it grows back over time.
            let seen = self.in_flight.max(1);
            self.cap_in_flight = self.capacity(now_ms).map_or(seen, |cap| cap.min(seen));
            self.cap_set_ms = now_ms;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        if f.started_ms.is_some_and(|t| t < self.run_began_ms) {
            self.stale_in_flight = self.stale_in_flight.saturating_sub(1);
        }
        self.stale_in_flight = self.stale_in_flight.min(self.in_flight);
        let Some(b) = self.bucket_mut(now_ms) else { return };
        if let (Outcome::Success, Some(u)) = (f.outcome, f.usage) {
            add(&mut b.prompt_tokens, u.prompt_tokens);
            add(&mut b.completion_tokens, u.completion_tokens);
            if u.cost_usd.is_finite() && u.cost_usd > 0.0 {
                add(&mut b.cost_micro_usd, (u.cost_usd * 1e6).round() as u64);
            }
            b.usage_reports = b.usage_reports.saturating_add(1);
        }
        b.attempts += 1;
        match f.outcome {
            Outcome::Success => b.successes += 1,
            o if o.is_failure() => b.failures += 1,
            Outcome::RateLimited => b.rate_limited += 1,
            _ => {}
        }
        if let Some(t) = f.ttft_ms {
            if let Some(c) = b.ttft.get_mut(bin(&TTFT_BOUNDS_MS, t)) {
                *c += 1;
            }
        }
        if let Some(tps) = f.tokens_per_s {
            if tps.is_finite() && tps > 0.0 {
                if let Some(c) = b.tps.get_mut(bin(&TPS_BOUNDS, tps.min(u32::MAX as f64) as u32)) {
                    *c += 1;
                }
            }
        }
        match f.outcome {
            // Only an attempt sent since the run began can end it (one sent before was already
            // under way when the failures started; unknown start: it counts).
            Outcome::Success if f.started_ms.is_none_or(|t| t >= self.run_began_ms) => {
                self.consecutive_failures = 0;
                self.stale_in_flight = 0;
            }
            o if o.is_failure() => {
                if now_ms >= self.failure_run_until_ms || self.consecutive_failures == 0 {
                    // No run, or the previous one is older than the window: a new run starts.
                    // What is in flight now was sent before it.
                    self.consecutive_failures = 0;
                    self.run_began_ms = now_ms;
                    self.stale_in_flight = self.in_flight;
                }
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.failure_run_until_ms = now_ms.saturating_add(outage_window_ms);
            }
            _ => {}
        }
        if let (Outcome::RateLimited, Some(s)) = (f.outcome, f.retry_after_s) {
            self.cooldown_until_ms = self.cooldown_until_ms.max(now_ms + u64::from(s) * 1000);
        }
    }

    /// Cools the endpoint down until `until_ms` (a mesh-wide cap or cool-down learned from the
    /// rate limit service); an existing later cool-down stays.
    pub fn cool_down_until(&mut self, until_ms: u64) {
        self.cooldown_until_ms = self.cooldown_until_ms.max(until_ms);
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The learned capacity now: it grows back by one per `CAP_REGROW_MS` without a 429.
    pub fn capacity(&self, now_ms: u64) -> Option<u32> {
        (self.cap_in_flight > 0).then(|| {
            let regrown = now_ms.saturating_sub(self.cap_set_ms) / CAP_REGROW_MS;
            self.cap_in_flight.saturating_add(regrown.min(u64::from(u32::MAX)) as u32)
        })
    }

    /// One served response judged for quality (`tool`: it carried tool calls).
    pub fn judge(&mut self, now_ms: u64, bad: bool, tool: bool) {
        let Some(b) = self.bucket_mut(now_ms) else { return };
        b.judged = b.judged.saturating_add(1);
        b.bad = b.bad.saturating_add(u32::from(bad));
        if tool {
            b.tool_judged = b.tool_judged.saturating_add(1);
            b.tool_bad = b.tool_bad.saturating_add(u32::from(bad));
        }
    }

    /// Totals over the window: (attempts, successes, failures, rate_limited).
    pub fn totals(&self, now_ms: u64) -> (u32, u32, u32, u32) {
        self.live(now_ms)
            .fold((0, 0, 0, 0), |a, b| (a.0 + b.attempts, a.1 + b.successes, a.2 + b.failures, a.3 + b.rate_limited))
    }

    /// The endpoint's health as routing sees it. `outage_window_ms` sets how far back the
    /// recent counts (and a run of consecutive failures) reach; whether that amounts to a
    /// significant outage is judged against the endpoint's peers (`health::significant_outage`).
    pub fn view(&self, now_ms: u64, outage_window_ms: u64) -> EndpointHealth {
        let (attempts, successes, failures, _) = self.totals(now_ms);
        let now_epoch = Self::epoch(now_ms);
        let recent_buckets = outage_window_ms.div_ceil(BUCKET_MS).max(1) as u32;
        let (recent_attempts, recent_failures, recent_rate_limited) = self
            .live(now_ms)
            .filter(|b| now_epoch - b.epoch < recent_buckets)
            .fold((0u32, 0u32, 0u32), |a, b| (a.0 + b.attempts, a.1 + b.failures, a.2 + b.rate_limited));
        let mut ttft = [0u32; 11];
        let mut tps = [0u32; 10];
        for b in self.live(now_ms) {
            for (a, x) in ttft.iter_mut().zip(b.ttft.iter()) {
                *a += x;
            }
            for (a, x) in tps.iter_mut().zip(b.tps.iter()) {
                *a += x;
            }
        }
        let pct = |h: &[u32], bounds: &[u32]| Percentiles {
            p50: quantile(h, bounds, 0.50),
            p75: quantile(h, bounds, 0.75),
            p90: quantile(h, bounds, 0.90),
            p99: quantile(h, bounds, 0.99),
        };
        let judged = successes + failures;
        let sum = |f: fn(&Bucket) -> u32| self.live(now_ms).map(|b| u64::from(f(b))).sum::<u64>();
        let (rate_limited, usage_reports) = (sum(|b| b.rate_limited), sum(|b| b.usage_reports));
        let (q_judged, q_bad, t_judged, t_bad) =
            (sum(|b| b.judged), sum(|b| b.bad), sum(|b| b.tool_judged), sum(|b| b.tool_bad));
        let ratio = |n: u64, d: u64| (d > 0).then(|| n as f64 / d as f64);
        EndpointHealth {
            attempts,
            in_flight: self.in_flight,
            uptime: (judged > 0).then(|| f64::from(successes) / f64::from(judged)),
            error_rate: (attempts > 0).then(|| f64::from(failures) / f64::from(attempts)),
            tool_error_rate: ratio(t_bad, t_judged),
            bad_response_rate: ratio(q_bad, q_judged),
            rate_limited_rate: ratio(rate_limited, u64::from(attempts)),
            usage: (usage_reports > 0).then(|| crate::routing::health::MeasuredUsage {
                reports: usage_reports,
                prompt_tokens: sum(|b| b.prompt_tokens),
                completion_tokens: sum(|b| b.completion_tokens),
                cost_usd: sum(|b| b.cost_micro_usd) as f64 / 1e6,
            }),
            capacity: self.capacity(now_ms),
            ttft_ms: pct(&ttft, &TTFT_BOUNDS_MS),
            throughput_tps: pct(&tps, &TPS_BOUNDS),
            recent_attempts,
            recent_failures,
            recent_rate_limited,
            // Attempts sent since a run of failures began and still in flight are suspect:
            // counted into the run, so a provider that falls over is paused once one of them is
            // under way, not after it has come back failed too.
            failure_run: if now_ms < self.failure_run_until_ms && self.consecutive_failures > 0 {
                self.consecutive_failures.saturating_add(self.in_flight.saturating_sub(self.stale_in_flight))
            } else {
                0
            },
            recent_outage: false,
            cooling_down: now_ms < self.cooldown_until_ms,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_BYTES);
        let mut w = |v: u32| out.extend_from_slice(&v.to_le_bytes());
        w(self.consecutive_failures);
        w(self.failure_run_until_ms as u32);
        w((self.failure_run_until_ms >> 32) as u32);
        w(self.cooldown_until_ms as u32);
        w((self.cooldown_until_ms >> 32) as u32);
        w(self.in_flight);
        w(self.cap_in_flight);
        w(self.cap_set_ms as u32);
        w((self.cap_set_ms >> 32) as u32);
        w(self.run_began_ms as u32);
        w((self.run_began_ms >> 32) as u32);
        w(self.stale_in_flight);
        for b in &self.buckets {
            for v in [b.epoch, b.attempts, b.successes, b.failures, b.rate_limited] {
                w(v);
            }
            for v in b.ttft.iter().chain(b.tps.iter()) {
                w(*v);
            }
            for v in [
                b.prompt_tokens,
                b.completion_tokens,
                b.cost_micro_usd,
                b.usage_reports,
                b.judged,
                b.bad,
                b.tool_judged,
                b.tool_bad,
            ] {
                w(v);
            }
        }
        out
    }

    /// Decodes a record; anything malformed (e.g. a record from an older layout) starts fresh.
    pub fn decode(bytes: &[u8]) -> EndpointStats {
        if bytes.len() != RECORD_BYTES {
            return EndpointStats::default();
        }
        let mut words = crate::protocol::bytes::Reader::new(bytes);
        let mut r = || words.u32().unwrap_or(0);
        let mut s = EndpointStats {
            consecutive_failures: r(),
            failure_run_until_ms: u64::from(r()) | (u64::from(r()) << 32),
            cooldown_until_ms: u64::from(r()) | (u64::from(r()) << 32),
            in_flight: r(),
            cap_in_flight: r(),
            cap_set_ms: u64::from(r()) | (u64::from(r()) << 32),
            run_began_ms: u64::from(r()) | (u64::from(r()) << 32),
            stale_in_flight: r(),
            ..EndpointStats::default()
        };
        for b in s.buckets.iter_mut() {
            b.epoch = r();
            b.attempts = r();
            b.successes = r();
            b.failures = r();
            b.rate_limited = r();
            for v in b.ttft.iter_mut() {
                *v = r();
            }
            for v in b.tps.iter_mut() {
                *v = r();
            }
            for v in [
                &mut b.prompt_tokens,
                &mut b.completion_tokens,
                &mut b.cost_micro_usd,
                &mut b.usage_reports,
                &mut b.judged,
                &mut b.bad,
                &mut b.tool_judged,
                &mut b.tool_bad,
            ] {
                *v = r();
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_stepped_in_place_equals_start_and_unstart() {
        let mut s = EndpointStats::default();
        s.finish(5_000, ok(120, 40.0), 30_000);
        s.start();
        let mut bytes = s.encode();
        assert!(EndpointStats::step_in_flight(&mut bytes, true));
        s.start();
        assert_eq!(EndpointStats::decode(&bytes), s);
        assert!(EndpointStats::step_in_flight(&mut bytes, false));
        assert!(EndpointStats::step_in_flight(&mut bytes, false));
        assert!(EndpointStats::step_in_flight(&mut bytes, false));
        s.unstart();
        s.unstart();
        s.unstart();
        assert_eq!(EndpointStats::decode(&bytes), s);
        assert_eq!(EndpointStats::decode(&bytes).in_flight, 0);
        assert!(!EndpointStats::step_in_flight(&mut [0u8; 8], true));
    }

    fn ok(ttft: u32, tps: f64) -> Finished {
        Finished { outcome: Outcome::Success, ttft_ms: Some(ttft), tokens_per_s: Some(tps), ..Finished::default() }
    }
    fn fail(outcome: Outcome) -> Finished {
        Finished { outcome, ..Finished::default() }
    }

    #[test]
    fn usage_quality_and_capacity_are_measured() {
        let mut s = EndpointStats::default();
        let now = 90_000_000;
        let usage = Usage { prompt_tokens: 1000, completion_tokens: 200, cost_usd: 0.0021 };
        s.finish(now, Finished { usage: Some(usage), ..ok(100, 50.0) }, 30_000);
        s.finish(now, Finished { usage: Some(usage), ..ok(100, 50.0) }, 30_000);
        s.judge(now, false, true);
        s.judge(now, true, true);
        s.judge(now, true, false);
        s.judge(now, false, false);
        let v = s.view(now, 30_000);
        assert_eq!(v.recent_rate_limited, 0);
        let u = v.usage.unwrap();
        assert_eq!((u.reports, u.prompt_tokens, u.completion_tokens), (2, 2000, 400));
        assert!((u.cost_usd - 0.0042).abs() < 1e-9);
        assert_eq!(v.bad_response_rate, Some(0.5));
        assert_eq!(v.tool_error_rate, Some(0.5));
        // Capacity: 429s while 5 attempts were in flight teach a cap of 5...
        for _ in 0..5 {
            s.start();
        }
        s.finish(now, fail(Outcome::RateLimited), 30_000);
        assert_eq!(s.capacity(now), Some(5));
        assert_eq!(s.view(now, 30_000).rate_limited_rate, Some(1.0 / 3.0));
        // ...lowered by a 429 at a lower load (4 in flight now), never raised by a higher one...
        s.finish(now, fail(Outcome::RateLimited), 30_000);
        assert_eq!(s.capacity(now), Some(4));
        for _ in 0..6 {
            s.start();
        }
        s.finish(now, fail(Outcome::RateLimited), 30_000);
        assert_eq!(s.capacity(now), Some(4));
        // ...and growing back by one per CAP_REGROW_MS without 429s.
        assert_eq!(s.capacity(now + 3 * CAP_REGROW_MS), Some(7));
        let bytes = s.encode();
        assert_eq!(bytes.len(), RECORD_BYTES);
        assert_eq!(EndpointStats::decode(&bytes), s);
    }

    #[test]
    fn empty_has_no_data() {
        let v = EndpointStats::default().view(1_000_000, 30_000);
        assert_eq!(v, EndpointHealth::default());
    }

    #[test]
    fn percentiles_and_rates() {
        let mut s = EndpointStats::default();
        let now = 10_000_000;
        for _ in 0..90 {
            s.finish(now, ok(150, 100.0), 30_000);
        }
        for _ in 0..10 {
            s.finish(now, ok(3000, 10.0), 30_000);
        }
        let v = s.view(now, 30_000);
        assert_eq!(v.ttft_ms.p50, Some(150.0)); // bin (100, 200]
        assert_eq!(v.ttft_ms.p99, Some(2400.0)); // bin (1600, 3200]
        assert_eq!(v.throughput_tps.p50, Some(120.0)); // bin (80, 160]
        assert_eq!(v.uptime, Some(1.0));
        assert_eq!(v.error_rate, Some(0.0));
    }

    #[test]
    fn recent_counts_and_failure_runs_expire_after_the_window() {
        let mut s = EndpointStats::default();
        let now = 50_000_000; // a bucket boundary
        s.finish(now, fail(Outcome::ServerError), 30_000);
        s.finish(now, fail(Outcome::NoResponse), 30_000);
        s.finish(now, fail(Outcome::Interrupted), 30_000);
        let v = s.view(now, 30_000);
        assert_eq!((v.recent_attempts, v.recent_failures, v.failure_run), (3, 3, 3));
        assert_eq!(v.uptime, Some(0.0));
        assert!(!v.recent_outage, "the view never judges an outage: that needs the peers");
        assert_eq!(s.view(now + 29_000, 30_000).failure_run, 3);
        let later = s.view(now + 31_000, 30_000);
        assert_eq!(later.failure_run, 0, "the run is older than the window");
        assert_eq!(later.recent_failures, 3, "still inside the two 20 s buckets the window covers");
        assert_eq!(s.view(now + 40_000, 30_000).recent_failures, 0);
        assert_eq!(s.view(now + 40_000, 30_000).attempts, 3, "the 5-minute window still has them");
        // A success resets the run; a failure after the window starts a new one.
        s.finish(now + 1, ok(100, 50.0), 30_000);
        s.finish(now + 2, fail(Outcome::ServerError), 30_000);
        assert_eq!(s.view(now + 2, 30_000).failure_run, 1);
        s.finish(now + 60_000, fail(Outcome::ServerError), 30_000);
        assert_eq!(s.view(now + 60_000, 30_000).failure_run, 1);
        // 429s and client errors are not reliability failures.
        s.finish(now + 60_001, fail(Outcome::RateLimited), 30_000);
        s.finish(now + 60_002, fail(Outcome::ClientError), 30_000);
        let v = s.view(now + 60_002, 30_000);
        assert_eq!((v.recent_attempts, v.recent_failures, v.failure_run), (3, 1, 1));
    }

    // A success of an attempt sent before the failures began (it was already under way) does
    // not end the run; one sent since does.
    #[test]
    fn only_an_attempt_sent_since_the_run_began_ends_it() {
        let mut s = EndpointStats::default();
        let now = 90_000_000;
        let sent = |t: u64, f: Finished| Finished { started_ms: Some(t), ..f };
        s.finish(now, sent(now - 5, fail(Outcome::ServerError)), 30_000);
        s.finish(now + 20, sent(now - 300, ok(100, 50.0)), 30_000);
        assert_eq!(s.view(now + 21, 30_000).failure_run, 1, "a stale success leaves the run");
        s.finish(now + 30, sent(now + 25, fail(Outcome::NoResponse)), 30_000);
        assert_eq!(s.view(now + 31, 30_000).failure_run, 2);
        s.finish(now + 60, sent(now + 40, ok(100, 50.0)), 30_000);
        assert_eq!(s.view(now + 61, 30_000).failure_run, 0, "a probe sent since the run began ends it");
        // Unknown start: counts as fresh.
        s.finish(now + 70, sent(now + 65, fail(Outcome::ServerError)), 30_000);
        s.finish(now + 80, ok(100, 50.0), 30_000);
        assert_eq!(s.view(now + 81, 30_000).failure_run, 0);
        // The run's start survives the shared-data round trip.
        s.finish(now + 90, sent(now + 85, fail(Outcome::ServerError)), 30_000);
        let mut back = EndpointStats::decode(&s.encode());
        back.finish(now + 95, sent(now + 10, ok(100, 50.0)), 30_000);
        assert_eq!(back.view(now + 96, 30_000).failure_run, 1);
    }

    // Attempts sent since a run began and still in flight count into it (suspects); those
    // already under way when it began do not.
    #[test]
    fn attempts_sent_since_a_run_began_are_suspect() {
        let mut s = EndpointStats::default();
        let now = 95_000_000;
        let sent = |t: u64, f: Finished| Finished { started_ms: Some(t), ..f };
        for _ in 0..4 {
            s.start();
        }
        // One of the four fails: a run of 1; the other three were sent before it began.
        s.finish(now, sent(now - 20, fail(Outcome::ServerError)), 30_000);
        assert_eq!(s.view(now + 1, 30_000).failure_run, 1);
        // Two more are sent: suspects.
        s.start();
        s.start();
        assert_eq!(s.view(now + 2, 30_000).failure_run, 3);
        // A stale one succeeds: the run and its suspects stay.
        s.finish(now + 5, sent(now - 30, ok(100, 50.0)), 30_000);
        assert_eq!(s.view(now + 6, 30_000).failure_run, 3);
        // A suspect fails: two failures, one suspect left.
        s.finish(now + 8, sent(now + 2, fail(Outcome::NoResponse)), 30_000);
        assert_eq!(s.view(now + 9, 30_000).failure_run, 3);
        // The other suspect succeeds: the run ends.
        s.finish(now + 12, sent(now + 2, ok(100, 50.0)), 30_000);
        assert_eq!(s.view(now + 13, 30_000).failure_run, 0);
        assert_eq!(EndpointStats::decode(&s.encode()), s);
    }

    #[test]
    fn retry_after_sets_cooldown_and_429_is_not_an_outage() {
        let mut s = EndpointStats::default();
        let now = 70_000_000;
        s.finish(
            now,
            Finished {
                outcome: Outcome::RateLimited,
                started_ms: None,
                ttft_ms: None,
                tokens_per_s: None,
                retry_after_s: Some(5),
                usage: None,
            },
            30_000,
        );
        s.finish(
            now,
            Finished {
                outcome: Outcome::RateLimited,
                started_ms: None,
                ttft_ms: None,
                tokens_per_s: None,
                retry_after_s: None,
                usage: None,
            },
            30_000,
        );
        let v = s.view(now + 4_000, 30_000);
        assert!(v.cooling_down && v.recent_failures == 0 && v.failure_run == 0);
        assert!(!s.view(now + 5_001, 30_000).cooling_down);
        assert_eq!(s.totals(now).3, 2);
    }

    #[test]
    fn window_decays_and_buckets_are_reused() {
        let mut s = EndpointStats::default();
        let t0 = 100_000_000;
        s.finish(t0, ok(100, 10.0), 30_000);
        assert_eq!(s.totals(t0).0, 1);
        assert_eq!(s.totals(t0 + 4 * 60_000).0, 1);
        assert_eq!(s.totals(t0 + 5 * 60_000 + BUCKET_MS).0, 0, "older than the window");
        // Same slot one full cycle later: reset, not accumulated.
        s.finish(t0 + BUCKET_MS * BUCKETS as u64, ok(100, 10.0), 30_000);
        assert_eq!(s.totals(t0 + BUCKET_MS * BUCKETS as u64).0, 1);
    }

    #[test]
    fn in_flight_and_encoding_round_trip() {
        let mut s = EndpointStats::default();
        s.start();
        s.start();
        s.finish(123_456_789, ok(300, 42.0), 30_000);
        assert_eq!(s.in_flight(), 1);
        let bytes = s.encode();
        assert_eq!(bytes.len(), RECORD_BYTES);
        assert_eq!(EndpointStats::decode(&bytes), s);
        assert_eq!(EndpointStats::decode(&bytes[1..]), EndpointStats::default());
    }
}
