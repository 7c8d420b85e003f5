//! Switchyard's stats, natively. Envoy's dynamic-module ABI lets a configuration define its
//! metrics only while it is being created (definition is frozen afterwards), as families with
//! label names; a stream then records into a family with label values. The filters name each
//! series the Wasm way (`switchyard.<base>.<label>.<value>...`, turned into labels by the
//! bootstrap's `stats_tags`), so this module keeps the table of families, defines them all on
//! each configuration (`families`) and resolves a series name
//! into its family and label values once per name and worker. Envoy names a labelled stat
//! `<namespace>.<family>.<label>.<value>...` with the labels in their definition order, the
//! name's: with the generated namespace `wasmcustom` (the Wasm host's) and families named
//! `switchyard.<base>`, that is the Wasm build's stat name and Prometheus series. (Prometheus
//! prints a series' labels in that order too, the Wasm build's in its `stats_tags` rules' order:
//! the same series.)
//!
//! A name no family matches is dropped (and logged once per worker): the table, not
//! the filters, is what a new metric adds to on the native build (`every_filter_metric_has_a_family`
//! checks the filters' own names against it).

use std::sync::{Mutex, RwLock};

use crate::filters::host::MetricKind;

/// The usage series' labels (`telemetry::usage_metric_names`), then the optional policy and caller.
const USAGE: [&str; 4] = ["gen_ai_request_model", "gen_ai_response_model", "gen_ai_provider_name", "endpoint"];
const ENDPOINT: [&str; 3] = ["model", "endpoint", "gen_ai_provider_name"];

/// A family: its kind, its name below the namespace, its label names in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub kind: MetricKind,
    pub name: String,
    pub labels: Vec<&'static str>,
}

