//! Default policy B, `routing_cost`: the expected cost of one good answer per endpoint, and the
//! traffic share each endpoint gets from it (OpenRouter's rebuilt default router).
//!
//! Per endpoint of the requested model:
//! - attempt cost = effective price of this request (list price scaled by what the endpoint
//!   actually charged recently, cached tokens included) + waiting time (TTFT + the whole answer's
//!   time, TTFT + completion tokens / throughput) converted to money at the model's rate + a rate-limit penalty weighted by the
//!   endpoint's 429 rate;
//! - success probability = (1 - reliability error rate) x (1 - bad-response rate);
//! - routing cost = attempt cost / success probability.
//!
//! Shares: endpoints within `competitive_margin` of the best routing cost share most of the
//! traffic (closer = more); past it the share falls off fast. Guardrails: a floor share for every
//! endpoint (so recovery is seen), paused endpoints (a significant outage: floor only), and a
//! learned capacity (an endpoint at its cap gets nothing, the excess spills to the others).
//! Endpoints without measurements start from the model's typical values.

use crate::routing::health::{EndpointHealth, MeasuredUsage};

/// Tunables (`routing.routing_cost` in the configuration); the defaults need no tuning.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostParams {
    /// Endpoints within this fraction of the best routing cost share most traffic.
    pub competitive_margin: f64,
    /// Share every endpoint keeps (unless at its learned capacity).
    pub floor_share: f64,
    /// Seconds of waiting a 429 costs (its round trip plus a penalty), weighted by the 429 rate.
    pub rate_limit_penalty_s: f64,
    /// USD per second of waiting; None = derived per model from its endpoints' typical price
    /// and speed (a typical request's price per second of its typical duration).
    pub wait_usd_per_s: Option<f64>,
}

impl Default for CostParams {
    fn default() -> Self {
        CostParams { competitive_margin: 0.25, floor_share: 0.02, rate_limit_penalty_s: 2.0, wait_usd_per_s: None }
    }
}

/// What the policy knows about one endpoint for this request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct EndpointInput {
    /// Catalog prices, USD per million tokens (and per request).
    pub prompt_price: f64,
    pub completion_price: f64,
    pub request_price: f64,
    pub health: EndpointHealth,
    /// A significant outage (judged against peers): paused, floor traffic only.
    pub outage: bool,
}

/// Every term of one endpoint's routing cost, for the debug header.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CostTerms {
    /// USD this request is expected to cost at this endpoint (effective price).
    pub price_usd: f64,
    /// Measured charge / list charge for the same tokens (1 before any usage is reported).
    pub effective_ratio: f64,
    pub wait_s: f64,
    pub wait_usd: f64,
    pub rate_limit_usd: f64,
    pub success_p: f64,
    pub routing_cost: f64,
    pub share: f64,
    /// Backoff factor on the share, (1 - recent 429 rate)^2 over the outage window:
    /// rate-limited endpoints get less traffic until the 429s stop.
    pub backoff: f64,
    pub paused: bool,
    /// At its learned capacity: no share this request.
    pub capped: bool,
}

const DEFAULT_TTFT_MS: f64 = 1_000.0;
const DEFAULT_TPS: f64 = 50.0;
/// Usage reports needed before the measured price replaces the list price.
const MIN_USAGE_REPORTS: u64 = 3;
const MIN_SUCCESS_P: f64 = 0.05;

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    crate::routing::sorting::sort_by(&mut v, f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v.get(mid).copied()
    } else {
        Some((v.get(mid - 1).copied().unwrap_or(0.0) + v.get(mid).copied().unwrap_or(0.0)) / 2.0)
    }
}

/// Tokens of one request of this model: (prompt, completion). The model's recent average per
/// answer where usage was reported, else the request's own prompt estimate and `completion`.
pub fn token_estimate(inputs: &[EndpointInput], prompt_estimate: u64, completion_default: u64) -> (f64, f64) {
    let total = inputs.iter().filter_map(|i| i.health.usage).fold(MeasuredUsage::default(), |a, u| MeasuredUsage {
        reports: a.reports + u.reports,
        prompt_tokens: a.prompt_tokens + u.prompt_tokens,
        completion_tokens: a.completion_tokens + u.completion_tokens,
        cost_usd: a.cost_usd + u.cost_usd,
    });
    if total.reports >= MIN_USAGE_REPORTS {
        let n = total.reports as f64;
        (total.prompt_tokens as f64 / n, total.completion_tokens as f64 / n)
    } else {
        (prompt_estimate as f64, completion_default as f64)
    }
}

