//! Fault soak: many concurrent requests through a real Envoy with the filter, against mock
//! providers that each misbehave independently per request (429 with and without
//! `Retry-After`, 500, 503, reset, a stall past the per-attempt timeout, a stream cut after two
//! chunks), with a random mix of `provider` objects, `models` fallbacks and streaming.
//!
//! Every provider's behaviour for a request is drawn up front and sent in `x-mock-behavior`, so
//! the harness knows which endpoints the request allowed and which of those would have answered;
//! the mocks' logs show which endpoints were actually attempted and with which headers. Used by
//! the bounded test in `make test` and by `make soak` (more requests).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::client::{post_json, Reply};
use crate::envoy::{http_get, ClusterSpec, Envoy, StackConfig};
use crate::mock::{Behavior, MockProvider};
use crate::rng::Rng;

/// Mock providers of the soak market, each in its own Envoy cluster with its own key.
pub const PROVIDERS: [&str; 6] = ["s1", "s2", "s3", "s4", "s5", "s6"];
/// Models and their endpoints (provider, price): overlapping provider sets, so `models`
/// fallbacks revisit providers that may just have failed.
const MODELS: [(&str, &[(&str, f64)]); 3] = [
    ("soak/a", &[("s1", 1.0), ("s2", 1.5), ("s3", 2.0), ("s4", 3.0)]),
    ("soak/b", &[("s3", 1.0), ("s4", 1.2), ("s5", 2.0), ("s6", 2.5)]),
    ("soak/c", &[("s5", 0.5), ("s6", 1.0), ("s1", 2.0)]),
];
/// Attempts per request: every allowed endpoint of up to two models can be tried.
const MAX_ATTEMPTS: u32 = 8;
/// An attempt that sends nothing for this long fails over; the "stall" fault waits longer.
const PER_TRY_IDLE_MS: u32 = 400;
const STALL_MS: u32 = 700;

pub fn key_of(provider: &str) -> String {
    format!("key-{provider}")
}

/// The soak catalog.
pub fn catalog() -> Value {
    let providers: serde_json::Map<String, Value> = PROVIDERS
        .iter()
        .map(|p| {
            let spec = json!({"cluster": format!("c_{p}"), "authority": format!("{p}.example"), "credential": {"value": key_of(p)}});
            (p.to_string(), spec)
        })
        .collect();
    let models: serde_json::Map<String, Value> = MODELS
        .iter()
        .map(|(m, eps)| {
            let eps: Vec<Value> = eps
                .iter()
                .map(|(p, price)| json!({"provider": p, "upstream_model": format!("{p}-{}", m.trim_start_matches("soak/")), "pricing": {"prompt": price, "completion": price}}))
                .collect();
            (m.to_string(), json!({"endpoints": eps}))
        })
        .collect();
    json!({"providers": providers, "models": models, "routing": {"max_attempts": MAX_ATTEMPTS}})
}

/// What one provider does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Ok,
    RateLimitedRetryAfter,
    RateLimited,
    Unavailable,
    ServerError,
    Reset,
    Stall,
    /// Streams: two chunks, then the stream ends without `[DONE]`. Non-streaming: 502.
    CutStream,
    /// 200 with a body that is not what was asked for (broken JSON, a broken event): a provider
    /// answering garbage cannot be failed over once its 200 is on its way.
    Garbage,
}

impl Fault {
    fn token(self, stream: bool) -> String {
        match self {
            Fault::Ok => "ok".into(),
            Fault::RateLimitedRetryAfter => "429/1".into(),
            Fault::RateLimited => "429".into(),
            Fault::Unavailable => "503".into(),
            Fault::ServerError => "500".into(),
            Fault::Reset => "reset".into(),
            Fault::Stall => format!("ttft{STALL_MS}"),
            Fault::CutStream if stream => "cut2+chunks5".into(),
            Fault::CutStream => "502".into(),
            Fault::Garbage => "garbage".into(),
        }
    }
}

/// Each provider answers 70 % of requests; the rest is spread over the faults.
fn draw_fault(rng: &mut Rng, ok_share: f64) -> Fault {
    let u = rng.unit();
    if u < ok_share {
        return Fault::Ok;
    }
    let faults = [
        Fault::RateLimitedRetryAfter,
        Fault::RateLimited,
        Fault::Unavailable,
        Fault::ServerError,
        Fault::Reset,
        Fault::Stall,
        Fault::CutStream,
        Fault::Garbage,
    ];
    faults[rng.below(faults.len())]
}

