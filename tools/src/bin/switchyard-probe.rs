//! `switchyard-probe`: where the full path's Envoy CPU per request goes, by variants of the
//! generated bootstrap (measurement only, not product configurations; `make bench` is the
//! benchmark). Each variant is its own Envoy (`--concurrency 1`); rounds are interleaved in a
//! rotated order; Envoy CPU per request comes from /proc; p50 and time to first byte at one
//! connection are measured after each loaded run.
//!
//! Variants (`PROBE_VARIANTS`, comma-separated, first = baseline; default plain,full,noup,wasmonly):
//! `plain` (router only), `full` (the generator's bootstrap), `floor_answer` (`floor` that also
//! holds and rewrites the answer), `floor` (plain plus the least a
//! Wasm body router does, integration/floor-module, built with `cargo build --release --target
//! wasm32-wasip1 --manifest-path integration/floor-module/Cargo.toml --target-dir target/floor`
//! or given as PROBE_FLOOR_WASM), `noup` (no per-attempt filter),
//! `wasmonly` (downstream Wasm only, static route),
//! `noopwasm` (`wasmonly` with a no-op proxy-wasm module: a Wasm filter's own cost),
//! `luaup` (a Lua upstream
//! hook instead of the per-attempt Wasm), `natfirst` (a native header_mutation instead of the
//! first-attempt clusters' Lua hook: what the hook costs), `nocomp` (no compressor), `noretry`
//! (no retry policy on the route), `noinject` (no credential_injector on the first-attempt
//! clusters), `noupmod` (no Switchyard per-attempt filter; the answer then names no attempt, so
//! the decision filter's records take another path too), `nomatcher` (a fixed first-attempt
//! cluster instead of the slot matcher), `nowiring` (`noretry`, `noinject`, `nomatcher` and
//! `nocomp` at once), `alt` /
//! `alt2` (the full path with the module at `PROBE_ALT_WASM` / `PROBE_ALT2_WASM`, e.g. other builds to compare).
//!
//! Env: PROBE_NATIVE (set: `full` and the variants built from it use the native module of `make
//! native` instead of the Wasm one), PROBE_SECONDS (3), PROBE_ROUNDS (5), PROBE_CONNECTIONS (16), PROBE_SIZE (1024),
//! PROBE_STREAM (set: SSE requests; needs PROBE_BENCH_MOCK), PROBE_BENCH_MOCK (set: `make
//! bench`'s mock instead of the fixed-answer one), PROBE_EXPERIMENT (set: one failing first
//! attempt without the per-attempt Wasm; prints what the provider received and what the retry's
//! filter saw of it).

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_integration::envoy::{bootstrap, plain_bootstrap, Build, ClusterSpec, Envoy, StackConfig};
use switchyard_tools::floor::{floor_bootstrap, floor_module};
use switchyard_tools::load::{run as run_spec, LoadResult, LoadSpec};

async fn run(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    connections: usize,
    duration: Duration,
) -> LoadResult {
    let stream = std::env::var("PROBE_STREAM").is_ok();
    run_spec(&LoadSpec {
        addr,
        path: path.into(),
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        body: body.to_vec(),
        stream,
        connections,
        duration,
        request_timeout: Duration::from_secs(10),
    })
    .await
}
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// A mock that answers every request with 429 and Retry-After: 7, and prints what it received.
async fn failing_mock() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { continue };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]);
                let head = head.split("\r\n\r\n").next().unwrap_or("").to_string();
                println!("failing mock received:\n{head}\n");
                let body = "{\"error\":{\"message\":\"slow down\"}}";
                let resp = format!("HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 7\r\ncontent-length: {}\r\n\r\n{}", body.len(), body);
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

