//! The Istio manifests rendered from the catalog, run in real Envoy on each install path
//! (`istio_sim::Install`: the Helm `gateway` chart, istioctl's `istio-egress` chart, an
//! application sidecar): the keys patch admitted and injected as Kubernetes and Istio would,
//! the volumes mounted from the pod's namespace, istio-agent's bootstrap override, clusters built
//! from the rendered ServiceEntries and DestinationRules, the EnvoyFilters that select the pod
//! applied with istiod's semantics, extension configs by ECDS. Requests then go through it to
//! HTTPS mock providers: routed, failed over across provider clusters, unrouted ones refused. A
//! single-model plan's first attempt goes to the provider's first-attempt cluster (Istio's
//! cluster of the DestinationRule subset `first`), without the per-attempt Wasm.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{mpsc, OnceLock};

use serde_json::{json, Value};
use switchyard::protocol::slots::{keyed_slot_token, slot_token};
use switchyard_integration::catalog::{default_catalog_path, Catalog};
use switchyard_integration::catalog_mocks::{start_catalog_mocks, CatalogMocks};
use switchyard_integration::client::{post_json, send, Reply};
use switchyard_integration::envoy::{http_get, repo_root, wasm_path, Envoy};
use switchyard_integration::istio_sim::{
    gateway_config, install_config, istio_envoy, serve_extensions_from_files, telemetries_for, test_secret, Install,
    MeshService, APP_NAMESPACE,
};
use switchyard_integration::mock::{Behavior, MockProvider};
use switchyard_integration::oci::Image;

struct Stack {
    addr: SocketAddr,
    admin: SocketAddr,
    providers: BTreeMap<String, MockProvider>,
    /// The catalog pointed at the mocks, and what a second proxy needs to reach them.
    local: Catalog,
    ca_file: String,
    digest: String,
    dir: std::path::PathBuf,
}

static STACK: OnceLock<Stack> = OnceLock::new();

fn stack() -> &'static Stack {
    STACK.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            let catalog = Catalog::load(&default_catalog_path()).unwrap();
            let dir = repo_root().join(".work").join(format!("istio-gateway-{}", std::process::id()));
            let mocks = start_catalog_mocks(&rt, &catalog, &dir).unwrap();
            let mut local = mocks.local(&catalog);
            let CatalogMocks { ca_file, providers, .. } = mocks;
            local.istio.service_host = "switchyard.local".into();
            local.istio.sidecar_namespaces = vec![APP_NAMESPACE.into()];
            let module = std::fs::read(wasm_path()).unwrap();
            let digest = Image::from_module(&module).digest();
            // istioctl's egress gateway (not injected, listener 8080): the keys patch, istiod
            // (Istio-shaped gateway, EnvoyFilter patches) and istio-agent (bootstrap override,
            // digest check, local module). The other install paths run in their own tests.
            let mut proxy = install_config(
                &local,
                Install::IstioctlGateway,
                &ca_file.to_string_lossy(),
                &wasm_path(),
                &digest,
                &test_secret(&local),
                &[],
            )
            .unwrap();
            serve_extensions_from_files(&mut proxy.boot, &proxy.extensions, &dir.join("ecds")).unwrap();
            // No key in the environment: the keys come from the mounted Secret. The metrics'
            // label rules come from the bootstrap override the keys patch mounts.
            assert!(!proxy.args.is_empty(), "no bootstrap override on the istioctl gateway");
            let envoy =
                Envoy::start_binary_with_args(&istio_envoy(), &proxy.boot, "istio-gateway", &[], 2, &proxy.args)
                    .unwrap();
            tx.send(Stack {
                addr: envoy.addr(),
                admin: envoy.admin,
                providers,
                local,
                ca_file: ca_file.to_string_lossy().into_owned(),
                digest,
                dir,
            })
            .unwrap();
            let _keep = (envoy, rt);
            loop {
                std::thread::park();
            }
        });
        rx.recv().expect("Istio-shaped stack failed to start (see panic above)")
    })
}

async fn chat(test_id: &str, extra: &[(&str, &str)], body: Value) -> Reply {
    let mut h = vec![("x-test-id", test_id), ("authorization", "Bearer caller-secret")];
    h.extend_from_slice(extra);
    post_json(stack().addr, "/v1/chat/completions", &h, &body).await.unwrap()
}

fn msg() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

