//! The filters' side of mesh-wide limits (`crate::limits`): admission of a routed request
//! (request limits at its headers, its estimate reserved on token and spend limits once routed,
//! each from the worker's lease on the counter when it covers it, else by leasing a chunk),
//! settlement of what it used against its reservation (an excess taken from the lease or sent
//! at once, unused reservations given back to the lease), capacity charges queued on the worker and sent by
//! the root context on its tick, and what the service's answers teach (a provider over its cap,
//! kept in shared data for the router; a shared cool-down, in the endpoints' statistics).

use std::cell::RefCell;

use super::host::Host;
use super::shared::{count, count_by, stats_key, tag, update_stats};
use super::Configured;
use crate::answer::errors::ApiError;
use crate::limits::rls::{self, Code, Descriptor};
use crate::limits::{
    capacity_descriptor, cooldown_descriptor, cooldown_slot, cooldown_slots, limit_descriptor, reservation, used,
    Applied, Kind, Ledger, Limit, MeshLimits, Pending, Service, COOLDOWN_GRACE_MS, COOLDOWN_MARK, COOLDOWN_SLOT_S,
};
use crate::routing::policy::CallerFacts;

#[cfg(not(feature = "native"))]
thread_local! {
    /// Charges of this worker's requests and attempts, sent on the root's next tick. Both
    /// filters run in the same VM on the worker, so both queue here.
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
}

/// The native build ticks once for every worker (on Envoy's main thread): the charges of all
/// workers queue here.
#[cfg(feature = "native")]
static PENDING: std::sync::Mutex<Option<Pending>> = std::sync::Mutex::new(None);

#[cfg(not(feature = "native"))]
fn with_pending<R>(f: impl FnOnce(&mut Pending) -> R) -> R {
    PENDING.with(|p| f(&mut p.borrow_mut()))
}

#[cfg(feature = "native")]
fn with_pending<R>(f: impl FnOnce(&mut Pending) -> R) -> R {
    f(PENDING.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(Pending::default))
}

thread_local! {
    /// This worker's leases per counter: budget the service counted that no request used yet
    /// (chunks, reservations not used up), which the next admissions on the same counter use
    /// without a call; and the fractions of charges not sent yet.
    static LEDGER: RefCell<Ledger> = RefCell::new(Ledger::default());
}

fn queue(descriptor: Descriptor, hits: f64) {
    with_pending(|p| p.add(descriptor, hits));
}

/// One `ShouldRateLimit` call to the service; the token of its answer, None if the host refused.
fn call(host: &dyn Host, service: &Service, descriptors: &[Descriptor], hits: u32) -> Option<u32> {
    let message = rls::encode_request(&service.domain, descriptors, hits);
    host.grpc_call(&service.target, rls::SERVICE, rls::METHOD, &message, service.timeout_ms)
}

/// The service's answer to a call, when it answered with a `RateLimitResponse`.
fn decoded(host: &dyn Host, status: u32, size: usize) -> Option<rls::Response> {
    if status != 0 {
        return None;
    }
    host.grpc_response(size).and_then(|b| rls::decode_response(&b))
}

/// A routed request's admission: the limits that apply, the calls that check them, and what
/// each limit's counter was charged for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub applied: Vec<Applied>,
    pub state: AdmissionState,
    /// Per applied limit (same order): what admission charged its counter.
    pub reserved: Vec<Reserved>,
    /// Calls not answered yet.
    calls: Vec<Call>,
    /// Token and spend limits apply and are not reserved yet (that waits for the body).
    to_reserve: bool,
    /// Per applied limit, once covered: over its limit, and when its window resets.
    answers: Vec<Option<(bool, Option<u64>)>>,
    /// A refused lease was asked again for the exact reservation (once per request).
    retried: bool,
}

/// One call of an admission: its token, the applied limits it carries, when it was sent (ms).
#[derive(Debug, Clone, PartialEq)]
struct Call {
    token: u32,
    which: Vec<usize>,
    sent_ms: u64,
}

