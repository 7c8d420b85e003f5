//! Attempt records and finishing an attempt. Each attempt's record sits in the request's filter
//! state (one key per attempt) for the downstream filter's attempt log and final error; a
//! finished attempt also updates its endpoint's shared statistics and the metrics. Used by the
//! per-attempt filter and, for a first attempt it prepared itself, by the decision filter.

use super::host::{Host, MetricKind};
use super::shared::{
    count, endpoint_metric, observe, stats_key, step_in_flight, tag, update_stats, LATENCY_SERIES, OUTPUT_RATE_SERIES,
    TTFT_SERIES,
};
use super::Configured;
use crate::answer::ending::{collect_records, MAX_RECORDED_ATTEMPTS};
use crate::answer::usage::{ReportedUsage, USAGE_TAIL_BYTES};
use crate::answer::watch::{AttemptWatch, Summary, ANTHROPIC_HEAD_BYTES};
use crate::protocol::outcome::{decode_records, encode_records, AttemptRecord, Outcome};
use crate::protocol::plan::attempt_property;
use crate::routing::quality::Verdict;
use crate::routing::stats::Finished;

/// Writes attempt `attempt`'s (1-based) record into the request's filter state (see
/// `attempt_property`). The per-attempt filter writes it when the attempt starts (status 0: no
/// response yet) and again when the answer arrives, so attempts that never got one are listed.
pub fn set_record(host: &dyn Host, attempt: usize, record: AttemptRecord) {
    if attempt == 0 || attempt > MAX_RECORDED_ATTEMPTS {
        return;
    }
    host.set_property(&[&attempt_property(attempt)], &encode_records(&[record]));
}

/// The record of attempt `attempt`, if one was written.
pub fn read_record(host: &dyn Host, attempt: usize) -> Option<AttemptRecord> {
    host.property(&[&attempt_property(attempt)]).and_then(|b| decode_records(&b).first().copied())
}

/// The records of attempts 1..=`attempts`; `first`, when given, is attempt 1's record and its
/// slot is not read (the decision filter knows it for a first attempt it prepared).
pub fn read_records(host: &dyn Host, attempts: usize, first: Option<AttemptRecord>) -> Vec<AttemptRecord> {
    let slots: Vec<Option<AttemptRecord>> = (1..=attempts.min(MAX_RECORDED_ATTEMPTS))
        .map(|k| match (k, first) {
            (1, Some(r)) => Some(r),
            _ => read_record(host, k),
        })
        .collect();
    collect_records(&slots)
}

/// Feeds one response body chunk of `body_size` bytes to `watch`, reading only what it needs
/// from Envoy's buffer: usage sits at the end of JSON bodies and in the last SSE events (a tail),
/// an Anthropic stream's prompt tokens in its first chunk (a head). `now_ms`: the caller's clock
/// reading in this callback.
pub fn watch_chunk(host: &dyn Host, watch: &mut AttemptWatch, body_size: usize, now_ms: u64) {
    let head =
        if watch.wants_head(body_size) { host.response_body(0, body_size.min(ANTHROPIC_HEAD_BYTES)) } else { None };
    let n = body_size.min(USAGE_TAIL_BYTES);
    let tail = if n > 0 { host.response_body(body_size - n, n) } else { None };
    watch.chunk(now_ms, body_size, head.as_deref(), tail.as_deref().unwrap_or(&[]));
}

/// The endpoint an attempt went to, by name (valid whichever configuration planned it).
pub struct AttemptOf<'a> {
    pub model: &'a str,
    pub slug: &'a str,
    /// The endpoint is in this configuration's catalog (a plan made before a reload that removed
    /// it writes no statistics: that would recreate the pruned record).
    pub in_catalog: bool,
}

/// Counts one attempt as started on its endpoint (its in-flight count, read by capacity learning).
pub fn started(host: &dyn Host, of: &AttemptOf) {
    if of.in_catalog {
        step_in_flight(host, &stats_key(of.model, of.slug), true);
    }
}

/// A 429 whose delay became known after the attempt was recorded (Gemini names it only in the
/// body): the attempt's record gets it (`record`), and the endpoint cools down for it, in its
/// statistics and, with shared cool-downs, on every pod.
pub fn cooled_down_late(
    host: &dyn Host,
    config: &Configured,
    attempt: usize,
    record: AttemptRecord,
    of: &AttemptOf,
    now_ms: u64,
) {
    let Some(delay) = record.retry_after_s else { return };
    set_record(host, attempt, record);
    let until = now_ms.saturating_add(u64::from(delay) * 1000);
    if of.in_catalog {
        update_stats(host, &stats_key(of.model, of.slug), |st| st.cool_down_until(until));
    }
    let catalog = &config.catalog;
    if let Some(provider) = catalog.endpoint_of(of.model, of.slug).and_then(|e| catalog.provider_of(e)) {
        super::mesh::share_cooldown(&config.limits, &provider.slug, delay, now_ms);
    }
}