/// One soak request: its body, its per-provider faults and the endpoints it allows.
#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    pub body: Value,
    pub stream: bool,
    pub faults: BTreeMap<String, Fault>,
    /// Providers the request (provider object, models) allows: the only ones that may be
    /// attempted.
    pub allowed: Vec<String>,
}

impl Case {
    fn behavior_header(&self) -> String {
        self.faults.iter().map(|(p, f)| format!("{p}={}", f.token(self.stream))).collect::<Vec<_>>().join(",")
    }

    /// Some allowed endpoint would have answered in full.
    pub fn has_healthy_endpoint(&self) -> bool {
        self.allowed.iter().any(|p| self.faults.get(p) == Some(&Fault::Ok))
    }

    /// Some allowed endpoint would cut the stream after its first bytes, or answer 200 with
    /// garbage: no failover is possible once it is chosen.
    pub fn may_be_cut(&self) -> bool {
        self.allowed.iter().any(|p| {
            let f = self.faults.get(p);
            f == Some(&Fault::Garbage) || (self.stream && f == Some(&Fault::CutStream))
        })
    }
}

fn model_providers(model: &str) -> Vec<&'static str> {
    MODELS.iter().find(|(m, _)| *m == model).map(|(_, eps)| eps.iter().map(|(p, _)| *p).collect()).unwrap_or_default()
}

/// Draws request `i` of a run.
pub fn make_case(seed: u64, i: usize, ok_share: f64) -> Case {
    let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let model = MODELS[rng.below(MODELS.len())].0;
    let fallback = (rng.unit() < 0.3).then(|| {
        let others: Vec<&str> = MODELS.iter().map(|m| m.0).filter(|m| *m != model).collect();
        others[rng.below(others.len())]
    });
    let stream = rng.unit() < 0.4;
    let mut models = vec![model];
    models.extend(fallback);
    let pool: Vec<&str> = {
        let mut v: Vec<&str> = models.iter().flat_map(|m| model_providers(m)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let pick = |rng: &mut Rng| pool[rng.below(pool.len())];
    let mut body = json!({"model": model, "messages": [{"role": "user", "content": format!("soak request {i}")}]});
    if stream {
        body["stream"] = json!(true);
    }
    if let Some(f) = fallback {
        body["models"] = json!([f]);
    }
    // The allowed providers per model; a request may narrow with only/ignore/order+no fallbacks.
    let allowed_for = |m: &str, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        model_providers(m).into_iter().filter(|p| keep(p)).map(str::to_string).collect()
    };
    let kind = rng.unit();
    let allowed: Vec<String> = if kind < 0.40 {
        models.iter().flat_map(|m| allowed_for(m, &|_| true)).collect()
    } else if kind < 0.50 {
        body["provider"] = json!({"sort": "price"});
        models.iter().flat_map(|m| allowed_for(m, &|_| true)).collect()
    } else if kind < 0.62 {
        let (a, b) = (pick(&mut rng), pick(&mut rng));
        body["provider"] = json!({"order": [a, b]});
        models.iter().flat_map(|m| allowed_for(m, &|_| true)).collect()
    } else if kind < 0.74 {
        let only: Vec<&str> = (0..3).map(|_| pick(&mut rng)).collect();
        body["provider"] = json!({"only": only});
        models.iter().flat_map(|m| allowed_for(m, &|p| only.contains(&p))).collect()
    } else if kind < 0.86 {
        let ignore = pick(&mut rng);
        body["provider"] = json!({"ignore": [ignore]});
        models.iter().flat_map(|m| allowed_for(m, &|p| p != ignore)).collect()
    } else {
        // allow_fallbacks false: only the order-listed providers, per model.
        let (a, b) = (pick(&mut rng), pick(&mut rng));
        body["provider"] = json!({"order": [a, b], "allow_fallbacks": false});
        models.iter().flat_map(|m| allowed_for(m, &|p| p == a || p == b)).collect()
    };
    let mut allowed = allowed;
    allowed.sort_unstable();
    allowed.dedup();
    let faults = PROVIDERS.iter().map(|p| (p.to_string(), draw_fault(&mut rng, ok_share))).collect();
    Case { id: format!("soak-{seed}-{i}"), body, stream, faults, allowed }
}

/// Soak parameters.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub requests: usize,
    pub concurrency: usize,
    pub seed: u64,
    /// Share of (request, provider) pairs answered normally.
    pub ok_share: f64,
}

