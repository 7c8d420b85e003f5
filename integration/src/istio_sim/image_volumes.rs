//! The parts of the Istio model the native build needs (`istio_native`): the sidecar injection
//! template's user volumes, the kubelet's image volumes, and where the dynamic module's library
//! must be. Read at istio/istio release-1.31 and in KEP-4639 (Kubernetes image volumes):
//!
//! - `sidecar.istio.io/userVolume` / `sidecar.istio.io/userVolumeMount`: JSON objects, volume
//!   name -> volume (mount) without its name, turned into pod volumes and `istio-proxy` mounts by
//!   the sidecar template (`manifests/charts/istio-control/istio-discovery/files/injection-template.yaml`;
//!   `pkg/kube/inject/testdata/inject/user-volume.yaml.injected` shows the result). The gateway
//!   template (`gateway-injection-template.yaml`) reads neither, and nothing reads them on a pod
//!   that is not injected.
//! - An image volume (`image: {reference, pullPolicy}`): the container runtime pulls the image
//!   for the node's platform (linux/amd64 here) and mounts the unpacked layers, read-only, at
//!   each mount path; an image that cannot be pulled keeps the pod from starting.
//! - A dynamic module's `module.local.filename` must be a file of a volume mounted into
//!   `istio-proxy` (the proxy image holds no Switchyard library); `module.remote` is refused.

use serde_json::{json, Value};

use crate::oci::{layer_files, Image};

pub const USER_VOLUME: &str = "sidecar.istio.io/userVolume";
pub const USER_VOLUME_MOUNT: &str = "sidecar.istio.io/userVolumeMount";

/// The injection template the pod asks for (`inject.istio.io/templates`, default `sidecar`).
pub fn injection_template(pod: &Value) -> &str {
    pod.pointer("/metadata/annotations/inject.istio.io~1templates").and_then(Value::as_str).unwrap_or("sidecar")
}

/// The user volumes and mounts the pod's annotations ask for, if its template reads them (the
/// sidecar template only): (pod volumes, `istio-proxy` mounts), each with its name. An annotation
/// that is not a JSON object of objects fails the injection (the template cannot render it).
pub fn user_volumes(pod: &Value) -> Result<(Vec<Value>, Vec<Value>), String> {
    if injection_template(pod) != "sidecar" {
        return Ok((Vec::new(), Vec::new()));
    }
    let read = |key: &str| -> Result<Vec<Value>, String> {
        let path = format!("/metadata/annotations/{}", key.replace('/', "~1"));
        let Some(text) = pod.pointer(&path) else { return Ok(Vec::new()) };
        let parsed: Value = serde_json::from_str(text.as_str().unwrap_or_default())
            .map_err(|e| format!("annotation {key}: not JSON ({e}): injection fails"))?;
        let entries = parsed.as_object().ok_or_else(|| format!("annotation {key}: not a JSON object"))?;
        entries
            .iter()
            .map(|(name, spec)| -> Result<Value, String> {
                let mut v = spec.clone();
                let o = v.as_object_mut().ok_or_else(|| format!("annotation {key}: {name} is not an object"))?;
                o.insert("name".into(), json!(name));
                Ok(v)
            })
            .collect()
    };
    Ok((read(USER_VOLUME)?, read(USER_VOLUME_MOUNT)?))
}

/// The files the container runtime mounts for an image volume: the image its reference names
/// (pinned by digest: `...@sha256:<hex>`, found among `images`, what the registry serves), for
/// linux/amd64, its layers unpacked. No such image: the pull fails and the pod does not start.
pub fn image_volume_files(name: &str, volume: &Value, images: &[&Image]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let image = &volume["image"];
    let reference = image["reference"].as_str().ok_or_else(|| format!("volume {name}: image without reference"))?;
    let policy = image["pullPolicy"].as_str().unwrap_or("IfNotPresent");
    if !["Always", "IfNotPresent", "Never"].contains(&policy) {
        return Err(format!("volume {name}: image.pullPolicy {policy:?}: Unsupported value"));
    }
    let digest = reference
        .rsplit_once("@sha256:")
        .map(|(_, d)| d)
        .ok_or_else(|| format!("volume {name}: {reference} is not pinned by digest (the model pulls by digest)"))?;
    let found = images.iter().find(|i| i.digest() == digest).ok_or_else(|| {
        format!("volume {name}: {reference}: the image cannot be pulled (ImagePullBackOff: the pod does not start)")
    })?;
    let manifest: Value = serde_json::from_slice(&found.manifest).map_err(|e| format!("{reference}: manifest: {e}"))?;
    let config: Value = serde_json::from_slice(&found.config).map_err(|e| format!("{reference}: config: {e}"))?;
    if (config["os"].as_str(), config["architecture"].as_str()) != (Some("linux"), Some("amd64")) {
        return Err(format!(
            "volume {name}: {reference} is for {}/{}, not the node's linux/amd64",
            config["os"], config["architecture"]
        ));
    }
    let layers = manifest["layers"].as_array().ok_or_else(|| format!("{reference}: a manifest without layers"))?;
    let [layer] = layers.as_slice() else {
        return Err(format!("{reference}: {} layers (the model unpacks one)", layers.len()));
    };
    if layer["digest"] != json!(format!("sha256:{}", crate::oci::sha256_hex(&found.layer))) {
        return Err(format!("{reference}: the layer does not match the manifest's digest"));
    }
    layer_files(&found.layer).map_err(|e| format!("{reference}: {e}"))
}