/// What one limit's counter was charged at admission: `units` in all, of which `credit`
/// came from this worker's lease (good until `credit_until_ms`) and the rest from its call,
/// which asked for `leased` (0: admitted from the lease alone; more than `units - credit`: a
/// chunk, its surplus the lease's). The reservation may be given back to the lease until
/// `until_ms` (its window's end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    pub units: u64,
    pub credit: u64,
    pub credit_until_ms: u64,
    pub leased: u64,
    pub until_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionState {
    /// Waiting for the service's answers (or for the body, to reserve).
    Waiting,
    Admitted,
    /// The service failed and every applicable limit fails open: served, uncounted.
    FailedOpen,
    /// Over a limit, or the service failed under a closed limit: the reply.
    Refused(ApiError),
}

/// What a request is estimated to use, for its reservation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub tokens: u64,
    /// The tokens priced at the dearest endpoint the plan may serve it from.
    pub cost_usd: f64,
}

fn reserves(l: &Limit) -> bool {
    l.kind != Kind::Requests
}

/// Starts the admission of a routed request: request limits are checked now (one call, one
/// unit each, while the body uploads); token and spend limits wait for the body, whose
/// estimate `reserve` charges. None when no limit applies (no call at all).
pub fn admit(
    host: &dyn Host,
    config: &Configured,
    policy: Option<&str>,
    facts: &mut dyn CallerFacts,
) -> Option<Admission> {
    let limits = &config.limits;
    let service = limits.service.as_ref()?;
    let applied = limits.applicable(policy, facts);
    if applied.is_empty() {
        return None;
    }
    let mut adm = Admission {
        reserved: vec![Reserved::default(); applied.len()],
        answers: vec![None; applied.len()],
        to_reserve: applied.iter().any(|a| limits.limit(a).is_some_and(reserves)),
        calls: Vec::new(),
        state: AdmissionState::Waiting,
        retried: false,
        applied,
    };
    let requests: Vec<usize> = (0..adm.applied.len())
        .filter(|&i| adm.applied.get(i).and_then(|a| limits.limit(a)).is_some_and(|l| !reserves(l)))
        .collect();
    if !requests.is_empty() {
        // Not leased: the call runs while the body uploads (no wait), and each request meets
        // its limits' failure mode when the service fails (docs/mesh-limits.md, "Leases").
        for &i in &requests {
            if let Some(r) = adm.reserved.get_mut(i) {
                *r = Reserved { units: 1, leased: 1, ..Reserved::default() };
            }
        }
        let now_ms = host.now_ms();
        if !send(host, service, limits, &mut adm, vec![(1, requests)], now_ms) {
            let state = failed(host, limits, &adm.applied, "refused");
            finish(&mut adm, limits, state, now_ms);
        }
    }
    Some(adm)
}

fn descriptors_of(limits: &MeshLimits, applied: &[Applied], which: &[usize]) -> Vec<Descriptor> {
    which
        .iter()
        .filter_map(|&i| applied.get(i))
        .filter_map(|a| limits.limit(a).map(|l| limit_descriptor(&l.name, &a.subject)))
        .collect()
}

/// Covers `need` units on each of the applied limits `which` from this worker's leases; what
/// they do not cover is asked for: the calls to make, one per distinct hits (the API adds one
/// `hits_addend` to every descriptor of a call).
fn lease(
    limits: &MeshLimits,
    adm: &mut Admission,
    which: &[usize],
    need: impl Fn(&Limit) -> u64,
    now_ms: u64,
) -> Vec<(u32, Vec<usize>)> {
    let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
    LEDGER.with(|l| {
        let mut l = l.borrow_mut();
        for &i in which {
            let Some((a, limit)) = adm.applied.get(i).and_then(|a| limits.limit(a).map(|l| (a, l))) else { continue };
            let units = need(limit);
            let lease = l.lease(&limit_descriptor(&limit.name, &a.subject), units, limit.amount, now_ms);
            let (Some(r), Some(answer)) = (adm.reserved.get_mut(i), adm.answers.get_mut(i)) else { continue };
            *r = Reserved {
                units,
                credit: lease.credit,
                credit_until_ms: lease.credit_until_ms,
                leased: lease.hits,
                until_ms: lease.credit_until_ms,
            };
            if lease.hits == 0 {
                // Admitted from the lease: counted in the service already.
                *answer = Some((false, None));
                continue;
            }
            let hits = u32::try_from(lease.hits).unwrap_or(u32::MAX);
            match groups.iter_mut().find(|(h, _)| *h == hits) {
                Some((_, w)) => w.push(i),
                None => groups.push((hits, vec![i])),
            }
        }
    });
    groups
}