fn family(kind: MetricKind, name: &str, labels: &[&'static str]) -> Family {
    Family { kind, name: name.to_string(), labels: labels.to_vec() }
}

/// Every family the filters write, in definition order (Envoy's ids follow it).
pub fn families() -> Vec<Family> {
    use MetricKind::{Counter, Gauge, Histogram};
    let mut f = vec![
        family(Counter, "requests_total", &["result"]),
        family(Counter, "requests_total", &["result", "code"]),
        family(Counter, "attempts_total", &["model", "endpoint", "gen_ai_provider_name", "outcome"]),
        family(Counter, "bad_responses_total", &["model", "endpoint"]),
        family(Counter, "failover_incomplete_total", &["reason"]),
        family(Counter, "fallbacks_total", &["kind"]),
        family(Counter, "policy_requests_total", &["policy"]),
        family(Counter, "policy_denials_total", &["policy", "code"]),
        family(Counter, "requests_by_strategy_total", &["strategy"]),
        family(Counter, "rate_limit.capped_total", &["provider"]),
        family(Counter, "rate_limit.shared_cooldown_total", &["provider"]),
        family(Counter, "rate_limit.charged_total", &["limit", "kind"]),
        family(Counter, "rate_limit.failure_total", &["reason"]),
        family(Counter, "rate_limit.refused_total", &["limit"]),
        family(Counter, "rate_limit.refused_total", &["limit", "code"]),
        family(Histogram, "attempt_duration_milliseconds", &ENDPOINT),
        family(Histogram, "gen_ai_server_time_to_first_token_milliseconds", &ENDPOINT),
        family(Histogram, "output_tokens_per_second", &ENDPOINT),
        family(Gauge, "endpoint_cooling_down", &ENDPOINT),
        family(Gauge, "rate_limit_budget", &["limit", "kind", "window", "per"]),
        family(Counter, "access_token.fetches_total", &["result"]),
        family(Counter, "access_token.missing_total", &["provider"]),
        // The native build's own: hooks that panicked (and answered for it).
        family(Counter, "native_panics_total", &["hook"]),
    ];
    // The usage series, with and without the optional policy and caller labels.
    for extra in [&[][..], &["policy"][..], &["caller"][..], &["policy", "caller"][..]] {
        let usage: Vec<&'static str> = USAGE.iter().chain(extra.iter()).copied().collect();
        let typed: Vec<&'static str> = std::iter::once("gen_ai_token_type").chain(usage.iter().copied()).collect();
        f.push(family(Counter, "gen_ai_client_token_usage_tokens_total", &typed));
        f.push(family(Counter, "gen_ai_usage_cache_read_input_tokens_total", &usage));
        f.push(family(Counter, "gen_ai_usage_cost_nano_usd_total", &usage));
        f.push(family(Histogram, "gen_ai_client_operation_duration_milliseconds", &usage));
    }
    f
}

/// The prefix of every series name, and of the families' names in Envoy.
pub const NAMESPACE: &str = "switchyard";

/// The family index and label values of a series name, if a family of that kind matches.
/// A value runs from its `.label.` to the next label's (values are ids as written, dots
/// included; `telemetry::label_value` encodes a part that is exactly a label name), so families
/// with more labels are tried first: `refused_total.limit.a.code.429` is not `limit` "a.code.429".
pub fn parse(families: &[Family], kind: MetricKind, name: &str) -> Option<(usize, Vec<String>)> {
    let rest = name.strip_prefix(NAMESPACE)?.strip_prefix('.')?;
    let mut order: Vec<usize> = (0..families.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(families.get(i).map_or(0, |f| f.labels.len())));
    order.into_iter().find_map(|i| {
        let f = families.get(i)?;
        if f.kind != kind {
            return None;
        }
        let mut tail = rest.strip_prefix(f.name.as_str())?;
        let mut values = Vec::with_capacity(f.labels.len());
        for (k, label) in f.labels.iter().enumerate() {
            tail = tail.strip_prefix('.')?.strip_prefix(label)?.strip_prefix('.')?;
            let end = match f.labels.get(k + 1) {
                Some(next) => tail.find(&format!(".{next}."))?,
                None => tail.len(),
            };
            let (value, after) = tail.split_at(end);
            values.push(value.to_string());
            tail = after;
        }
        tail.is_empty().then_some((i, values))
    })
}

/// A resolved series: the family (by index) and its label values.
#[derive(Debug, Clone)]
pub struct Series {
    pub kind: MetricKind,
    pub family: usize,
    pub values: Vec<String>,
}

struct Registry {
    families: Vec<Family>,
    /// Envoy's id of each family (the same in every configuration: defined in one order).
    envoy_ids: Vec<Option<usize>>,
    /// Resolved series by the id the filters hold (index + 1); 0 is never handed out.
    series: Vec<Series>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    let mut g = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let r = g.get_or_insert_with(|| {
        let families = families();
        Registry { envoy_ids: vec![None; families.len()], families, series: Vec::new() }
    });
    f(r)
}

/// The families to define on a new configuration, with their indexes.
pub fn to_define() -> Vec<(usize, Family)> {
    with(|r| r.families.iter().cloned().enumerate().collect())
}

/// Records Envoy's id of family `index` (from a configuration's definition).
pub fn defined(index: usize, envoy_id: usize) {
    with(|r| {
        if let Some(slot) = r.envoy_ids.get_mut(index) {
            if slot.is_some_and(|id| id != envoy_id) {
                log::warn!("switchyard: metric family {index} has id {envoy_id} here, {slot:?} before");
            }
            *slot = Some(envoy_id);
        }
    })
}

/// The id the filters use for series `name`. A name no family matches gets an id too (recording
/// into it does nothing), so the filters cache it and it is logged once per worker, not on
/// every use.
pub fn resolve(kind: MetricKind, name: &str) -> Option<u32> {
    with(|r| {
        let (family, values) = parse(&r.families, kind, name).unwrap_or_else(|| {
            log::warn!("switchyard: no native metric family for {name}: not recorded (see native::metrics)");
            (usize::MAX, Vec::new())
        });
        r.series.push(Series { kind, family, values });
        u32::try_from(r.series.len()).ok()
    })
}

/// Envoy's family id and the label values of series `id`.
pub fn lookup(id: u32) -> Option<(MetricKind, usize, Vec<String>)> {
    with(|r| {
        let s = r.series.get((id as usize).checked_sub(1)?)?;
        let envoy = (*r.envoy_ids.get(s.family)?)?;
        Some((s.kind, envoy, s.values.clone()))
    })
}

/// A series as a worker records it: its kind, Envoy's family id and the label values, kept
/// with the buffers Envoy reads them through.
pub struct Recorded {
    pub kind: MetricKind,
    pub envoy_id: usize,
    /// Owns the bytes `labels` points at (never changed after construction).
    _values: Vec<String>,
    labels: Vec<crate::native::abi::ModuleBuffer>,
}

impl Recorded {
    fn new(kind: MetricKind, envoy_id: usize, values: Vec<String>) -> Recorded {
        // A String's bytes stay where they are when the String moves: the buffers stay valid.
        let labels = values.iter().map(|v| crate::native::abi::ModuleBuffer::of(v.as_bytes())).collect();
        Recorded { kind, envoy_id, _values: values, labels }
    }

    /// The label values as module buffers, built once per series and worker, valid while
    /// `self` is.
    pub fn labels(&self) -> &[crate::native::abi::ModuleBuffer] {
        &self.labels
    }
}

thread_local! {
    /// Resolved series by id, per worker: a series never changes once resolved and a family's
    /// Envoy id is the same in every configuration, so each worker takes the registry's lock
    /// once per series instead of on every record.
    static RECORDED: std::cell::RefCell<Vec<Option<std::rc::Rc<Recorded>>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Series `id` as this worker records it (None: unknown, or its family not defined yet).
pub fn recorded(id: u32) -> Option<std::rc::Rc<Recorded>> {
    let index = (id as usize).checked_sub(1)?;
    if let Some(r) = RECORDED.with(|c| c.borrow().get(index).cloned().flatten()) {
        return Some(r);
    }
    let (kind, envoy_id, values) = lookup(id)?;
    let r = std::rc::Rc::new(Recorded::new(kind, envoy_id, values));
    RECORDED.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() <= index {
            c.resize(index + 1, None);
        }
        if let Some(slot) = c.get_mut(index) {
            *slot = Some(r.clone());
        }
    });
    Some(r)
}