/// A counter from an Envoy's admin (0 when absent). Istio's cluster names hold `|`, so the
/// whole list is read rather than a regex filter.
fn stat(admin: SocketAddr, name: &str) -> u64 {
    let (_, body) = http_get(admin, "/stats").unwrap();
    body.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Requests a provider's cluster (`first`: its first-attempt cluster) sent on an Envoy.
fn cluster_requests(admin: SocketAddr, slug: &str, first: bool) -> u64 {
    let p = stack().local.providers.iter().find(|p| p.slug == slug).unwrap();
    let cluster = if first { p.first_attempt_cluster() } else { p.cluster() };
    stat(admin, &format!("cluster.{cluster}.upstream_rq_total"))
}

/// The `switchyard_attempts_total` metric of an endpoint with an outcome, over every model (this
/// bootstrap, like Istio's, has no tag rules for it: the raw name `wasmcustom.switchyard.attempts_total.
/// model.<m>.endpoint.<e>.outcome.<o>`).
fn attempts_metric(endpoint: &str, outcome: &str) -> u64 {
    let (_, stats) = http_get(stack().admin, "/stats").unwrap();
    stats
        .lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(name, _)| {
            name.starts_with("wasmcustom.switchyard.attempts_total.")
                && name.contains(&format!(".endpoint.{endpoint}."))
                && name.ends_with(&format!(".outcome.{outcome}"))
        })
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

/// The catalog's Vertex AI provider through the Istio-shaped gateway: its token comes from the
/// metadata server through the cluster the EnvoyFilter adds (`gcp_metadata`, here a local mock
/// whose live tokens alone the Vertex mock takes), not from the mounted key Secret.
#[tokio::test]
async fn claude_on_vertex_takes_the_metadata_servers_token_through_the_gateway() {
    let body = json!({"model": "anthropic/claude-sonnet-4.5", "messages": msg(),
                      "provider": {"only": ["google-vertex"], "allow_fallbacks": false}});
    let mut r = chat("istio-vertex", &[], body.clone()).await;
    for _ in 0..100 {
        if r.status == 200 {
            break;
        }
        assert_eq!(r.json()["error"]["code"], "credential_unavailable", "{}", r.text());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        r = chat("istio-vertex", &[], body.clone()).await;
    }
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("google-vertex"));
    let got = stack().providers["google-vertex"].received_for("istio-vertex");
    let g = got.last().expect("Vertex saw the request");
    assert!(g.path.ends_with("/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"), "{}", g.path);
    let auth = g.header("authorization").unwrap_or_default();
    assert!(auth.starts_with("Bearer ") && !auth.contains("caller-secret"), "{auth}");
    assert!(stat(stack().admin, "cluster.gcp_metadata.upstream_rq_total") >= 1, "fetched through gcp_metadata");
}

