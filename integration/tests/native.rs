//! The native build (an Envoy dynamic module, `make native`): a panic in a hook never reaches
//! Envoy (the caller gets a JSON error, the module keeps serving), and the one library loads and
//! fails over under load in every Envoy release of the matrix. The routing tests run on it too:
//! `SWITCHYARD_BUILD=native` with the core test files (`make integration` does).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{
    bootstrap, envoy_release, http_get, native_path, repo_root, Build, ClusterSpec, Envoy, StackConfig, ENVOY_MATRIX,
};
use switchyard_integration::mock::{Behavior, MockProvider};

/// Builds the fault-injection variant of the native module into its own target directory
/// (incremental: a no-op when it is current) and returns its path.
fn fault_module() -> PathBuf {
    let dir = repo_root().join("target/fault-injection");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(repo_root())
        .args(["build", "--profile", "native", "--lib", "-p", "switchyard", "--features", "native,fault-injection"])
        .arg("--target-dir")
        .arg(&dir)
        .status();
    assert!(status.is_ok_and(|s| s.success()), "building the fault-injection module failed");
    dir.join("native/libswitchyard.so")
}

fn catalog() -> Value {
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"value": "key-beta"}}
        },
        "models": {"n/model": {"endpoints": [
            {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}},
            {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}}
        ]}},
        "routing": {"debug_header": true}
    })
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    let (_, body) = envoy.admin_get("/stats").unwrap_or_default();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}

fn stack_config(module: PathBuf, alpha: &MockProvider, beta: &MockProvider) -> StackConfig {
    let clusters = vec![
        ClusterSpec { name: "c_alpha".into(), port: alpha.addr.port() },
        ClusterSpec { name: "c_beta".into(), port: beta.addr.port() },
    ];
    let mut cfg = StackConfig::new(catalog(), clusters, None);
    cfg.build = Build::Native;
    cfg.native = module;
    cfg
}

