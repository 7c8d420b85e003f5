//! What a served request used, told to the metrics at its end (tokens by type, cache reads,
//! cost and duration by request model, endpoint, policy and caller), and the per-request
//! attributes spans and access logs read from filter state (`telemetry.request_attributes`).
//! The names and labels are `crate::telemetry`'s.

use super::host::{Host, MetricKind};
use super::shared::{metric, tag};
use super::Configured;
use crate::filters::fast_hash::FastMap;
use crate::telemetry::{
    attribute, usage_metric_names, UsageLabels, CACHE_READ_SERIES, COST_SERIES, DURATION_SERIES, INPUT_SERIES,
    NANO_USD, OUTPUT_SERIES, USAGE_SERIES,
};
use std::cell::RefCell;

/// Which usage series a request counts into: indices into the catalog and the configuration
/// (bounded by their sizes), never caller text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UsageKey {
    /// Catalog model index the caller asked for; the number of models for `auto`.
    pub request_model: usize,
    /// Catalog endpoint index that served.
    pub endpoint: usize,
    pub policy: Option<usize>,
    /// `telemetry.caller`'s label index, when configured.
    pub caller: Option<usize>,
}

/// What the served answer reported, priced: the numbers behind its `usage.cost`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Used {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
}

/// The metric ids of one usage key's series (None: the host refused to define it).
type UsageIds = [Option<u32>; USAGE_SERIES];

thread_local! {
    /// Metric ids per usage key for the configuration `.0`: each request's five series are
    /// named and defined once per worker.
    static USAGE_METRICS: RefCell<(u64, FastMap<UsageKey, UsageIds>)> = RefCell::new((0, FastMap::default()));
}

/// The request model's label: its catalog id, or `auto`.
pub fn request_model_name(config: &Configured, index: usize) -> &str {
    config.catalog.models.get(index).map_or("auto", |m| m.id.as_str())
}

fn ids(host: &dyn Host, config: &Configured, key: UsageKey) -> Option<UsageIds> {
    let cached = USAGE_METRICS.with(|m| {
        let m = m.borrow();
        (m.0 == config.id).then(|| m.1.get(&key).copied()).flatten()
    });
    if cached.is_some() {
        return cached;
    }
    let catalog = &config.catalog;
    let ep = catalog.endpoint(key.endpoint)?;
    let response_model = catalog.models.get(ep.model).map(|m| m.id.as_str())?;
    let provider = catalog.provider_name(ep);
    let policy = key.policy.and_then(|i| config.policies.list.get(i)).map(|p| tag(&p.name));
    let caller = key.caller.zip(config.telemetry.caller.as_ref()).map(|(i, c)| c.name(i).to_string());
    let names = usage_metric_names(&UsageLabels {
        request_model: &tag(request_model_name(config, key.request_model)),
        response_model: &tag(response_model),
        provider: &tag(provider),
        endpoint: &tag(&ep.slug),
        policy: policy.as_deref(),
        caller: caller.as_deref(),
    });
    let mut row = [None; USAGE_SERIES];
    for (i, (slot, name)) in row.iter_mut().zip(names.iter()).enumerate() {
        let kind = if i == DURATION_SERIES { MetricKind::Histogram } else { MetricKind::Counter };
        *slot = metric(host, kind, name);
    }
    USAGE_METRICS.with(|m| {
        let mut m = m.borrow_mut();
        if m.0 != config.id {
            *m = (config.id, FastMap::default());
        }
        m.1.insert(key, row);
    });
    Some(row)
}

/// Counts a served request's usage (when the answer reported it) and its duration.
pub fn record(host: &dyn Host, config: &Configured, key: UsageKey, used: Option<Used>, duration_ms: u64) {
    let Some(row) = ids(host, config, key) else { return };
    let add = |series: usize, by: u64| {
        if let (Some(&Some(id)), true) = (row.get(series), by > 0) {
            host.increment_metric(id, i64::try_from(by).unwrap_or(i64::MAX));
        }
    };
    if let Some(u) = used {
        add(INPUT_SERIES, u.input_tokens);
        add(OUTPUT_SERIES, u.output_tokens);
        add(CACHE_READ_SERIES, u.cache_read_tokens);
        // Rounded to the nano-dollar; a negative or non-finite price counts nothing.
        let nanos = (u.cost_usd * NANO_USD).round();
        add(COST_SERIES, if nanos.is_finite() && nanos > 0.0 { nanos as u64 } else { 0 });
    }
    if let Some(&Some(id)) = row.get(DURATION_SERIES) {
        host.record_metric(id, duration_ms);
    }
}

/// A request's span and access-log attributes, written into filter state when
/// `telemetry.request_attributes` is on (absent facts are not written: Envoy shows them empty).
#[derive(Debug, Default)]
pub struct Attributes<'a> {
    pub request_model: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub used: Option<Used>,
    pub caller: Option<&'a str>,
    pub path: Option<&'a str>,
    pub error: Option<&'a str>,
    pub request_id: Option<&'a str>,
    /// `gen_ai.operation.name` (`crate::telemetry::operation_name`).
    pub operation: Option<&'a str>,
}

pub fn write_attributes(host: &dyn Host, a: &Attributes) {
    let number = |n: u64| n.to_string();
    let used = a.used;
    let values: [(&str, Option<String>); 11] = [
        (attribute::OPERATION, a.operation.map(str::to_string)),
        (attribute::REQUEST_MODEL, a.request_model.map(str::to_string)),
        (attribute::PROVIDER, a.provider.map(str::to_string)),
        (attribute::INPUT_TOKENS, used.map(|u| number(u.input_tokens))),
        (attribute::OUTPUT_TOKENS, used.map(|u| number(u.output_tokens))),
        (attribute::CACHE_READ_TOKENS, used.map(|u| number(u.cache_read_tokens))),
        (attribute::COST_USD, used.map(|u| format_usd(u.cost_usd))),
        (attribute::CALLER, a.caller.map(str::to_string)),
        (attribute::PATH, a.path.map(str::to_string)),
        (attribute::ERROR, a.error.map(str::to_string)),
        (attribute::REQUEST_ID, a.request_id.map(str::to_string)),
    ];
    for (name, value) in values {
        if let Some(v) = value {
            host.set_property(&[name], v.as_bytes());
        }
    }
}

/// USD with up to 9 decimals, no trailing zeros (`0.000123`), as the answer's `usage.cost`.
pub fn format_usd(usd: f64) -> String {
    if !usd.is_finite() || usd <= 0.0 {
        return "0".to_string();
    }
    let s = format!("{usd:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usd_is_printed_as_a_plain_decimal() {
        assert_eq!(format_usd(0.000123), "0.000123");
        assert_eq!(format_usd(1.5), "1.5");
        assert_eq!(format_usd(2.0), "2");
        assert_eq!(format_usd(f64::NAN), "0");
        assert_eq!(format_usd(-1.0), "0");
    }
}
