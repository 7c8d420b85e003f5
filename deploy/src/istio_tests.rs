//! The Istio generator's tests (`istio.rs`).

use super::*;
use std::path::PathBuf;

fn catalog() -> Catalog {
    Catalog::parse(
        &json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1"}},
            "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
            "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}
        })
        .to_string(),
    )
    .unwrap()
}

/// The cluster names the EnvoyFilter's `CLUSTER` patches and failover route use.
fn patched_and_routed(ef: &Value) -> (Vec<String>, Vec<String>) {
    let patches = ef["spec"]["configPatches"].as_array().unwrap();
    let patched = patches
        .iter()
        .filter(|p| p["applyTo"] == "CLUSTER")
        .map(|p| p["match"]["cluster"]["name"].as_str().unwrap().to_string())
        .collect();
    let route = patches
        .iter()
        .find(|p| {
            p["applyTo"] == "HTTP_ROUTE" && p["patch"]["value"]["route"]["inline_cluster_specifier_plugin"].is_object()
        })
        .unwrap();
    let routed = route["patch"]["value"]["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
        ["cluster_matcher"]["matcher_tree"]["exact_match_map"]["map"]
        .as_object()
        .unwrap()
        .values()
        .map(|a| a["action"]["typed_config"]["cluster"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    let mut routed = routed;
    routed.sort();
    (patched, routed)
}

#[test]
fn the_first_attempt_subset_cluster_is_named_patched_and_routed_or_absent_altogether() {
    let c = catalog();
    let mut cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    let twin = "outbound|443|first|api.p.example";
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let dr = &providers_resources(&c, v, &cfg)[1];
        assert_eq!(dr["spec"]["subsets"], json!([{"name": "first"}]));
        assert_eq!(plugin_config(&c, &cfg)["providers"]["p"]["first_attempt_cluster"], twin);
        let ef = envoy_filter(&c, v, &cfg, "d");
        let (patched, routed) = patched_and_routed(&ef);
        assert_eq!(patched, ["outbound|443||api.p.example", twin]);
        assert_eq!(routed, [twin, "outbound|443||api.p.example"], "sorted: the matcher maps both");
        let patches = ef["spec"]["configPatches"].as_array().unwrap();
        let hook = &patches.last().unwrap()["patch"]["value"]["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"];
        // The first-attempt filter, then the provider's key injector reading its SDS file,
        // then the codec.
        let (_, t) = &first_attempt_providers(&c, &cfg)[0];
        let key = t.key.clone().unwrap();
        assert_eq!(key.source, crate::envoy::KeySource::Env { name: "P_KEY".into(), prefix: "Bearer ".into() });
        assert_eq!(
            *hook,
            first_attempt_filters_ecds(Some(credential_injector(&key, sds_secret_ref(&t.cluster, KEYS_MOUNT))))
        );
        assert_eq!(hook[0]["name"], "switchyard-first");
        let path = hook[1]["typed_config"]["credential"]["typed_config"]["credential"]["sds_config"]
            ["path_config_source"]["path"]
            .as_str()
            .unwrap();
        // The ConfigMap holds that file, naming the key's file in the mounted Secret (no key
        // in it), and the keys patch mounts both where the paths point; the filter holds no
        // key and reads no key variable.
        let file = path.strip_prefix(&format!("{SDS_MOUNT}/")).unwrap();
        let cm = sds_config_map(&c, &cfg, "ns");
        let sds: Value = serde_json::from_str(cm["data"][file].as_str().unwrap()).unwrap();
        assert_eq!(sds["resources"][0]["name"], crate::envoy::twin_secret_name(&t.cluster));
        assert_eq!(sds["resources"][0]["generic_secret"]["secret"], json!({"filename": "/etc/switchyard/keys/P_KEY"}));
        assert_eq!(plugin_config(&c, &cfg)["providers"]["p"]["credential"], json!({"injected": true}));
        let patch = keys_patch(&c, v);
        let spec = &patch["spec"]["template"]["spec"];
        let env = spec["containers"][0]["env"].as_array().unwrap();
        assert_eq!(env.len(), 1, "no key in the proxy's environment: {env:?}");
        assert_eq!(env[0]["name"], BOOTSTRAP_OVERRIDE_ENV);
        // The API server needs an image: a sidecar's container is new in the pod template
        // (the injector replaces `auto`); the gateways' Deployments have theirs.
        assert_eq!(spec["containers"][0].get("image"), (v == Variant::Sidecar).then(|| json!("auto")).as_ref());
        let mounts: Vec<&str> = spec["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert_eq!(mounts, [SDS_MOUNT, BOOTSTRAP_MOUNT, KEYS_MOUNT]);
        assert_eq!(spec["volumes"][0]["configMap"]["name"], SDS_CONFIG_MAP);
        assert_eq!(spec["volumes"][1]["configMap"]["name"], BOOTSTRAP_CONFIG_MAP);
        assert_eq!(spec["volumes"][2]["secret"]["secretName"], c.istio.keys_secret);
        // The regular cluster: its key injector, then the per-attempt filter.
        let regular = patches
            .iter()
            .find(|p| p["applyTo"] == "CLUSTER" && p["match"]["cluster"]["name"] == "outbound|443||api.p.example")
            .unwrap();
        let names: Vec<&str> = regular["patch"]["value"]["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["envoy.filters.http.credential_injector", "switchyard-upstream", "envoy.filters.http.upstream_codec"]
        );
        // The first-attempt filter's extension config: its role, no catalog.
        let first = patches
            .iter()
            .find(|p| p["applyTo"] == "EXTENSION_CONFIG" && p["patch"]["value"]["name"] == "switchyard-first")
            .unwrap();
        let config = &first["patch"]["value"]["typed_config"]["config"];
        assert_eq!(
            (config["root_id"].as_str(), config["configuration"]["value"].as_str()),
            (Some("switchyard_first"), Some("{}"))
        );
        // No listener-wide router setting: the upstream filters keep x-envoy-* off attempts.
        assert!(!ef.to_string().contains("suppress_envoy_headers"));
    }
    // The fallback, keys as environment variables: the filter reads them, the twin's SDS
    // file names the variable, nothing is mounted but the ConfigMap.
    let mut env = c.clone();
    env.istio.keys = KeyDelivery::Env;
    assert_eq!(plugin_config(&env, &cfg)["providers"]["p"]["credential"], json!({"env": "P_KEY"}));
    let cm = sds_config_map(&env, &cfg, "ns");
    let (_, text) = cm["data"].as_object().unwrap().iter().next().unwrap();
    let sds: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    assert_eq!(sds["resources"][0]["generic_secret"]["secret"], json!({"environment_variable": "P_KEY"}));
    let patch = keys_patch(&env, Variant::EgressGateway);
    assert_eq!(patch["spec"]["template"]["spec"]["containers"][0]["env"][0]["name"], "P_KEY");
    assert_eq!(patch["spec"]["template"]["spec"]["volumes"].as_array().unwrap().len(), 2, "the two ConfigMaps");
    // Off: no subset, no twin anywhere, every attempt through the per-attempt filter.
    cfg.first_attempt_clusters = false;
    let v = Variant::EgressGateway;
    assert!(providers_resources(&c, v, &cfg)[1]["spec"].get("subsets").is_none());
    assert!(plugin_config(&c, &cfg)["providers"]["p"].get("first_attempt_cluster").is_none());
    let ef = envoy_filter(&c, v, &cfg, "d");
    assert!(!ef.to_string().contains(twin) && !ef.to_string().contains("switchyard-first"));
    assert_eq!(patched_and_routed(&ef).1, ["outbound|443||api.p.example"]);
}

#[test]
fn tracing_renders_the_telemetry_and_turns_the_attributes_on_only_when_asked() {
    let off = catalog();
    let cfg = off.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    let kinds = |c: &Catalog| -> Vec<String> {
        render_k8s(c, &cfg, "sha")
            .iter()
            .filter(|(p, _)| p.ends_with("switchyard.yaml"))
            .flat_map(|(_, t)| t.lines().filter(|l| l.starts_with("kind: ")).map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    assert!(!kinds(&off).iter().any(|k| k == "kind: Telemetry"));
    assert!(plugin_config(&off, &cfg).get("telemetry").is_none());
    let on = Catalog::parse(
        &json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1", "tracing": true}},
            "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
            "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}
        })
        .to_string(),
    )
    .unwrap();
    assert_eq!(kinds(&on).iter().filter(|k| *k == "kind: Telemetry").count(), 2, "one per variant");
    assert_eq!(plugin_config(&on, &cfg)["telemetry"]["request_attributes"], true);
    let t = telemetry_resource(&on, Variant::Sidecar, "apps");
    assert_eq!(t["metadata"]["namespace"], "apps");
    let tags = &t["spec"]["tracing"][0]["customTags"];
    assert_eq!(
        tags["gen_ai.usage.output_tokens"]["formatter"]["value"],
        "%FILTER_STATE(wasm.switchyard.output_tokens:PLAIN)%"
    );
    // Per request (the caller's API), not a literal.
    assert_eq!(tags["gen_ai.operation.name"]["formatter"]["value"], "%FILTER_STATE(wasm.switchyard.operation:PLAIN)%");
    assert_eq!(t["spec"]["selector"]["matchLabels"], json!(on.istio.sidecar_labels));
}

/// The Istio route reads the next cluster from the header its plugin configuration writes, with
/// tokens keyed by the catalog's key (derived when the catalog sets none, its own otherwise);
/// the plain-Envoy route reads filter state and its plugin configuration says nothing of a key.
#[test]
fn istio_hands_off_by_keyed_header_and_plain_envoy_by_filter_state() {
    let raw = json!({
        "deployment": {"istio": {"image": "oci://registry.example/switchyard:1",
            "handoff_key": "00112233445566778899aabbccddeeff"}},
        "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
        "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}
    });
    for (c, key) in [
        (catalog(), catalog().istio.handoff_key),
        (
            Catalog::parse(&raw.to_string()).unwrap(),
            *b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff",
        ),
    ] {
        let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
        let plugin = plugin_config(&c, &cfg);
        assert_eq!(plugin["routing"]["handoff"], "header");
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(plugin["routing"]["handoff_key"], hex.as_str());
        let ef = envoy_filter(&c, Variant::EgressGateway, &cfg, "d");
        let route = ef["spec"]["configPatches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["applyTo"] == "HTTP_ROUTE"
                    && p["patch"]["value"]["route"]["inline_cluster_specifier_plugin"].is_object()
            })
            .unwrap()["patch"]["value"]
            .clone();
        let tree = &route["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"]["cluster_matcher"]
            ["matcher_tree"];
        assert_eq!(tree["input"]["typed_config"]["header_name"], "x-switchyard-next");
        let cluster = "outbound|443||api.p.example";
        let token = switchyard::protocol::slots::keyed_slot_token(&key, cluster);
        assert_eq!(tree["exact_match_map"]["map"][&token]["action"]["typed_config"]["cluster"], cluster);
        assert!(tree["exact_match_map"]["map"].get(switchyard::protocol::slots::slot_token(cluster)).is_none());
        // The filter accepts what the generator wrote.
        let parsed = switchyard::config::Catalog::from_json(plugin.to_string().as_bytes(), &|_| Some("k".into()));
        assert_eq!(parsed.map(|c| c.routing.handoff_key).ok().flatten(), Some(key));
    }
    let c = catalog();
    let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    let boot = crate::envoy::bootstrap(&cfg);
    let text = boot.to_string();
    assert!(!text.contains("HttpRequestHeaderMatchInput"), "plain Envoy reads no header for the next cluster");
    assert!(text.contains("\"wasm.switchyard_next_1\""), "plain Envoy reads the first attempt's filter state");
    assert!(!text.contains("handoff"), "plain Envoy's plugin configuration keeps the default");
    let mut bad = raw.clone();
    bad["deployment"]["istio"]["handoff_key"] = json!("0011");
    assert!(Catalog::parse(&bad.to_string()).unwrap_err().starts_with("deployment.istio.handoff_key:"));
}

/// The derived handoff key follows the deployment, not the catalog's contents: a catalog change
/// (a model or provider added) keeps every token, so a route and a plugin configuration of two
/// catalog versions still agree during a rollout (`hot_reload.rs` runs one under load).
#[test]
fn the_derived_handoff_key_survives_a_catalog_change() {
    let raw = |models: Value, service_host: &str| {
        json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1", "service_host": service_host}},
            "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
            "models": models
        })
        .to_string()
    };
    let one = json!({"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}});
    let mut two = one.clone();
    two["m/y"] = one["m/x"].clone();
    let key = |text: String| Catalog::parse(&text).unwrap().istio.handoff_key;
    assert_eq!(key(raw(one.clone(), "llm.a.internal")), key(raw(two, "llm.a.internal")));
    assert_ne!(key(raw(one.clone(), "llm.a.internal")), key(raw(one, "llm.b.internal")), "another deployment");
}

#[test]
fn a_bedrock_cluster_is_signed_by_the_sidecar_and_has_no_first_attempt_subset() {
    let c = Catalog::parse(
        &json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1"}},
            "providers": {"amazon-bedrock": {"host": "bedrock-runtime.us-east-1.amazonaws.com", "http2": true,
                                              "kind": "bedrock", "apis": {"anthropic": {}}}},
            "models": {"m/x": {"endpoints": [{"provider": "amazon-bedrock", "upstream_model": "anthropic.x-v1:0",
                                              "pricing": {"prompt": 1, "completion": 2}}]}}
        })
        .to_string(),
    )
    .unwrap();
    let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let ef = envoy_filter(&c, v, &cfg, "d");
        let (patched, _) = patched_and_routed(&ef);
        assert_eq!(patched, ["outbound|443||bedrock-runtime.us-east-1.amazonaws.com"], "no first-attempt subset");
        let patch = ef["spec"]["configPatches"].as_array().unwrap().iter().find(|p| p["applyTo"] == "CLUSTER").unwrap();
        let filters = patch["patch"]["value"]["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"]
            .as_array()
            .unwrap();
        let names: Vec<&str> = filters.iter().map(|f| f["name"].as_str().unwrap()).collect();
        let at = names.iter().position(|n| *n == "envoy.filters.http.aws_request_signing").expect("signed");
        assert_eq!(names[at + 1], "envoy.filters.http.upstream_codec", "{names:?}");
        assert_eq!(filters[at]["typed_config"]["region"], "us-east-1");
        assert!(at >= 1, "after the per-attempt filter: {names:?}");
    }
}