/// Records a finished attempt on its endpoint's statistics and in the metrics. `timed`: the
/// summary's latency is known (a first attempt reported by the hook has none). `verdict`: the
/// served answer's quality, written in the same update. `now_ms`: the caller's clock reading in
/// this callback (each reading is a host call).
// Every helper here takes the host first; the other seven are what one finished attempt is.
#[allow(clippy::too_many_arguments)]
pub fn finished(
    host: &dyn Host,
    config: &Configured,
    of: &AttemptOf,
    s: &Summary,
    usage: &ReportedUsage,
    timed: bool,
    verdict: Option<Verdict>,
    now_ms: u64,
) {
    let catalog = &config.catalog;
    let endpoint = catalog.endpoint_of(of.model, of.slug);
    let pricing = endpoint.map(|e| e.pricing).unwrap_or_default();
    if let Some(provider) = endpoint.and_then(|e| catalog.provider_of(e)) {
        let tokens = usage.prompt_tokens.unwrap_or(0) + usage.completion_tokens.unwrap_or(0);
        let retry_after = if s.outcome == Outcome::RateLimited { s.retry_after_s } else { None };
        super::mesh::attempt_charges(&config.limits, &provider.slug, tokens, retry_after, now_ms);
    }
    let usage = if s.outcome == Outcome::Success { usage.priced(&pricing) } else { None };
    let f = Finished {
        outcome: s.outcome,
        started_ms: timed.then(|| now_ms.saturating_sub(s.latency_ms)),
        ttft_ms: s.ttft_ms,
        tokens_per_s: s.tokens_per_s,
        retry_after_s: s.retry_after_s,
        usage,
    };
    let window = catalog.routing.outage_window_s.saturating_mul(1000);
    if of.in_catalog {
        update_stats(host, &stats_key(of.model, of.slug), |st| {
            st.finish(now_ms, f, window);
            if let Some(v) = verdict {
                st.judge(now_ms, v.bad, v.tool);
            }
        });
    }
    // The provider's slug, or the endpoint slug's base when the endpoint left the catalog.
    let provider = endpoint.map_or_else(|| crate::config::base_of(of.slug), |e| catalog.provider_name(e));
    let tags = || format!("model.{}.endpoint.{}.gen_ai_provider_name.{}", tag(of.model), tag(of.slug), tag(provider));
    let attempts = || format!("switchyard.attempts_total.{}.outcome.{}", tags(), s.outcome.name());
    let ttft = || format!("switchyard.gen_ai_server_time_to_first_token_milliseconds.{}", tags());
    let latency = || format!("switchyard.attempt_duration_milliseconds.{}", tags());
    let rate = || format!("switchyard.output_tokens_per_second.{}", tags());
    // Whole tokens per second of a successful attempt (the health statistics' throughput).
    let tokens_per_s = s.tokens_per_s.filter(|t| t.is_finite() && *t >= 0.0).map(|t| t.round() as u64);
    let Some(index) = catalog.find_endpoint(of.model, of.slug) else {
        // Planned before a reload that removed the endpoint: named on each use.
        count(host, &attempts());
        if let Some(t) = s.ttft_ms {
            observe(host, &ttft(), u64::from(t));
        }
        if timed {
            observe(host, &latency(), s.latency_ms);
        }
        if let Some(t) = tokens_per_s {
            observe(host, &rate(), t);
        }
        return;
    };
    let id = |series, kind, name: &dyn Fn() -> String| endpoint_metric(host, config.id, index, series, kind, name);
    if let Some(m) = id(s.outcome.index(), MetricKind::Counter, &attempts) {
        host.increment_metric(m, 1);
    }
    if let (Some(t), Some(m)) = (s.ttft_ms, s.ttft_ms.and_then(|_| id(TTFT_SERIES, MetricKind::Histogram, &ttft))) {
        host.record_metric(m, u64::from(t));
    }
    if let Some(m) = timed.then(|| id(LATENCY_SERIES, MetricKind::Histogram, &latency)).flatten() {
        host.record_metric(m, s.latency_ms);
    }
    if let Some((t, m)) = tokens_per_s.and_then(|t| Some((t, id(OUTPUT_RATE_SERIES, MetricKind::Histogram, &rate)?))) {
        host.record_metric(m, t);
    }
}