/// Sends an admission's calls; false when the host refused one.
fn send(
    host: &dyn Host,
    service: &Service,
    limits: &MeshLimits,
    adm: &mut Admission,
    groups: Vec<(u32, Vec<usize>)>,
    now_ms: u64,
) -> bool {
    for (hits, which) in groups {
        let descriptors = descriptors_of(limits, &adm.applied, &which);
        match call(host, service, &descriptors, hits) {
            Some(token) => adm.calls.push(Call { token, which, sent_ms: now_ms }),
            None => return false,
        }
    }
    true
}

/// Reserves a routed request's estimate on its token and spend limits: from the worker's lease
/// on each counter when it covers it (no call), else in a call leasing a chunk. Does nothing
/// unless the admission still waits for it.
pub fn reserve(host: &dyn Host, limits: &MeshLimits, adm: &mut Admission, estimate: Estimate, now_ms: u64) {
    if !adm.to_reserve || adm.state != AdmissionState::Waiting {
        return;
    }
    adm.to_reserve = false;
    let Some(service) = &limits.service else { return };
    let which: Vec<usize> = (0..adm.applied.len())
        .filter(|&i| adm.applied.get(i).and_then(|a| limits.limit(a)).is_some_and(reserves))
        .collect();
    let groups = lease(limits, adm, &which, |l| reservation(l.kind, estimate.tokens, estimate.cost_usd), now_ms);
    if !send(host, service, limits, adm, groups, now_ms) {
        let state = failed(host, limits, &adm.applied, "refused");
        finish(adm, limits, state, now_ms);
    } else if adm.calls.is_empty() {
        adm.state = AdmissionState::Admitted;
    }
}

/// A reservation that did not count (refused, or the service failed): the credit it took is
/// given back; what it sent may or may not have been counted, so it is not credited.
fn release_credit(adm: &mut Admission, limits: &MeshLimits, now_ms: u64) {
    LEDGER.with(|l| {
        let mut l = l.borrow_mut();
        for (a, r) in adm.applied.iter().zip(adm.reserved.iter_mut()) {
            if let Some(limit) = limits.limit(a).filter(|_| r.credit > 0) {
                l.give_back(&limit_descriptor(&limit.name, &a.subject), r.credit, r.credit_until_ms, now_ms);
            }
            *r = Reserved::default();
        }
    });
}

/// The service did not answer usefully: each limit's failure mode decides.
fn failed(host: &dyn Host, limits: &MeshLimits, applied: &[Applied], why: &str) -> AdmissionState {
    count(host, &failure_metric(why));
    let closed = applied.iter().filter_map(|a| limits.limit(a)).find(|l| l.fail_closed);
    match closed {
        Some(l) => {
            let mut e = ApiError::new(
                503,
                "server_error",
                "rate_limit_unavailable",
                format!("the rate limit service is unavailable and limit \"{}\" fails closed", l.name),
            );
            e.metadata.insert("limit".into(), l.name.clone().into());
            AdmissionState::Refused(e)
        }
        None => AdmissionState::FailedOpen,
    }
}

impl Admission {
    /// Admitted, counted or not.
    pub fn admitted(&self) -> bool {
        matches!(self.state, AdmissionState::Admitted | AdmissionState::FailedOpen)
    }

    /// Whether `token` is one of this admission's calls, still unanswered.
    pub fn waits_for(&self, token: u32) -> bool {
        self.state == AdmissionState::Waiting && self.calls.iter().any(|c| c.token == token)
    }