/// A catalog with a provider whose access tokens come from the metadata server, and the
/// workload identities of the proxy's ServiceAccount.
fn google_catalog(identities: Value) -> Catalog {
    let mut istio = json!({"image": "oci://registry.example/switchyard:1"});
    for (k, v) in identities.as_object().unwrap() {
        istio[k] = v.clone();
    }
    Catalog::parse(
        &json!({
            "deployment": {"istio": istio},
            "providers": {
                "p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}},
                "g": {"host": "us-east5-aiplatform.googleapis.com", "http2": true,
                      "credential": {"google_metadata": {"cluster": "gcp_metadata"}}}
            },
            "models": {"m/x": {"endpoints": [
                {"provider": "p", "pricing": {"prompt": 1, "completion": 2}},
                {"provider": "g", "pricing": {"prompt": 1, "completion": 2}}
            ]}}
        })
        .to_string(),
    )
    .unwrap()
}

#[test]
fn a_google_metadata_provider_gets_the_metadata_cluster_and_no_first_attempt_twin() {
    let c = google_catalog(json!({}));
    let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let ef = envoy_filter(&c, v, &cfg, "d");
        let patches = ef["spec"]["configPatches"].as_array().unwrap();
        let added: Vec<&Value> =
            patches.iter().filter(|p| p["applyTo"] == "CLUSTER" && p["patch"]["operation"] == "ADD").collect();
        assert_eq!(added.len(), 1, "{added:?}");
        let cluster = &added[0]["patch"]["value"];
        assert_eq!(cluster["name"], "gcp_metadata");
        let addr =
            &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        assert_eq!((addr["address"].as_str(), addr["port_value"].as_u64()), (Some("169.254.169.254"), Some(80)));
        // Its attempts all run the per-attempt filter: no first-attempt twin for g, one for p.
        let plugin = plugin_config(&c, &cfg);
        assert!(plugin["providers"]["g"].get("first_attempt_cluster").is_none(), "{}", plugin["providers"]["g"]);
        assert!(plugin["providers"]["p"]["first_attempt_cluster"].is_string());
        assert_eq!(plugin["providers"]["g"]["credential"], json!({"google_metadata": {"cluster": "gcp_metadata"}}));
    }
    let files = render_k8s(&c, &cfg, "d");
    assert!(files.iter().all(|(f, _)| !f.ends_with("serviceaccount.yaml")), "no identity configured, no file");
}

