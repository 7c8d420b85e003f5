//! `make bench`: Switchyard's full routing + failover path against plain Envoy, side by side in
//! one run, same machine, same mock provider, same 1 KB request body. Prints one table.
//!
//! Env: BENCH_SECONDS (per round, default 5), BENCH_ROUNDS (default 3), BENCH_CONNECTIONS (32).

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_integration::envoy::{bootstrap, plain_bootstrap, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::load::{run, LoadResult};
use switchyard_integration::mock::{Behavior, MockProvider};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(bench()) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

async fn bench() -> Result<(), String> {
    let seconds = env_num("BENCH_SECONDS", 5);
    let rounds = env_num("BENCH_ROUNDS", 3) as usize;
    let connections = env_num("BENCH_CONNECTIONS", 32) as usize;
    let provider = MockProvider::start("bench", 0, Behavior::default()).await.map_err(|e| e.to_string())?;
    let port = provider.addr.port();

    let catalog = json!({
        "providers": {
            "fast": {"cluster": "p_fast", "authority": "fast.example", "credential": {"value": "k1"}},
            "cheap": {"cluster": "p_cheap", "authority": "cheap.example", "credential": {"value": "k2"}}
        },
        "models": {"bench/model": {"endpoints": [
            {"provider": "fast", "upstream_model": "fast-model", "pricing": {"prompt": 2, "completion": 2}},
            {"provider": "cheap", "upstream_model": "cheap-model", "pricing": {"prompt": 1, "completion": 1}}
        ]}}
    });
    let cfg = StackConfig::new(
        catalog,
        vec![ClusterSpec { name: "p_fast".into(), port }, ClusterSpec { name: "p_cheap".into(), port }],
        None,
    );
    let boot = bootstrap(&cfg);
    // On this (main) thread: Envoy dies with the thread that started it.
    let sy = Envoy::start_bootstrap(&boot, "bench-switchyard", &[], 1)?;
    // BENCH_BREAKDOWN=1: where the cost goes (not product configurations, measurement only).
    let breakdown = env_num("BENCH_BREAKDOWN", 0) == 1;
    let mut extra: Vec<(&str, Envoy)> = Vec::new();
    if breakdown {
        let mut no_upstream = boot.clone();
        strip_upstream_filters(&mut no_upstream);
        extra.push((
            "  - without the per-attempt filter",
            Envoy::start_bootstrap(&no_upstream, "bench-no-upstream", &[], 1)?,
        ));
        let mut wasm_only = no_upstream.clone();
        wasm_only_static_route(&mut wasm_only);
        extra.push((
            "  - downstream Wasm only, static route",
            Envoy::start_bootstrap(&wasm_only, "bench-wasm-only", &[], 1)?,
        ));
    }
    let plain_boot = plain_bootstrap(&ClusterSpec { name: "provider".into(), port }, 0, 0);
    let plain = Envoy::start_bootstrap(&plain_boot, "bench-plain", &[], 1)?;

    // A 1 KB OpenAI chat request (the same bytes for both paths).
    let mut body = json!({"model": "bench/model", "max_tokens": 16, "messages": [{"role": "user", "content": ""}]});
    let filler = 1024 - body.to_string().len();
    body["messages"][0]["content"] = json!("x".repeat(filler));
    let body = body.to_string().into_bytes();
    let headers = [("content-type", "application/json")];
    let path = "/v1/chat/completions";

    println!("Switchyard benchmark: Envoy 1.40, 1 worker each, {connections} connections, {} B body, {rounds} x {seconds}s rounds, alternating", body.len());
    let warm = Duration::from_secs(1);
    run(plain.addr(), path, &headers, &body, connections, warm).await;
    run(sy.addr(), path, &headers, &body, connections, warm).await;

    let mut results: Vec<(&str, Vec<LoadResult>)> =
        vec![("plain Envoy (router only)", Vec::new()), ("Switchyard full path", Vec::new())];
    let mut addrs = vec![plain.addr(), sy.addr()];
    for (name, e) in &extra {
        results.push((name, Vec::new()));
        addrs.push(e.addr());
    }
    let pids: Vec<&Envoy> = [&plain, &sy].into_iter().chain(extra.iter().map(|(_, e)| e)).collect();
    // Envoy CPU time per served request: far steadier than req/s on a shared 2-core machine.
    let mut cpu_per_req: Vec<Vec<f64>> = vec![Vec::new(); addrs.len()];
    for _ in 0..rounds {
        for (i, addr) in addrs.iter().copied().enumerate() {
            let cpu0 = pids.get(i).map(|e| e.cpu_us()).unwrap_or(0);
            let r = run(addr, path, &headers, &body, connections, Duration::from_secs(seconds)).await;
            let cpu1 = pids.get(i).map(|e| e.cpu_us()).unwrap_or(0);
            if let Some(v) = cpu_per_req.get_mut(i) {
                v.push(cpu1.saturating_sub(cpu0) as f64 / r.requests.max(1) as f64);
            }
            if let Some(slot) = results.get_mut(i) {
                slot.1.push(r);
            }
        }
    }
    // Unloaded latency: one connection, so p50 is the per-request cost, not queueing.
    let mut idle_p50: Vec<f64> = Vec::new();
    for addr in addrs.iter().copied() {
        let r = run(addr, path, &headers, &body, 1, Duration::from_secs(seconds.min(3))).await;
        idle_p50.push(f64::from(r.percentile_us(0.50)));
    }
    let summary: Vec<(&str, f64, f64, f64, u64)> = results
        .iter()
        .map(|(name, rs)| {
            let rps = median(rs.iter().map(LoadResult::rps).collect());
            let p50 = median(rs.iter().map(|r| f64::from(r.percentile_us(0.50))).collect());
            let p99 = median(rs.iter().map(|r| f64::from(r.percentile_us(0.99))).collect());
            let errors: u64 = rs.iter().map(|r| r.errors).sum();
            (*name, rps, p50, p99, errors)
        })
        .collect();
    let base = summary.first().map(|s| s.1).unwrap_or(1.0);
    let mut rss = vec![plain.rss_kib(), sy.rss_kib()];
    rss.extend(extra.iter().map(|(_, e)| e.rss_kib()));
    println!();
    let cpu: Vec<f64> = cpu_per_req.into_iter().map(median).collect();
    let base_cpu = cpu.first().copied().unwrap_or(0.0);
    let base_idle = idle_p50.first().copied().unwrap_or(0.0);
    println!("| path | req/s (median) | vs plain | p50 us @1 conn | p50 delta us @1 conn | p50 us @{connections} conn | p99 us @{connections} conn | Envoy CPU us/req | CPU delta us/req | errors | Envoy RSS MiB |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (i, (name, rps, p50, p99, errors)) in summary.iter().enumerate() {
        let c = cpu.get(i).copied().unwrap_or(0.0);
        let idle = idle_p50.get(i).copied().unwrap_or(0.0);
        println!(
            "| {name} | {rps:.0} | {:.2}x | {idle:.0} | {:+.0} | {p50:.0} | {p99:.0} | {c:.1} | {:+.1} | {errors} | {:.1} |",
            rps / base.max(1e-9),
            idle - base_idle,
            c - base_cpu,
            rss.get(i).copied().unwrap_or(0) as f64 / 1024.0
        );
    }
    let served = provider.received().len();
    println!("\nmock provider served {served} requests; per-round req/s:");
    for (name, rs) in &results {
        println!("  {name}: {}", rs.iter().map(|r| format!("{:.0}", r.rps())).collect::<Vec<_>>().join(", "));
    }
    Ok(())
}

fn strip_upstream_filters(boot: &mut Value) {
    if let Some(clusters) = boot["static_resources"]["clusters"].as_array_mut() {
        for c in clusters {
            if let Some(o) = c.as_object_mut() {
                o.remove("typed_extension_protocol_options");
            }
        }
    }
}

/// Keeps only the downstream routing filter and sends routed requests to one static cluster.
fn wasm_only_static_route(boot: &mut Value) {
    let hcm = &mut boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    if let Some(filters) = hcm["http_filters"].as_array_mut() {
        filters.retain(|f| {
            f["name"] != "envoy.filters.http.header_to_metadata"
                && f["typed_config"]["config"]["root_id"] != "switchyard_clear"
        });
    }
    let route = &mut hcm["route_config"]["virtual_hosts"][0]["routes"][0];
    route["route"] = json!({"cluster": "p_fast", "timeout": "300s"});
}
