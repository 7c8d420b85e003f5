//! `make bench-routing`: `price_weighted` vs `routing_cost` on a simulated provider market,
//! measured like OpenRouter's switchback experiment: the same open-loop (Poisson) traffic goes
//! to one of two Envoys (one per default policy, same filter, same market) in alternating
//! matched time blocks; a warm-up after each switch is discarded. Prints one table with both
//! policies and the change, and writes the per-request data, the traffic shares per endpoint
//! over time (CSV) and a plot of them (PNG, when matplotlib is available).
//!
//! Usage: switchyard-market [--market FILE] [--seed N] [--out DIR]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::post_json;
use switchyard_integration::envoy::{repo_root, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::market::{self, Market, Rng};

const POLICIES: [&str; 2] = ["price_weighted", "routing_cost"];

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

/// One request as the caller saw it.
#[derive(Clone, Debug, Default)]
struct Outcome {
    id: String,
    policy: usize,
    measured: bool,
    stream: bool,
    status: u16,
    ttft_ms: f64,
    ttlt_ms: f64,
    completion_tokens: f64,
    cost_usd: f64,
    tps: Option<f64>,
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The usage object of a whole JSON answer or of the SSE event carrying it.
fn usage_of(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return v.get("usage").cloned();
    }
    text.split("\n\n")
        .filter_map(|e| e.trim().strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v.get("usage").cloned())
        .last()
}

fn main() {
    let market_path =
        arg("--market").map(PathBuf::from).unwrap_or_else(|| repo_root().join("integration/market/default.json"));
    let seed: u64 = arg("--seed").and_then(|s| s.parse().ok()).unwrap_or(1);
    let out_dir = arg("--out").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target/bench-routing"));
    let text = match std::fs::read_to_string(&market_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("switchyard-market: {}: {e}", market_path.display());
            std::process::exit(2);
        }
    };
    let m = match Market::parse(&text) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("switchyard-market: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-market: {e}");
            std::process::exit(2);
        }
    };
    let clock = Instant::now();
    let running = match rt.block_on(market::start(&m, clock)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("switchyard-market: market: {e}");
            std::process::exit(2);
        }
    };
    let clusters: Vec<ClusterSpec> =
        running.addrs.iter().map(|(n, a)| ClusterSpec { name: format!("m_{n}"), port: a.port() }).collect();
    let mut envoys = Vec::new();
    for policy in POLICIES {
        let mut cfg = StackConfig::new(m.catalog(policy), clusters.clone(), None);
        cfg.per_try_idle_timeout_ms = 3_000;
        match Envoy::start(&cfg, &format!("market-{policy}")) {
            Ok(e) => envoys.push(e),
            Err(e) => {
                eprintln!("switchyard-market: envoy: {e}");
                std::process::exit(2);
            }
        }
    }
    let addrs: Vec<_> = envoys.iter().map(Envoy::addr).collect();
    println!(
        "market {} ({} endpoints), {} req/s Poisson, {} blocks of {} s alternating {:?}, {} s warm-up discarded per block",
        market_path.display(),
        m.endpoints.len(),
        m.requests_per_s,
        m.blocks,
        m.block_s,
        POLICIES,
        m.warmup_s
    );
    let prices: HashMap<String, (f64, f64, f64)> =
        m.endpoints.iter().map(|e| (e.name.clone(), (e.prompt, e.completion, e.cached_prompt))).collect();
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::new(Mutex::new(Vec::new()));
    let total_s = m.block_s * m.blocks as f64;
    rt.block_on(async {
        let mut rng = Rng::new(seed);
        // Open conversations: (id, turns so far, history text).
        let mut conversations: Vec<(String, usize, String)> = Vec::new();
        let mut tasks = Vec::new();
        let start = Instant::now();
        let mut next_s = 0.0;
        let mut i = 0u64;
        while next_s < total_s {
            next_s += rng.exp(m.requests_per_s);
            let wait = next_s - start.elapsed().as_secs_f64();
            if wait > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            let block = (next_s / m.block_s) as usize;
            // Blocks alternate in matched pairs: (A, B), (B, A), ... so neither policy always
            // sees the later half of a pair.
            let policy = if (block / 2).is_multiple_of(2) { block % 2 } else { 1 - block % 2 };
            let measured = next_s - block as f64 * m.block_s >= m.warmup_s;
            let stream = rng.unit() < m.stream_share;
            let tools = rng.unit() < m.tools_share;
            let prompt_tokens = rng.lognormal(m.prompt_mean, m.prompt_spread).clamp(16.0, 30_000.0) as usize;
            let fresh = "lorem ipsum ".repeat(prompt_tokens * 4 / 12 + 1);
            let (user, messages) = if rng.unit() < m.conversation_share {
                // Continue an open conversation or start one.
                if conversations.is_empty() || rng.unit() < 0.3 {
                    conversations.push((format!("conv-{seed}-{i}"), 0, String::new()));
                }
                let k = (rng.unit() * conversations.len() as f64) as usize % conversations.len();
                let (id, turns, history) = conversations[k].clone();
                let history = format!("{history}{fresh}");
                let msgs = json!([{"role": "system", "content": format!("conversation {id}")}, {"role": "user", "content": history}]);
                if turns + 1 >= m.turns {
                    conversations.remove(k);
                } else {
                    conversations[k] = (id.clone(), turns + 1, history);
                }
                (id, msgs)
            } else {
                (String::new(), json!([{"role": "user", "content": format!("request {i} {fresh}")}]))
            };
            let mut body = json!({"model": m.model, "messages": messages, "stream": stream});
            if !user.is_empty() {
                body["user"] = json!(user);
                body["session_id"] = json!(user);
            }
            if tools {
                body["tools"] = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]);
            }
            let id = format!("mk-{i}");
            i += 1;
            let addr = addrs[policy];
            let (outcomes, prices) = (Arc::clone(&outcomes), prices.clone());
            tasks.push(tokio::spawn(async move {
                let sent = Instant::now();
                let r = post_json(addr, "/v1/chat/completions", &[("x-test-id", &id)], &body).await;
                let mut o = Outcome { id, policy, measured, stream, ..Outcome::default() };
                if let Ok(r) = r {
                    o.status = r.status;
                    o.ttft_ms = r.chunks.first().map_or(f64::NAN, |c| c.0.as_secs_f64() * 1000.0);
                    o.ttlt_ms = r.chunks.last().map_or(sent.elapsed().as_secs_f64() * 1000.0, |c| c.0.as_secs_f64() * 1000.0);
                    if r.status == 200 {
                        let usage = usage_of(&r.text()).unwrap_or(Value::Null);
                        let p = usage["prompt_tokens"].as_f64().unwrap_or(0.0);
                        let c = usage["completion_tokens"].as_f64().unwrap_or(0.0);
                        let cached = usage["prompt_tokens_details"]["cached_tokens"].as_f64().unwrap_or(0.0);
                        let served = r.header("x-switchyard-provider").unwrap_or("").to_string();
                        if let Some((pp, cp, kp)) = prices.get(&served) {
                            o.cost_usd = ((p - cached) * pp + cached * kp + c * cp) / 1e6;
                        }
                        o.completion_tokens = c;
                        let gen_s = (o.ttlt_ms - o.ttft_ms) / 1000.0;
                        o.tps = if stream && gen_s > 0.0 { Some(c / gen_s) } else { None };
                    }
                }
                if let Ok(mut g) = outcomes.lock() {
                    g.push(o);
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let outcomes = outcomes.lock().map(|g| g.clone()).unwrap_or_default();
    let log = running.log.lock().map(|g| g.clone()).unwrap_or_default();
    let mut by_request: HashMap<&str, Vec<&market::AttemptLog>> = HashMap::new();
    for a in &log {
        by_request.entry(a.request.as_str()).or_default().push(a);
    }
    // The table.
    let mut rows: Vec<(String, [f64; 2], bool)> = Vec::new();
    let mut cols: [HashMap<&str, f64>; 2] = [HashMap::new(), HashMap::new()];
    for (p, col) in cols.iter_mut().enumerate() {
        let set: Vec<&Outcome> = outcomes.iter().filter(|o| o.policy == p && o.measured).collect();
        let ok: Vec<&&Outcome> = set.iter().filter(|o| o.status == 200).collect();
        // TTFT only means something for streams (a whole answer's first byte is its last).
        let mut ttft: Vec<f64> = ok.iter().filter(|o| o.stream).map(|o| o.ttft_ms).filter(|x| x.is_finite()).collect();
        let mut ttlt: Vec<f64> = ok.iter().map(|o| o.ttlt_ms).collect();
        let mut tps: Vec<f64> = ok.iter().filter_map(|o| o.tps).collect();
        let cost: f64 = ok.iter().map(|o| o.cost_usd).sum();
        let tokens: f64 = ok.iter().map(|o| o.completion_tokens).sum();
        let attempts = |o: &Outcome| by_request.get(o.id.as_str()).cloned().unwrap_or_default();
        let met_429 = set.iter().filter(|o| attempts(o).iter().any(|a| a.status == 429)).count();
        let retried = set.iter().filter(|o| attempts(o).len() > 1).count();
        let failed_ms: f64 = set
            .iter()
            .map(|o| attempts(o).iter().filter(|a| a.status != 200).map(|a| a.duration_ms).sum::<f64>())
            .sum();
        let n = set.len().max(1) as f64;
        col.insert("requests", set.len() as f64);
        col.insert("success", ok.len() as f64 / n * 100.0);
        col.insert("ttft50", percentile(&mut ttft, 0.5));
        col.insert("ttft95", percentile(&mut ttft, 0.95));
        col.insert("tps50", percentile(&mut tps, 0.5));
        col.insert("ttlt50", percentile(&mut ttlt, 0.5));
        col.insert("ttlt95", percentile(&mut ttlt, 0.95));
        col.insert("cost1k", cost / ok.len().max(1) as f64 * 1000.0);
        col.insert("cost1m", if tokens > 0.0 { cost / tokens * 1e6 } else { f64::NAN });
        col.insert("met429", met_429 as f64 / n * 100.0);
        col.insert("retried", retried as f64 / n * 100.0);
        col.insert("failedms", failed_ms / n);
    }
    for (key, label, lower_better) in [
        ("requests", "requests measured", false),
        ("success", "success %", false),
        ("ttft50", "TTFT p50 ms (streams)", true),
        ("ttft95", "TTFT p95 ms (streams)", true),
        ("tps50", "throughput p50 tok/s (streams)", false),
        ("ttlt50", "time to last token p50 ms", true),
        ("ttlt95", "time to last token p95 ms", true),
        ("cost1k", "cost per 1k requests USD", true),
        ("cost1m", "cost per 1M completion tokens USD", true),
        ("met429", "requests that met a 429 %", true),
        ("retried", "requests that needed a retry %", true),
        ("failedms", "time on failed attempts per request ms", true),
    ] {
        rows.push((label.to_string(), [cols[0][key], cols[1][key]], lower_better));
    }
    let mut table = String::from("| metric | price_weighted | routing_cost | change |\n|---|---|---|---|\n");
    for (label, v, _) in &rows {
        let change =
            if v[0].is_finite() && v[0] != 0.0 { format!("{:+.1} %", (v[1] / v[0] - 1.0) * 100.0) } else { "-".into() };
        let fmt = |x: f64| if x.abs() >= 100.0 { format!("{x:.0}") } else { format!("{x:.3}") };
        table.push_str(&format!("| {label} | {} | {} | {change} |\n", fmt(v[0]), fmt(v[1])));
    }
    println!("\n{table}");
    let _ = std::fs::create_dir_all(&out_dir);
    let _ = std::fs::write(out_dir.join("results.md"), &table);
    // Traffic share per endpoint over time (5 s buckets of first attempts, by the policy of
    // the block they fell in).
    let first_attempt: HashMap<&str, &market::AttemptLog> = {
        let mut m: HashMap<&str, &market::AttemptLog> = HashMap::new();
        for a in &log {
            m.entry(a.request.as_str())
                .and_modify(|x| {
                    if a.at_s < x.at_s {
                        *x = a
                    }
                })
                .or_insert(a);
        }
        m
    };
    let policy_of: HashMap<&str, usize> = outcomes.iter().map(|o| (o.id.as_str(), o.policy)).collect();
    let mut csv = String::from("t_s,policy,endpoint,share\n");
    let bucket = 5.0;
    let buckets = (total_s / bucket).ceil() as usize;
    for b in 0..buckets {
        for (p, name) in POLICIES.iter().enumerate() {
            let in_bucket: Vec<&&market::AttemptLog> = first_attempt
                .iter()
                .filter(|(id, a)| policy_of.get(*id) == Some(&p) && (a.at_s / bucket) as usize == b)
                .map(|(_, a)| a)
                .collect();
            // Buckets cut by a block switch hold a handful of requests: too few for a share.
            if in_bucket.len() < 20 {
                continue;
            }
            for e in &m.endpoints {
                let share = in_bucket.iter().filter(|a| a.endpoint == e.name).count() as f64 / in_bucket.len() as f64;
                csv.push_str(&format!("{},{name},{},{share:.4}\n", b as f64 * bucket, e.name));
            }
        }
    }
    let _ = std::fs::write(out_dir.join("shares.csv"), &csv);
    // A market whose endpoint fails in bursts: the share of first attempts it got, per phase
    // around its bursts (measured requests only).
    if let Some((name, bursts)) = m.endpoints.iter().find_map(|e| e.bursts.map(|b| (e.name.clone(), b))) {
        let measured: HashMap<&str, bool> = outcomes.iter().map(|o| (o.id.as_str(), o.measured)).collect();
        const PHASES: [&str; 4] = [
            "steady (5 s after a burst until the next)",
            "during a burst",
            "0-2 s after a burst",
            "2-5 s after a burst",
        ];
        let phase = |at_s: f64| match (bursts.into_burst(at_s), bursts.since_end(at_s)) {
            (Some(_), _) => 1,
            (None, Some(t)) if t < 2.0 => 2,
            (None, Some(t)) if t < 5.0 => 3,
            _ => 0,
        };
        // [policy][phase] = (first attempts, of which to the bursting endpoint)
        let mut counts = [[(0u32, 0u32); 4]; 2];
        for (id, a) in &first_attempt {
            let (Some(&p), Some(true)) = (policy_of.get(id), measured.get(id).copied()) else { continue };
            if let Some(c) = counts.get_mut(p).and_then(|row| row.get_mut(phase(a.at_s))) {
                c.0 += 1;
                if a.endpoint == name {
                    c.1 += 1;
                }
            }
        }
        let mut t = format!(
            "\nFirst attempts sent to `{name}` (fails every attempt for {} s every {} s from {} s; {:.0} % of them resets, the rest 503), by phase:\n\n| phase | price_weighted | routing_cost |\n|---|---|---|\n",
            bursts.length_s, bursts.every_s, bursts.first_s, bursts.reset_share * 100.0
        );
        for (k, label) in PHASES.iter().enumerate() {
            let cell = |p: usize| {
                let (n, x) = counts[p][k];
                if n == 0 {
                    "-".to_string()
                } else {
                    format!("{:.1} % ({x} of {n})", f64::from(x) / f64::from(n) * 100.0)
                }
            };
            t.push_str(&format!("| {label} | {} | {} |\n", cell(0), cell(1)));
        }
        println!("{t}");
        table.push_str(&t);
        let _ = std::fs::write(out_dir.join("results.md"), &table);
    }
    println!("wrote {}/results.md and shares.csv", out_dir.display());
    drop(envoys);
}