/// What a soak run saw.
#[derive(Debug, Default)]
pub struct SoakReport {
    pub requests: usize,
    pub answered: usize,
    /// Requests with at least one allowed endpoint that would answer, none that would cut.
    pub with_healthy: usize,
    pub healthy_served: usize,
    /// Requests where an allowed endpoint would cut the stream midway.
    pub cut_risk: usize,
    pub cut_risk_served: usize,
    pub cut_risk_error_event: usize,
    pub without_healthy: usize,
    pub without_healthy_json_error: usize,
    pub retry_overflows: u64,
    pub attempts: usize,
    /// Violations: each a line saying what went wrong for which request.
    pub violations: Vec<String>,
    pub rss_start_kib: u64,
    pub rss_end_kib: u64,
    pub elapsed: Duration,
    pub statuses: BTreeMap<u16, usize>,
}

impl SoakReport {
    pub fn healthy_success_rate(&self) -> f64 {
        if self.with_healthy == 0 {
            1.0
        } else {
            self.healthy_served as f64 / self.with_healthy as f64
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "soak: {} requests in {:.1} s, {} answered, {} attempts\n\
             - with a healthy allowed endpoint: {} served of {} ({:.3} %)\n\
             - an allowed endpoint would cut the stream or answer garbage: {} ({} served whole, {} cut with the error event or garbage passed on)\n\
             - no healthy allowed endpoint: {} ({} answered with an OpenAI-style JSON error)\n\
             - statuses: {:?}\n\
             - Envoy retry overflows: {}; Envoy RSS {} -> {} MiB\n\
             - violations: {}",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.answered,
            self.attempts,
            self.healthy_served,
            self.with_healthy,
            100.0 * self.healthy_success_rate(),
            self.cut_risk,
            self.cut_risk_served,
            self.cut_risk_error_event,
            self.without_healthy,
            self.without_healthy_json_error,
            self.statuses,
            self.retry_overflows,
            self.rss_start_kib / 1024,
            self.rss_end_kib / 1024,
            self.violations.len()
        )
    }
}

fn stream_complete(r: &Reply) -> bool {
    r.body_error.is_none() && r.text().contains("data: [DONE]")
}

fn stream_error_event(r: &Reply) -> bool {
    r.text().trim_end().rsplit("\n\n").next().is_some_and(|last| last.contains("\"stream_interrupted\""))
}

/// The mock's garbage answer, passed through (the 200 was already on its way).
fn is_garbage(r: &Reply) -> bool {
    r.text().contains("oops <html>")
}

fn json_error(r: &Reply) -> bool {
    r.json()["error"]["message"].is_string() && r.json()["error"]["code"].is_string()
}

/// Judges one answer against what its case allowed; returns the violations.
fn judge(case: &Case, reply: &Result<Reply, String>, report: &mut SoakReport) {
    let r = match reply {
        Ok(r) => r,
        Err(e) => {
            report.violations.push(format!("{}: no answer: {e}", case.id));
            return;
        }
    };
    report.answered += 1;
    *report.statuses.entry(r.status).or_default() += 1;
    let served_whole = r.status == 200 && if case.stream { stream_complete(r) } else { r.json()["choices"].is_array() };
    if case.may_be_cut() {
        report.cut_risk += 1;
        if served_whole {
            report.cut_risk_served += 1;
        } else if r.status == 200 && (stream_error_event(r) || is_garbage(r)) {
            report.cut_risk_error_event += 1;
        } else if !(r.status >= 400 && json_error(r)) {
            report.violations.push(format!("{}: cut stream ended without the error event: {}", case.id, r.text()));
        }
    } else if case.has_healthy_endpoint() {
        report.with_healthy += 1;
        if served_whole {
            report.healthy_served += 1;
        }
    } else {
        report.without_healthy += 1;
        if r.status >= 400 && json_error(r) {
            report.without_healthy_json_error += 1;
        } else {
            report.violations.push(format!(
                "{}: every allowed endpoint failed but the answer is {} {}",
                case.id,
                r.status,
                r.text()
            ));
        }
    }
}