/// A cheap mock: answers every request with one fixed chat completion (keeps nothing).
async fn mock() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    let body = json!({"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}).to_string();
    let resp =
        format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}", body.len(), body);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else { continue };
            let _ = s.set_nodelay(true);
            let resp = resp.clone();
            tokio::spawn(async move {
                let mut buf: Vec<u8> = Vec::with_capacity(8192);
                let mut tmp = [0u8; 8192];
                loop {
                    // Parse one request: headers, then content-length body.
                    loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                buf.drain(..end + 4 + len);
                                break;
                            }
                        }
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
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

fn drop_filters(boot: &mut Value, drop: impl Fn(&Value) -> bool) {
    let hcm = &mut boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    if let Some(filters) = hcm["http_filters"].as_array_mut() {
        filters.retain(|f| !drop(f));
    }
}

/// Takes the upstream HTTP filters whose name `drop` picks off every cluster.
fn drop_upstream_filters(boot: &mut Value, drop: impl Fn(&str) -> bool) {
    if let Some(clusters) = boot["static_resources"]["clusters"].as_array_mut() {
        for c in clusters {
            let opts =
                &mut c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
            if let Some(filters) = opts["http_filters"].as_array_mut() {
                filters.retain(|f| !f["name"].as_str().is_some_and(&drop));
            }
        }
    }
}

fn wasm_only_static_route(boot: &mut Value) {
    let hcm = &mut boot["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let route = &mut hcm["route_config"]["virtual_hosts"][0]["routes"][0];
    route["route"] = json!({"cluster": "p_fast", "timeout": "300s"});
}

/// The full path without one piece of the wiring around the module (`noretry`, `noinject`,
/// `noupmod`, `nomatcher`, `nocomp`).
fn strip_wiring_piece(piece: &str, b: &mut Value) {
    match piece {
        "noretry" => {
            // The full path without the route's retry policy: what retry state and the
            // request body Envoy keeps for a retry cost when the first attempt succeeds.
            let hcm = &mut b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
            if let Some(route) = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"].as_object_mut() {
                route.remove("retry_policy");
            }
        }
        "noinject" => {
            // The full path without the first-attempt clusters' credential_injector.
            drop_upstream_filters(b, |name| name == "envoy.filters.http.credential_injector");
        }
        "noupmod" => {
            // The full path without Switchyard's own per-attempt filters (the clusters keep
            // the credential injector and the codec): what the module's upstream role costs.
            drop_upstream_filters(b, |name| name.contains("wasm") || name.contains("dynamic_modules"));
        }
        "nomatcher" => {
            // The full path with the slot matcher replaced by the cheaper endpoint's
            // first-attempt cluster (the plan's usual first attempt): what the cluster
            // matcher costs.
            let hcm = &mut b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
            if let Some(route) = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"].as_object_mut() {
                route.remove("inline_cluster_specifier_plugin");
                route.insert("cluster".into(), json!("p_cheap-first"));
            }
        }
        "nocomp" => {
            drop_filters(b, |f| f["name"] == "envoy.filters.http.compressor");
        }
        other => panic!("not a wiring piece: {other}"),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
    rt.block_on(probe());
}

async fn probe() {
    let seconds = env_num("PROBE_SECONDS", 3);
    let rounds = env_num("PROBE_ROUNDS", 5) as usize;
    let connections = env_num("PROBE_CONNECTIONS", 16) as usize;
    let port = if std::env::var("PROBE_BENCH_MOCK").is_ok() {
        switchyard_tools::load::start_mock(0).await.expect("mock").port()
    } else {
        mock().await
    };
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
    let mut cfg = StackConfig::new(
        catalog,
        vec![ClusterSpec { name: "p_fast".into(), port }, ClusterSpec { name: "p_cheap".into(), port }],
        None,
    );
    if std::env::var("PROBE_NATIVE").is_ok() {
        cfg.build = Build::Native;
    }
    let full = bootstrap(&cfg);
    if std::env::var("PROBE_EXPERIMENT").is_ok() {
        return experiment(cfg).await;
    }
    let wanted = std::env::var("PROBE_VARIANTS").unwrap_or_else(|_| "plain,full,noup,wasmonly".into());
    let mut envoys: Vec<(String, Envoy)> = Vec::new();
    for v in wanted.split(',') {
        let boot = match v {
            "plain" => plain_bootstrap(&ClusterSpec { name: "provider".into(), port }, 0, 0),
            "full" => full.clone(),
            "floor" | "floor_answer" => {
                // Plain Envoy plus the least a Wasm body router does (integration/floor-module:
                // pause for the body, read it, write it back, set a header; `floor_answer` also
                // holds and rewrites the answer): what any filter of that shape costs here.
                let plain = plain_bootstrap(&ClusterSpec { name: "provider".into(), port }, 0, 0);
                floor_module()
                    .and_then(|m| floor_bootstrap(&plain, &m, v == "floor_answer"))
                    .unwrap_or_else(|e| panic!("floor: {e}"))
            }
            "noup" => {
                let mut b = full.clone();
                strip_upstream_filters(&mut b);
                b
            }
            "wasmonly" => {
                let mut b = full.clone();
                strip_upstream_filters(&mut b);
                wasm_only_static_route(&mut b);
                b
            }
            "luaup" => {
                // The first attempt's shape if it ran without the Wasm: a Lua upstream filter that
                // only notes the status and Retry-After in the request's dynamic metadata.
                let mut b = full.clone();
                if let Some(clusters) = b["static_resources"]["clusters"].as_array_mut() {
                    for c in clusters {
                        let opts = &mut c["typed_extension_protocol_options"]
                            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
                        if let Some(filters) = opts["http_filters"].as_array_mut() {
                            filters[0] = json!({"name": "envoy.filters.http.lua", "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                                "default_source_code": {"inline_string": "function envoy_on_response(h)\n  local s = h:headers():get(':status')\n  if s ~= '200' then h:streamInfo():dynamicMetadata():set('switchyard', 'a1', s .. ',' .. (h:headers():get('retry-after') or '')) end\nend\n"}
                            }});
                        }
                    }
                }
                b
            }
            "natfirst" => {
                // First-attempt clusters with a native header_mutation naming attempt 1 in place of
                // the Lua hook (header_to_metadata is not an upstream filter in Envoy 1.40, so a
                // failed attempt's status cannot be noted natively): what the hook costs.
                let mut b = full.clone();
                if let Some(clusters) = b["static_resources"]["clusters"].as_array_mut() {
                    for c in clusters.iter_mut().filter(|c| c["name"].as_str().is_some_and(|n| n.ends_with("-first"))) {
                        let opts = &mut c["typed_extension_protocol_options"]
                            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
                        opts["http_filters"] = json!([
                            {"name": "envoy.filters.http.header_mutation", "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
                                "mutations": {"response_mutations": [{"append": {"header": {"key": "x-switchyard-attempts", "value": "1"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}]}}},
                            {"name": "envoy.filters.http.upstream_codec", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
                        ]);
                    }
                }
                b
            }
            "noopwasm" => {
                // The decision-filter-only row with a no-op proxy-wasm module in Switchyard's
                // place: what a Wasm filter costs before any of Switchyard's code runs (its
                // callbacks, no pause, no host calls).
                let path = std::env::temp_dir().join(format!("switchyard-probe-noop-{}.wasm", std::process::id()));
                std::fs::write(&path, switchyard_integration::memory::NOOP_WASM).expect("write the no-op module");
                let mut c = cfg.clone();
                c.wasm = path;
                let mut b = bootstrap(&c);
                strip_upstream_filters(&mut b);
                wasm_only_static_route(&mut b);
                // Nothing names the first cluster: the static route matches every request.
                let hcm = &mut b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
                hcm["route_config"]["virtual_hosts"][0]["routes"][0]["match"] = json!({"prefix": "/"});
                b
            }
            "noretry" | "noinject" | "noupmod" | "nomatcher" | "nocomp" => {
                let mut b = full.clone();
                strip_wiring_piece(v, &mut b);
                b
            }
            "nowiring" => {
                // All four at once: what the wiring costs together.
                let mut b = full.clone();
                for piece in ["noretry", "noinject", "nomatcher", "nocomp"] {
                    strip_wiring_piece(piece, &mut b);
                }
                b
            }
            "alt" | "alt2" => {
                // The full path with another build of the module (PROBE_ALT_WASM, PROBE_ALT2_WASM).
                let var = if v == "alt" { "PROBE_ALT_WASM" } else { "PROBE_ALT2_WASM" };
                let mut c = cfg.clone();
                c.wasm = std::env::var(var).map(Into::into).unwrap_or(c.wasm);
                bootstrap(&c)
            }
            other => panic!("unknown variant {other}"),
        };
        let e = Envoy::start_bootstrap(&boot, &format!("probe-{v}"), &[], 1).expect("envoy");
        envoys.push((v.to_string(), e));
    }
    let body = switchyard_tools::load::chat_body(
        "bench/model",
        env_num("PROBE_SIZE", 1024) as usize,
        std::env::var("PROBE_STREAM").is_ok(),
    );
    let headers = [("content-type", "application/json"), ("authorization", "Bearer caller")];
    let path = "/v1/chat/completions";
    for (_, e) in &envoys {
        let r = run(e.addr(), path, &headers, &body, connections, Duration::from_secs(1)).await;
        if r.errors > 0 || r.requests == 0 {
            eprintln!("warm-up errors on {}: {} ok {}", e.port, r.errors, r.requests);
        }
    }
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); envoys.len()];
    let mut errs: Vec<u64> = vec![0; envoys.len()];
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); envoys.len()];
    let mut idle: Vec<Vec<f64>> = vec![Vec::new(); envoys.len()];
    let mut ttfb: Vec<Vec<f64>> = vec![Vec::new(); envoys.len()];
    for round in 0..rounds {
        // Rotate the order each round.
        for k in 0..envoys.len() {
            let i = (k + round) % envoys.len();
            let e = &envoys[i].1;
            let c0 = e.cpu_us();
            let r = run(e.addr(), path, &headers, &body, connections, Duration::from_secs(seconds)).await;
            errs[i] += r.errors;
            let c1 = e.cpu_us();
            cpu[i].push((c1 - c0) as f64 / r.requests.max(1) as f64);
            rps[i].push(r.rps());
            let r1 = run(e.addr(), path, &headers, &body, 1, Duration::from_secs(1)).await;
            idle[i].push(f64::from(r1.percentile_us(0.5)));
            ttfb[i].push(f64::from(r1.ttfb_percentile_us(0.5)));
        }
    }
    let base_cpu = median(cpu[0].clone());
    let base_idle = median(idle[0].clone());
    let base_ttfb = median(ttfb[0].clone());
    println!("| variant | CPU us/req | delta | min | rps | p50@1 | delta | ttfb@1 | delta | errors |");
    for (i, (name, _)) in envoys.iter().enumerate() {
        let c = median(cpu[i].clone());
        let m = cpu[i].iter().cloned().fold(f64::MAX, f64::min);
        let p = median(idle[i].clone());
        println!(
            "| {name} | {c:.1} | {:+.1} | {m:.1} | {:.0} | {p:.0} | {:+.0} | {:.0} | {:+.0} | {} |",
            c - base_cpu,
            median(rps[i].clone()),
            p - base_idle,
            median(ttfb[i].clone()),
            median(ttfb[i].clone()) - base_ttfb,
            errs[i]
        );
    }
}

