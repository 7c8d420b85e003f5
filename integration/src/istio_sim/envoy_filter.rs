//! istiod's EnvoyFilter patching (`pilot/pkg/networking/core/envoyfilter/` at release-1.31)
//! for the patch kinds Switchyard renders: HTTP filters, the HTTP connection manager, routes,
//! virtual hosts, clusters and extension configs, matched by context, port and filter name.
//! Stricter than istiod where istiod skips silently (see the parent module).

use serde_json::Value;

use super::Extensions;

fn context_matches(patch: &Value, context: &str) -> bool {
    match patch.pointer("/match/context").and_then(Value::as_str) {
        None | Some("ANY") => true,
        Some(c) => c == context,
    }
}

/// Proto-merge of JSON: objects merge field by field, lists append, scalars replace. Map
/// fields replace per key (Istio's `pkg/proto/merge`: "Merge semantics replaces, rather than
/// merges into existing entries").
fn merge(dst: &mut Value, src: &Value, is_map: bool) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                if is_map {
                    d.insert(k.clone(), v.clone());
                    continue;
                }
                let map_field = matches!(
                    k.as_str(),
                    "typed_extension_protocol_options" | "typed_per_filter_config" | "filter_metadata"
                );
                match d.get_mut(k) {
                    Some(existing) => merge(existing, v, map_field),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(d), Value::Array(s)) => d.extend(s.iter().cloned()),
        (d, s) => *d = s.clone(),
    }
}

/// The HTTP connection managers of the listeners a patch's `listener.portNumber` selects (Istio
/// names listeners `<address>_<port>`).
fn hcms<'a>(boot: &'a mut Value, patch: &Value) -> Vec<&'a mut Value> {
    let port = patch.pointer("/match/listener/portNumber").and_then(Value::as_u64);
    let mut out = Vec::new();
    if let Some(listeners) = boot.pointer_mut("/static_resources/listeners").and_then(Value::as_array_mut) {
        for l in listeners {
            let name = l["name"].as_str().unwrap_or("").to_string();
            if port.is_some_and(|p| !name.ends_with(&format!("_{p}"))) {
                continue;
            }
            if let Some(chains) = l["filter_chains"].as_array_mut() {
                for ch in chains {
                    if let Some(filters) = ch["filters"].as_array_mut() {
                        for f in filters {
                            if f["name"] == "envoy.filters.network.http_connection_manager" {
                                out.push(f);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Applies an EnvoyFilter's `configPatches` for `context` the way istiod does, for the patch
/// kinds Switchyard renders; any other kind is an error (never silently skipped). Added
/// extension configs go to `extensions`.
pub fn apply_envoy_filter(
    boot: &mut Value,
    envoy_filter: &Value,
    context: &str,
    extensions: &mut Extensions,
) -> Result<(), String> {
    let patches = envoy_filter["spec"]["configPatches"].as_array().ok_or("no configPatches")?;
    for (i, p) in patches.iter().enumerate() {
        let apply_to = p["applyTo"].as_str().unwrap_or("");
        let op = p["patch"]["operation"].as_str().unwrap_or("");
        let value = &p["patch"]["value"];
        if apply_to != "EXTENSION_CONFIG" && !context_matches(p, context) {
            continue;
        }
        let mut applied = 0;
        match (apply_to, op) {
            ("EXTENSION_CONFIG", "ADD") => {
                let name = value["name"].as_str().ok_or(format!("patch {i}: extension config without a name"))?;
                extensions.insert(name.to_string(), value.clone());
                applied = 1;
            }
            ("HTTP_FILTER", "INSERT_BEFORE" | "INSERT_AFTER" | "REPLACE" | "MERGE") => {
                let target = p
                    .pointer("/match/listener/filterChain/filter/subFilter/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                for hcm in hcms(boot, p) {
                    if let Some(filters) = hcm["typed_config"]["http_filters"].as_array_mut() {
                        if let Some(at) = filters.iter().position(|f| f["name"] == target) {
                            match op {
                                "INSERT_BEFORE" => filters.insert(at, value.clone()),
                                "INSERT_AFTER" => filters.insert(at + 1, value.clone()),
                                "MERGE" => {
                                    // istiod skips a MERGE on a filter without typed_config (an
                                    // ECDS filter's `config_discovery`, `mergeHTTPFilter`): the
                                    // patch would do nothing, so it is an error here.
                                    let Some(f) = filters.get_mut(at).filter(|f| f["typed_config"].is_object()) else {
                                        return Err(format!("patch {i}: HTTP_FILTER MERGE on {target}, which has no typed_config (istiod skips it)"));
                                    };
                                    merge(&mut f["typed_config"], &value["typed_config"], false);
                                }
                                _ => {
                                    if let Some(slot) = filters.get_mut(at) {
                                        *slot = value.clone();
                                    }
                                }
                            }
                            applied += 1;
                        }
                    }
                }
                // Istio skips a patch whose filter is absent silently; here it is an error (a
                // patch written for another release's names would do nothing there).
            }
            ("NETWORK_FILTER", "MERGE") => {
                let target = p.pointer("/match/listener/filterChain/filter/name").and_then(Value::as_str).unwrap_or("");
                for f in hcms(boot, p) {
                    if f["name"] == target {
                        merge(&mut f["typed_config"], &value["typed_config"], false);
                        applied += 1;
                    }
                }
            }
            ("HTTP_ROUTE", "INSERT_FIRST") => {
                let vhost = p.pointer("/match/routeConfiguration/vhost/name").and_then(Value::as_str).unwrap_or("");
                for hcm in hcms(boot, p) {
                    if let Some(vhosts) = hcm["typed_config"]["route_config"]["virtual_hosts"].as_array_mut() {
                        for vh in vhosts.iter_mut().filter(|v| v["name"] == vhost) {
                            if let Some(routes) = vh["routes"].as_array_mut() {
                                routes.insert(0, value.clone());
                                applied += 1;
                            }
                        }
                    }
                }
            }
            ("VIRTUAL_HOST", "MERGE") => {
                let vhost = p.pointer("/match/routeConfiguration/vhost/name").and_then(Value::as_str).unwrap_or("");
                for hcm in hcms(boot, p) {
                    if let Some(vhosts) = hcm["typed_config"]["route_config"]["virtual_hosts"].as_array_mut() {
                        for vh in vhosts.iter_mut().filter(|v| v["name"] == vhost) {
                            merge(vh, value, false);
                            applied += 1;
                        }
                    }
                }
            }
            ("CLUSTER", "MERGE") => {
                let name = p.pointer("/match/cluster/name").and_then(Value::as_str).unwrap_or("");
                if let Some(clusters) = boot.pointer_mut("/static_resources/clusters").and_then(Value::as_array_mut) {
                    for c in clusters.iter_mut().filter(|c| c["name"] == name) {
                        merge(c, value, false);
                        applied += 1;
                    }
                }
            }
            ("CLUSTER", "ADD") => {
                // Istio adds the cluster to the proxy's clusters (the metadata server's).
                if let Some(clusters) = boot.pointer_mut("/static_resources/clusters").and_then(Value::as_array_mut) {
                    clusters.push(value.clone());
                    applied += 1;
                }
            }
            _ => return Err(format!("patch {i}: {apply_to}/{op} is not modelled")),
        }
        if applied == 0 {
            return Err(format!("patch {i} ({apply_to}/{op}) matched nothing in the Istio-shaped config"));
        }
    }
    Ok(())
}
