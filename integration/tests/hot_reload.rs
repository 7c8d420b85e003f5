//! Hot reload the way Istio delivers configuration: the Wasm filters' configurations arrive by
//! ECDS (here from files, as istio-agent hands them to Envoy), and a new catalog is swapped in
//! under load: non-streaming requests that fail over, long streams, plain requests. The decision
//! and per-attempt filters are updated one after the other, so for a while they hold different
//! configurations. No request fails; new requests follow the new catalog; an invalid catalog is
//! rejected with a log line naming the field while the previous one keeps serving; statistics
//! of endpoints the new catalog removed are pruned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::catalog_mocks::{start_catalog_mocks, CatalogMocks};
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{http_get, repo_root, wasm_path, Envoy};
use switchyard_integration::istio_sim::{
    gateway_config, istio_envoy, serve_extensions_from_files, test_secret, write_extension, Extensions,
};
use switchyard_integration::mock::MockProvider;
use switchyard_integration::oci::Image;

struct Setup {
    ca_file: String,
    digest: String,
    ports: BTreeMap<String, (String, u16)>,
    /// The mock metadata server of the catalog's token providers.
    metadata: Option<(String, u16)>,
    ecds: PathBuf,
}

impl Setup {
    /// The extension configs for a catalog (JSON of `catalog/switchyard.json`'s shape).
    fn extensions(&self, raw: &Value) -> Extensions {
        let c = self.local(&Catalog::parse(&raw.to_string()).unwrap());
        gateway_config(&c, &self.ca_file, &wasm_path(), &self.digest, &test_secret(&c)).unwrap().1
    }

    /// `c` pointed at the mock providers and the mock metadata server.
    fn local(&self, c: &Catalog) -> Catalog {
        let c = c.with_hosts(&self.ports);
        match &self.metadata {
            Some(addr) => c.with_metadata_server(addr.clone()),
            None => c,
        }
    }

    fn write(&self, ext: &Extensions, name: &str) {
        write_extension(&self.ecds, name, &ext[name]).unwrap();
    }
}

/// The shipped catalog with the debug header on and the test entry host.
fn catalog_a() -> Value {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(default_catalog_path()).unwrap()).unwrap();
    v["routing"]["debug_header"] = json!(true);
    v["deployment"]["istio"]["service_host"] = json!("switchyard.local");
    v
}

/// Catalog B: `together` no longer serves llama-4-maverick, and a new model exists.
fn catalog_b() -> Value {
    let mut v = catalog_a();
    let eps = v["models"]["meta-llama/llama-4-maverick"]["endpoints"].as_array_mut().unwrap();
    eps.retain(|e| e["provider"] != "together");
    v["models"]["openai/gpt-4.1-nano"] = json!({"endpoints": [
        {"provider": "openai", "upstream_model": "gpt-4.1-nano", "pricing": {"prompt": 0.1, "completion": 0.4}}]});
    v
}

fn counter(admin: std::net::SocketAddr, needle: &str) -> u64 {
    let (_, body) = http_get(admin, "/stats").unwrap_or((0, String::new()));
    body.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(": ").next().and_then(|v| v.trim().parse::<u64>().ok()))
        .sum()
}

