//! The install paths of docs/istio.md, checked on the rendered manifests with the Istio model
//! (`istio_sim`): each chart and the sidecar assembles into a proxy (the keys patch admitted and
//! injected, its volumes found in the pod's namespace, the bootstrap override read, every
//! EnvoyFilter patch applied where it matches), the provider ServiceEntries reach only the
//! namespaces that use Switchyard, and a module istio-agent cannot fetch leaves the other hosts
//! of the listener alone (real Envoy 1.39.3, Istio 1.31's).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::client::{post_json, send, Reply};
use switchyard_integration::envoy::{http_get, remove_http_filter, wasm_path, Envoy};
use switchyard_integration::istio::{variant_manifests, Variant, RBAC_TYPE_URL};
use switchyard_integration::istio_sim::{
    clusters_from_manifests, envoy_filters_for, install_proxy, istio_envoy, serve_extensions_from_files,
    telemetries_for, test_secret, Install, MeshService, Proxy, APP_NAMESPACE,
};
use switchyard_integration::mock::{Behavior, MockProvider};
use switchyard_integration::tls::TestCa;

/// The repository's catalog, its sidecars in the modelled application namespace, its token
/// providers' metadata server a local mock.
fn catalog() -> Catalog {
    let mut c = Catalog::load(&default_catalog_path())
        .unwrap()
        .with_metadata_server(switchyard_integration::mock::gcp_metadata::process_wide());
    c.istio.sidecar_namespaces = vec![APP_NAMESPACE.into()];
    c
}

fn assemble(c: &Catalog, install: Install, services: &[MeshService], failed: &[&str]) -> Result<Proxy, String> {
    assemble_with_ca(c, install, services, failed, "/ca.pem")
}

fn assemble_with_ca(
    c: &Catalog,
    install: Install,
    services: &[MeshService],
    failed: &[&str],
    ca: &str,
) -> Result<Proxy, String> {
    let cfg = c.envoy_stack(wasm_path(), &BTreeMap::new());
    let m = variant_manifests(c, install.variant(), &cfg, "sha256:digest");
    install_proxy(&m, install, ca, &wasm_path(), "sha256:digest", &test_secret(c), services, failed)
}