/// The first attempt without the Wasm: p_fast (always 429) carries only a Lua upstream hook that
/// notes status and Retry-After in dynamic metadata; does the retry's Wasm filter (p_cheap) see
/// them? And what does a provider receive when no per-attempt filter ran?
async fn experiment(mut cfg: StackConfig) {
    let fail = failing_mock().await;
    cfg.clusters[0].port = fail;
    cfg.wasm = std::env::var("PROBE_ALT_WASM").map(Into::into).unwrap_or(cfg.wasm);
    let mut b = bootstrap(&cfg);
    if let Some(clusters) = b["static_resources"]["clusters"].as_array_mut() {
        for c in clusters.iter_mut().filter(|c| c["name"] == "p_fast") {
            let opts =
                &mut c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
            if let Some(filters) = opts["http_filters"].as_array_mut() {
                filters[0] = json!({"name": "envoy.filters.http.lua", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                    "default_source_code": {"inline_string": "function envoy_on_response(h)\n  local s = h:headers():get(':status')\n  if s ~= '200' then h:streamInfo():dynamicMetadata():set('switchyard', 'a1', s .. ',' .. (h:headers():get('retry-after') or '')) end\nend\n"}
                }});
            }
        }
    }
    let e = Envoy::start_bootstrap(&b, "probe-experiment", &[], 1).expect("envoy");
    let body = json!({"model": "bench/model", "messages": [{"role": "user", "content": "hi"}], "provider": {"order": ["fast", "cheap"]}}).to_string();
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-i",
            "-H",
            "content-type: application/json",
            "-H",
            "authorization: Bearer caller-secret",
            "-H",
            "x-request-id: r1",
        ])
        .arg("--data")
        .arg(&body)
        .arg(format!("http://{}/v1/chat/completions", e.addr()))
        .output()
        .expect("curl");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    std::thread::sleep(Duration::from_millis(300));
    let log = std::fs::read_to_string(e.dir.join("envoy.log")).unwrap_or_default();
    for l in log.lines().filter(|l| l.contains("experiment") || l.contains("lua")) {
        println!("{l}");
    }
}