fn list_usd(i: &EndpointInput, prompt: f64, completion: f64) -> f64 {
    (prompt * i.prompt_price + completion * i.completion_price) / 1e6 + i.request_price
}

/// The routing-cost terms of every endpoint (same order as `inputs`), shares included.
pub fn costs(inputs: &[EndpointInput], tokens: (f64, f64), params: &CostParams) -> Vec<CostTerms> {
    let (prompt, completion) = tokens;
    // The model's typical values, for endpoints without measurements.
    let typical_ttft = median(inputs.iter().filter_map(|i| i.health.ttft_ms.p50).collect()).unwrap_or(DEFAULT_TTFT_MS);
    let typical_tps =
        median(inputs.iter().filter_map(|i| i.health.throughput_tps.p50).collect()).unwrap_or(DEFAULT_TPS).max(0.1);
    let typical_err = median(inputs.iter().filter_map(|i| i.health.error_rate).collect()).unwrap_or(0.0);
    let typical_bad = median(inputs.iter().filter_map(|i| i.health.bad_response_rate).collect()).unwrap_or(0.0);
    let typical_rl = median(inputs.iter().filter_map(|i| i.health.rate_limited_rate).collect()).unwrap_or(0.0);
    // The whole answer's time (TTFT + generation), plus TTFT once more on its own: interactive
    // and agent callers wait for every first token (as the seed's router counts it).
    let wait_of = |i: &EndpointInput| {
        let ttft = i.health.ttft_ms.p50.unwrap_or(typical_ttft) / 1000.0;
        let tps = i.health.throughput_tps.p50.unwrap_or(typical_tps).max(0.1);
        ttft + (ttft + completion / tps)
    };
    let usd_per_s = params.wait_usd_per_s.unwrap_or_else(|| {
        let price = median(inputs.iter().map(|i| list_usd(i, prompt, completion)).collect()).unwrap_or(0.0);
        let wait = median(inputs.iter().map(wait_of).collect()).unwrap_or(1.0).max(0.05);
        price / wait
    });
    let mut terms: Vec<CostTerms> = inputs
        .iter()
        .map(|i| {
            let h = &i.health;
            let effective_ratio = match h.usage {
                Some(u) if u.reports >= MIN_USAGE_REPORTS => {
                    // The same answers at list prices (one request price per answer).
                    let listed = (u.prompt_tokens as f64 * i.prompt_price
                        + u.completion_tokens as f64 * i.completion_price)
                        / 1e6
                        + i.request_price * u.reports as f64;
                    if listed > 0.0 {
                        u.cost_usd / listed
                    } else {
                        1.0
                    }
                }
                _ => 1.0,
            };
            let price_usd = list_usd(i, prompt, completion) * effective_ratio;
            let wait_s = wait_of(i);
            let wait_usd = wait_s * usd_per_s;
            let rl_rate = h.rate_limited_rate.unwrap_or(typical_rl).clamp(0.0, 1.0);
            let rate_limit_usd = rl_rate * params.rate_limit_penalty_s * usd_per_s;
            let success_p = ((1.0 - h.error_rate.unwrap_or(typical_err))
                * (1.0 - h.bad_response_rate.unwrap_or(typical_bad)))
            .clamp(MIN_SUCCESS_P, 1.0);
            let capped = h.capacity.is_some_and(|cap| h.in_flight.saturating_add(1) >= cap);
            CostTerms {
                price_usd,
                effective_ratio,
                wait_s,
                wait_usd,
                rate_limit_usd,
                success_p,
                routing_cost: (price_usd + wait_usd + rate_limit_usd) / success_p,
                share: 0.0,
                backoff: {
                    let recent = if h.recent_attempts > 0 {
                        f64::from(h.recent_rate_limited) / f64::from(h.recent_attempts)
                    } else {
                        0.0
                    };
                    (1.0 - recent.clamp(0.0, 1.0)).powi(2)
                },
                paused: i.outage,
                capped,
            }
        })
        .collect();
    let shares = shares(&terms, params);
    for (t, s) in terms.iter_mut().zip(shares) {
        t.share = s;
    }
    terms
}