/// Every install path assembles from the rendered manifests: the patch admitted (the sidecar's
/// container has an image), the injected or named proxy image, the ConfigMaps found in the
/// pod's namespace, the bootstrap override handed to Envoy, the decision filter in the chart's
/// listener (80 on the Helm chart, 8080 on istioctl's), the span attributes' Telemetry applying.
#[test]
fn every_install_path_assembles_from_the_rendered_manifests() {
    let c = catalog();
    for install in Install::ALL {
        let proxy = assemble(&c, install, &[], &[]).unwrap_or_else(|e| panic!("{install:?}: {e}"));
        let listener = &proxy.boot["static_resources"]["listeners"][0];
        assert_eq!(listener["name"], format!("0.0.0.0_{}", install.listener().0), "{install:?}");
        let filters: Vec<&str> = listener["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert!(filters.contains(&"switchyard-decision"), "{install:?}: {filters:?}");
        let proxy_container =
            proxy.pod["spec"]["containers"].as_array().unwrap().iter().find(|c| c["name"] == "istio-proxy").unwrap();
        assert!(proxy_container["image"].as_str().is_some_and(|i| i != "auto"), "{install:?}");
        assert_eq!(proxy.args.first().map(String::as_str), Some("--config-yaml"), "{install:?}");
        let ov: Value = serde_json::from_str(&proxy.args[1]).unwrap();
        assert!(ov["stats_config"]["stats_tags"].as_array().is_some_and(|t| !t.is_empty()), "{install:?}");
        let cfg = c.envoy_stack(wasm_path(), &BTreeMap::new());
        let m = variant_manifests(&c, install.variant(), &cfg, "d");
        assert_eq!(telemetries_for(&proxy.pod, &m.main).len(), 1, "{install:?}: the Telemetry must apply");
        assert_eq!(envoy_filters_for(&proxy.pod, &m.main).len(), 1, "{install:?}");
    }
}

/// The sidecar variant's provider ServiceEntries, DestinationRules and entry point are exported
/// to the namespaces that use Switchyard only: a proxy in another namespace builds no provider
/// cluster (its workloads keep their own TLS to the providers on 443) and no Switchyard route.
#[test]
fn sidecar_provider_entries_reach_only_the_switchyard_namespaces() {
    let mut c = catalog();
    c.istio.sidecar_namespaces = vec![APP_NAMESPACE.into(), "ml".into()];
    let cfg = c.envoy_stack(wasm_path(), &BTreeMap::new());
    let m = variant_manifests(&c, Variant::Sidecar, &cfg, "d");
    let all: Vec<Value> = m.providers.iter().chain(&m.main).cloned().collect();
    let openai = c.providers.iter().find(|p| p.slug == "openai").unwrap().cluster();
    for ns in [APP_NAMESPACE, "ml"] {
        let clusters = clusters_from_manifests(&all, ns, "/ca.pem").unwrap();
        assert!(clusters.iter().any(|x| x["name"] == openai), "{ns}");
        // One ConfigMap of each kind and the Telemetry in each application namespace.
        for (kind, name) in
            [("ConfigMap", "switchyard-sds"), ("ConfigMap", "switchyard-bootstrap"), ("Telemetry", "switchyard-genai")]
        {
            let n = m
                .main
                .iter()
                .filter(|r| r["kind"] == kind && r["metadata"]["name"] == name && r["metadata"]["namespace"] == ns)
                .count();
            assert_eq!(n, 1, "{kind} {name} in {ns}");
        }
    }
    let elsewhere = clusters_from_manifests(&all, "billing", "/ca.pem").unwrap();
    assert!(
        elsewhere.is_empty(),
        "exported to billing: {:?}",
        elsewhere.iter().map(|x| &x["name"]).collect::<Vec<_>>()
    );
    for r in all
        .iter()
        .filter(|r| ["ServiceEntry", "DestinationRule", "VirtualService"].contains(&r["kind"].as_str().unwrap()))
    {
        assert_eq!(r["spec"]["exportTo"], json!([APP_NAMESPACE, "ml"]), "{}", r["metadata"]["name"]);
    }
}

/// How the decision filter's extension config reaches Envoy in the failed-pull tests.
#[derive(Clone, Copy, Debug)]
enum DecisionConfig {
    /// istio-agent could not fetch the module and sent its deny-all RBAC filter instead.
    Substituted,
    /// Nothing arrived (istiod or the agent has not sent it).
    Missing,
    /// Not in the chain at all (a listener the patch missed, a hand-written configuration).
    Absent,
}

struct FailedPull {
    envoy: Envoy,
    other: MockProvider,
    _rt: tokio::runtime::Runtime,
}

/// The Helm gateway with another service on its listener, the decision filter's config
/// substituted or missing.
fn failed_pull(how: DecisionConfig, tag: &str) -> FailedPull {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let other = rt.block_on(MockProvider::start("vllm", 0, Behavior::default())).unwrap();
    let service = MeshService { host: "vllm.apps.svc.cluster.local".into(), port: other.addr.port() };
    // Another service whose workload is down (nothing listens on its port).
    let down = MeshService { host: DOWN_HOST.into(), port: common::closed_port() };
    let c = catalog();
    let failed: &[&str] = match how {
        DecisionConfig::Substituted => &["switchyard-decision"],
        DecisionConfig::Missing | DecisionConfig::Absent => &[],
    };
    let dir = switchyard_integration::envoy::work_dir(tag);
    let ca = dir.join("ca.pem");
    TestCa::new("failed pull CA").unwrap().write_pem(&ca).unwrap();
    let mut proxy =
        assemble_with_ca(&c, Install::HelmGateway, &[service, down], failed, &ca.to_string_lossy()).unwrap();
    if let DecisionConfig::Absent = how {
        assert_eq!(
            remove_http_filter(&mut proxy.boot, "switchyard-decision"),
            1,
            "the decision filter was in the chain"
        );
    }
    serve_extensions_from_files(&mut proxy.boot, &proxy.extensions, &dir).unwrap();
    if let DecisionConfig::Missing = how {
        // A discovery response without the resource: Envoy keeps waiting for it.
        let path = switchyard_integration::istio_sim::extension_path(&dir, "switchyard-decision");
        std::fs::write(path, json!({"version_info": "0", "resources": []}).to_string()).unwrap();
    }
    let envoy = Envoy::start_binary(&istio_envoy(), &proxy.boot, tag, &[], 1).unwrap();
    FailedPull { envoy, other, _rt: rt }
}

impl FailedPull {
    fn other_host(&self, id: &str) -> Reply {
        let h = [("host", "vllm.apps.svc.cluster.local"), ("x-test-id", id)];
        self._rt.block_on(send(self.envoy.addr(), "POST", "/generate", &h, b"{}")).unwrap()
    }

    fn down_host(&self, path: &str, extra: &[(&str, &str)]) -> Reply {
        let mut h = vec![("host", DOWN_HOST), ("content-type", "application/json")];
        h.extend_from_slice(extra);
        self._rt.block_on(send(self.envoy.addr(), "POST", path, &h, b"{}")).unwrap()
    }

    fn switchyard(&self, id: &str) -> Reply {
        let body = json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]});
        self._rt
            .block_on(post_json(
                self.envoy.addr(),
                "/v1/chat/completions",
                &[("host", "llm.switchyard.internal"), ("x-test-id", id)],
                &body,
            ))
            .unwrap()
    }

    fn post(&self, id: &str, path: &str, body: &str) -> Reply {
        self.post_with(id, path, body, &[])
    }

    fn post_with(&self, id: &str, path: &str, body: &str, extra: &[(&str, &str)]) -> Reply {
        let mut h = vec![("host", "llm.switchyard.internal"), ("x-test-id", id), ("content-type", "application/json")];
        h.extend_from_slice(extra);
        self._rt.block_on(send(self.envoy.addr(), "POST", path, &h, body.as_bytes())).unwrap()
    }

    fn ecds_dump(&self) -> Value {
        let (_, dump) = http_get(self.envoy.admin, "/config_dump?resource=ecds_filters").unwrap();
        serde_json::from_str(&dump).unwrap()
    }

    fn stats(&self) -> String {
        http_get(self.envoy.admin, "/stats").unwrap().1
    }
}

