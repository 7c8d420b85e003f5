//! Gauges of what the shared health statistics say now, published from each worker's root
//! context on a timer (every worker reads the same shared data, so they write the same values):
//! which endpoints are cooling down (a 429's `Retry-After`, a mesh-wide capacity cap, another
//! pod's shared cool-down). An alert on "every endpoint of a model is cooling down" needs the
//! state itself, not the attempts: a cooling endpoint gets none. Also each mesh-wide limit's
//! size, so an alert can compare what was charged with it.
//!
//! The counters alerts watch for rare events are created at zero on the first tick: a counter
//! that first appears with a value has no increase in Prometheus's eyes (`rate`, `increase`
//! need a sample before the event).

use std::cell::Cell;

use super::downstream::{failover_incomplete_metric, END_METRICS};
use super::host::{Host, MetricKind};
use super::mesh::{charged_metric, failure_metric, refused_metric, FAILURE_REASONS};
use super::shared::{count_by, endpoint_metric, metric, read_stats, stats_key, tag, COOLING_DOWN_SERIES};
use super::Configured;
use crate::limits::{Kind, Subject};
use crate::protocol::outcome::StopReason;

thread_local! {
    /// The configuration whose counters were created at zero on this worker.
    static ZEROED: Cell<u64> = const { Cell::new(0) };
}

/// Creates the rare-event counters at zero, once per configuration and worker.
fn zero_counters(host: &dyn Host, config: &Configured) {
    if ZEROED.with(|z| z.replace(config.id)) == config.id {
        return;
    }
    let mut names: Vec<String> = StopReason::ALL
        .into_iter()
        .map(failover_incomplete_metric)
        .chain(END_METRICS.iter().map(|n| n.to_string()))
        .collect();
    let limits = &config.limits;
    if limits.service.is_some() {
        names.extend(FAILURE_REASONS.iter().map(|r| failure_metric(r)));
        for l in &limits.limits {
            names.push(refused_metric(l));
            if l.kind != Kind::Requests {
                names.push(charged_metric(l));
            }
        }
    }
    for n in &names {
        count_by(host, n, 0);
    }
}

/// How often the gauges are published (Envoy's default stats flush interval).
pub const GAUGE_INTERVAL_MS: u64 = 5_000;

/// Sets `switchyard_endpoint_cooling_down{model, endpoint, gen_ai_provider_name}` to 1 or 0
/// for every catalog endpoint: one shared-data read each.
pub fn publish(host: &dyn Host, config: &Configured, now_ms: u64) {
    zero_counters(host, config);
    let catalog = &config.catalog;
    let window = catalog.routing.outage_window_s.saturating_mul(1000);
    for (index, ep) in catalog.endpoints.iter().enumerate() {
        let Some(model) = catalog.models.get(ep.model) else { continue };
        let provider = catalog.provider_name(ep);
        let name = || {
            format!(
                "switchyard.endpoint_cooling_down.model.{}.endpoint.{}.gen_ai_provider_name.{}",
                tag(&model.id),
                tag(&ep.slug),
                tag(provider)
            )
        };
        let cooling = read_stats(host, &stats_key(&model.id, &ep.slug)).view(now_ms, window).cooling_down;
        if let Some(id) = endpoint_metric(host, config.id, index, COOLING_DOWN_SERIES, MetricKind::Gauge, name) {
            host.record_metric(id, u64::from(cooling));
        }
    }
    for l in &config.limits.limits {
        let per = match l.per {
            Subject::All => "all",
            Subject::Policy => "policy",
            Subject::PeerUriSan => "peer_uri_san",
            Subject::Header(_) => "header",
            Subject::JwtClaim { .. } => "jwt_claim",
        };
        let name = format!(
            "switchyard.rate_limit_budget.limit.{}.kind.{}.window.{}.per.{per}",
            tag(&l.name),
            l.kind.name(),
            l.window.name()
        );
        if let Some(id) = metric(host, MetricKind::Gauge, &name) {
            host.record_metric(id, l.amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::configure;
    use crate::filters::mock::MockHost;
    use crate::filters::shared::update_stats;

    #[test]
    fn a_cooling_endpoint_reads_one_and_the_others_zero() {
        let config = configure(
            br#"{"providers": {"a": {"cluster": "ca", "authority": "a", "credential": {"value": "k"}},
                               "b": {"cluster": "cb", "authority": "b", "credential": {"value": "k"}}},
                 "models": {"m/x": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}},
                                                  {"provider": "b", "pricing": {"prompt": 1, "completion": 1}}]}}}"#,
            &|_| None,
        )
        .unwrap();
        let host = MockHost::new();
        update_stats(&host, &stats_key("m/x", "a"), |s| s.cool_down_until(10_000));
        publish(&host, &config, 1_000);
        let gauge = |slug: &str| {
            let name =
                format!("switchyard.endpoint_cooling_down.model.m/x.endpoint.{slug}.gen_ai_provider_name.{slug}");
            host.recorded(&name)
        };
        assert_eq!(gauge("a"), vec![1]);
        assert_eq!(gauge("b"), vec![0]);
        // Once the cool-down is over the gauge reads 0 again.
        publish(&host, &config, 10_001);
        assert_eq!(gauge("a"), vec![1, 0]);
    }

    #[test]
    fn each_limit_publishes_its_size_in_the_units_it_charges() {
        let config = configure(
            br#"{"providers": {"a": {"cluster": "ca", "authority": "a", "credential": {"value": "k"}}},
                 "models": {"m": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}}]}},
                 "rate_limits": {"service": {"cluster": "rl"},
                                 "limits": {"all-tokens": {"tokens": 5000, "window": "hour"},
                                            "spend": {"spend_usd": 2.5, "window": "day"}}}}"#,
            &|_| None,
        )
        .unwrap();
        let host = MockHost::new();
        publish(&host, &config, 1_000);
        let gauge = |name: &str| host.recorded(&format!("switchyard.rate_limit_budget.{name}"));
        assert_eq!(gauge("limit.all-tokens.kind.tokens.window.hour.per.all"), vec![5000]);
        // Spend in the units `switchyard_rate_limit_charged_total` counts ($0.0001).
        assert_eq!(gauge("limit.spend.kind.spend.window.day.per.all"), vec![25_000]);
        // The rare-event counters exist at zero from the first tick, once.
        let defined = |name: &str| host.state().calls.iter().filter(|c| *c == &format!("define_metric {name}")).count();
        assert_eq!(defined("switchyard.rate_limit.failure_total.reason.unavailable"), 1);
        assert_eq!(defined("switchyard.rate_limit.charged_total.limit.spend.kind.spend"), 1);
        assert_eq!(defined("switchyard.rate_limit.refused_total.limit.all-tokens.code.rate_limited"), 1);
        assert_eq!(host.counter("switchyard.failover_incomplete_total.reason.timeout"), 0);
        let increments = host.state().calls.iter().filter(|c| c.starts_with("increment_metric")).count();
        publish(&host, &config, 6_000);
        let again = host.state().calls.iter().filter(|c| c.starts_with("increment_metric")).count();
        assert_eq!(again, increments, "zeroed once per configuration");
    }
}
