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