/// The rendered bootstrap override (the ConfigMap the keys patch mounts and names in
/// `ISTIO_BOOTSTRAP_OVERRIDE`, as istio-agent passes it to Envoy) gives the metrics their labels
/// on istioctl's uninjected egress gateway, as the generated bootstrap does on plain Envoy: the
/// dashboard's queries work on both (the other install paths:
/// `the_helm_gateway_and_the_sidecar_route_fail_over_and_label_their_metrics`).
#[tokio::test]
async fn the_bootstrap_override_labels_the_metrics_on_istios_proxy() {
    let r = chat("istio-labels", &[], json!({"model": "meta-llama/llama-4-maverick", "messages": msg()})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The labels are the ids as written (docs/metrics.md), through Istio's bootstrap too.
    let endpoint = r.header("x-switchyard-provider").unwrap_or_default().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, prom) = http_get(stack().admin, "/stats/prometheus").unwrap();
        let labelled = prom.lines().find(|l| {
            l.starts_with("switchyard_attempts_total{")
                && l.contains(&format!("endpoint=\"{endpoint}\""))
                && l.contains("model=\"meta-llama/llama-4-maverick\"")
                && l.contains("outcome=\"success\"")
                && l.contains("gen_ai_provider_name=")
        });
        if labelled.is_some() {
            assert!(
                prom.lines().any(|l| l.starts_with("switchyard_gen_ai_client_token_usage_tokens_total{")
                    && l.contains("gen_ai_token_type=\"input\"")),
                "no labelled usage counter"
            );
            assert!(!prom.contains("switchyard_attempts_total_model_"), "labels left in a name");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no labelled switchyard_attempts_total:\n{prom}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn routes_through_the_istio_shaped_gateway_over_tls() {
    // Only this test sends to openai.
    let r = chat(
        "istio-route",
        &[("x-request-id", "caller-rid"), ("cookie", "c=1")],
        json!({"model": "openai/gpt-4.1-mini", "messages": msg()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("openai"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("1"));
    let got = stack().providers["openai"].received_for("istio-route");
    assert_eq!(got.len(), 1);
    assert!(got[0].tls);
    assert_eq!(got[0].version, "HTTP/2.0");
    assert_eq!(got[0].header(":scheme"), Some("https"));
    // From the route's auto_host_rewrite: the subset cluster's host is named by the provider host.
    assert_eq!(got[0].header(":authority"), Some("api.openai.com"));
    assert_eq!(got[0].header("authorization"), Some("Bearer key-for-OPENAI_API_KEY"));
    assert_eq!(got[0].json()["model"], "gpt-4.1-mini");
    // The first attempt went to the first-attempt cluster (no per-attempt Wasm), and what the
    // provider got is what that filter would have sent: nothing of the caller's secrets,
    // identity or tracing, no Envoy or Switchyard headers.
    assert_eq!(cluster_requests(stack().admin, "openai", true), 1);
    assert_eq!(cluster_requests(stack().admin, "openai", false), 0);
    assert_eq!(got[0].internal_headers(), vec![], "openai got internal headers");
    for (k, v) in &got[0].headers {
        assert!(!["cookie", "x-request-id", "x-forwarded-for"].contains(&k.as_str()), "openai got {k}");
        assert!(!v.contains("caller-secret") && !v.contains("caller-rid"), "openai got {k}: {v}");
    }
    // The decision filter recorded it.
    assert_eq!(attempts_metric("openai", "success"), 1);
}

#[tokio::test]
async fn a_failed_first_attempt_fails_over_and_is_recorded() {
    // Only this test sends to groq on this gateway.
    let body = json!({"model": "meta-llama/llama-4-maverick", "messages": msg(), "provider": {"order": ["groq", "fireworks"]}});
    let r = chat("istio-first-429", &[("x-mock-behavior", "groq=429/30")], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("fireworks"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("2"));
    let log = r.header("x-switchyard-attempt-log").unwrap_or_default().to_string();
    assert!(log.contains("groq") && log.contains("429"), "the attempt log names the refused first attempt: {log}");
    // groq's refusal came from its first-attempt cluster; the retry went to fireworks' regular
    // cluster, whose per-attempt filter recorded the refusal and its Retry-After.
    assert_eq!(cluster_requests(stack().admin, "groq", true), 1);
    assert_eq!(cluster_requests(stack().admin, "groq", false), 0);
    let got = stack().providers["groq"].received_for("istio-first-429");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("authorization"), Some("Bearer key-for-GROQ_API_KEY"));
    assert_eq!(got[0].header(":authority"), Some("api.groq.com"));
    let got = stack().providers["fireworks"].received_for("istio-first-429");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("authorization"), Some("Bearer key-for-FIREWORKS_API_KEY"));
    assert_eq!(attempts_metric("groq", "rate_limited"), 1);
    // groq cools down: the same order now tries fireworks first.
    let r = chat("istio-first-429-after", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("fireworks"), "groq is cooling down");
    assert!(stack().providers["groq"].received_for("istio-first-429-after").is_empty());
}

#[tokio::test]
async fn fails_over_across_istio_provider_clusters() {
    let r = chat(
        "istio-failover",
        &[("x-mock-behavior", "together=503,fireworks=429")],
        json!({"model": "deepseek/deepseek-chat-v3", "messages": msg(),
               "provider": {"order": ["together", "fireworks", "deepinfra"]}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-switchyard-provider"), Some("deepinfra"));
    assert_eq!(r.header("x-switchyard-attempts"), Some("3"));
    // istio-proxy reads the next cluster from a header (it builds no filter-state matcher input):
    // each attempt that may be retried carries the next cluster's token, keyed by the
    // deployment's secret, not the hash of its public name; the last carries none.
    let order = [
        ("together", "TOGETHER", Some("fireworks")),
        ("fireworks", "FIREWORKS", Some("deepinfra")),
        ("deepinfra", "DEEPINFRA", None),
    ];
    for (slug, key, next) in order {
        let got = stack().providers[slug].received_for("istio-failover");
        assert_eq!(got.len(), 1, "{slug}");
        assert_eq!(got[0].header("authorization"), Some(format!("Bearer key-for-{key}_API_KEY").as_str()), "{slug}");
        assert_eq!(got[0].internal_headers_but_next_token(), vec![], "{slug} got internal headers");
        let next_cluster = next.map(|n| stack().local.providers.iter().find(|p| p.slug == n).unwrap().cluster());
        let keyed = next_cluster.as_deref().map(|c| keyed_slot_token(&stack().local.istio.handoff_key, c));
        assert_eq!(got[0].next_token(), keyed.as_deref(), "{slug}");
        if let Some(c) = &next_cluster {
            assert_ne!(got[0].next_token(), Some(slot_token(c).as_str()), "{slug}: an unkeyed token");
        }
        for (k, v) in &got[0].headers {
            assert!(!v.contains("caller-secret"), "{slug} got {k}: {v}");
        }
    }
    // Attempt 1 on together's first-attempt cluster (only this test sends to together here),
    // the retries on the regular clusters, through the per-attempt filter.
    assert_eq!(cluster_requests(stack().admin, "together", true), 1);
    assert_eq!(cluster_requests(stack().admin, "together", false), 0);
    assert_eq!(cluster_requests(stack().admin, "deepinfra", false), 1);
}

#[tokio::test]
async fn unrouted_requests_reach_no_provider() {
    let r = send(stack().addr, "GET", "/v1/files", &[("x-test-id", "istio-unrouted")], b"").await.unwrap();
    assert_eq!(r.status / 100, 4, "{}", r.text());
    assert!(stack().providers.values().all(|p| p.received_for("istio-unrouted").is_empty()));
}

#[test]
fn filter_chain_order_is_decision_then_router() {
    let (_, dump) =
        switchyard_integration::envoy::http_get(stack().admin, "/config_dump?resource=static_listeners").unwrap();
    let v: Value = serde_json::from_str(&dump).unwrap();
    let filters = &v["configs"][0]["listener"]["filter_chains"][0]["filters"][0]["typed_config"]["http_filters"];
    let names: Vec<&str> = filters.as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "envoy.filters.http.cors",
            "envoy.filters.http.fault",
            // Inserted by the EnvoyFilter before the router, with its own extension config.
            "switchyard-decision",
            "envoy.filters.http.router"
        ]
    );
    // The router is Istio's own: no listener-wide setting of Switchyard's (every attempt's
    // upstream filter keeps the router's x-envoy-* headers from providers).
    assert!(filters[3]["typed_config"].get("suppress_envoy_headers").is_none(), "{}", filters[3]);
    // The flag and the failure policy are on the decision filter that runs (delivered by ECDS).
    let (_, ecds) =
        switchyard_integration::envoy::http_get(stack().admin, "/config_dump?resource=ecds_filters").unwrap();
    let ecds: Value = serde_json::from_str(&ecds).unwrap();
    let decision = ecds["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ecds_filter"]["name"] == "switchyard-decision")
        .unwrap_or_else(|| panic!("no switchyard-decision in {ecds}"));
    let config = &decision["ecds_filter"]["typed_config"]["config"];
    assert_eq!(config["allow_on_headers_stop_iteration"], true, "{config}");
    assert_eq!(config["failure_policy"], "FAIL_RELOAD", "{config}");
}

/// The clusters istiod builds from the rendered DestinationRules: a first-attempt twin per
/// provider that serves one API, with the first-attempt filter and its key injector instead of the per-attempt
/// Wasm, the same TLS and limits otherwise. A provider serving several APIs has none (a twin
/// injects one key header): every attempt to it runs the per-attempt filter.
#[test]
fn every_provider_has_a_first_attempt_cluster_with_its_filter_and_the_same_tls() {
    let (_, dump) =
        switchyard_integration::envoy::http_get(stack().admin, "/config_dump?resource=static_clusters").unwrap();
    let v: Value = serde_json::from_str(&dump).unwrap();
    let clusters: Vec<&Value> = v["configs"].as_array().unwrap().iter().map(|c| &c["cluster"]).collect();
    let by_name = |n: &str| clusters.iter().find(|c| c["name"] == n).copied();
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(default_catalog_path()).unwrap()).unwrap();
    let mut twins = 0;
    let filters = |c: &Value| -> Vec<String> {
        c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    };
    for p in &stack().local.providers {
        let regular = by_name(&p.cluster()).unwrap_or_else(|| panic!("no cluster {}", p.cluster()));
        // The APIs with their own key header (the Responses API shares OpenAI's host and key).
        let apis = raw["providers"][&p.slug]["apis"]
            .as_object()
            .map_or(1, |a| a.keys().filter(|k| *k != "openai_responses").count());
        // The regular cluster: the provider's key injectors (one per key header its APIs use,
        // the key read by SDS from the mounted Secret), then the per-attempt filter.
        let regular_filters = filters(regular);
        if raw["providers"][&p.slug]["kind"] == "bedrock" && raw["providers"][&p.slug].get("credential").is_none() {
            // Signed by Envoy (SigV4) after the per-attempt filter, no key; no twin (every
            // attempt's path and body are the kind's).
            assert_eq!(
                regular_filters,
                ["switchyard-upstream", "envoy.filters.http.aws_request_signing", "envoy.filters.http.upstream_codec"],
                "{}",
                p.slug
            );
            assert!(by_name(&p.first_attempt_cluster()).is_none(), "{}", p.slug);
            continue;
        }
        if raw["providers"][&p.slug]["credential"].get("google_metadata").is_some() {
            // An access token from the metadata server, put on each attempt by the per-attempt
            // filter: no key injector and no twin (a twin runs no per-attempt filter).
            assert_eq!(regular_filters, ["switchyard-upstream", "envoy.filters.http.upstream_codec"], "{}", p.slug);
            assert!(by_name(&p.first_attempt_cluster()).is_none(), "{}", p.slug);
            assert!(by_name("gcp_metadata").is_some(), "the metadata server's cluster");
            continue;
        }
        let (injectors, rest) = regular_filters.split_at(regular_filters.len().saturating_sub(2));
        assert_eq!(rest, ["switchyard-upstream", "envoy.filters.http.upstream_codec"], "{}", p.slug);
        assert!(injectors.iter().all(|f| f == "envoy.filters.http.credential_injector"), "{}", p.slug);
        assert!((1..=apis).contains(&injectors.len()), "{}: {injectors:?}", p.slug);
        if apis > 1 {
            assert!(by_name(&p.first_attempt_cluster()).is_none(), "{} serves {apis} APIs", p.slug);
            continue;
        }
        twins += 1;
        let twin =
            by_name(&p.first_attempt_cluster()).unwrap_or_else(|| panic!("no cluster {}", p.first_attempt_cluster()));
        assert_eq!(
            filters(twin),
            ["switchyard-first", "envoy.filters.http.credential_injector", "envoy.filters.http.upstream_codec"],
            "{}",
            p.slug
        );
        assert_eq!(twin["transport_socket"], regular["transport_socket"], "{}", p.slug);
        assert_eq!(twin["circuit_breakers"], regular["circuit_breakers"], "{}", p.slug);
    }
    assert!(twins >= 4, "the catalog's single-API providers have twins");
}

/// Waits (10 s at most) until an Envoy's Prometheus output has `switchyard_attempts_total` with
/// its labels for an endpoint's success: what the bootstrap override's label rules make of the
/// raw name.
fn wait_for_labelled_attempts(admin: SocketAddr, endpoint: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, prom) = http_get(admin, "/stats/prometheus")?;
        if prom.lines().any(|l| {
            l.starts_with("switchyard_attempts_total{")
                && l.contains(&format!("endpoint=\"{endpoint}\""))
                && l.contains("outcome=\"success\"")
        }) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("no labelled switchyard_attempts_total for {endpoint}:\n{prom}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The other two install paths, each from the same rendered manifests: the Helm `gateway` chart
/// (injected, listener `0.0.0.0_80`) and an application sidecar in its own namespace (the
/// ConfigMaps mounted from there, `SIDECAR_OUTBOUND` patches, the outbound listener `0.0.0.0_80`,
/// route `80`). Each routes, fails over, and labels its metrics through the bootstrap override.
#[test]
fn the_helm_gateway_and_the_sidecar_route_fail_over_and_label_their_metrics() {
    let s = stack();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for install in [Install::HelmGateway, Install::Sidecar] {
        let mut proxy =
            install_config(&s.local, install, &s.ca_file, &wasm_path(), &s.digest, &test_secret(&s.local), &[])
                .unwrap();
        let listener = proxy.boot["static_resources"]["listeners"][0]["name"].clone();
        assert_eq!(listener, "0.0.0.0_80", "{install:?}");
        serve_extensions_from_files(
            &mut proxy.boot,
            &proxy.extensions,
            &s.dir.join(format!("ecds-{}", install.name())),
        )
        .unwrap();
        // No key in the environment: the keys come from the mounted Secret.
        let envoy = Envoy::start_binary_with_args(
            &istio_envoy(),
            &proxy.boot,
            &format!("istio-{}", install.name()),
            &[],
            1,
            &proxy.args,
        )
        .unwrap();
        let id = format!("{}-failover", install.name());
        let r = rt
            .block_on(post_json(
                envoy.addr(),
                "/v1/chat/completions",
                &[("x-test-id", id.as_str()), ("x-mock-behavior", "groq=429")],
                &json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg(), "provider": {"order": ["groq", "together"]}}),
            ))
            .unwrap();
        assert_eq!(r.status, 200, "{install:?}: {}", r.text());
        assert_eq!(r.header("x-switchyard-provider"), Some("together"));
        let got = s.providers["together"].received_for(&id);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].header("authorization"), Some("Bearer key-for-TOGETHER_API_KEY"));
        assert_eq!(got[0].json()["model"], "meta-llama/Llama-3.3-70B-Instruct-Turbo");
        assert_eq!(s.providers["groq"].received_for(&id).len(), 1);
        // groq's refused first attempt came from its first-attempt cluster, the retry from
        // together's regular cluster (this proxy's counters are its own).
        assert_eq!(cluster_requests(envoy.admin, "groq", true), 1);
        assert_eq!(cluster_requests(envoy.admin, "groq", false), 0);
        assert_eq!(cluster_requests(envoy.admin, "together", false), 1);
        wait_for_labelled_attempts(envoy.admin, "together").unwrap_or_else(|e| panic!("{install:?}: {e}"));
        // The GenAI span attributes reach this proxy: the Telemetry is in its namespace.
        let cfg = s.local.envoy_stack(wasm_path(), &BTreeMap::new());
        let m = switchyard_integration::istio::variant_manifests(&s.local, install.variant(), &cfg, &s.digest);
        assert_eq!(telemetries_for(&proxy.pod, &m.main).len(), 1, "{install:?}");
    }
}

