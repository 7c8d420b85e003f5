//! The native build on Istio (`deployment.istio.build: native`): the same filters as an Envoy
//! dynamic module instead of the Wasm module, on every install path.
//!
//! - The filters: the EnvoyFilter inserts them inline (no ECDS, no extension configs): the
//!   decision filter before the router, the per-attempt filter in each provider cluster's
//!   upstream chain and the first-attempt filter in each first-attempt cluster's, with exactly the
//!   filter configs of the plain-Envoy generator's native build (`envoy::native_filter`: same role
//!   names, configuration, stats namespace) pointing at the library's path inside istio-proxy,
//!   `LIBRARY_MOUNT/libswitchyard.so`. Always `module.local`: Envoy's `remote` module source
//!   leaves the filter out when its fetch fails (fail-open, in the `DynamicModuleConfig.module`
//!   comment of go-control-plane at the commit istiod 1.31 vendors), so it is never used.
//!   istiod 1.31 validates the type (`envoy.extensions.filters.http.dynamic_modules.v3` in
//!   `pkg/config/xds/filter_types.gen.go`, release-1.31) and istio-proxy 1.31 builds the filter
//!   (`envoy.filters.http.dynamic_modules`, k8s/istio/extensions-1.31.txt).
//! - The library: an OCI image holding `libswitchyard.so` at its root (`oci::Image::from_library`,
//!   `make image-native`), mounted read-only into `istio-proxy` as a Kubernetes image volume
//!   (KEP-4639: alpha in Kubernetes 1.31, beta from 1.33, on by default from 1.35; the container
//!   runtime must support it), its reference pinned to the digest of the image built from the
//!   library. Declared on the pod the proxy runs in:
//!   - an application's sidecar: the `sidecar.istio.io/userVolume` and
//!     `sidecar.istio.io/userVolumeMount` annotations, which the sidecar injection template
//!     turns into a pod volume and an `istio-proxy` mount
//!     (`manifests/charts/istio-control/istio-discovery/files/injection-template.yaml`,
//!     release-1.31);
//!   - both gateway charts: the volume and the mount in the keys patch (the Deployment overlay).
//!     The gateway injection template (`gateway-injection-template.yaml`) reads no `userVolume`
//!     annotation, istioctl's `istio-egress` chart is not injected at all; the Helm `gateway`
//!     chart's `volumes` and `volumeMounts` values put the same two entries in the same places
//!     (`manifests/charts/gateway/templates/deployment.yaml`).
//! - If the library is not at that path (a wrong image, a runtime that mounts nothing), Envoy
//!   cannot load it and refuses the configuration that names it (it never runs the route without
//!   the decision filter); if the image cannot be pulled, the pod does not start.
//! - The runtime flag that names the module's stats like the Wasm host's (`envoy::native_runtime`)
//!   goes into the bootstrap override the keys patch already mounts.

use std::path::PathBuf;

use serde_json::{json, Value};
use switchyard::wiring::{ATTEMPT_ROOT_ID, DECISION_ROOT_ID, FIRST_ATTEMPT_ROOT_ID};

use crate::catalog::Catalog;
use crate::envoy::{
    first_attempt_filters, native_filter, native_runtime, upstream_filters, Build, StackConfig, DECISION_FILTER,
    FIRST_ATTEMPT_CONFIGURATION,
};
use crate::istio_variant::Variant;
use crate::oci::LIBRARY_FILE;

/// Where the library's image volume is mounted in `istio-proxy` (the image's root).
pub const LIBRARY_MOUNT: &str = "/var/lib/switchyard";
/// The image volume's name (pod volume and mount).
pub const LIBRARY_VOLUME: &str = "switchyard-native";
/// The sidecar injection template's annotations for a volume of the pod and its mount in
/// `istio-proxy`: JSON objects, volume name -> the volume (or mount) without its name.
pub const USER_VOLUME_ANNOTATION: &str = "sidecar.istio.io/userVolume";
pub const USER_VOLUME_MOUNT_ANNOTATION: &str = "sidecar.istio.io/userVolumeMount";

/// The library's path inside `istio-proxy`: what the filter configs name.
pub fn library_path() -> String {
    format!("{LIBRARY_MOUNT}/{LIBRARY_FILE}")
}

pub fn is_native(c: &Catalog) -> bool {
    c.istio.build == Build::Native
}

