//! What a caller sees when the Wasm VM fails, and that the filter recovers: a build with the
//! test-only `fault-injection` feature traps the VM when a request carries
//! `x-switchyard-test-trap`. With the generated `failure_policy: FAIL_RELOAD`, the failing
//! request and any request while the VM is down get an OpenAI-style JSON 503 and reach no
//! provider; after the reload back-off the VM is recreated and requests are routed again.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use switchyard_integration::client::{post_json, Reply};
use switchyard_integration::envoy::{bootstrap, repo_root, ClusterSpec, Envoy, StackConfig};
use switchyard_integration::mock::{Behavior, MockProvider};

/// Builds the fault-injection variant into its own target directory (incremental: a no-op
/// when it is current) and returns its path.
fn fault_wasm() -> PathBuf {
    let dir = repo_root().join("target/fault-injection");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(repo_root())
        .args(["build", "--release", "--target", "wasm32-wasip1", "-p", "switchyard", "--features", "fault-injection"])
        .arg("--target-dir")
        .arg(&dir)
        .status();
    assert!(status.is_ok_and(|s| s.success()), "building the fault-injection module failed");
    dir.join("wasm32-wasip1/release/switchyard.wasm")
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    let (_, body) = envoy.admin_get("/stats").unwrap_or_default();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

fn assert_json_503(r: &Reply, what: &str) {
    assert_json_503_of(r, what, &["wasm_fail_stream"]);
}

fn assert_json_503_of(r: &Reply, what: &str, codes: &[&str]) {
    assert_eq!(r.status, 503, "{what}: {}", r.text());
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{what}: {:?}", r.headers);
    let e = &r.json()["error"];
    assert!(e["message"].is_string() && e["type"].is_string(), "{what}: {}", r.text());
    assert!(codes.iter().any(|c| e["code"] == *c), "{what}: {}", r.text());
}

#[test]
fn a_failed_vm_answers_json_503_reaches_no_provider_and_is_reloaded() {
    let wasm = fault_wasm();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let alpha = match rt.block_on(MockProvider::start("alpha", 0, Behavior::default())) {
        Ok(p) => p,
        Err(e) => panic!("mock: {e}"),
    };
    let catalog = json!({
        "providers": {"alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "key-alpha"}}},
        "models": {"vm/model": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}}
    });
    let mut cfg =
        StackConfig::new(catalog, vec![ClusterSpec { name: "c_alpha".into(), port: alpha.addr.port() }], None);
    cfg.wasm = wasm;
    // One worker, so the trapped VM is the one every later request meets.
    let envoy = match Envoy::start_bootstrap(&bootstrap(&cfg), "vm-failure", &[], 1) {
        Ok(e) => e,
        Err(e) => panic!("envoy: {e}"),
    };
    let body = json!({"model": "vm/model", "messages": [{"role": "user", "content": "hi"}]});
    let chat = |id: &str, extra: &[(&str, &str)]| {
        let mut h: Vec<(&str, &str)> = vec![("x-test-id", id)];
        h.extend_from_slice(extra);
        match rt.block_on(post_json(envoy.addr(), "/v1/chat/completions", &h, &body)) {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}"),
        }
    };

    let r = chat("before", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(stat(&envoy, "wasm.switchyard.vm_reload_success"), 0);

    // The trap: the caller gets a JSON 503 and no provider sees the request.
    let r = chat("trap", &[("x-switchyard-test-trap", "1"), ("authorization", "Bearer caller-secret")]);
    assert_json_503(&r, "trapping request");
    assert!(alpha.received_for("trap").is_empty());

    // Until the reload: JSON 503s that reach no provider (fail closed); then routed again.
    // Bounded: the reload back-off is 1 s; 100 tries 100 ms apart leave ample room.
    let mut served = None;
    for i in 0..100 {
        let id = format!("after-{i}");
        let r = chat(&id, &[]);
        if r.status == 200 {
            served = Some((id, r));
            break;
        }
        // Each plugin of the VM reloads on its own first request after the back-off: the
        // decision filter may be back while the attempt's filter (the first-attempt cluster's)
        // still fails its attempt, which the decision filter then reports.
        assert_json_503_of(&r, &id, &["wasm_fail_stream", "no_endpoint_available"]);
        assert!(alpha.received_for(&id).is_empty(), "{id} reached a provider while the VM was down");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (id, r) = served.unwrap_or_else(|| panic!("the filter never recovered; log:\n{}", envoy.log_tail()));
    assert_eq!(r.header("x-switchyard-provider"), Some("alpha"));
    let got = alpha.received_for(&id);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("authorization"), Some("Bearer key-alpha"), "routed by the reloaded filter");
    assert!(stat(&envoy, "wasm.switchyard.vm_reload_success") >= 1, "Envoy reloaded the VM");
    // And it keeps serving.
    for i in 0..5 {
        let r = chat(&format!("steady-{i}"), &[]);
        assert_eq!(r.status, 200, "{}", r.text());
    }

    // Envoy's own reply comes in the shape of the caller's API (local_reply_config mappers by
    // path): a trap on the Anthropic Messages path, then on a Google generateContent path.
    let post = |path: &str, id: &str| {
        let h = [("x-test-id", id), ("x-switchyard-test-trap", "1")];
        match rt.block_on(post_json(envoy.addr(), path, &h, &json!({"contents": []}))) {
            Ok(r) => r,
            Err(e) => panic!("{id}: {e}"),
        }
    };
    let wait_until_routed = |tag: &str| {
        for i in 0..100 {
            if chat(&format!("{tag}-{i}"), &[]).status == 200 {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the filter never recovered after {tag}");
    };
    let r = post("/v1/messages", "trap-anthropic");
    assert_eq!(r.status, 503, "{}", r.text());
    let v = r.json();
    assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some("api_error")), "{v}");
    assert_eq!(v["error"]["code"], "wasm_fail_stream", "{v}");
    wait_until_routed("after-anthropic");
    let r = post("/v1beta/models/vm/model:streamGenerateContent?alt=sse", "trap-google");
    assert_eq!(r.status, 503, "{}", r.text());
    let v = r.json();
    assert_eq!((v["error"]["code"].as_u64(), v["error"]["status"].as_str()), (Some(503), Some("UNAVAILABLE")), "{v}");
    assert_eq!(v["error"]["details"][0]["reason"], "wasm_fail_stream", "{v}");
    assert!(alpha.received_for("trap-anthropic").is_empty() && alpha.received_for("trap-google").is_empty());
}