/// Closeness weight: 1 at the best cost, 0.5 at the margin's edge, then a fast fall.
fn closeness(cost: f64, best: f64, margin: f64) -> f64 {
    let rel = if best > 0.0 {
        cost / best - 1.0
    } else if cost > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    let m = margin.max(1e-6);
    if rel <= m {
        1.0 - 0.5 * rel / m
    } else {
        0.5 * (-4.0 * (rel - m) / m).exp()
    }
}

/// Traffic shares (sum 1 over endpoints not at capacity; 0 for capped ones unless all are).
pub fn shares(terms: &[CostTerms], params: &CostParams) -> Vec<f64> {
    let open: Vec<usize> = (0..terms.len()).filter(|&i| terms.get(i).is_some_and(|t| !t.capped)).collect();
    let open = if open.is_empty() { (0..terms.len()).collect() } else { open };
    let active = |i: usize| terms.get(i).is_some_and(|t| !t.paused && t.routing_cost.is_finite());
    let best = open
        .iter()
        .filter(|&&i| active(i))
        .filter_map(|&i| terms.get(i))
        .map(|t| t.routing_cost)
        .fold(f64::INFINITY, f64::min);
    let weight = |i: usize| {
        if !active(i) || !best.is_finite() {
            return 0.0;
        }
        terms.get(i).map_or(0.0, |t| closeness(t.routing_cost, best, params.competitive_margin) * t.backoff)
    };
    let total: f64 = open.iter().map(|&i| weight(i)).sum();
    let k = open.len() as f64;
    let floor = params.floor_share.clamp(0.0, 1.0 / k.max(1.0));
    // A paused endpoint is only probed: half the floor, so a provider that falls over costs
    // as few first attempts as possible until a probe succeeds.
    let floor_of =
        |i: usize| if terms.get(i).is_some_and(|t| t.paused) { floor * PAUSED_FLOOR_FRACTION } else { floor };
    let floors: f64 = open.iter().map(|&i| floor_of(i)).sum();
    let mut out = vec![0.0; terms.len()];
    for &i in &open {
        let w = if total > 0.0 { weight(i) / total } else { 1.0 / k };
        if let Some(slot) = out.get_mut(i) {
            *slot = floor_of(i) + (1.0 - floors) * w;
        }
    }
    out
}

/// The share of the floor a paused endpoint (a significant outage) keeps: its probes.
pub const PAUSED_FLOOR_FRACTION: f64 = 0.5;