/// The image volume's reference: the catalog's `native_image` pinned to `digest` (the manifest
/// digest of the image built from the library, hex), so a moved tag never changes what runs.
pub fn library_image(c: &Catalog, digest: &str) -> String {
    format!("{}@sha256:{digest}", c.istio.native_image.as_deref().unwrap_or_default())
}

/// The generator's configuration with the native build pointing at the mounted library.
fn in_proxy(cfg: &StackConfig) -> StackConfig {
    let mut cfg = cfg.clone();
    cfg.build = Build::Native;
    cfg.native = PathBuf::from(library_path());
    cfg
}

/// The decision filter as the EnvoyFilter inserts it before the router (held disabled there
/// like the Wasm one: only Switchyard's marked routes enable it).
pub fn decision_filter(cfg: &StackConfig, plugin: &str) -> Value {
    json!({"name": DECISION_FILTER, "typed_config": native_filter(&in_proxy(cfg), DECISION_ROOT_ID, plugin)})
}

/// A provider cluster's upstream chain: the per-attempt filter, then the codec (the key
/// injectors go first, as on the Wasm build).
pub fn upstream_chain(cfg: &StackConfig, plugin: &str) -> Value {
    upstream_filters(native_filter(&in_proxy(cfg), ATTEMPT_ROOT_ID, plugin))
}

/// A first-attempt cluster's chain: the first-attempt filter, the provider's key injector, the
/// codec.
pub fn first_attempt_chain(cfg: &StackConfig, injector: Option<Value>) -> Value {
    first_attempt_filters(native_filter(&in_proxy(cfg), FIRST_ATTEMPT_ROOT_ID, FIRST_ATTEMPT_CONFIGURATION), injector)
}

/// The bootstrap override's additions on the native build: the runtime layer that makes Envoy
/// register the module's stats namespace like the Wasm host's (`wasmcustom.switchyard.*`, the
/// same Prometheus series). Envoy appends it to Istio's runtime layers.
pub fn with_native_runtime(c: &Catalog, bootstrap_override: &mut Value) {
    if is_native(c) {
        bootstrap_override["layered_runtime"] = native_runtime();
    }
}

/// Adds the library's image volume and its read-only mount at `LIBRARY_MOUNT` to the keys
/// patch (`keys_patch`) of a variant: the sidecar's as the injection template's annotations on
/// the pod template, the gateways' as the volume and the `istio-proxy` mount themselves (see the
/// module comment). A private registry's pull secret becomes the pod's `imagePullSecrets`: the
/// kubelet pulls an image volume with the pod's credentials, as it pulls its containers.
pub fn with_library_volume(patch: &mut Value, c: &Catalog, v: Variant, digest: &str) {
    if !is_native(c) {
        return;
    }
    let image = json!({"reference": library_image(c, digest), "pullPolicy": c.istio.image_pull_policy});
    let spec = &mut patch["spec"]["template"]["spec"];
    if let Some(secret) = &c.istio.image_pull_secret {
        spec["imagePullSecrets"] = json!([{"name": secret}]);
    }
    match v {
        Variant::Sidecar => {
            let annotations = &mut patch["spec"]["template"]["metadata"]["annotations"];
            annotations[USER_VOLUME_ANNOTATION] = json!(json!({LIBRARY_VOLUME: {"image": image}}).to_string());
            annotations[USER_VOLUME_MOUNT_ANNOTATION] =
                json!(json!({LIBRARY_VOLUME: {"mountPath": LIBRARY_MOUNT, "readOnly": true}}).to_string());
        }
        Variant::EgressGateway => {
            if let Some(volumes) = spec["volumes"].as_array_mut() {
                volumes.push(json!({"name": LIBRARY_VOLUME, "image": image}));
            }
            if let Some(mounts) = spec["containers"][0]["volumeMounts"].as_array_mut() {
                mounts.push(json!({"name": LIBRARY_VOLUME, "mountPath": LIBRARY_MOUNT, "readOnly": true}));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::istio::{bootstrap_config_map, envoy_filter, keys_patch, variant_manifests, BOOTSTRAP_OVERRIDE_KEY};
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
                    for f in v["typed_extension_protocol_options"]
                        ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["http_filters"]
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
            let plugin = serde_json::to_string(&crate::istio::plugin_config(&c, &cfg)).unwrap();
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
            serde_json::from_str(bootstrap_config_map(c, "ns")["data"][BOOTSTRAP_OVERRIDE_KEY].as_str().unwrap())
                .unwrap()
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
}