/// Another service on the same sidecar or gateway listener (an in-mesh model server): its
/// requests, on Switchyard's paths or any other, reach it exactly as sent, with no provider key
/// and no Switchyard header; Switchyard's host on the same proxy is routed as before.
#[test]
fn another_service_on_the_same_listener_is_untouched() {
    let s = stack();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let vllm = rt.block_on(MockProvider::start("vllm", 0, Behavior::default())).unwrap();
    let keys = test_secret(&s.local);
    let secrets: Vec<&str> = keys.iter().map(|(_, v)| v.as_str()).collect();
    let service = MeshService { host: "vllm.apps.svc.cluster.local".into(), port: vllm.addr.port() };
    for install in Install::ALL {
        let mut proxy = install_config(
            &s.local,
            install,
            &s.ca_file,
            &wasm_path(),
            &s.digest,
            &keys,
            std::slice::from_ref(&service),
        )
        .unwrap();
        serve_extensions_from_files(
            &mut proxy.boot,
            &proxy.extensions,
            &s.dir.join(format!("ecds-shared-{}", install.name())),
        )
        .unwrap();
        let envoy = Envoy::start_binary(&istio_envoy(), &proxy.boot, "istio-shared", &[], 1).unwrap();
        let chat =
            json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg(), "provider": {"order": ["groq"]}})
                .to_string();
        for (path_id, method, path, extra, body) in [
            ("chat-key", "POST", "/v1/chat/completions", vec![("authorization", "Bearer caller-own")], chat.as_bytes()),
            ("chat", "POST", "/v1/chat/completions", vec![], chat.as_bytes()),
            ("models", "GET", "/v1/models", vec![("authorization", "Bearer caller-own")], &b""[..]),
            ("generate", "POST", "/generate", vec![("x-api-key", "caller-x")], &b"{}"[..]),
        ] {
            let id = format!("istio-other-{}-{path_id}", install.name());
            let mut sent: Vec<(&str, &str)> = vec![("host", service.host.as_str()), ("x-test-id", id.as_str())];
            sent.extend(extra);
            let r = rt.block_on(send(envoy.addr(), method, path, &sent, body)).unwrap();
            assert!(r.headers.iter().all(|(k, _)| !k.starts_with("x-switchyard")), "{id}: {:?}", r.headers);
            let got = vllm.received_for(&id);
            assert_eq!(got.len(), 1, "{id}");
            let adds =
                ["x-forwarded-proto", "x-request-id", "x-envoy-expected-rq-timeout-ms", "x-envoy-decorator-operation"];
            assert_eq!(got[0].differs_from_sent(method, path, &sent, body, &adds, &secrets), None, "{id}");
            for p in s.providers.values() {
                assert!(p.received_for(&id).is_empty(), "{id} reached {}", p.name);
            }
        }
        // Switchyard's host on the same proxy: routed, its first attempt carrying groq's key.
        let id = format!("istio-own-{}", install.name());
        let r = rt
            .block_on(post_json(
                envoy.addr(),
                "/v1/chat/completions",
                &[("x-test-id", id.as_str())],
                &serde_json::from_str(&chat).unwrap(),
            ))
            .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let got = s.providers["groq"].received_for(&id);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].header("authorization"), Some("Bearer key-for-GROQ_API_KEY"));
        assert_eq!(cluster_requests(envoy.admin, "groq", true), 1, "the first attempt went to groq's twin");
    }
}