#[test]
fn an_azure_managed_identity_provider_gets_the_imds_cluster_on_istio_and_plain_envoy() {
    let c = Catalog::parse(
        &json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1"}},
            "providers": {
                "azure": {"host": "switchyard-eastus2.openai.azure.com", "http2": true, "kind": "azure",
                          "credential": {"azure_managed_identity": {"cluster": "azure_imds"}}}
            },
            "models": {"openai/gpt-4.1": {"endpoints": [{"provider": "azure", "upstream_model": "gpt-4.1",
                                                         "pricing": {"prompt": 2, "completion": 8}}]}}
        })
        .to_string(),
    )
    .unwrap();
    let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    let is_imds = |cluster: &Value| {
        let addr =
            &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"];
        let filters = &cluster["typed_extension_protocol_options"]
            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"];
        cluster["name"] == "azure_imds"
            && (addr["address"].as_str(), addr["port_value"].as_u64()) == (Some("169.254.169.254"), Some(80))
            && filters[0]["typed_config"]["mutations"]["request_mutations"][0]["remove"] == "x-forwarded-for"
    };
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let ef = envoy_filter(&c, v, &cfg, "d");
        let patches = ef["spec"]["configPatches"].as_array().unwrap();
        let added: Vec<&Value> =
            patches.iter().filter(|p| p["applyTo"] == "CLUSTER" && p["patch"]["operation"] == "ADD").collect();
        assert_eq!(added.len(), 1, "{added:?}");
        assert!(is_imds(&added[0]["patch"]["value"]), "{}", added[0]);
        let plugin = plugin_config(&c, &cfg);
        assert!(plugin["providers"]["azure"].get("first_attempt_cluster").is_none());
        assert_eq!(
            plugin["providers"]["azure"]["credential"],
            json!({"azure_managed_identity": {"cluster": "azure_imds"}})
        );
    }
    let boot = crate::envoy::bootstrap(&cfg);
    let clusters = boot["static_resources"]["clusters"].as_array().unwrap();
    assert_eq!(clusters.iter().filter(|c| is_imds(c)).count(), 1, "plain Envoy renders it too");
}

