//! Cross-worker state: per-endpoint statistics in proxy-wasm shared data (compare-and-swap
//! updates, so several workers never lose an increment) and Envoy stats (metrics).

use crate::filters::fast_hash::FastMap;
use std::cell::RefCell;

use super::host::{Host, MetricKind, CAS_MISMATCH};
use crate::protocol::bytes::u64_at;

use crate::config::Catalog;
use crate::routing::health::{EndpointHealth, HealthView};
use crate::routing::stats::EndpointStats;

const KEY_PREFIX: &str = "sy/h/";
/// Registry of stats keys ever written, so keys of endpoints removed from the catalog are pruned.
const REGISTRY_KEY: &str = "sy/keys";
const CAS_ATTEMPTS: usize = 16;

pub fn stats_key(model: &str, slug: &str) -> String {
    format!("{KEY_PREFIX}{model}|{slug}")
}

pub fn read_stats(host: &dyn Host, key: &str) -> EndpointStats {
    // Decoded where the record is: a request reads each of its endpoints' 2 KB records once.
    let mut stats = EndpointStats::default();
    host.read_shared_data(key, &mut |bytes| {
        if let Some(b) = bytes {
            stats = EndpointStats::decode(b);
        }
    });
    stats
}

/// Read-modify-write of an endpoint's record bytes with CAS (`f` gets the record as read, None
/// when there is none, and returns what to write); retried when another worker wrote in between.
fn cas_record(host: &dyn Host, key: &str, mut f: impl FnMut(Option<Vec<u8>>) -> Vec<u8>) {
    for _ in 0..CAS_ATTEMPTS {
        let (bytes, cas) = host.shared_data(key);
        let fresh = bytes.is_none();
        match host.set_shared_data(key, &f(bytes), cas) {
            0 => {
                if fresh {
                    register_key(host, key);
                }
                return;
            }
            CAS_MISMATCH => continue,
            status => {
                log::warn!("switchyard: shared data write failed (status {status})");
                return;
            }
        }
    }
    log::warn!("switchyard: shared data contention on {key}; update dropped");
}

/// Read-modify-write of an endpoint's statistics with CAS.
pub fn update_stats(host: &dyn Host, key: &str, mut f: impl FnMut(&mut EndpointStats)) {
    cas_record(host, key, |bytes| {
        let mut stats = bytes.map(|b| EndpointStats::decode(&b)).unwrap_or_default();
        f(&mut stats);
        stats.encode()
    });
}

/// An attempt's start (`up`) or its take-back on an endpoint's record: the in-flight word is
/// changed in place (see `EndpointStats::step_in_flight`), the rest copied as it is.
pub fn step_in_flight(host: &dyn Host, key: &str, up: bool) {
    cas_record(host, key, |bytes| {
        let mut bytes = bytes.unwrap_or_default();
        if !EndpointStats::step_in_flight(&mut bytes, up) {
            // No record yet (or not one of ours): written whole.
            let mut stats = EndpointStats::decode(&bytes);
            if up {
                stats.start();
            } else {
                stats.unstart();
            }
            bytes = stats.encode();
        }
        bytes
    });
}

fn register_key(host: &dyn Host, key: &str) {
    for _ in 0..CAS_ATTEMPTS {
        let (bytes, cas) = host.shared_data(REGISTRY_KEY);
        let mut list = bytes.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        if list.lines().any(|l| l == key) {
            return;
        }
        list.push_str(key);
        list.push('\n');
        if host.set_shared_data(REGISTRY_KEY, list.as_bytes(), cas) != CAS_MISMATCH {
            return;
        }
    }
}

/// Drops statistics of endpoints no longer in the catalog (called on configuration).
pub fn prune_stale_keys(host: &dyn Host, catalog: &Catalog) {
    let wanted: Vec<String> = catalog
        .endpoints
        .iter()
        .filter_map(|e| catalog.models.get(e.model).map(|m| stats_key(&m.id, &e.slug)))
        .collect();
    for _ in 0..CAS_ATTEMPTS {
        let (bytes, cas) = host.shared_data(REGISTRY_KEY);
        let Some(bytes) = bytes else { return };
        let list = String::from_utf8_lossy(&bytes).into_owned();
        let (keep, drop): (Vec<&str>, Vec<&str>) =
            list.lines().filter(|l| !l.is_empty()).partition(|k| wanted.iter().any(|w| w == k));
        if drop.is_empty() {
            return;
        }
        let kept: String = keep.iter().map(|k| format!("{k}\n")).collect();
        if host.set_shared_data(REGISTRY_KEY, kept.as_bytes(), cas) == CAS_MISMATCH {
            continue;
        }
        for k in drop {
            host.set_shared_data(k, &[], 0);
        }
        return;
    }
}