/// Mesh-wide limits on the Istio-shaped gateway: the catalog names the rate limit service by
/// its Kubernetes Service host and port, the rendered plugin configuration names Istio's own
/// cluster for it (no patch adds one), and the gateway enforces the limit through it (a real
/// Redis and the test rate limit service).
#[test]
fn mesh_limits_work_through_the_in_mesh_service_cluster() {
    use switchyard_integration::istio_sim::add_grpc_service;
    use switchyard_integration::mesh::{RateLimitService, Redis};
    let s = stack();
    let mut raw: Value = serde_json::from_str(&std::fs::read_to_string(default_catalog_path()).unwrap()).unwrap();
    let (host, port) = ("ratelimit.limits.svc.cluster.local", 8081);
    raw["rate_limits"] = json!({"service": {"host": host, "port": port, "timeout_ms": 1000},
                                "limits": {"two": {"requests": 2, "window": "hour"}}});
    let ports: BTreeMap<String, (String, u16)> =
        s.local.providers.iter().map(|p| (p.slug.clone(), (p.host.clone(), p.port))).collect();
    let mut limited = Catalog::parse(&raw.to_string()).unwrap().with_hosts(&ports);
    limited.metadata_server = s.local.metadata_server.clone();
    limited.istio.service_host = "switchyard.local".into();
    let plugin = limited.plugin_config();
    assert_eq!(plugin["rate_limits"]["service"]["cluster"], "outbound|8081||ratelimit.limits.svc.cluster.local");
    let redis = Redis::start("istio").unwrap();
    let limits = switchyard_integration::ratelimit::service_config(&plugin).unwrap();
    let service = RateLimitService::start("istio", &redis.url(), &limits).unwrap();
    let (mut boot, extensions) =
        gateway_config(&limited, &s.ca_file, &wasm_path(), &s.digest, &test_secret(&limited)).unwrap();
    add_grpc_service(&mut boot, host, port, service.addr.port()).unwrap();
    serve_extensions_from_files(&mut boot, &extensions, &s.dir.join("ecds-limits")).unwrap();
    let envoy = Envoy::start_binary(&istio_envoy(), &boot, "istio-limits", &[], 1).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ask = |n: usize| {
        rt.block_on(post_json(
            envoy.addr(),
            "/v1/chat/completions",
            &[("x-test-id", &format!("istio-limits-{n}"))],
            &json!({"model": "meta-llama/llama-3.3-70b-instruct", "messages": msg()}),
        ))
        .unwrap()
    };
    assert_eq!(ask(0).status, 200);
    assert_eq!(ask(1).status, 200);
    let refused = ask(2);
    let (_, stats) = http_get(envoy.admin, "/stats").unwrap();
    let related: Vec<&str> = stats.lines().filter(|l| l.contains("rate_limit") || l.contains("8081")).collect();
    assert_eq!(refused.status, 429, "{}\n{related:?}\n{}", refused.text(), envoy.log_tail());
    assert_eq!(refused.json()["error"]["code"], "rate_limited");
    assert!(refused.header("retry-after").is_some());
    let served: usize = s.providers.values().map(|p| p.received_for("istio-limits-2").len()).sum();
    assert_eq!(served, 0, "the refused request reached a provider");
}
