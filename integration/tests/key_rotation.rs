//! Provider keys by SDS from files (real Envoy): each provider cluster's `credential_injector`
//! reads its key from a file laid out as the kubelet mounts a Secret (`..data` -> a versioned
//! directory, one symlink per key). The keys are in neither the Wasm configuration nor Envoy's
//! environment. Replacing the Secret (an atomic swap of `..data`) under load rotates every key:
//! later attempts carry the new one, first attempts and failovers alike, and no request fails.

use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_integration::client::post_json;
use switchyard_integration::envoy::{bootstrap, keep_running, repo_root, ClusterSpec, Envoy, KeyFiles, StackConfig};
use switchyard_integration::mock::{MockProvider, Received};

/// (provider, its key's file name, the header it arrives in, the value prefix)
const PROVIDERS: [(&str, &str, &str, &str); 3] = [
    ("alpha", "SY_ROT_ALPHA", "authorization", "Bearer "),
    ("beta", "SY_ROT_BETA", "authorization", "Bearer "),
    ("delta", "SY_ROT_DELTA", "x-api-key", ""),
];

fn catalog() -> Value {
    let ep = |p: &str, price: f64| json!({"provider": p, "upstream_model": format!("{p}-up"), "pricing": {"prompt": price, "completion": price}});
    json!({
        "providers": {
            "alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"env": "SY_ROT_ALPHA"}},
            "beta": {"cluster": "c_beta", "authority": "beta.example", "credential": {"env": "SY_ROT_BETA"}},
            "delta": {"cluster": "c_delta", "authority": "delta.example",
                      "credential": {"header": "x-api-key", "prefix": "", "env": "SY_ROT_DELTA"}}
        },
        "models": {"m/rot": {"endpoints": [ep("alpha", 1.0), ep("beta", 2.0), ep("delta", 3.0)]}},
        "routing": {"default_policy": "price_weighted"}
    })
}

