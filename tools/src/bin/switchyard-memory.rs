//! `switchyard-memory`: where Envoy's RSS goes with the filter (measurement only; `make bench`
//! reports the one figure the target names). Each variant runs in its own Envoy, one after the
//! other, at each concurrency asked for; after start-up (settled) and after a short load it reads
//! `/proc/<pid>/status` (RSS, anonymous, file-backed) and Envoy's `/memory` (tcmalloc: bytes
//! allocated, and bytes freed but still held). RSS does not depend on timing, so the machine
//! may be busy.
//!
//! Variants (`MEMORY_VARIANTS`, comma-separated; the first is the baseline, default
//! `plain,noop,sy`):
//! - `plain`: router only (`make bench`'s plain Envoy);
//! - `noop`: the generator's bootstrap (the bench's two providers) with a no-op proxy-wasm module
//!   (`memory::NOOP_WAT`) in all three roles: V8's cost for the same VMs and plugins, without our code;
//! - `sy`: the generator's bootstrap with the module (`SWITCHYARD_WASM`), `make bench`'s catalog;
//! - `sy-noup`: `sy` without the per-attempt (upstream) filters;
//! - `sy-N` (e.g. `sy-16`): `sy` with N provider clusters and N providers (one plugin per cluster);
//! - `noop-N`: the same N clusters with the no-op module;
//! - `sy@PATH`: `sy` with the module at PATH (another build); `mod@PATH`: any other proxy-wasm
//!   module at PATH loaded like `noop`;
//! - any variant with `-nofirst` appended: without the first-attempt clusters' filter;
//! - `sy-demo`: the repository's catalog (`catalog/switchyard.json`, its 11 providers as plain
//!   clusters on the mock);
//! - `sy-release`: `sy` with tcmalloc asked to return freed memory to the system
//!   (`memory_allocator_manager`) — what RSS holds that is no longer allocated.
//!
//! Env: MEMORY_CONCURRENCY (`2`; e.g. `1,2,4` to separate the cost per worker from the fixed
//! cost), MEMORY_SECONDS (each load, 2), MEMORY_CONNECTIONS (16), MEMORY_LOADS (request body
//! sizes in bytes, `s` = SSE: `1024,1024s,102400`), MEMORY_SETTLE_MS (wait after start-up, 1500),
//! MEMORY_DUMP (keep smaps and `/memory/tcmalloc` in `.work/`).

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::envoy::{bootstrap, plain_bootstrap, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::memory::{proc_status, tcmalloc, wasm_memories, NOOP_WASM};
use switchyard_tools::load::{chat_body, run, start_mock, LoadSpec};

const MODEL: &str = "bench/model";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `make bench`'s stack with `n` providers, one cluster each, all on the mock.
fn bench_stack(port: u16, n: usize) -> StackConfig {
    let mut providers = serde_json::Map::new();
    let mut endpoints = Vec::new();
    let mut clusters = Vec::new();
    for i in 0..n {
        let (slug, cluster) = match i {
            0 => ("fast".to_string(), "p_fast".to_string()),
            1 => ("cheap".to_string(), "p_cheap".to_string()),
            _ => (format!("p{i}"), format!("p_{i}")),
        };
        providers.insert(
            slug.clone(),
            json!({"cluster": cluster, "authority": format!("{slug}.example"), "credential": {"value": format!("k{i}")}}),
        );
        endpoints.push(json!({"provider": slug, "upstream_model": format!("{slug}-model"), "pricing": {"prompt": n - i, "completion": n - i}}));
        clusters.push(ClusterSpec { name: cluster, port });
    }
    let catalog = json!({"providers": providers, "models": {MODEL: {"endpoints": endpoints}}});
    StackConfig::new(catalog, clusters, None)
}

/// The repository's catalog, its providers as plain clusters on the mock (no TLS: the CA bundle
/// per cluster would be measured too), a fixed key per credential variable.
fn demo_stack(port: u16) -> Result<(StackConfig, Vec<(String, String)>), String> {
    let catalog = Catalog::load(&default_catalog_path())?;
    let clusters = catalog.providers.iter().map(|p| ClusterSpec { name: p.cluster(), port }).collect();
    let mut cfg = StackConfig::new(catalog.plugin_config(), clusters, None);
    cfg.env_keys = catalog.env_keys();
    cfg.max_attempts = catalog.max_attempts();
    let env = cfg.env_keys.iter().map(|k| (k.clone(), "key".to_string())).collect();
    Ok((cfg, env))
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

/// What a variant runs: its bootstrap, the environment, and the request it is loaded with.
struct Variant {
    boot: Value,
    env: Vec<(String, String)>,
    /// Extra request headers (the no-op module routes nothing; this header takes its requests
    /// through the routed route and the per-attempt filter like the module's would).
    headers: Vec<(String, String)>,
    model: String,
}

/// Removes the first-attempt clusters' filter (measurement only: a failed first attempt then
/// goes unrecorded, and its provider sees the internal headers).
fn strip_first_attempt_filters(boot: &mut Value) {
    if let Some(clusters) = boot["static_resources"]["clusters"].as_array_mut() {
        for c in clusters {
            let opts =
                &mut c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
            if let Some(filters) = opts["http_filters"].as_array_mut() {
                filters.retain(|f| f["typed_config"]["config"]["root_id"] != switchyard::wiring::FIRST_ATTEMPT_ROOT_ID);
            }
        }
    }
}

/// Lets the routed route take requests no decision filter planned (measurement only: a module
/// that does not route writes no plan, so its requests would match no route to a provider).
fn without_plan_requirement(mut boot: Value, cfg: &switchyard_integration::envoy::StackConfig) -> Value {
    let names: Vec<&str> = cfg.clusters.iter().map(|c| c.name.as_str()).collect();
    switchyard_integration::envoy::routed_by_header_without_plan(&mut boot, &names);
    boot
}

fn variant(name: &str, port: u16, noop_path: &std::path::Path) -> Result<Variant, String> {
    if let Some(base) = name.strip_suffix("-nofirst") {
        let mut v = variant(base, port, noop_path)?;
        strip_first_attempt_filters(&mut v.boot);
        return Ok(v);
    }
    let plain = Variant { boot: Value::Null, env: Vec::new(), headers: Vec::new(), model: MODEL.into() };
    let clusters = |prefix: &str| -> Result<usize, String> {
        match name.strip_prefix(prefix) {
            None | Some("") => Ok(2),
            Some(n) => n.trim_start_matches('-').parse().map_err(|_| format!("bad variant {name}")),
        }
    };
    Ok(match name {
        "plain" => Variant { boot: plain_bootstrap(&ClusterSpec { name: "provider".into(), port }, 0, 0), ..plain },
        "sy-noup" => {
            let mut boot = bootstrap(&bench_stack(port, 2));
            strip_upstream_filters(&mut boot);
            Variant { boot, ..plain }
        }
        "sy-demo" => {
            let (cfg, env) = demo_stack(port)?;
            // A model the repository's catalog serves.
            let model = cfg.plugin_config["models"]
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap_or_else(|| MODEL.into());
            Variant { boot: bootstrap(&cfg), env, headers: Vec::new(), model }
        }
        "sy-release" => {
            let mut boot = bootstrap(&bench_stack(port, 2));
            boot["memory_allocator_manager"] = json!({"bytes_to_release": 1 << 30, "memory_release_interval": "0.5s"});
            Variant { boot, ..plain }
        }
        n if n.starts_with("sy@") => {
            // The module at another path (another build of it).
            let mut cfg = bench_stack(port, 2);
            cfg.wasm = n.trim_start_matches("sy@").into();
            Variant { boot: bootstrap(&cfg), ..plain }
        }
        n if n.starts_with("mod@") => {
            // Any other proxy-wasm module in the same three roles, loaded like `noop`.
            let mut cfg = bench_stack(port, 2);
            cfg.wasm = n.trim_start_matches("mod@").into();
            Variant { boot: without_plan_requirement(bootstrap(&cfg), &cfg), headers: first_slot(&cfg), ..plain }
        }
        n if n.starts_with("sy") => Variant { boot: bootstrap(&bench_stack(port, clusters("sy")?)), ..plain },
        n if n.starts_with("noop") => {
            let mut cfg = bench_stack(port, clusters("noop")?);
            cfg.wasm = noop_path.to_path_buf();
            Variant { boot: without_plan_requirement(bootstrap(&cfg), &cfg), headers: first_slot(&cfg), ..plain }
        }
        other => return Err(format!("unknown variant {other}")),
    })
}

#[derive(Clone, Copy, Default)]
struct Sample {
    rss: u64,
    anon: u64,
    file: u64,
    allocated: u64,
    held_free: u64,
    /// The Wasm instances (VMs) and their linear memories' resident KiB.
    instances: usize,
    linear: u64,
}

fn sample(e: &Envoy) -> Sample {
    let [rss, anon, file] = proc_status(e.pid());
    let [allocated, held_free] = tcmalloc(e);
    let (instances, linear) = wasm_memories(e.pid());
    Sample { rss, anon, file, allocated, held_free, instances, linear }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    if let Err(e) = rt.block_on(measure()) {
        eprintln!("switchyard-memory: {e}");
        std::process::exit(1);
    }
}

async fn measure() -> Result<(), String> {
    let seconds = env_num("MEMORY_SECONDS", 2);
    let connections = env_num("MEMORY_CONNECTIONS", 16) as usize;
    let sizes: Vec<(usize, bool)> = std::env::var("MEMORY_LOADS")
        .unwrap_or_else(|_| "1024,1024s,102400".into())
        .split(',')
        .filter_map(|l| {
            let l = l.trim();
            let stream = l.ends_with('s');
            l.trim_end_matches('s').parse().ok().map(|n| (n, stream))
        })
        .collect();
    let settle = Duration::from_millis(env_num("MEMORY_SETTLE_MS", 1500));
    let concurrency: Vec<u32> = std::env::var("MEMORY_CONCURRENCY")
        .unwrap_or_else(|_| "2".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let names = std::env::var("MEMORY_VARIANTS").unwrap_or_else(|_| "plain,noop,sy".into());
    let mock = start_mock(0).await.map_err(|e| format!("mock: {e}"))?;
    let dir = switchyard_integration::envoy::repo_root().join(".work");
    let _ = std::fs::create_dir_all(&dir);
    let noop_path = dir.join(format!("noop-{}.wasm", std::process::id()));
    std::fs::write(&noop_path, NOOP_WASM).map_err(|e| format!("write {}: {e}", noop_path.display()))?;

    println!("| variant | conc | RSS MiB start | RSS MiB loaded | over baseline (loaded) | anon / file MiB | tcmalloc allocated MiB | tcmalloc free but held MiB | Wasm instances: linear memory MiB | requests / errors |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &c in &concurrency {
        let mut baseline: Option<u64> = None;
        for name in names.split(',').map(str::trim) {
            let v = variant(name, mock.port(), &noop_path)?;
            let env: Vec<(&str, &str)> = v.env.iter().map(|(k, x)| (k.as_str(), x.as_str())).collect();
            let e = Envoy::start_bootstrap(&v.boot, &format!("memory-{name}"), &env, c)?;
            tokio::time::sleep(settle).await;
            let start = sample(&e);
            let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
            headers.extend(v.headers.iter().cloned());
            let mut requests = 0;
            let mut errors = 0;
            for &(size, stream) in &sizes {
                let r = run(&LoadSpec {
                    addr: e.addr(),
                    path: "/v1/chat/completions".into(),
                    headers: headers.clone(),
                    body: chat_body(&v.model, size, stream),
                    stream,
                    connections,
                    duration: Duration::from_secs(seconds),
                    request_timeout: Duration::from_secs(10),
                })
                .await;
                requests += r.requests;
                errors += r.errors;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let loaded = sample(&e);
            let base = *baseline.get_or_insert(loaded.rss);
            println!(
                "| {name} | {c} | {:.1} | {:.1} | {:+.1} | {:.1} / {:.1} | {:.1} | {:.1} | {}: {:.1} | {requests} / {errors} |",
                mib(start.rss),
                mib(loaded.rss),
                mib(loaded.rss) - mib(base),
                mib(loaded.anon),
                mib(loaded.file),
                mib(loaded.allocated),
                mib(loaded.held_free),
                loaded.instances,
                mib(loaded.linear),
            );
            if std::env::var("MEMORY_DUMP").is_ok() {
                let name: String = name.chars().map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' }).collect();
                // The process's mappings and tcmalloc's own report, for a closer look.
                let tc = e.admin_get("/memory/tcmalloc").map(|(_, b)| b).unwrap_or_default();
                let _ = std::fs::write(dir.join(format!("tcmalloc-{name}-c{c}.txt")), tc);
                std::fs::copy(format!("/proc/{}/smaps", e.pid()), dir.join(format!("smaps-{name}-c{c}.txt")))
                    .map_err(|err| format!("smaps: {err}"))?;
            }
            drop(e);
        }
    }
    let _ = std::fs::remove_file(&noop_path);
    Ok(())
}

/// The next-cluster header a module that does not route (a no-op) needs for the routed route
/// (`without_plan_requirement`) to send its requests to the first provider cluster.
fn first_slot(cfg: &switchyard_integration::envoy::StackConfig) -> Vec<(String, String)> {
    let first = cfg.clusters.first().map(|c| c.name.as_str()).unwrap_or_default();
    vec![switchyard_integration::envoy::unplanned_token(first)]
}