    /// The debug header's value: each applicable limit and whose counter, and how admission went.
    pub fn explain(&self, limits: &MeshLimits) -> String {
        let list: Vec<String> =
            self.applied.iter().filter_map(|a| limits.limit(a).map(|l| format!("{}={}", l.name, a.subject))).collect();
        let how = match self.state {
            AdmissionState::FailedOpen => "service failed, open",
            AdmissionState::Admitted => "admitted",
            _ => "pending",
        };
        format!("{} ({how})", list.join(", "))
    }
}

/// An answer to one of the admission's calls; the admission's state once every call answered
/// (or at once, for a failure or a refusal). A refused chunk is asked again for exactly the
/// reservation, once: it may have been refused for its size alone.
pub fn answered(
    host: &dyn Host,
    limits: &MeshLimits,
    adm: &mut Admission,
    token: u32,
    status: u32,
    size: usize,
    now_ms: u64,
) {
    let Some(at) = adm.calls.iter().position(|c| c.token == token) else { return };
    let Call { which, sent_ms, .. } = adm.calls.swap_remove(at);
    let Some(r) = decoded(host, status, size) else {
        let why = match status {
            0 => "malformed",
            4 => "timeout",
            14 => "unavailable",
            _ => "error",
        };
        return finish(adm, limits, failed(host, limits, &adm.applied, why), now_ms);
    };
    if r.overall == Code::Unknown {
        return finish(adm, limits, failed(host, limits, &adm.applied, "unknown"), now_ms);
    }
    // Per limit of the call, when the service gave one status per descriptor.
    let statuses = (r.statuses.len() == which.len()).then_some(&r.statuses);
    let (mut chunks_over, mut exact_over) = (Vec::new(), false);
    LEDGER.with(|l| {
        let mut l = l.borrow_mut();
        for (k, &i) in which.iter().enumerate() {
            let s = statuses.and_then(|s| s.get(k));
            // Over: what its status says (every limit of the call when there are none).
            let over = r.overall == Code::OverLimit && s.is_none_or(|s| s.code == Code::OverLimit);
            let reset = s.and_then(|s| s.reset_s);
            let (Some(a), Some(res), Some(answer)) =
                (adm.applied.get(i), adm.reserved.get_mut(i), adm.answers.get_mut(i))
            else {
                continue;
            };
            let Some(limit) = limits.limit(a) else { continue };
            // Counted until its window resets (a second early: the service rounds the time
            // up; from when the call was sent). An engine that says no reset time (Limitador)
            // gets the limit's whole window: a credit may then be used early in the next
            // window (docs/mesh-limits.md, "Undershoot"), which beats never giving a
            // reservation back (budgets ran out at a quarter of their use).
            let reset_s = reset.unwrap_or(limit.window.seconds());
            let until = sent_ms.saturating_add(reset_s.saturating_sub(1).saturating_mul(1000));
            *answer = Some((over, reset));
            if !reserves(limit) {
                // Request limits are not leased: a refusal is final.
                exact_over |= over;
                continue;
            }
            let descriptor = limit_descriptor(&limit.name, &a.subject);
            if over {
                l.refused(&descriptor, until, now_ms);
                if res.leased > res.units.saturating_sub(res.credit) {
                    chunks_over.push(i);
                } else {
                    exact_over = true;
                }
                continue;
            }
            // The chunk beyond the reservation is the worker's lease now.
            let surplus = (res.leased + res.credit).saturating_sub(res.units);
            l.counted(&descriptor, surplus, s.map(|s| s.remaining), until, now_ms);
            res.until_ms = if res.credit > 0 { until.min(res.credit_until_ms) } else { until };
        }
    });
    if !chunks_over.is_empty() && !exact_over && !adm.retried {
        adm.retried = true;
        let mut groups: Vec<(u32, Vec<usize>)> = Vec::new();
        for i in chunks_over {
            let (Some(res), Some(answer)) = (adm.reserved.get_mut(i), adm.answers.get_mut(i)) else { continue };
            res.leased = res.units.saturating_sub(res.credit);
            *answer = None;
            let hits = u32::try_from(res.leased).unwrap_or(u32::MAX);
            match groups.iter_mut().find(|(h, _)| *h == hits) {
                Some((_, w)) => w.push(i),
                None => groups.push((hits, vec![i])),
            }
        }
        let Some(service) = &limits.service else { return };
        if !send(host, service, limits, adm, groups, now_ms) {
            let state = failed(host, limits, &adm.applied, "refused");
            finish(adm, limits, state, now_ms);
        }
        return;
    }
    if adm.answers.iter().any(|a| a.is_some_and(|(o, _)| o)) {
        // A refusal does not wait for the other calls: they are over budget or not counted.
        let state = refusal(host, limits, adm);
        return finish(adm, limits, state, now_ms);
    }
    if adm.calls.is_empty() && !adm.to_reserve {
        adm.state = AdmissionState::Admitted;
    }
}