/// Writes version `v` of the Secret into `dir` and points `..data` at it atomically.
fn write_secret(dir: &Path, v: &str) {
    let version = dir.join(format!("..{v}"));
    std::fs::create_dir_all(&version).unwrap();
    for (p, file, _, _) in PROVIDERS {
        std::fs::write(version.join(file), format!("key-{p}-{v}")).unwrap();
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    symlink(format!("..{v}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for (_, file, _, _) in PROVIDERS {
        let link = dir.join(file);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(format!("..data/{file}"), &link).unwrap();
        }
    }
}

struct Stack {
    addr: SocketAddr,
    providers: Vec<MockProvider>,
    keys: PathBuf,
    config: String,
}

fn start() -> Stack {
    let base = repo_root().join(".work").join(format!("key-rotation-{}", std::process::id()));
    let keys = base.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    write_secret(&keys, "v1");
    let names = ["alpha", "beta", "delta"].map(String::from).to_vec();
    keep_running("key-rotation", names, move |providers| {
        let port = |n: &str| providers.iter().find(|p| p.name == n).map(|p| p.addr.port()).unwrap_or(0);
        let clusters =
            ["alpha", "beta", "delta"].iter().map(|n| ClusterSpec { name: format!("c_{n}"), port: port(n) }).collect();
        let mut cfg = StackConfig::new(catalog(), clusters, None);
        cfg.env_keys = PROVIDERS.iter().map(|p| p.1.to_string()).collect();
        cfg.key_files = Some(KeyFiles { keys_dir: keys.clone(), sds_dir: base.join("sds") });
        let config = bootstrap(&cfg).to_string();
        // No key in the environment: the filter could not read one if it tried.
        let envoy = Envoy::start_with_env(&cfg, "key-rotation", &[]).unwrap_or_else(|e| panic!("envoy: {e}"));
        let stack = Stack { addr: envoy.addr(), providers, keys: keys.clone(), config };
        (envoy, stack)
    })
}

/// The version of `provider`'s key this request carried (exactly one key, in its header, and
/// nothing of any other provider's).
fn version_of(who: &str, r: &Received) -> String {
    let (_, _, header, prefix) = PROVIDERS.iter().find(|p| p.0 == who).copied().unwrap();
    let value = r.header(header).unwrap_or_else(|| panic!("{who} got no {header}: {:?}", r.headers));
    let version = value
        .strip_prefix(&format!("{prefix}key-{who}-"))
        .unwrap_or_else(|| panic!("{who} got {header}: {value}"))
        .to_string();
    for (k, v) in &r.headers {
        if k != header {
            assert!(!v.contains("key-"), "{who} got a key in {k}: {v}");
        }
    }
    assert_eq!(r.internal_headers(), vec![], "{who}");
    version
}

#[tokio::test]
async fn keys_come_from_files_and_rotate_under_load_without_a_failed_request() {
    let s = Arc::new(start());
    // The keys are nowhere in Envoy's configuration: only file names are.
    for (p, _, _, _) in PROVIDERS {
        assert!(!s.config.contains(&format!("key-{p}-")), "{p}'s key in the configuration");
    }
    // The plugin configuration leaves the keys to the clusters, and the Wasm VM reads no key
    // variable (the key files' names are only in the SDS files).
    assert!(s.config.contains("injected"), "no injected credential in the plugin configuration");
    assert!(!s.config.contains("SY_ROT_"), "a key variable is still named in the configuration");

    // Load: first attempts on each provider's first-attempt cluster and failovers through the
    // per-attempt filter, from 4 tasks, until told to stop (bounded by the deadline too).
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (s, stop, sent) = (Arc::clone(&s), Arc::clone(&stop), Arc::clone(&sent));
        tasks.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                i += 1;
                let id = format!("rot-{t}-{i}");
                let (order, behavior) = match i % 3 {
                    0 => (json!(["alpha", "beta"]), "alpha=503"),
                    1 => (json!(["beta"]), ""),
                    _ => (json!(["delta", "alpha"]), ""),
                };
                let body = json!({"model": "m/rot", "messages": [{"role": "user", "content": "hi"}], "provider": {"order": order}});
                let mut h = vec![("x-test-id", id.as_str())];
                if !behavior.is_empty() {
                    h.push(("x-mock-behavior", behavior));
                }
                match post_json(s.addr, "/v1/chat/completions", &h, &body).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => failures.push(format!("{id}: {} {}", r.status, r.text())),
                    Err(e) => failures.push(format!("{id}: {e}")),
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    // Rotate once some requests went through on v1.
    while sent.load(Ordering::Relaxed) < 30 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    write_secret(&s.keys, "v2");
    let rotated_at = sent.load(Ordering::Relaxed);
    // Keep the load on until every provider has been seen with the new key (bounded).
    let seen_v2 = |s: &Stack| {
        PROVIDERS.iter().all(|(p, _, _, _)| {
            s.providers.iter().find(|m| m.name == *p).unwrap().received().iter().any(|r| version_of(p, r) == "v2")
        })
    };
    while !seen_v2(&s) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let settled_at = sent.load(Ordering::Relaxed);
    // What each provider had received when every one had seen the new key: all later attempts
    // must carry it (an attempt keyed just before the swap may still arrive around it).
    let mark: Vec<usize> = PROVIDERS
        .iter()
        .map(|(p, _, _, _)| s.providers.iter().find(|m| m.name == *p).unwrap().received().len())
        .collect();
    while sent.load(Ordering::Relaxed) < settled_at + 60 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "{} failed requests: {:?}", failures.len(), &failures[..failures.len().min(5)]);
    assert!(seen_v2(&s), "the new keys never arrived");
    assert!(rotated_at >= 30 && sent.load(Ordering::Relaxed) >= settled_at + 60, "the load ran on both keys");

    // Every attempt carried exactly its provider's key, v1 or v2: v1 before the swap, only v2
    // after every provider had seen it.
    for ((p, _, _, _), mark) in PROVIDERS.iter().zip(mark) {
        let got = s.providers.iter().find(|m| m.name == *p).unwrap().received();
        let versions: Vec<String> = got.iter().map(|r| version_of(p, r)).collect();
        assert_eq!(versions.first().map(String::as_str), Some("v1"), "{p}");
        assert!(versions.len() > mark, "{p} got nothing after the new key settled");
        assert!(
            versions[mark..].iter().all(|v| v == "v2"),
            "{p} got the old key after the new one settled: {versions:?}"
        );
    }
}