/// The live decision filters' configurations (Envoy's pointers, as addresses): every stat is
/// recorded through the newest one. A configuration's stats scope is where it was created, and
/// an upstream filter's is its cluster's (`cluster.<name>.switchyard...`), so recording through
/// the attempt's own filter would not give the Wasm build's names. Read-locked for the call, so
/// a configuration Envoy destroys (write-locked, on the main thread) is never used after.
static ROOTS: RwLock<Vec<usize>> = RwLock::new(Vec::new());

pub fn add_root(config: usize) {
    ROOTS.write().unwrap_or_else(|e| e.into_inner()).push(config);
}

pub fn remove_root(config: usize) {
    ROOTS.write().unwrap_or_else(|e| e.into_inner()).retain(|c| *c != config);
}

/// Runs `f` with the configuration to record through (None before any decision filter).
pub fn with_root<R>(f: impl FnOnce(Option<usize>) -> R) -> R {
    let roots = ROOTS.read().unwrap_or_else(|e| e.into_inner());
    f(roots.last().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{strategy_metric_name, usage_metric_names, UsageLabels};

    #[test]
    fn series_names_resolve_into_family_and_values() {
        let f = families();
        let (i, v) = parse(&f, MetricKind::Counter, "switchyard.requests_total.result.rejected.code.400").unwrap();
        assert_eq!((f[i].name.as_str(), v), ("requests_total", vec!["rejected".to_string(), "400".to_string()]));
        let (i, v) = parse(&f, MetricKind::Counter, "switchyard.rate_limit.failure_total.reason.timeout").unwrap();
        assert_eq!((f[i].name.as_str(), v), ("rate_limit.failure_total", vec!["timeout".to_string()]));
        assert!(parse(&f, MetricKind::Histogram, "switchyard.requests_total.result.served").is_none(), "kind matters");
        assert!(parse(&f, MetricKind::Counter, "switchyard.requests_total.code.1.result.x").is_none(), "order matters");
        assert!(parse(&f, MetricKind::Counter, "other.requests_total.result.served").is_none());
        // Ids as written, dots and slashes included.
        let n = "switchyard.attempts_total.model.google/gemini-2.5-pro.endpoint.deepinfra/turbo.gen_ai_provider_name.deepinfra.outcome.success";
        let (i, v) = parse(&f, MetricKind::Counter, n).unwrap();
        assert_eq!(f[i].name, "attempts_total");
        assert_eq!(v, ["google/gemini-2.5-pro", "deepinfra/turbo", "deepinfra", "success"]);
        let (i, v) = parse(&f, MetricKind::Counter, "switchyard.rate_limit.refused_total.limit.a.code.429").unwrap();
        assert_eq!((f[i].labels.len(), v), (2, vec!["a".to_string(), "429".to_string()]));
    }

    #[test]
    fn every_filter_metric_has_a_family() {
        let f = families();
        let usage = |policy, caller| {
            usage_metric_names(&UsageLabels {
                request_model: "a",
                response_model: "b",
                provider: "c",
                endpoint: "d",
                policy,
                caller,
            })
        };
        let mut counters: Vec<String> =
            [usage(None, None), usage(Some("p"), None), usage(None, Some("c")), usage(Some("p"), Some("c"))]
                .into_iter()
                .flat_map(|names| names.into_iter().take(4))
                .collect();
        counters.push(strategy_metric_name("s"));
        counters.extend(crate::filters::downstream::END_METRICS.iter().map(|s| s.to_string()));
        counters.extend(crate::filters::mesh::FAILURE_REASONS.iter().map(|r| crate::filters::mesh::failure_metric(r)));
        counters.push("switchyard.attempts_total.model.m.endpoint.e.gen_ai_provider_name.p.outcome.success".into());
        for r in ["ok", "unreachable", "http_error", "malformed"] {
            counters.push(crate::filters::tokens::fetch_metric(r));
        }
        counters.push(crate::filters::tokens::missing_metric("google-vertex"));
        for n in &counters {
            assert!(parse(&f, MetricKind::Counter, n).is_some(), "{n}");
        }
        let budget = "switchyard.rate_limit_budget.limit.all-tokens.kind.tokens.window.hour.per.policy";
        assert!(parse(&f, MetricKind::Gauge, budget).is_some(), "{budget}");
        let histogram = &usage(None, None)[4];
        assert!(parse(&f, MetricKind::Histogram, histogram).is_some(), "{histogram}");
    }

    #[test]
    fn an_unknown_name_gets_an_id_that_records_nothing() {
        let id = resolve(MetricKind::Counter, "switchyard.no_such_family_total.x.y");
        assert!(id.is_some(), "cached by the filters, so logged once");
        assert!(lookup(id.unwrap()).is_none());
        assert!(recorded(id.unwrap()).is_none());
    }

    #[test]
    fn a_worker_records_through_its_cached_series() {
        let Some(index) = families().iter().position(|f| f.name == "fallbacks_total") else {
            panic!("no fallbacks_total family")
        };
        defined(index, 4242);
        let id = resolve(MetricKind::Counter, "switchyard.fallbacks_total.kind.model").unwrap();
        let r = recorded(id).unwrap();
        assert_eq!((r.kind, r.envoy_id), (MetricKind::Counter, 4242));
        let labels = r.labels();
        assert_eq!(labels.len(), 1);
        // SAFETY: the buffer points into `r`, alive here.
        assert_eq!(unsafe { std::slice::from_raw_parts(labels[0].ptr, labels[0].length) }, b"model");
        assert!(std::rc::Rc::ptr_eq(&r, &recorded(id).unwrap()), "the second record reads the worker's cache");
    }

    #[test]
    fn family_names_are_unique_per_label_set() {
        let f = families();
        for (i, a) in f.iter().enumerate() {
            for b in f.iter().skip(i + 1) {
                assert!(!(a.name == b.name && a.labels == b.labels), "{} twice", a.name);
            }
        }
    }
}