fn stat(text: &str, name: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// istio-agent's substitute for a module it cannot fetch (its deny-all RBAC filter under the
/// decision filter's name) is accepted by Envoy: the ECDS filter lists the RBAC type beside the
/// Wasm type. Without it Envoy rejects the update and the filter stays without a configuration,
/// which fails every stream of the listener (HTTP 500, measured). The other hosts of the listener
/// keep working: `other_hosts_keep_working_when_the_decision_filter_cannot_be_fetched`.
#[test]
fn envoy_accepts_istio_agents_substitute_for_an_unfetchable_module() {
    let p = failed_pull(DecisionConfig::Substituted, "istio-substitute");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while stat(&p.stats(), "extension_config_discovery.http_filter.switchyard-decision.update_attempt") == 0 {
        assert!(std::time::Instant::now() < deadline, "no ECDS update for switchyard-decision");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = p.stats();
    let prefix = "extension_config_discovery.http_filter.switchyard-decision";
    assert_eq!(stat(&stats, &format!("{prefix}.update_rejected")), 0, "Envoy rejected the substitute");
    assert_eq!(stat(&stats, &format!("{prefix}.config_reload")), 1);
    let dump = p.ecds_dump();
    let decision = dump["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ecds_filter"]["name"] == "switchyard-decision")
        .unwrap_or_else(|| panic!("no switchyard-decision in {dump}"));
    assert_eq!(decision["ecds_filter"]["typed_config"]["@type"], RBAC_TYPE_URL);
    assert_eq!(decision["ecds_filter"]["typed_config"]["rules_stat_prefix"], "wasm-default-deny");
    // Switchyard's route is refused, by the substitute (a 403 the listener's mappers turn into
    // a JSON 503 on Switchyard's host only).
    let r = p.switchyard("substitute-own");
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (503, Some("module_unavailable")), "{}", r.text());
    assert_eq!(stat(&p.stats(), &format!("{prefix}.rbac.wasm-default-deny.denied")), 1);
}