#[test]
fn the_workload_identities_annotate_the_proxys_service_account() {
    let gsa = "vertex@proj.iam.gserviceaccount.com";
    let arn = "arn:aws:iam::123456789012:role/switchyard-bedrock";
    let c = google_catalog(json!({"gcp_service_account": gsa, "aws_role_arn": arn}));
    let cfg = c.envoy_stack(PathBuf::from("m.wasm"), &Default::default());
    let files = render_k8s(&c, &cfg, "d");
    let file = |v: &str| files.iter().find(|(f, _)| f == &format!("{v}/serviceaccount.yaml")).unwrap().1.clone();
    let gateway = file("egress-gateway");
    assert!(gateway.contains("serviceAccount:") && gateway.contains("annotations:"), "{gateway}");
    assert!(gateway.contains(&format!("iam.gke.io/gcp-service-account: \"{gsa}\"")), "{gateway}");
    assert!(gateway.contains(&format!("eks.amazonaws.com/role-arn: \"{arn}\"")), "{gateway}");
    let sidecar = file("sidecar");
    assert!(sidecar.contains("metadata:"), "{sidecar}");
    assert!(sidecar.contains(&format!("iam.gke.io/gcp-service-account: \"{gsa}\"")), "{sidecar}");
    for (bad, field) in [
        (json!({"gcp_service_account": "default"}), "gcp_service_account"),
        (json!({"aws_role_arn": "arn:aws:iam::1:role/x"}), "aws_role_arn"),
    ] {
        let mut v = json!({"deployment": {"istio": {"image": "oci://r.example/s:1"}},
            "providers": {"p": {"host": "api.p.example", "credential": {"env": "P_KEY"}}},
            "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}});
        for (k, val) in bad.as_object().unwrap() {
            v["deployment"]["istio"][k] = val.clone();
        }
        let e = Catalog::parse(&v.to_string()).unwrap_err();
        assert!(e.contains(&format!("deployment.istio.{field}")), "{e}");
    }
}