/// The health view for one request, read from shared data once per endpoint.
pub struct SharedHealth<'h> {
    host: &'h dyn Host,
    now_ms: u64,
    outage_window_ms: u64,
    /// Each endpoint read so far, by a hash of (model id, slug), with its names to confirm a
    /// hit. A request looks at its endpoints many times over (filters, ranking, peers' outage
    /// rules): hashing the two names costs less than formatting the shared-data key each time.
    memo: RefCell<FastMap<u64, (String, String, EndpointHealth)>>,
    /// The caller's `x-session-id`.
    pub session: Option<String>,
    /// Hash of who is calling (see `HealthView::caller_scope`).
    pub caller_scope: u64,
    /// Providers over their mesh-wide capacity, until when (ms): `filters::mesh::capped`.
    pub capped: Vec<(String, u64)>,
    /// Providers whose access token is not usable now (`filters::tokens::tokenless`).
    pub tokenless: Vec<String>,
    /// Those of them the router skipped for this request (counted once each).
    pub skipped_tokenless: RefCell<Vec<String>>,
}

impl<'h> SharedHealth<'h> {
    pub fn new(host: &'h dyn Host, now_ms: u64, outage_window_ms: u64) -> SharedHealth<'h> {
        SharedHealth {
            host,
            now_ms,
            outage_window_ms,
            memo: RefCell::new(FastMap::default()),
            session: None,
            caller_scope: 0,
            capped: Vec::new(),
            tokenless: Vec::new(),
            skipped_tokenless: RefCell::new(Vec::new()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sticky conversations
// ---------------------------------------------------------------------------------------------

/// Conversations are kept in a fixed number of shared-data slots (`sy/s/<n>`), chosen by the
/// conversation hash: memory is bounded whatever the traffic, and a newer conversation that
/// lands on a taken slot replaces the older one (it is then routed afresh, nothing breaks).
const STICKY_SLOTS: u64 = 4096;

fn sticky_key(conversation: u64) -> String {
    format!("sy/s/{}", conversation % STICKY_SLOTS)
}

/// Remembers the endpoint that served a conversation until `expires_ms`.
pub fn stick(host: &dyn Host, conversation: u64, model: &str, slug: &str, expires_ms: u64) {
    let mut v = Vec::with_capacity(16 + model.len() + slug.len() + 1);
    v.extend_from_slice(&conversation.to_le_bytes());
    v.extend_from_slice(&expires_ms.to_le_bytes());
    v.extend_from_slice(model.as_bytes());
    v.push(b'|');
    v.extend_from_slice(slug.as_bytes());
    host.set_shared_data(&sticky_key(conversation), &v, 0);
}

fn stuck(host: &dyn Host, conversation: u64, now_ms: u64) -> Option<(String, String)> {
    let (bytes, _) = host.shared_data(&sticky_key(conversation));
    let b = bytes?;
    if u64_at(&b, 0)? != conversation || u64_at(&b, 8)? <= now_ms {
        return None;
    }
    let rest = std::str::from_utf8(b.get(16..)?).ok()?;
    // Model ids may contain '|'? No: slugs cannot, so split at the last one.
    let (model, slug) = rest.rsplit_once('|')?;
    Some((model.to_string(), slug.to_string()))
}

/// FNV-1a over `model`, a separator and `slug` (the memo's key; its entries confirm the names).
fn name_hash(model: &str, slug: &str) -> u64 {
    model
        .bytes()
        .chain(std::iter::once(b'|'))
        .chain(slug.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl HealthView for SharedHealth<'_> {
    fn sticky(&self, conversation: u64) -> Option<(String, String)> {
        stuck(self.host, conversation, self.now_ms)
    }

    fn session_header(&self) -> Option<&str> {
        self.session.as_deref()
    }

    fn caller_scope(&self) -> u64 {
        self.caller_scope
    }

    fn lacks_credential(&self, provider: &str) -> bool {
        let lacks = self.tokenless.iter().any(|p| p == provider);
        if lacks {
            let mut skipped = self.skipped_tokenless.borrow_mut();
            if !skipped.iter().any(|p| p == provider) {
                skipped.push(provider.to_string());
            }
        }
        lacks
    }

    fn capped_for_s(&self, provider: &str) -> Option<u64> {
        let until = self.capped.iter().find(|(p, _)| p == provider)?.1;
        (until > self.now_ms).then(|| (until - self.now_ms).div_ceil(1000))
    }

    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth {
        let id = name_hash(model, slug);
        let mut collided = false;
        if let Some((m, s, h)) = self.memo.borrow().get(&id) {
            if m == model && s == slug {
                return *h;
            }
            collided = true;
        }
        let h = read_stats(self.host, &stats_key(model, slug)).view(self.now_ms, self.outage_window_ms);
        if !collided {
            self.memo.borrow_mut().insert(id, (model.to_string(), slug.to_string(), h));
        }
        h
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

thread_local! {
    static METRICS: RefCell<FastMap<String, u32>> = RefCell::new(FastMap::default());
}

/// Stats names carry labels as `.label.value` pairs (`.model.<m>.endpoint.<e>`) that the
/// bootstrap's `stats_tags` turn into labels; values are the ids themselves
/// (`crate::telemetry::label_value`).
pub fn tag(v: &str) -> String {
    crate::telemetry::label_value(v)
}

/// The id of metric `name`, defined on its first use on this worker.
pub fn metric(host: &dyn Host, kind: MetricKind, name: &str) -> Option<u32> {
    METRICS.with(|m| {
        if let Some(id) = m.borrow().get(name) {
            return Some(*id);
        }
        let id = host.define_metric(kind, name);
        match id {
            Some(id) => {
                m.borrow_mut().insert(name.to_string(), id);
            }
            None => log::warn!("switchyard: define_metric {name} failed"),
        }
        id
    })
}

/// Series kept per catalog endpoint: attempts by outcome (`Outcome::index`), then TTFT,
/// latency, output speed and the cool-down gauge.
pub const ENDPOINT_SERIES: usize = 10;
pub const TTFT_SERIES: usize = 6;
pub const LATENCY_SERIES: usize = 7;
pub const OUTPUT_RATE_SERIES: usize = 8;
pub const COOLING_DOWN_SERIES: usize = 9;

thread_local! {
    /// Metric ids per catalog endpoint (by index) and series, for the configuration `.0`: a
    /// finished attempt neither formats its metric names nor hashes them; each name is built
    /// once per worker and configuration.
    static ENDPOINT_METRICS: RefCell<(u64, Vec<[Option<u32>; ENDPOINT_SERIES]>)> =
        const { RefCell::new((0, Vec::new())) };
}

/// The id of endpoint `endpoint`'s metric `series` in configuration `config_id`, defined on its
/// first use from `name()`.
pub fn endpoint_metric(
    host: &dyn Host,
    config_id: u64,
    endpoint: usize,
    series: usize,
    kind: MetricKind,
    name: impl FnOnce() -> String,
) -> Option<u32> {
    let cached = ENDPOINT_METRICS.with(|m| {
        let m = m.borrow();
        if m.0 != config_id {
            return None;
        }
        m.1.get(endpoint).and_then(|row| row.get(series).copied().flatten())
    });
    if cached.is_some() {
        return cached;
    }
    let id = metric(host, kind, &name())?;
    ENDPOINT_METRICS.with(|m| {
        let mut m = m.borrow_mut();
        if m.0 != config_id {
            *m = (config_id, Vec::new());
        }
        if m.1.len() <= endpoint {
            m.1.resize(endpoint + 1, [None; ENDPOINT_SERIES]);
        }
        if let Some(slot) = m.1.get_mut(endpoint).and_then(|row| row.get_mut(series)) {
            *slot = Some(id);
        }
    });
    Some(id)
}

pub fn count(host: &dyn Host, name: &str) {
    count_by(host, name, 1);
}

pub fn count_by(host: &dyn Host, name: &str, by: u64) {
    if let Some(id) = metric(host, MetricKind::Counter, name) {
        host.increment_metric(id, i64::try_from(by).unwrap_or(i64::MAX));
    }
}

pub fn observe(host: &dyn Host, name: &str, value: u64) {
    if let Some(id) = metric(host, MetricKind::Histogram, name) {
        host.record_metric(id, value);
    }
}