#[test]
fn a_panicking_hook_answers_json_in_the_callers_shape_and_envoy_keeps_serving() {
    let module = fault_module();
    let rt = runtime();
    let start = |name: &str| match rt.block_on(MockProvider::start(name, 0, Behavior::default())) {
        Ok(p) => p,
        Err(e) => panic!("mock {name}: {e}"),
    };
    let (alpha, beta) = (start("alpha"), start("beta"));
    let cfg = stack_config(module, &alpha, &beta);
    // One worker: the request after the panic meets the same thread and module state.
    let envoy = match Envoy::start_bootstrap(&bootstrap(&cfg), "native-panic", &[], 1) {
        Ok(e) => e,
        Err(e) => panic!("envoy: {e}"),
    };
    let post = |id: &str, path: &str, body: &Value, extra: &[(&str, &str)]| -> Reply {
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", id)];
        h.extend_from_slice(extra);
        match rt.block_on(post_json(envoy.addr(), path, &h, body)) {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}\n{}", envoy.log_tail()),
        }
    };
    let chat = json!({"model": "n/model", "messages": [{"role": "user", "content": "hi"}]});
    let r = post("before", "/v1/chat/completions", &chat, &[]);
    assert_eq!(r.status, 200, "{}", r.text());

    // The panic: a JSON 500 in OpenAI's shape, no provider reached.
    let trap = [("x-switchyard-test-trap", "1")];
    let r = post("trap", "/v1/chat/completions", &chat, &trap);
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{:?}", r.headers);
    assert_eq!(r.json()["error"]["type"], "server_error", "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "internal_error", "{}", r.text());
    assert!(alpha.received_for("trap").is_empty() && beta.received_for("trap").is_empty());
    // In Anthropic's shape on the Messages API.
    let messages = json!({"model": "n/model", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let r = post("trap-anthropic", "/v1/messages", &messages, &trap);
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.json()["type"], "error", "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "api_error", "{}", r.text());

    // Envoy survived, counted both, and the same worker routes again at once.
    let (status, _) = http_get(envoy.admin, "/ready").unwrap_or_default();
    assert_eq!(status, 200, "Envoy is gone:\n{}", envoy.log_tail());
    assert_eq!(stat(&envoy, "wasmcustom.switchyard.native_panics_total.hook.request_headers"), 2);
    for i in 0..5 {
        let id = format!("after-{i}");
        let r = post(&id, "/v1/chat/completions", &chat, &[]);
        assert_eq!(r.status, 200, "{id}: {}", r.text());
        assert!(matches!(r.header("x-switchyard-provider"), Some("alpha" | "beta")), "{id}");
    }
}

/// The same library in every Envoy release of the matrix: 200 concurrent requests that all
/// start on a failing provider fail over and are served, attempts are counted under the Wasm
/// build's stat names, and the shared statistics saw every attempt (process memory, all workers).
#[test]
fn one_library_loads_and_fails_over_under_load_in_every_envoy_release() {
    let module = native_path();
    assert!(module.exists(), "{} is missing: run `make native`", module.display());
    let rt = runtime();
    for version in ENVOY_MATRIX {
        let binary = envoy_release(version);
        assert!(binary.exists(), "Envoy {version} is not installed: run `make envoy-matrix`");
        let start = |name: &str| match rt.block_on(MockProvider::start(name, 0, Behavior::default())) {
            Ok(p) => p,
            Err(e) => panic!("mock {name}: {e}"),
        };
        let (alpha, beta) = (start("alpha"), start("beta"));
        let cfg = stack_config(module.clone(), &alpha, &beta);
        let envoy = match Envoy::start_binary(&binary, &bootstrap(&cfg), "native-matrix", &[], 2) {
            Ok(e) => e,
            Err(e) => panic!("Envoy {version}: {e}"),
        };
        let addr = envoy.addr();
        let body = Arc::new(json!({"model": "n/model", "messages": [{"role": "user", "content": "hi"}],
            "provider": {"order": ["alpha", "beta"]}}));
        let replies: Vec<(String, Reply)> = rt.block_on(async {
            let tasks: Vec<_> = (0..200)
                .map(|i| {
                    let body = Arc::clone(&body);
                    tokio::spawn(async move {
                        let id = format!("{version}-{i}");
                        let h = [("x-test-id", id.as_str()), ("x-mock-behavior", "alpha=503")];
                        let r = post_json(addr, "/v1/chat/completions", &h, &body).await;
                        (id, r)
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                match t.await {
                    Ok((id, Ok(r))) => out.push((id, r)),
                    Ok((id, Err(e))) => panic!("{id}: {e}"),
                    Err(e) => panic!("task: {e}"),
                }
            }
            out
        });
        for (id, r) in &replies {
            assert_eq!(r.status, 200, "Envoy {version} {id}: {}", r.text());
            assert_eq!(r.header("x-switchyard-provider"), Some("beta"), "{id}");
            assert_eq!(r.header("x-switchyard-attempts"), Some("2"), "{id}");
        }
        let attempts = |endpoint: &str, outcome: &str| {
            stat(
                &envoy,
                &format!("wasmcustom.switchyard.attempts_total.model.n/model.endpoint.{endpoint}.gen_ai_provider_name.{endpoint}.outcome.{outcome}"),
            )
        };
        // Every first attempt is counted once, by what happened to it: alpha's 503 for each
        // request alpha received, no response for the others (200 new connections at once to
        // the mock: Envoy sometimes fails to connect some of them, and retries on beta).
        let answered = (0..200).filter(|i| !alpha.received_for(&format!("{version}-{i}")).is_empty()).count() as u64;
        assert_eq!(
            attempts("alpha", "server_error"),
            answered,
            "Envoy {version}: 503s against requests alpha received"
        );
        assert_eq!(
            attempts("alpha", "no_response"),
            200 - answered,
            "Envoy {version}: the attempts alpha never received"
        );
        assert_eq!(attempts("beta", "success"), 200, "Envoy {version}");
        // Prometheus: the Wasm build's series (the runtime flag strips the namespace); its labels
        // in the name's order.
        let prom = envoy.admin_get("/stats/prometheus").map(|r| r.1).unwrap_or_default();
        let line = r#"switchyard_attempts_total{model="n/model",endpoint="beta",gen_ai_provider_name="beta",outcome="success"} 200"#;
        assert!(prom.lines().any(|l| l == line), "Envoy {version}: no {line}");
        // Both workers wrote alpha's statistics: the debug header shows all 200 attempts.
        let h = [("x-test-id", "stats"), ("x-switchyard-debug", "1")];
        let r = match rt.block_on(post_json(addr, "/v1/chat/completions", &h, &body)) {
            Ok(r) => r,
            Err(e) => panic!("stats: {e}"),
        };
        let text = r.header("x-switchyard-candidates").unwrap_or_default().to_string();
        let candidates: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let alpha_health = candidates
            .as_array()
            .and_then(|c| c.iter().find(|x| x["endpoint"] == "alpha"))
            .map(|x| x["health"]["attempts"].clone());
        assert_eq!(alpha_health, Some(json!(200)), "Envoy {version}: {text}");
        drop(envoy);
    }
}

/// A listener update (LDS from a file) swaps the decision filter's configuration under the
/// module: the old one is destroyed once its listener drained (its tick thread stopped, its
/// scheduler deleted, stats no longer recorded through it), and the new catalog serves.
#[test]
fn a_listener_update_replaces_the_configuration_and_the_old_one_is_destroyed() {
    let rt = runtime();
    let start = |name: &str| match rt.block_on(MockProvider::start(name, 0, Behavior::default())) {
        Ok(p) => p,
        Err(e) => panic!("mock {name}: {e}"),
    };
    let (alpha, beta) = (start("alpha"), start("beta"));
    let mut cfg = stack_config(native_path(), &alpha, &beta);
    cfg.listener_port = switchyard_integration::mesh::free_port().unwrap_or_else(|e| panic!("port: {e}"));
    let dir = switchyard_integration::envoy::work_dir("native-lds");
    let lds = dir.join("lds.json");
    let write_lds = |cfg: &StackConfig| {
        let boot = bootstrap(cfg);
        let mut listener = boot["static_resources"]["listeners"][0].clone();
        listener["@type"] = json!("type.googleapis.com/envoy.config.listener.v3.Listener");
        let tmp = dir.join("lds.json.tmp");
        std::fs::write(&tmp, json!({"resources": [listener]}).to_string()).unwrap();
        std::fs::rename(&tmp, &lds).unwrap();
    };
    write_lds(&cfg);
    let mut boot = bootstrap(&cfg);
    boot["static_resources"]["listeners"] = json!([]);
    boot["dynamic_resources"] =
        json!({"lds_config": {"path_config_source": {"path": lds.to_string_lossy()}, "resource_api_version": "V3"}});
    let args = ["--drain-time-s".to_string(), "1".to_string(), "--drain-strategy".to_string(), "immediate".to_string()];
    let envoy = Envoy::start_binary_with_args(
        &switchyard_integration::envoy::envoy_binary(),
        &boot,
        "native-lds",
        &[],
        2,
        &args,
    )
    .unwrap_or_else(|e| panic!("envoy: {e}"));
    let chat = |id: &str, model: &str| -> Reply {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        match rt.block_on(post_json(envoy.addr(), "/v1/chat/completions", &[("x-test-id", id)], &body)) {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}"),
        }
    };
    assert_eq!(chat("old", "n/model").status, 200);
    assert_ne!(chat("old-new-model", "n/new").status, 200, "not in the first catalog");

    // The new catalog: one more model.
    cfg.plugin_config["models"]["n/new"] =
        json!({"endpoints": [{"provider": "beta", "pricing": {"prompt": 1, "completion": 1}}]});
    write_lds(&cfg);
    let mut updated = false;
    for i in 0..100 {
        if chat(&format!("poll-{i}"), "n/new").status == 200 {
            updated = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(updated, "the new catalog never served:\n{}", envoy.log_tail());
    // The old listener drains (1 s) and its filter configurations are destroyed.
    let log = || std::fs::read_to_string(envoy.dir.join("envoy.log")).unwrap_or_default();
    let mut destroyed = false;
    for _ in 0..100 {
        if log().contains("a decision filter configuration was removed") {
            destroyed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(destroyed, "the old configuration was never destroyed:\n{}", envoy.log_tail());
    // Still serving, stats recorded through the new configuration, no panic.
    let served = |e: &Envoy| stat(e, "wasmcustom.switchyard.requests_total.result.served");
    let before = served(&envoy);
    for i in 0..5 {
        let r = chat(&format!("after-{i}"), "n/model");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(served(&envoy), before + 5);
    assert!(!log().contains("switchyard: panic in"), "{}", envoy.log_tail());
}