/// With the decision filter's configuration missing or replaced by istio-agent's deny-all
/// substitute, the other hosts of the gateway's listener keep working and Switchyard's route
/// answers a JSON 503: the decision filter is disabled on the HTTP connection manager and enabled
/// per Switchyard route (the shared generator's `mark_route`). Before that, the substitute denied
/// every host of the listener (403) and a missing configuration failed them all (500).
#[test]
fn other_hosts_keep_working_when_the_decision_filter_cannot_be_fetched() {
    for how in [DecisionConfig::Substituted, DecisionConfig::Missing] {
        let p = failed_pull(how, "istio-unfetched");
        let id = format!("unfetched-other-{how:?}");
        let r = p.other_host(&id);
        assert_eq!(r.status, 200, "{how:?}: another host failed: {} {}", r.status, r.text());
        assert_eq!(p.other.received_for(&id).len(), 1, "{how:?}");
        let r = p.switchyard(&format!("unfetched-own-{how:?}"));
        assert_eq!(r.status, 503, "{how:?}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "module_unavailable", "{how:?}: {}", r.text());
        assert!(
            r.header("content-type").is_some_and(|c| c.starts_with("application/json")),
            "{how:?}: {:?}",
            r.headers
        );
        assert!(r.json()["error"]["message"].is_string(), "{how:?}: {}", r.text());
        // Anthropic and Google callers get the refusal in their API's shape.
        let r = p.post(&format!("unfetched-anthropic-{how:?}"), "/v1/messages", ANTHROPIC_BODY);
        assert_eq!(r.status, 503, "{how:?}: {}", r.text());
        let v = r.json();
        assert_eq!(
            (v["type"].as_str(), v["error"]["type"].as_str()),
            (Some("error"), Some("api_error")),
            "{how:?}: {v}"
        );
        assert_eq!(v["error"]["code"], "module_unavailable", "{how:?}: {v}");
        let r = p.post(&format!("unfetched-google-{how:?}"), GOOGLE_PATH, GOOGLE_BODY);
        assert_eq!(r.status, 503, "{how:?}: {}", r.text());
        let v = r.json();
        assert_eq!(
            (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
            (Some(503), Some("UNAVAILABLE")),
            "{how:?}: {v}"
        );
        assert_eq!(v["error"]["details"][0]["reason"], "module_unavailable", "{how:?}: {v}");
    }
}

/// A service of the gateway's listener that no Switchyard manifest names, its workload down.
const DOWN_HOST: &str = "down.apps.svc.cluster.local";

/// A host of the gateway's listener that no Switchyard manifest names, its service down, answers
/// Envoy's own text/plain 503 untouched (no JSON, no `vary`, no gzip), whatever API its path
/// looks like and with or without `accept-encoding: gzip`, while on the same listener
/// Switchyard's routes refuse a failed module pull in each caller's API shape: the local-reply
/// mappers the EnvoyFilter merges into the connection manager act on Switchyard's marked routes
/// only.
#[test]
fn a_host_declared_nowhere_keeps_envoys_own_503_beside_a_failed_pull() {
    for how in [DecisionConfig::Substituted, DecisionConfig::Missing] {
        let p = failed_pull(how, "istio-declared-nowhere");
        for accept in [&[][..], &[("accept-encoding", "gzip")][..]] {
            for path in ["/v1/chat/completions", "/v1/messages", GOOGLE_PATH, "/generate"] {
                let r = p.down_host(path, accept);
                let what = format!("{how:?} {path} {accept:?}");
                assert_eq!((r.status, r.header("content-type")), (503, Some("text/plain")), "{what}: {:?}", r.headers);
                assert_eq!((r.header("vary"), r.header("content-encoding")), (None, None), "{what}: {:?}", r.headers);
                assert!(r.text().starts_with("upstream connect error"), "{what}: {}", r.text());
            }
            let id = format!("declared-nowhere-{how:?}");
            for (path, body, api) in [
                ("/v1/chat/completions", r#"{"model": "openai/gpt-4.1-mini", "messages": []}"#, "openai"),
                ("/v1/messages", ANTHROPIC_BODY, "anthropic"),
                (GOOGLE_PATH, GOOGLE_BODY, "google"),
                // Google paths beyond generateContent are Google's too.
                ("/v1beta/models/google/gemini-2.5-flash:countTokens", GOOGLE_BODY, "google"),
            ] {
                let r = p.post_with(&id, path, body, accept);
                let what = format!("{how:?} {path} {accept:?}");
                assert_eq!((r.status, r.header("content-type")), (503, Some("application/json")), "{what}");
                let v = r.json();
                let code = match api {
                    "anthropic" => v["error"]["code"].as_str().filter(|_| v["type"] == "error"),
                    "google" => v["error"]["details"][0]["reason"].as_str().filter(|_| v["error"]["code"] == 503),
                    _ => v["error"]["code"].as_str().filter(|_| v.get("type").is_none()),
                };
                assert_eq!(code, Some("module_unavailable"), "{what}: {v}");
            }
        }
    }
}

const ANTHROPIC_BODY: &str =
    r#"{"model": "anthropic/claude-sonnet-4.5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}"#;
const GOOGLE_PATH: &str = "/v1beta/models/google/gemini-2.5-flash:generateContent";
const GOOGLE_BODY: &str = r#"{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}"#;

/// On the Helm gateway with the decision filter absent from the chain, its module missing or
/// replaced by istio-agent's substitute, a caller who forges the next-cluster token of every
/// provider cluster (first-attempt ones included) reaches none of them: each gets a JSON error
/// (the marked 404 without the filter, the 503 without its module), no provider cluster sends a
/// request.
#[test]
fn forged_tokens_reach_no_provider_on_the_helm_gateway_without_the_decision_filter() {
    for how in [DecisionConfig::Absent, DecisionConfig::Substituted, DecisionConfig::Missing] {
        let p = failed_pull(how, "istio-forged");
        let stats = p.stats();
        let clusters: Vec<String> = stats
            .lines()
            .filter_map(|l| l.strip_prefix("cluster.")?.strip_suffix(".upstream_rq_total: 0").map(str::to_string))
            .filter(|c| c.starts_with("outbound|443|"))
            .collect();
        assert!(clusters.len() >= 8 && clusters.iter().any(|c| c.contains("|first|")), "{how:?}: {clusters:?}");
        for c in &clusters {
            // The token the routed route's matcher knows (keyed on istio-proxy).
            let key = Catalog::load(&default_catalog_path()).unwrap().istio.handoff_key;
            let token = switchyard::protocol::slots::keyed_slot_token(&key, c);
            let body = json!({"model": "openai/gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]});
            let h =
                [("host", "llm.switchyard.internal"), ("x-test-id", "forged"), ("x-switchyard-next", token.as_str())];
            let r = p._rt.block_on(post_json(p.envoy.addr(), "/v1/chat/completions", &h, &body)).unwrap();
            let expected = match how {
                DecisionConfig::Absent => (404, Some("not_found")),
                _ => (503, Some("module_unavailable")),
            };
            assert_eq!((r.status, r.json()["error"]["code"].as_str()), expected, "{how:?} {c}: {}", r.text());
        }
        let after = p.stats();
        for c in &clusters {
            assert_eq!(stat(&after, &format!("cluster.{c}.upstream_rq_total")), 0, "{how:?}: {c}");
        }
    }
}