/// The order to try: drawn by share without replacement (each pick a weighted random draw
/// among the rest); endpoints with no share (capped) follow by routing cost.
pub fn draw_order(terms: &[CostTerms], rand: &mut dyn FnMut() -> f64) -> Vec<usize> {
    let mut left: Vec<usize> = (0..terms.len()).filter(|&i| terms.get(i).is_some_and(|t| t.share > 0.0)).collect();
    let mut order = Vec::with_capacity(terms.len());
    while !left.is_empty() {
        let total: f64 = left.iter().filter_map(|&i| terms.get(i)).map(|t| t.share).sum();
        let mut target = rand() * total;
        let mut pick = left.len() - 1;
        for (k, &i) in left.iter().enumerate() {
            let s = terms.get(i).map_or(0.0, |t| t.share);
            if target < s {
                pick = k;
                break;
            }
            target -= s;
        }
        order.push(left.remove(pick));
    }
    let mut rest: Vec<usize> = (0..terms.len()).filter(|i| !order.contains(i)).collect();
    crate::routing::sorting::sort_by(&mut rest, |&a, &b| {
        let c = |i: usize| terms.get(i).map_or(f64::INFINITY, |t| t.routing_cost);
        c(a).total_cmp(&c(b))
    });
    order.extend(rest);
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::health::Percentiles;

    fn ep(prompt: f64, completion: f64) -> EndpointInput {
        EndpointInput { prompt_price: prompt, completion_price: completion, ..EndpointInput::default() }
    }

    fn measured(mut i: EndpointInput, ttft_ms: f64, tps: f64, err: f64) -> EndpointInput {
        i.health.attempts = 100;
        i.health.ttft_ms = Percentiles { p50: Some(ttft_ms), ..Percentiles::default() };
        i.health.throughput_tps = Percentiles { p50: Some(tps), ..Percentiles::default() };
        i.health.error_rate = Some(err);
        i.health.rate_limited_rate = Some(0.0);
        i
    }

    fn share_of(terms: &[CostTerms]) -> Vec<f64> {
        terms.iter().map(|t| (t.share * 1000.0).round() / 1000.0).collect()
    }

    /// Seeded draws for the share tests.
    fn lcg(seed: u64) -> impl FnMut() -> f64 {
        let mut rng = crate::test_support::Lcg(seed);
        move || rng.next()
    }

    #[test]
    fn routing_cost_is_attempt_cost_over_success_probability() {
        let a = measured(ep(1.0, 2.0), 500.0, 100.0, 0.2);
        let t = costs(&[a], (1000.0, 200.0), &CostParams { wait_usd_per_s: Some(0.001), ..CostParams::default() });
        let t = t[0];
        assert!((t.price_usd - (1000.0 * 1.0 + 200.0 * 2.0) / 1e6).abs() < 1e-12);
        assert!((t.wait_s - (0.5 + 0.5 + 200.0 / 100.0)).abs() < 1e-9);
        assert!((t.wait_usd - 0.003).abs() < 1e-12);
        assert!((t.success_p - 0.8).abs() < 1e-12);
        assert!((t.routing_cost - (t.price_usd + t.wait_usd) / 0.8).abs() < 1e-12);
        assert!((t.share - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_price_gaming_endpoint_loses_share_once_usage_is_measured() {
        // "gamer" lists a cheap prompt price but charges far more (its cached and completion
        // tokens are dear); "fair" lists a little more. Same speed and reliability.
        let gamer = measured(ep(0.5, 0.5), 300.0, 80.0, 0.0);
        let fair = measured(ep(0.8, 0.8), 300.0, 80.0, 0.0);
        let params = CostParams::default();
        let before = costs(&[gamer, fair], (1000.0, 200.0), &params);
        assert!(before[0].share > before[1].share, "before usage the list price wins: {:?}", share_of(&before));
        let mut gamer_used = gamer;
        // 10 answers of 1000 + 200 tokens that cost 3x the list price.
        gamer_used.health.usage = Some(MeasuredUsage {
            reports: 10,
            prompt_tokens: 10_000,
            completion_tokens: 2_000,
            cost_usd: 3.0 * (10_000.0 * 0.5 + 2_000.0 * 0.5) / 1e6,
        });
        let after = costs(&[gamer_used, fair], (1000.0, 200.0), &params);
        assert!((after[0].effective_ratio - 3.0).abs() < 1e-9);
        assert!(after[0].share < after[1].share, "measured price loses: {:?}", share_of(&after));
    }

    #[test]
    fn close_endpoints_share_traffic_and_distant_ones_fall_off_fast() {
        let params = CostParams { wait_usd_per_s: Some(0.0), floor_share: 0.0, ..CostParams::default() };
        let eps = [ep(1.0, 1.0), ep(1.1, 1.1), ep(1.25, 1.25), ep(2.0, 2.0)];
        let t = costs(&eps, (1000.0, 1000.0), &params);
        let s = share_of(&t);
        assert!(s[0] > s[1] && s[1] > s[2] && s[2] > s[3], "{s:?}");
        // Within the margin (10 %, 25 %): a real share; at +100 % next to nothing.
        assert!(s[1] > 0.25 && s[2] > 0.15, "{s:?}");
        assert!(s[3] < 0.001, "{s:?}");
        assert!((t.iter().map(|x| x.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_floor_keeps_a_paused_endpoint_probed() {
        let params = CostParams::default();
        let mut sick = measured(ep(0.5, 0.5), 300.0, 80.0, 0.9);
        sick.outage = true;
        let ok = measured(ep(1.0, 1.0), 300.0, 80.0, 0.0);
        let t = costs(&[sick, ok], (1000.0, 200.0), &params);
        assert!(t[0].paused);
        // Half the floor: probed, never starved.
        assert!((t[0].share - 0.01).abs() < 1e-9, "{:?}", share_of(&t));
        // Drawn first about 1 % of the time (seeded).
        let mut rand = lcg(42);
        let firsts = (0..5_000).filter(|_| draw_order(&t, &mut rand)[0] == 0).count();
        assert!((20..=85).contains(&firsts), "{firsts}");
    }

    #[test]
    fn a_429ing_endpoint_loses_share_and_recovers() {
        let params = CostParams::default();
        let cheap = measured(ep(1.0, 1.0), 300.0, 80.0, 0.0);
        let other = measured(ep(1.1, 1.1), 300.0, 80.0, 0.0);
        let healthy = costs(&[cheap, other], (1000.0, 200.0), &params);
        let mut limited = cheap;
        limited.health.rate_limited_rate = Some(0.6);
        limited.health.recent_attempts = 10;
        limited.health.recent_rate_limited = 6;
        let backoff = costs(&[limited, other], (1000.0, 200.0), &params);
        assert!(backoff[0].share < healthy[0].share * 0.5, "{:?} vs {:?}", share_of(&backoff), share_of(&healthy));
        assert!((backoff[0].backoff - 0.16).abs() < 1e-9);
        assert!(backoff[0].rate_limit_usd > 0.0);
        // Once the 429s stop (the window forgets them), the share comes back.
        let recovered = costs(&[cheap, other], (1000.0, 200.0), &params);
        assert_eq!(share_of(&recovered), share_of(&healthy));
    }

    #[test]
    fn a_learned_cap_spills_the_excess_to_others() {
        let params = CostParams::default();
        let mut cheap = measured(ep(0.5, 0.5), 300.0, 80.0, 0.0);
        let other = measured(ep(1.0, 1.0), 300.0, 80.0, 0.0);
        cheap.health.capacity = Some(4);
        cheap.health.in_flight = 2;
        let below = costs(&[cheap, other], (1000.0, 200.0), &params);
        assert!(!below[0].capped && below[0].share > 0.5);
        cheap.health.in_flight = 3; // one more would reach the cap
        let at_cap = costs(&[cheap, other], (1000.0, 200.0), &params);
        assert!(at_cap[0].capped);
        assert_eq!(share_of(&at_cap), vec![0.0, 1.0]);
        let mut rand = lcg(7);
        for _ in 0..100 {
            assert_eq!(draw_order(&at_cap, &mut rand), vec![1, 0], "capped goes last, never first");
        }
        // Every endpoint capped: nothing to spill to, so they share as usual.
        let mut other_capped = other;
        other_capped.health.capacity = Some(1);
        let all = costs(&[cheap, other_capped], (1000.0, 200.0), &params);
        assert!((all.iter().map(|t| t.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn unmeasured_endpoints_start_from_the_models_typical_values() {
        let params = CostParams::default();
        let a = measured(ep(1.0, 1.0), 400.0, 60.0, 0.1);
        let b = measured(ep(1.0, 1.0), 600.0, 40.0, 0.1);
        let fresh = ep(1.0, 1.0);
        let t = costs(&[a, b, fresh], (1000.0, 200.0), &params);
        // The newcomer is costed at the median TTFT/throughput/error rate: between a and b.
        assert!((t[2].wait_s - (0.5 + 0.5 + 200.0 / 50.0)).abs() < 1e-9, "{}", t[2].wait_s);
        assert!((t[2].success_p - 0.9).abs() < 1e-9);
        assert!(t[2].share > 0.1, "{:?}", share_of(&t));
    }

    #[test]
    fn bad_responses_lower_the_success_probability() {
        let params = CostParams::default();
        let mut sloppy = measured(ep(1.0, 1.0), 300.0, 80.0, 0.0);
        sloppy.health.bad_response_rate = Some(0.5);
        let mut careful = measured(ep(1.0, 1.0), 300.0, 80.0, 0.0);
        careful.health.bad_response_rate = Some(0.0);
        let t = costs(&[sloppy, careful], (1000.0, 200.0), &params);
        assert!((t[0].success_p - 0.5).abs() < 1e-12);
        assert!((t[0].routing_cost / t[1].routing_cost - 2.0).abs() < 1e-9);
        assert!(t[0].share < 0.05);
    }

    #[test]
    fn token_estimate_follows_recent_usage() {
        let mut a = ep(1.0, 1.0);
        assert_eq!(token_estimate(&[a], 500, 256), (500.0, 256.0));
        a.health.usage =
            Some(MeasuredUsage { reports: 4, prompt_tokens: 4_000, completion_tokens: 800, cost_usd: 0.0 });
        assert_eq!(token_estimate(&[a], 500, 256), (1000.0, 200.0));
    }
}