/// Checks the mocks' logs: only allowed endpoints attempted, each with its own key only, and
/// nothing of the caller's secrets.
fn check_attempts(cases: &[Case], providers: &[MockProvider], report: &mut SoakReport) {
    let by_id: BTreeMap<&str, &Case> = cases.iter().map(|c| (c.id.as_str(), c)).collect();
    for p in providers {
        let own = format!("Bearer {}", key_of(&p.name));
        for r in p.received() {
            report.attempts += 1;
            let id = r.header("x-test-id").unwrap_or("").to_string();
            let Some(case) = by_id.get(id.as_str()) else {
                report.violations.push(format!("{}: request without a known test id", p.name));
                continue;
            };
            if !case.allowed.contains(&p.name) {
                report.violations.push(format!("{id}: attempt reached {} outside {:?}", p.name, case.allowed));
            }
            if r.header("authorization") != Some(own.as_str()) {
                report.violations.push(format!("{id}: {} got authorization {:?}", p.name, r.header("authorization")));
            }
            for (k, v) in &r.headers {
                if v.contains("caller-secret") || v.contains("caller-cookie") {
                    report.violations.push(format!("{id}: {} received the caller's secret in {k}", p.name));
                }
                for other in PROVIDERS.iter().filter(|o| **o != p.name) {
                    if v.contains(&key_of(other)) {
                        report.violations.push(format!("{id}: {} received {other}'s key in {k}", p.name));
                    }
                }
            }
        }
    }
}

async fn run_requests(addr: SocketAddr, cases: Arc<Vec<Case>>, concurrency: usize) -> Vec<Result<Reply, String>> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (cases, next) = (Arc::clone(&cases), Arc::clone(&next));
        workers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(case) = cases.get(i) else { break };
                let behavior = case.behavior_header();
                let headers = [
                    ("x-test-id", case.id.as_str()),
                    ("x-mock-behavior", behavior.as_str()),
                    ("authorization", "Bearer caller-secret"),
                    ("cookie", "session=caller-cookie"),
                ];
                out.push((i, post_json(addr, "/v1/chat/completions", &headers, &case.body).await));
            }
            out
        }));
    }
    let mut replies: Vec<(usize, Result<Reply, String>)> = Vec::new();
    for w in workers {
        match w.await {
            Ok(v) => replies.extend(v),
            Err(e) => replies.push((usize::MAX, Err(format!("worker failed: {e}")))),
        }
    }
    replies.sort_by_key(|r| r.0);
    replies.into_iter().map(|r| r.1).collect()
}

/// Runs a soak on the current tokio runtime: starts the mocks and Envoy (2 workers), sends
/// every request, judges every answer and every attempt, and stops Envoy.
pub async fn run(cfg: &SoakConfig) -> Result<SoakReport, String> {
    let mut providers = Vec::new();
    for p in PROVIDERS {
        providers.push(MockProvider::start(p, 0, Behavior::default()).await.map_err(|e| e.to_string())?);
    }
    let clusters =
        providers.iter().map(|p| ClusterSpec { name: format!("c_{}", p.name), port: p.addr.port() }).collect();
    let mut stack = StackConfig::new(catalog(), clusters, None);
    stack.max_attempts = MAX_ATTEMPTS;
    stack.per_try_idle_timeout_ms = PER_TRY_IDLE_MS;
    // Envoy is started from a blocking thread that lives until it is stopped (PDEATHSIG).
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let envoy = Envoy::start(&stack, "soak");
        let info = envoy.as_ref().map(|e| (e.addr(), e.admin, e.pid())).map_err(|e| e.clone());
        let _ = tx.send(info);
        let _ = stop_rx.recv();
        drop(envoy);
    });
    let (addr, admin, pid) = rx.await.map_err(|_| "envoy thread died".to_string())??;
    let rss = || crate::procfs::rss_kib(pid);
    let cases: Arc<Vec<Case>> = Arc::new((0..cfg.requests).map(|i| make_case(cfg.seed, i, cfg.ok_share)).collect());
    let start = Instant::now();
    let mut report = SoakReport { requests: cfg.requests, ..SoakReport::default() };
    // Warm-up tenth first, so the RSS baseline includes the VMs' steady state.
    let warm = (cfg.requests / 10).max(1).min(cfg.requests);
    let first: Arc<Vec<Case>> = Arc::new(cases.iter().take(warm).cloned().collect());
    let rest: Arc<Vec<Case>> = Arc::new(cases.iter().skip(warm).cloned().collect());
    let mut replies = run_requests(addr, first, cfg.concurrency).await;
    report.rss_start_kib = rss();
    replies.extend(run_requests(addr, rest, cfg.concurrency).await);
    report.elapsed = start.elapsed();
    report.rss_end_kib = rss();
    for (case, reply) in cases.iter().zip(replies.iter()) {
        judge(case, reply, &mut report);
    }
    check_attempts(&cases, &providers, &mut report);
    let (_, stats) = http_get(admin, "/stats?filter=upstream_rq_retry_overflow")?;
    report.retry_overflows = stats
        .lines()
        .filter(|l| l.starts_with("cluster.c_"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()))
        .sum();
    let _ = stop_tx.send(());
    Ok(report)
}