fn finish(adm: &mut Admission, limits: &MeshLimits, state: AdmissionState, now_ms: u64) {
    adm.state = state;
    adm.calls.clear();
    adm.to_reserve = false;
    release_credit(adm, limits, now_ms);
}

/// The 429 of an admission some limit refused, in the caller's shape.
fn refusal(host: &dyn Host, limits: &MeshLimits, adm: &Admission) -> AdmissionState {
    let over: Vec<(usize, Option<u64>)> = adm
        .answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.filter(|(o, _)| *o).map(|(_, reset)| (i, reset)))
        .collect();
    let Some(&(first, _)) = over.first() else { return AdmissionState::Admitted };
    let Some(limit) = adm.applied.get(first).and_then(|a| limits.limit(a)) else {
        return AdmissionState::Admitted;
    };
    // Retry when the last over-limit window frees capacity (its window when unsaid).
    let retry_after = over
        .iter()
        .filter_map(|&(i, reset)| {
            reset.or_else(|| adm.applied.get(i).and_then(|a| limits.limit(a)).map(|l| l.window.seconds()))
        })
        .max()
        .unwrap_or(limit.window.seconds())
        .max(1);
    let code = refusal_code(limit.kind);
    let what = match limit.kind {
        Kind::Spend => "spend budget",
        Kind::Tokens => "token limit",
        Kind::Requests => "request limit",
    };
    count(host, &refused_metric(limit));
    let mut e = ApiError::new(
        429,
        "rate_limit_error",
        code,
        format!(
            "{what} \"{}\" ({} per {}) is used up; retry in {retry_after} s",
            limit.name,
            amount_text(limit),
            limit.window.name()
        ),
    );
    e.metadata.insert("limit".into(), limit.name.clone().into());
    e.headers.push(("retry-after".into(), retry_after.to_string()));
    AdmissionState::Refused(e)
}

fn amount_text(l: &crate::limits::Limit) -> String {
    match l.kind {
        Kind::Spend => format!("${:.2}", l.amount as f64 / crate::limits::SPEND_UNITS_PER_USD),
        Kind::Tokens => format!("{} tokens", l.amount),
        Kind::Requests => format!("{} requests", l.amount),
    }
}

/// Settles an admitted request on its token and spend limits: what it used (`served`: its
/// tokens and cost; None when no answer was served) less what admission reserved. The excess
/// is taken from the worker's lease on the counter, and what that does not cover is charged at
/// once, one detached call per counter; what was reserved and not used goes back to the lease
/// for the next reservations of the same counter in the same window. Call it once, when the
/// answer ends.
pub fn settle(host: &dyn Host, limits: &MeshLimits, adm: &Admission, served: Option<(u64, f64)>, now_ms: u64) {
    let Some(service) = &limits.service else { return };
    if !adm.admitted() {
        return;
    }
    let ready: Vec<(Descriptor, u32)> = LEDGER.with(|p| {
        let mut p = p.borrow_mut();
        let mut out = Vec::new();
        for (a, r) in adm.applied.iter().zip(&adm.reserved) {
            let Some(l) = limits.limit(a).filter(|l| reserves(l)) else { continue };
            let use_ = served.map_or(0.0, |(tokens, cost)| used(l.kind, tokens, cost));
            let descriptor = limit_descriptor(&l.name, &a.subject);
            let hits = p.settle(&descriptor, use_ - r.units as f64, r.until_ms, now_ms);
            if hits > 0 {
                out.push((descriptor, hits));
            }
            if served.is_some() {
                // What was charged, per limit (identities are unbounded: not a label).
                count_by(host, &charged_metric(l), use_.round() as u64);
            }
        }
        out
    });
    for (descriptor, hits) in ready {
        let message = rls::encode_request(&service.domain, std::slice::from_ref(&descriptor), hits);
        if !host.grpc_call_detached(&service.target, rls::SERVICE, rls::METHOD, &message, service.timeout_ms) {
            count(host, &failure_metric("settlement"));
        }
    }
}