/// Every dynamic module library the configuration names (`dynamic_module_config.module`): each
/// must be a local file under one of the proxy's mount paths (`mounts`) — the proxy image holds no
/// Switchyard library, so anywhere else Envoy would find nothing — and never `remote` (Envoy
/// leaves a filter whose remote module it could not fetch out of the chain).
pub fn check_module_files(boot: &Value, mounts: &[String]) -> Result<usize, String> {
    fn walk(v: &Value, out: &mut Vec<Value>) {
        match v {
            Value::Object(o) => {
                if let Some(m) = o.get("dynamic_module_config") {
                    out.push(m.clone());
                }
                o.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut configs = Vec::new();
    walk(boot, &mut configs);
    for m in &configs {
        if m.pointer("/module/remote").is_some() {
            return Err("a dynamic module from a remote source (fail-open when its fetch fails)".into());
        }
        let file = m
            .pointer("/module/local/filename")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a dynamic module without module.local.filename: {m}"))?;
        if !mounts.iter().any(|at| file.strip_prefix(at.as_str()).is_some_and(|f| f.starts_with('/'))) {
            return Err(format!("{file}: not under any volume mounted into istio-proxy (mounts: {mounts:?})"));
        }
    }
    Ok(configs.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_volume_annotations_are_read_by_the_sidecar_template_only() {
        let annotations = json!({
            USER_VOLUME: r#"{"lib":{"image":{"reference":"r/x:1@sha256:aa","pullPolicy":"IfNotPresent"}}}"#,
            USER_VOLUME_MOUNT: r#"{"lib":{"mountPath":"/var/lib/x","readOnly":true}}"#
        });
        let sidecar = json!({"metadata": {"annotations": annotations}});
        let (volumes, mounts) = user_volumes(&sidecar).unwrap();
        assert_eq!(
            volumes,
            [json!({"name": "lib", "image": {"reference": "r/x:1@sha256:aa", "pullPolicy": "IfNotPresent"}})]
        );
        assert_eq!(mounts, [json!({"name": "lib", "mountPath": "/var/lib/x", "readOnly": true})]);
        let mut gateway = sidecar.clone();
        gateway["metadata"]["annotations"]["inject.istio.io/templates"] = json!("gateway");
        assert_eq!(user_volumes(&gateway).unwrap(), (Vec::new(), Vec::new()));
        let mut broken = sidecar;
        broken["metadata"]["annotations"][USER_VOLUME] = json!("[not json");
        assert!(user_volumes(&broken).unwrap_err().contains("injection fails"));
    }

    #[test]
    fn an_image_volume_holds_the_pinned_images_files_for_the_nodes_platform() {
        let library = b"\x7fELF library".to_vec();
        let image = Image::from_library(&library);
        let volume = |reference: String| json!({"image": {"reference": reference, "pullPolicy": "IfNotPresent"}});
        let pinned = volume(format!("r/lib:1@sha256:{}", image.digest()));
        assert_eq!(image_volume_files("v", &pinned, &[&image]).unwrap(), [("libswitchyard.so".to_string(), library)]);
        // Not in the registry, not pinned, another platform: the pod does not start.
        let other = Image::from_library(b"another build");
        assert!(image_volume_files("v", &pinned, &[&other]).unwrap_err().contains("cannot be pulled"));
        assert!(image_volume_files("v", &volume("r/lib:1".into()), &[&image]).unwrap_err().contains("digest"));
        let wasm = Image::from_module(b"\0asm");
        let err = image_volume_files("v", &volume(format!("r/w:1@sha256:{}", wasm.digest())), &[&wasm]).unwrap_err();
        assert!(err.contains("linux/amd64"), "{err}");
        let mut bad = pinned.clone();
        bad["image"]["pullPolicy"] = json!("Sometimes");
        assert!(image_volume_files("v", &bad, &[&image]).unwrap_err().contains("pullPolicy"));
    }

    #[test]
    fn a_library_must_be_a_local_file_under_a_mount() {
        let boot = |module: Value| json!({"static_resources": {"listeners": [{"filters": [{"typed_config": {"dynamic_module_config": {"module": module}}}]}]}});
        let mounts = vec!["/var/lib/switchyard".to_string()];
        let local = |f: &str| json!({"local": {"filename": f}});
        assert_eq!(check_module_files(&boot(local("/var/lib/switchyard/libswitchyard.so")), &mounts), Ok(1));
        for outside in ["/usr/lib/libswitchyard.so", "/var/lib/switchyardx/libswitchyard.so"] {
            let err = check_module_files(&boot(local(outside)), &mounts).unwrap_err();
            assert!(err.contains("not under any volume"), "{err}");
        }
        let remote = json!({"remote": {"http_uri": {"uri": "https://x/lib.so"}, "sha256": "aa"}});
        assert!(check_module_files(&boot(remote), &mounts).unwrap_err().contains("remote"));
        assert_eq!(check_module_files(&json!({"static_resources": {}}), &mounts), Ok(0));
    }
}
