//! The pod a proxy runs in, as Kubernetes and Istio's injector make it: the keys patch applied
//! as a strategic merge patch and admitted as the API server would (a container needs an
//! image), the injection (only where the chart injects), the kubelet's volumes for
//! `istio-proxy` and istio-agent's arguments from the bootstrap override.

use serde_json::{json, Value};

use super::*;

/// A strategic merge patch of a pod template (`kubectl patch`, and the injector's container
/// overlay): maps merge, `containers` merge by `name`, a container's `env` and `volumes` by
/// `name`, `volumeMounts` by `mountPath`; other lists and scalars are replaced.
pub fn strategic_merge(dst: &mut Value, patch: &Value) {
    fn key_of(field: &str) -> Option<&'static str> {
        match field {
            "containers" | "initContainers" | "env" | "volumes" | "imagePullSecrets" => Some("name"),
            "volumeMounts" => Some("mountPath"),
            _ => None,
        }
    }
    match (dst, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                match (d.get_mut(k), key_of(k), v) {
                    (Some(Value::Array(existing)), Some(key), Value::Array(items)) => {
                        for item in items {
                            match existing.iter_mut().find(|e| e.get(key).is_some() && e.get(key) == item.get(key)) {
                                Some(e) => strategic_merge(e, item),
                                None => existing.push(item.clone()),
                            }
                        }
                    }
                    (Some(existing), _, _) if existing.is_object() && v.is_object() => strategic_merge(existing, v),
                    _ => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

/// The pod after the keys patch, as the API server admits it and the injector completes it.
pub(super) fn admitted_pod(install: Install, keys_patch: &Value) -> Result<Value, String> {
    let mut pod = install.pod();
    let template = keys_patch.pointer("/spec/template").ok_or("the keys patch has no spec.template")?;
    strategic_merge(&mut pod, template);
    // The API server: every container needs an image ("spec.containers[i].image: Required value").
    for (i, c) in pod["spec"]["containers"].as_array().into_iter().flatten().enumerate() {
        if c["image"].as_str().is_none_or(str::is_empty) {
            return Err(format!(
                "{}: spec.template.spec.containers[{i}].image: Required value (container {})",
                install.name(),
                c["name"]
            ));
        }
    }
    if !install.injected() {
        // Nothing replaces `auto` on a pod the injector skips: the kubelet would try to pull it.
        if let Some(c) = pod["spec"]["containers"].as_array().into_iter().flatten().find(|c| c["image"] == "auto") {
            return Err(format!(
                "{}: container {} has image auto but the pod is not injected",
                install.name(),
                c["name"]
            ));
        }
        return Ok(pod);
    }
    // Injection (`pkg/kube/inject/webhook.go`): the template's istio-proxy, overlaid by the pod's
    // own container of that name (its `auto` image dropped), the bootstrap override
    // annotation's variable, mount and volume (the injection templates), and the sidecar
    // template's user volumes and mounts (`image_volumes::user_volumes`).
    let mut proxy = json!({"name": "istio-proxy", "image": PROXY_IMAGE, "env": [], "volumeMounts": []});
    let (user_volumes, user_mounts) = image_volumes::user_volumes(&pod)?;
    let annotation = pod.pointer("/metadata/annotations/sidecar.istio.io~1bootstrapOverride").cloned();
    if let Some(name) = &annotation {
        proxy["env"] =
            json!([{"name": "ISTIO_BOOTSTRAP_OVERRIDE", "value": "/etc/istio/custom-bootstrap/custom_bootstrap.json"}]);
        proxy["volumeMounts"] =
            json!([{"name": "custom-bootstrap-volume", "mountPath": "/etc/istio/custom-bootstrap"}]);
        strategic_merge(
            &mut pod,
            &json!({"spec": {"volumes": [{"name": "custom-bootstrap-volume", "configMap": {"name": name}}]}}),
        );
    }
    if let Some(mounts) = proxy["volumeMounts"].as_array_mut() {
        mounts.extend(user_mounts);
    }
    if !user_volumes.is_empty() {
        strategic_merge(&mut pod, &json!({"spec": {"volumes": user_volumes}}));
    }
    let containers = pod["spec"]["containers"].as_array_mut().ok_or("a pod without containers")?;
    match containers.iter().position(|c| c["name"] == "istio-proxy") {
        Some(at) => {
            let mut overlay = containers.remove(at);
            if overlay["image"] == "auto" {
                if let Some(o) = overlay.as_object_mut() {
                    o.remove("image");
                }
            }
            strategic_merge(&mut proxy, &overlay);
            containers.insert(at, proxy);
        }
        None => containers.push(proxy),
    }
    Ok(pod)
}

/// The kubelet's mounts of the pod's `istio-proxy`: every ConfigMap and Secret volume from the
/// pod's own namespace, none optional (a missing one keeps the pod from starting), and every
/// image volume from `images` (what the registry serves, `image_volumes::image_volume_files`).
/// Secrets are the key Secret's `secret` data (the operator creates it there, as docs/istio.md
/// says). Any other kind of volume is an error.
pub(super) fn proxy_volumes(
    pod: &Value,
    resources: &[Value],
    secret: &[(String, String)],
    images: &[&Image],
) -> Result<Vec<Volume>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let proxy = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "istio-proxy")
        .ok_or("the pod has no istio-proxy container")?;
    let mut out = Vec::new();
    for m in proxy["volumeMounts"].as_array().into_iter().flatten() {
        let name = m["name"].as_str().unwrap_or_default();
        let volume = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .ok_or_else(|| format!("volumeMount {name}: no such volume in the pod"))?;
        let mount = m["mountPath"].as_str().unwrap_or_default().to_string();
        if let Some(map) = volume["configMap"]["name"].as_str() {
            let cm = resources
                .iter()
                .find(|r| r["kind"] == "ConfigMap" && r["metadata"]["name"] == map && r["metadata"]["namespace"] == ns)
                .ok_or_else(|| {
                    format!("volume {name}: configmap \"{map}\" not found in namespace {ns} (the pod does not start)")
                })?;
            let files = cm["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect();
            out.push(Volume { mount, files, binaries: Vec::new() });
        } else if volume["secret"].is_object() {
            out.push(Volume { mount, files: secret.to_vec(), binaries: Vec::new() });
        } else if volume["image"].is_object() {
            let binaries = image_volumes::image_volume_files(name, volume, images)?;
            out.push(Volume { mount, files: Vec::new(), binaries });
        } else {
            return Err(format!("volume {name}: a kind the model does not know"));
        }
    }
    Ok(out)
}

/// istio-agent's bootstrap override: with `ISTIO_BOOTSTRAP_OVERRIDE` in the proxy's environment,
/// the file's JSON is passed to Envoy as `--config-yaml` (`pkg/envoy/proxy.go`). The file must be
/// in a mounted volume (the agent logs a warning and starts Envoy without it otherwise: an error
/// here).
pub(super) fn agent_override_args(pod: &Value, volumes: &[Volume]) -> Result<Vec<String>, String> {
    let proxy = pod["spec"]["containers"].as_array().into_iter().flatten().find(|c| c["name"] == "istio-proxy");
    let Some(path) = proxy
        .and_then(|p| p["env"].as_array())
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "ISTIO_BOOTSTRAP_OVERRIDE")
        .and_then(|e| e["value"].as_str())
    else {
        return Ok(Vec::new());
    };
    let file = volumes
        .iter()
        .find_map(|v| {
            let name = path.strip_prefix(v.mount.as_str())?.strip_prefix('/')?;
            v.files.iter().find(|(n, _)| n == name).map(|(_, text)| text.clone())
        })
        .ok_or_else(|| format!("ISTIO_BOOTSTRAP_OVERRIDE={path}: no such file in the proxy's mounts"))?;
    let parsed: Value = serde_json::from_str(&file).map_err(|e| format!("{path}: {e}"))?;
    Ok(vec!["--config-yaml".to_string(), parsed.to_string()])
}