/// Queues one finished attempt's charges on its provider's capacity, and a shared cool-down
/// when the provider answered 429 with `Retry-After`.
pub fn attempt_charges(limits: &MeshLimits, provider: &str, tokens: u64, retry_after_s: Option<u32>, now_ms: u64) {
    if !limits.tracks_provider(provider) {
        return;
    }
    if let Some(c) = limits.capacity_of(provider) {
        if c.requests_per_minute.is_some() {
            queue(capacity_descriptor(provider, Kind::Requests), 1.0);
        }
        if c.tokens_per_minute.is_some() && tokens > 0 {
            queue(capacity_descriptor(provider, Kind::Tokens), tokens as f64);
        }
    }
    if let Some(r) = retry_after_s {
        share_cooldown(limits, provider, r, now_ms);
    }
}

/// With `share_cooldowns`, marks `provider` cooling down for `retry_after_s` on every pod.
pub fn share_cooldown(limits: &MeshLimits, provider: &str, retry_after_s: u32, now_ms: u64) {
    if limits.share_cooldowns && retry_after_s > 0 && limits.tracks_provider(provider) {
        for slot in cooldown_slots(now_ms / 1000, u64::from(retry_after_s)) {
            queue(cooldown_descriptor(provider, slot), f64::from(COOLDOWN_MARK));
        }
    }
}

/// A call the root context made, by token.
#[derive(Debug, Clone, PartialEq)]
enum RootCall {
    /// A charge of one descriptor.
    Charge(Descriptor),
    /// The cool-down poll: one descriptor per provider, in `providers` order.
    Poll { providers: Vec<String>, slot: u64 },
}

/// The root context's part: each tick it sends the queued charges (one call per descriptor,
/// the summed hits) and polls the providers' current cool-down slots.
#[derive(Debug, Default)]
pub struct Ticker {
    calls: Vec<(u32, RootCall)>,
}

/// Calls in flight from one root at most (a service that never answers cannot grow this).
const MAX_ROOT_CALLS: usize = 1024;

impl Ticker {
    pub fn tick(&mut self, host: &dyn Host, config: &Configured, now_ms: u64) {
        let limits = &config.limits;
        let Some(service) = &limits.service else { return };
        let charges = with_pending(|p| p.drain());
        for (descriptor, hits) in charges {
            if self.calls.len() >= MAX_ROOT_CALLS {
                count(host, &failure_metric("backlog"));
                continue;
            }
            match call(host, service, std::slice::from_ref(&descriptor), hits) {
                Some(token) => self.calls.push((token, RootCall::Charge(descriptor))),
                None => count(host, &failure_metric("refused")),
            }
        }
        if limits.share_cooldowns && self.calls.len() < MAX_ROOT_CALLS {
            let slot = cooldown_slot(now_ms / 1000);
            let providers: Vec<String> = config.catalog.providers.iter().map(|p| p.slug.clone()).collect();
            let descriptors: Vec<Descriptor> = providers.iter().map(|p| cooldown_descriptor(p, slot)).collect();
            if let Some(token) = call(host, service, &descriptors, 1) {
                self.calls.push((token, RootCall::Poll { providers, slot }));
            }
        }
    }