/// Waits until Envoy has applied (or rejected) a new version of extension `name`.
fn wait_counter(admin: std::net::SocketAddr, needle: &str, above: u64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if counter(admin, needle) > above {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{needle} did not move past {above}");
}

async fn chat(addr: std::net::SocketAddr, id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", id)];
    h.extend_from_slice(extra);
    post_json(addr, "/v1/chat/completions", &h, &body).await.unwrap_or_else(|e| panic!("{id}: {e}"))
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

/// TLS mock providers for every provider of catalog A (certificates from a fresh test CA), and
/// the setup that points the catalog at them.
fn start_providers(rt: &tokio::runtime::Runtime, tag: &str) -> (Catalog, BTreeMap<String, MockProvider>, Setup) {
    let dir = repo_root().join(".work").join(format!("{tag}-{}", std::process::id()));
    let base = Catalog::parse(&catalog_a().to_string()).unwrap();
    let CatalogMocks { ca_file, providers, ports, metadata } = start_catalog_mocks(rt, &base, &dir).unwrap();
    let setup = Setup {
        ca_file: ca_file.to_string_lossy().into_owned(),
        digest: Image::from_module(&std::fs::read(wasm_path()).unwrap()).digest(),
        ports,
        metadata: metadata.map(|m| ("127.0.0.1".to_string(), m.addr.port())),
        ecds: dir.join("ecds"),
    };
    (base, providers, setup)
}

fn log_contains(dir: &Path, needle: &str) -> bool {
    std::fs::read_to_string(dir.join("envoy.log")).unwrap_or_default().contains(needle)
}

#[test]
fn catalog_swap_under_load_fails_no_request() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (base, providers, setup) = start_providers(&rt, "hot-reload");
    let local = setup.local(&base);
    let (mut boot, ext_a) =
        gateway_config(&local, &setup.ca_file, &wasm_path(), &setup.digest, &test_secret(&local)).unwrap();
    serve_extensions_from_files(&mut boot, &ext_a, &setup.ecds).unwrap();
    // No key in the environment: the keys come from the mounted Secret.
    let envoy = Envoy::start_binary(&istio_envoy(), &boot, "hot-reload", &[], 2).unwrap();
    let (addr, admin) = (envoy.addr(), envoy.admin);
    let maverick = "meta-llama/llama-4-maverick";

    // Catalog A: no nano model; together serves maverick and collects statistics.
    rt.block_on(async {
        let r = chat(addr, "a-nano", &[], json!({"model": "openai/gpt-4.1-nano", "messages": msg()})).await;
        assert_eq!(r.status, 400, "{}", r.text());
        for i in 0..3 {
            let r = chat(
                addr,
                &format!("a-mav-{i}"),
                &[],
                json!({"model": maverick, "messages": msg(), "provider": {"order": ["together"]}}),
            )
            .await;
            assert_eq!(r.header("x-switchyard-provider"), Some("together"), "{}", r.text());
        }
        let r = chat(
            addr,
            "a-debug",
            &[("x-switchyard-debug", "1")],
            json!({"model": maverick, "messages": msg(), "provider": {"order": ["together"]}}),
        )
        .await;
        let cands: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
        let together = cands.as_array().unwrap().iter().find(|c| c["endpoint"] == "together").unwrap();
        assert!(together["health"]["attempts"].as_u64().unwrap() >= 3, "{together}");
    });

    // Load: failovers (together 503 -> fireworks), long streams (2 s), plain requests.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..6 {
        let (stop, done, failures) = (Arc::clone(&stop), Arc::clone(&done), Arc::clone(&failures));
        tasks.push(rt.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("load-{w}-{n}");
                let (extra, body, stream) = match w % 3 {
                    0 => (vec![("x-mock-behavior", "together=503")], json!({"model": maverick, "messages": msg(), "provider": {"order": ["together", "fireworks"]}}), false),
                    1 => (vec![("x-mock-behavior", "fireworks=interval100+chunks20")], json!({"model": maverick, "messages": msg(), "stream": true, "provider": {"order": ["fireworks"]}}), true),
                    _ => (vec![], json!({"model": "openai/gpt-4.1-mini", "messages": msg()}), false),
                };
                let r = chat(addr, &id, &extra, body).await;
                let text = r.text();
                let ok = r.status == 200 && (!stream || text.trim_end().ends_with("data: [DONE]") && text.contains("tok19"));
                if !ok {
                    failures.lock().unwrap().push(format!("{id}: {} {}", r.status, text.chars().take(300).collect::<String>()));
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(800));
    let ext_b = setup.extensions(&catalog_b());
    // Per-attempt filter first: for a while the decision filter plans with A while attempts run
    // under B (together is gone from maverick there).
    let together_load = || {
        let all = providers["together"].received();
        all.iter().filter(|r| r.header("x-test-id").is_some_and(|t| t.starts_with("load-"))).count()
    };
    let before = counter(admin, "switchyard-upstream.config_reload");
    setup.write(&ext_b, "switchyard-upstream");
    wait_counter(admin, "switchyard-upstream.config_reload", before);
    let mixed_start = together_load();
    std::thread::sleep(Duration::from_millis(1500));
    let before = counter(admin, "switchyard-decision.config_reload");
    setup.write(&ext_b, "switchyard-decision");
    wait_counter(admin, "switchyard-decision.config_reload", before);
    let mixed_end = together_load();
    std::thread::sleep(Duration::from_millis(1500));
    let after_b = together_load();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        rt.block_on(t).unwrap();
    }
    let failures = failures.lock().unwrap().clone();
    let total = done.load(Ordering::Relaxed);
    assert!(failures.is_empty(), "{} of {total} requests failed during the swap: {failures:#?}", failures.len());
    eprintln!(
        "hot reload: {total} requests during the swap, none failed; {} plans made under A were carried out by per-attempt filters holding B",
        mixed_end - mixed_start
    );
    assert!(total >= 30, "too little load to mean anything: {total}");
    // While the decision filter still planned with A, per-attempt filters holding B carried
    // those plans out (together first, by name through its provider) ...
    assert!(mixed_end > mixed_start, "the mixed-configuration window was never exercised");
    // ... and once both held B nothing more was planned to together for maverick (at most the
    // requests already planned before the second reload).
    assert!(after_b - mixed_end <= 6, "together still planned under B: {}", after_b - mixed_end);

    // New requests follow B.
    rt.block_on(async {
        let r = chat(addr, "b-nano", &[], json!({"model": "openai/gpt-4.1-nano", "messages": msg()})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(providers["openai"].received_for("b-nano")[0].json()["model"], "gpt-4.1-nano");
        let r = chat(
            addr,
            "b-mav",
            &[],
            json!({"model": maverick, "messages": msg(), "provider": {"order": ["together", "deepinfra"]}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("deepinfra"));
        assert!(providers["together"].received_for("b-mav").is_empty());
    });

    // An invalid catalog is rejected with a log line naming the field; B keeps serving.
    let mut bad = catalog_b();
    bad["models"]["openai/gpt-4.1-nano"]["endpoints"][0]["quantization"] = json!("fp9");
    let mut ext_bad = ext_b.clone();
    let good_cfg =
        ext_b["switchyard-decision"].pointer("/typed_config/config/configuration/value").unwrap().as_str().unwrap();
    let mut bad_plugin: Value = serde_json::from_str(good_cfg).unwrap();
    bad_plugin["models"]["openai/gpt-4.1-nano"]["endpoints"][0]["quantization"] = json!("fp9");
    *ext_bad.get_mut("switchyard-decision").unwrap().pointer_mut("/typed_config/config/configuration/value").unwrap() =
        json!(bad_plugin.to_string());
    let before = counter(admin, "switchyard-decision.config_fail");
    setup.write(&ext_bad, "switchyard-decision");
    wait_counter(admin, "switchyard-decision.config_fail", before);
    assert!(
        log_contains(
            &envoy.dir,
            r#"invalid plugin configuration: models["openai/gpt-4.1-nano"].endpoints[0].quantization"#
        ),
        "no log line naming the field"
    );
    rt.block_on(async {
        let r = chat(addr, "bad-nano", &[], json!({"model": "openai/gpt-4.1-nano", "messages": msg()})).await;
        assert_eq!(r.status, 200, "the previous configuration must keep serving: {}", r.text());
    });

    // Back to A: together's maverick statistics were pruned when B loaded, so they start over.
    for name in ["switchyard-upstream", "switchyard-decision"] {
        let before = counter(admin, &format!("{name}.config_reload"));
        setup.write(&ext_a_for(&setup), name);
        wait_counter(admin, &format!("{name}.config_reload"), before);
    }
    rt.block_on(async {
        let r = chat(
            addr,
            "a2-debug",
            &[("x-switchyard-debug", "1")],
            json!({"model": maverick, "messages": msg(), "provider": {"order": ["together"]}}),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let cands: Value = serde_json::from_str(r.header("x-switchyard-candidates").unwrap()).unwrap();
        let together = cands.as_array().unwrap().iter().find(|c| c["endpoint"] == "together").unwrap();
        assert_eq!(together["health"]["attempts"], 0, "stale statistics survived the removal: {together}");
    });
    drop(envoy);
}

fn ext_a_for(setup: &Setup) -> Extensions {
    setup.extensions(&catalog_a())
}

/// A provider removed entirely while requests planned with it are in flight: the per-attempt
/// filter holding the new catalog cannot send a retry to it (its key is gone) and refuses the
/// attempt with a JSON 503. Envoy does not retry an upstream filter's local reply (and resetting
/// the attempt from Wasm resets the caller's stream too: measured), so that request ends there;
/// the README says to remove a provider from the models first. (A single-model plan's first
/// attempt is prepared and sent by the decision filter, with the catalog it planned with, on the
/// first-attempt cluster; a plan with a fallback model keeps the per-attempt filter on it.)
#[test]
fn attempt_for_a_removed_provider_is_never_sent() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (base, providers, setup) = start_providers(&rt, "hot-reload-removed");
    let (mut boot, ext_a) =
        gateway_config(&setup.local(&base), &setup.ca_file, &wasm_path(), &setup.digest, &test_secret(&base)).unwrap();
    serve_extensions_from_files(&mut boot, &ext_a, &setup.ecds).unwrap();
    // No key in the environment: the keys come from the mounted Secret.
    let envoy = Envoy::start_binary(&istio_envoy(), &boot, "hot-reload-removed", &[], 1).unwrap();

    // Catalog C: together is gone (provider and endpoints). Only the per-attempt filter has it
    // yet: the decision filter still plans with A.
    let mut c = catalog_a();
    c["providers"].as_object_mut().unwrap().remove("together");
    for m in c["models"].as_object_mut().unwrap().values_mut() {
        m["endpoints"].as_array_mut().unwrap().retain(|e| e["provider"] != "together");
    }
    c["models"].as_object_mut().unwrap().retain(|_, m| !m["endpoints"].as_array().unwrap().is_empty());
    // The auto router's task lists may name models that lost their only endpoint.
    c.as_object_mut().unwrap().remove("auto");
    let ext_c = setup.extensions(&c);
    let before = counter(envoy.admin, "switchyard-upstream.config_reload");
    setup.write(&ext_c, "switchyard-upstream");
    wait_counter(envoy.admin, "switchyard-upstream.config_reload", before);

    // Attempt 1 through the per-attempt filter (the plan has a fallback model).
    let r = rt.block_on(chat(
        envoy.addr(),
        "removed",
        &[],
        json!({"model": "meta-llama/llama-4-maverick", "models": ["meta-llama/llama-3.3-70b-instruct"],
               "messages": msg(), "provider": {"order": ["together", "fireworks"]}}),
    ));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "attempt_not_sent", "{}", r.text());
    assert!(providers["together"].received_for("removed").is_empty(), "nothing may reach a removed provider");
    // A retry planned for together after a first attempt on fireworks' first-attempt cluster.
    let r = rt.block_on(chat(
        envoy.addr(),
        "removed-retry",
        &[("x-mock-behavior", "fireworks=503")],
        json!({"model": "meta-llama/llama-4-maverick", "messages": msg(), "provider": {"order": ["fireworks", "together"]}}),
    ));
    assert_eq!(r.status, 503, "{}", r.text());
    // The refusal is the answer, as on a first attempt (not a failover Envoy cut short).
    assert_eq!(r.json()["error"]["code"], "attempt_not_sent", "{}", r.text());
    assert_eq!(providers["fireworks"].received_for("removed-retry").len(), 1);
    assert!(providers["together"].received_for("removed-retry").is_empty(), "nothing may reach a removed provider");
    assert!(log_contains(&envoy.dir, "the planned provider is no longer in the configuration"));
}
