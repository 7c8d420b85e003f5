//! The native build's tests (`istio_native.rs`), run through the Istio generator (`istio.rs`):
//! what the EnvoyFilter inserts and what the keys patch mounts. A child of `istio`, not of
//! `istio_native`, so that `istio_native` never imports `istio`, not even in its tests.

use std::path::PathBuf;

use super::*;
use crate::envoy::{native_filter, native_runtime, Build};
use crate::istio_native::*;
use crate::oci::Image;

fn catalog(build: &str) -> Catalog {
    Catalog::parse(
        &json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1", "build": build,
                                     "native_image": "registry.example/switchyard-native:1"}},
            "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
            "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}
        })
        .to_string(),
    )
    .unwrap()
}

fn stack(c: &Catalog) -> StackConfig {
    c.envoy_stack(PathBuf::from("m.wasm"), &Default::default())
}

/// Every HTTP filter config of the EnvoyFilter (listener and cluster chains), by name.
fn filters(ef: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for p in ef["spec"]["configPatches"].as_array().unwrap() {
        let v = &p["patch"]["value"];
        match p["applyTo"].as_str().unwrap() {
            "HTTP_FILTER" => out.push((v["name"].as_str().unwrap().to_string(), v["typed_config"].clone())),
            "CLUSTER" => {
                for f in v["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
                    ["http_filters"]
                    .as_array()
                    .unwrap()
                {
                    out.push((f["name"].as_str().unwrap().to_string(), f["typed_config"].clone()));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn native_inserts_the_plain_generators_filter_configs_inline_pointing_at_the_mount() {
    let c = catalog("native");
    let cfg = stack(&c);
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let ef = envoy_filter(&c, v, &cfg, "abc");
        let text = ef.to_string();
        assert!(!text.contains("EXTENSION_CONFIG") && !text.contains("config_discovery"), "no ECDS: {text}");
        assert!(!text.contains("envoy.extensions.filters.http.wasm.v3.Wasm") && !text.contains("\"remote\""));
        let modules: Vec<(String, Value)> =
            filters(&ef).into_iter().filter(|(_, t)| t["@type"] == crate::envoy::DYNAMIC_MODULE_TYPE_URL).collect();
        // The decision filter, the per-attempt filter of the provider cluster, the
        // first-attempt filter of its twin.
        let roles: Vec<&str> = modules.iter().map(|(_, t)| t["filter_name"].as_str().unwrap()).collect();
        assert_eq!(roles, [DECISION_ROOT_ID, ATTEMPT_ROOT_ID, FIRST_ATTEMPT_ROOT_ID], "{v:?}");
        assert_eq!(modules[0].0, DECISION_FILTER);
        let decision =
            ef["spec"]["configPatches"].as_array().unwrap().iter().find(|p| p["applyTo"] == "HTTP_FILTER").unwrap();
        assert_eq!(decision["patch"]["value"]["disabled"], true, "enabled by Switchyard's routes only");
        assert_eq!(decision["patch"]["operation"], "INSERT_BEFORE");
        // Exactly the plain generator's configs, with the in-proxy path.
        let plugin = serde_json::to_string(&plugin_config(&c, &cfg)).unwrap();
        let mut plain = cfg.clone();
        plain.build = Build::Native;
        plain.native = PathBuf::from("/var/lib/switchyard/libswitchyard.so");
        assert_eq!(modules[0].1, native_filter(&plain, DECISION_ROOT_ID, &plugin));
        assert_eq!(modules[1].1, native_filter(&plain, ATTEMPT_ROOT_ID, &plugin));
        assert_eq!(
            modules[2].1,
            native_filter(&plain, FIRST_ATTEMPT_ROOT_ID, FIRST_ATTEMPT_CONFIGURATION),
            "the first-attempt filter gets no catalog"
        );
    }
    // The Wasm build (the default) is untouched by any of this.
    let wasm = catalog("wasm");
    let ef = envoy_filter(&wasm, Variant::EgressGateway, &stack(&wasm), "abc");
    assert!(!ef.to_string().contains(crate::envoy::DYNAMIC_MODULE_TYPE_URL));
    assert!(ef.to_string().contains("EXTENSION_CONFIG"));
}

#[test]
fn the_library_reaches_istio_proxy_by_an_image_volume_pinned_to_its_digest() {
    let c = catalog("native");
    let digest = Image::from_library(b"\x7fELF").digest();
    let reference = format!("registry.example/switchyard-native:1@sha256:{digest}");
    // Gateways: the volume and its read-only mount in the Deployment overlay.
    let m = variant_manifests(&c, Variant::EgressGateway, &stack(&c), &digest);
    let spec = &m.keys_patch["spec"]["template"]["spec"];
    let volume = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == LIBRARY_VOLUME).unwrap();
    assert_eq!(volume["image"], json!({"reference": reference, "pullPolicy": "IfNotPresent"}));
    let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
    let mount = mounts.iter().find(|m| m["name"] == LIBRARY_VOLUME).unwrap();
    assert_eq!(mount, &json!({"name": LIBRARY_VOLUME, "mountPath": LIBRARY_MOUNT, "readOnly": true}));
    assert!(m.keys_patch["spec"]["template"].get("metadata").is_none());
    // Sidecars: the injection template's annotations, nothing in the container overlay.
    let m = variant_manifests(&c, Variant::Sidecar, &stack(&c), &digest);
    let t = &m.keys_patch["spec"]["template"];
    let volumes: Value =
        serde_json::from_str(t["metadata"]["annotations"][USER_VOLUME_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(volumes, json!({LIBRARY_VOLUME: {"image": {"reference": reference, "pullPolicy": "IfNotPresent"}}}));
    let mounts: Value =
        serde_json::from_str(t["metadata"]["annotations"][USER_VOLUME_MOUNT_ANNOTATION].as_str().unwrap()).unwrap();
    assert_eq!(mounts, json!({LIBRARY_VOLUME: {"mountPath": LIBRARY_MOUNT, "readOnly": true}}));
    assert!(!t["spec"].to_string().contains(LIBRARY_VOLUME));
    // The runtime flag in the bootstrap override, on the native build only.
    let over = |c: &Catalog| -> Value {
        serde_json::from_str(bootstrap_config_map(c, "ns")["data"][BOOTSTRAP_OVERRIDE_KEY].as_str().unwrap()).unwrap()
    };
    assert_eq!(over(&c)["layered_runtime"], native_runtime());
    assert!(over(&catalog("wasm")).get("layered_runtime").is_none());
    // A private registry: the pod's pull secret (the kubelet's), not istio-agent's DOCKER_CONFIG.
    let mut private = c.clone();
    private.istio.image_pull_secret = Some("regcred".into());
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let mut patch = keys_patch(&private, v);
        with_library_volume(&mut patch, &private, v, &digest);
        assert_eq!(patch["spec"]["template"]["spec"]["imagePullSecrets"], json!([{"name": "regcred"}]));
        assert!(!patch.to_string().contains("DOCKER_CONFIG"), "{v:?}");
    }
    // The Wasm build's patch has none of it.
    let wasm = catalog("wasm");
    let m = variant_manifests(&wasm, Variant::Sidecar, &stack(&wasm), &digest);
    assert!(!m.keys_patch.to_string().contains(LIBRARY_VOLUME));
}