    /// An answer to one of the root's calls: an over-limit capacity or cool-down slot cools
    /// the provider's endpoints down on this pod until the service says the window resets.
    pub fn answered(
        &mut self,
        host: &dyn Host,
        config: &Configured,
        token: u32,
        status: u32,
        size: usize,
        now_ms: u64,
    ) {
        let Some(i) = self.calls.iter().position(|(t, _)| *t == token) else { return };
        let (_, call) = self.calls.swap_remove(i);
        let Some(r) = decoded(host, status, size) else {
            count(host, &failure_metric("charge"));
            return;
        };
        if r.overall != Code::OverLimit {
            return;
        }
        match call {
            RootCall::Charge(descriptor) => {
                let (Some((key, provider)), reset) = (descriptor.first(), r.statuses.first().and_then(|s| s.reset_s))
                else {
                    return;
                };
                if key == crate::limits::CAPACITY_KEY {
                    count(host, &format!("switchyard.rate_limit.capped_total.provider.{}", tag(provider)));
                    let until = now_ms.saturating_add(reset.unwrap_or(60).saturating_mul(1000));
                    host.set_shared_data(&capped_key(provider), &until.to_le_bytes(), 0);
                }
            }
            RootCall::Poll { providers, slot } => {
                // Past the slot's end by the grace: the next slot's poll answers before it runs out.
                let slot_end_ms = slot.saturating_add(1).saturating_mul(COOLDOWN_SLOT_S).saturating_mul(1000);
                let until_ms = slot_end_ms.saturating_add(COOLDOWN_GRACE_MS);
                for (p, s) in providers.iter().zip(&r.statuses) {
                    if s.code == Code::OverLimit {
                        count(host, &format!("switchyard.rate_limit.shared_cooldown_total.provider.{}", tag(p)));
                        cool_provider(host, config, p, until_ms);
                    }
                }
            }
        }
    }
}

/// The error code of a request a limit of this kind refused.
pub fn refusal_code(kind: Kind) -> &'static str {
    match kind {
        Kind::Spend => "budget_exceeded",
        Kind::Tokens | Kind::Requests => "rate_limited",
    }
}

/// The counter of what served requests charged to a token or spend limit.
pub fn charged_metric(l: &Limit) -> String {
    format!("switchyard.rate_limit.charged_total.limit.{}.kind.{}", tag(&l.name), l.kind.name())
}

/// The counter of requests a limit refused.
pub fn refused_metric(l: &Limit) -> String {
    format!("switchyard.rate_limit.refused_total.limit.{}.code.{}", tag(&l.name), refusal_code(l.kind))
}

/// `switchyard_rate_limit_failure_total{reason}`: `reason` one of `FAILURE_REASONS`.
pub fn failure_metric(reason: &str) -> String {
    format!("switchyard.rate_limit.failure_total.reason.{reason}")
}

/// Every `reason` of `switchyard_rate_limit_failure_total`.
pub const FAILURE_REASONS: [&str; 9] =
    ["timeout", "unavailable", "error", "malformed", "unknown", "refused", "settlement", "charge", "backlog"];

fn capped_key(provider: &str) -> String {
    format!("switchyard.capped.{provider}")
}

/// The providers over their mesh-wide capacity on this pod, with until when (ms): read for
/// the providers `capacity` names (no host call without it).
pub fn capped(host: &dyn Host, limits: &MeshLimits, now_ms: u64) -> Vec<(String, u64)> {
    limits
        .capacity
        .iter()
        .filter_map(|c| {
            let until =
                host.shared_data(&capped_key(&c.provider)).0.and_then(|b| crate::protocol::bytes::u64_at(&b, 0))?;
            (until > now_ms).then(|| (c.provider.clone(), until))
        })
        .collect()
}

/// Every endpoint of `provider` cools down until `until_ms` on this pod.
fn cool_provider(host: &dyn Host, config: &Configured, provider: &str, until_ms: u64) {
    let catalog = &config.catalog;
    for e in &catalog.endpoints {
        if catalog.provider_of(e).is_some_and(|p| p.slug == provider) {
            let Some(model) = catalog.models.get(e.model) else { continue };
            update_stats(host, &stats_key(&model.id, &e.slug), |s| s.cool_down_until(until_ms));
        }
    }
}
