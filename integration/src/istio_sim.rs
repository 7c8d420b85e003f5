//! A model of what Istio generates from the rendered manifests, to run real Envoy on it (no
//! Kubernetes API server or istiod can run here): an Envoy bootstrap shaped like an Istio egress
//! gateway's (cluster names `outbound|<port>||<host>`, TLS origination as a DestinationRule
//! produces it, Istio's HTTP filter order, the virtual host `<host>:80`), the EnvoyFilter's
//! patches applied with Istio's semantics (a patch that matches nothing is an error here), and
//! the ConfigMap mounted as the keys patch mounts it. Extension configs arrive by ECDS from files (Istio sends them over ADS; istio-agent
//! has replaced the OCI URL by the pulled module's path after checking its digest).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::catalog::{istio_subset_cluster, Catalog};
use crate::envoy::upstream_tls;
use crate::istio::Variant;

/// The extension configs (ECDS) a proxy receives, by name.
pub type Extensions = BTreeMap<String, Value>;

/// What istio-agent does before Envoy sees an extension config: fetch the OCI image, check
/// its digest against `sha256`, point the config at the local module file.
pub fn agent_localize(ext: &mut Value, image_digest: &str, module: &Path) -> Result<(), String> {
    let vm = ext.pointer_mut("/typed_config/config/vm_config").ok_or("not a Wasm extension config")?;
    let remote = vm["code"]["remote"].clone();
    if !remote["http_uri"]["uri"].as_str().unwrap_or("").starts_with("oci://") {
        return Err(format!("expected an oci:// module URL, got {}", remote["http_uri"]["uri"]));
    }
    if remote["sha256"].as_str() != Some(image_digest) {
        return Err(format!("image digest {image_digest} does not match sha256 {}", remote["sha256"]));
    }
    vm["code"] = json!({"local": {"filename": module.to_string_lossy()}});
    Ok(())
}

/// A proxy's configuration before EnvoyFilter patches, as istiod would generate it for the
/// rendered ServiceEntries, DestinationRules (`destination_rules`: a cluster per subset too,
/// `outbound|<port>|<subset>|<host>`) and Gateway/VirtualService: the egress
/// gateway's HTTP listener (`0.0.0.0_8080`, route `http.80`) or a sidecar's outbound HTTP
/// listener (`0.0.0.0_80`, route `80`). Provider endpoints are 127.0.0.1 at each catalog port
/// (stand-ins for DNS) named by the provider's host, as the hosts of Istio's DNS clusters are
/// (Envoy names a host a STRICT_DNS/LOGICAL_DNS cluster resolved by its DNS name, the
/// ServiceEntry host: what the route's `auto_host_rewrite` sends as `:authority`).
#[allow(clippy::too_many_arguments)]
pub fn proxy_bootstrap(
    c: &Catalog,
    v: Variant,
    ca_file: &str,
    max_retries: u32,
    host: &str,
    destination_rules: &[Value],
    services: &[MeshService],
) -> Value {
    let (node, listener, route) = match v {
        Variant::EgressGateway => (
            json!({"id": "router~127.0.0.1~istio-egressgateway-0.istio-system~istio-system.svc.cluster.local", "cluster": "istio-egressgateway.istio-system"}),
            "0.0.0.0_8080",
            "http.80",
        ),
        Variant::Sidecar => (
            json!({"id": "sidecar~127.0.0.1~llm-app-0.apps~apps.svc.cluster.local", "cluster": "llm-app.apps"}),
            "0.0.0.0_80",
            "80",
        ),
    };
    let mut clusters: Vec<Value> = c
        .providers
        .iter()
        .map(|p| {
            // DestinationRule: SIMPLE TLS with SNI and subjectAltNames; h2UpgradePolicy UPGRADE
            // makes the cluster HTTP/2; connectionPool -> circuit breakers.
            let http = if p.http2 {
                json!({"http2_protocol_options": {}})
            } else {
                json!({"http_protocol_options": {}})
            };
            json!({
                "name": p.cluster(),
                "type": "STATIC",
                "connect_timeout": "10s",
                "lb_policy": "LEAST_REQUEST",
                "load_assignment": {"cluster_name": p.cluster(), "endpoints": [{"lb_endpoints": [{"endpoint": {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": p.port}},
                    "hostname": p.host
                }}]}]},
                "circuit_breakers": {"thresholds": [{"max_connections": 1024, "max_pending_requests": 1024, "max_requests": 1024, "max_retries": max_retries}]},
                "transport_socket": upstream_tls(&p.host, ca_file, p.http2),
                "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                    "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                    "common_http_protocol_options": {"idle_timeout": "3600s"},
                    "explicit_http_config": http
                }}
            })
        })
        .collect();
    // A DestinationRule subset without labels: the same cluster (endpoints, TLS, limits: the
    // subset inherits the rule's traffic policy) under the subset's name.
    let mut subsets = Vec::new();
    for dr in destination_rules.iter().filter(|d| d["kind"] == "DestinationRule") {
        let Some(host) = dr["spec"]["host"].as_str() else { continue };
        for subset in dr["spec"]["subsets"].as_array().into_iter().flatten() {
            let Some(subset) = subset["name"].as_str() else { continue };
            for p in c.providers.iter().filter(|p| p.host == host) {
                if let Some(parent) = clusters.iter().find(|x| x["name"] == json!(p.cluster())) {
                    let name = istio_subset_cluster(&p.host, p.port, subset);
                    let mut twin = parent.clone();
                    twin["name"] = json!(name);
                    twin["load_assignment"]["cluster_name"] = json!(name);
                    subsets.push(twin);
                }
            }
        }
    }
    clusters.extend(subsets);
    // Other services on the same listener (a sidecar's port-80 outbound listener serves every
    // port-80 service; a gateway every host of its servers): one virtual host and cluster each.
    let mut virtual_hosts: Vec<Value> = services
        .iter()
        .map(|s| {
            let cluster = format!("outbound|80||{}", s.host);
            clusters.push(json!({"name": cluster, "type": "STATIC", "connect_timeout": "10s",
                "load_assignment": {"cluster_name": cluster, "endpoints": [{"lb_endpoints": [{"endpoint": {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": s.port}}}}]}]}}));
            json!({"name": format!("{}:80", s.host), "domains": [s.host, format!("{}:80", s.host)],
                   "routes": [{"name": "default", "match": {"prefix": "/"}, "route": {"cluster": cluster, "timeout": "0s"}}]})
        })
        .collect();
    let not_found = "{\"error\":{\"message\":\"not found\",\"type\":\"invalid_request_error\",\"code\":\"not_found\",\"param\":null}}";
    virtual_hosts.push(json!({
        "name": format!("{host}:80"),
        "domains": [host, format!("{host}:80")],
        // The VirtualService's route: everything not routed gets a 404.
        "routes": [{"name": "switchyard-unrouted", "match": {"prefix": "/"},
                    "direct_response": {"status": 404, "body": {"inline_string": not_found}}}]
    }));
    json!({
        // Istio's node identity (ECDS needs one).
        "node": node,
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [{
                "name": listener,
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                "enable_reuse_port": false,
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": format!("outbound_{listener}"),
                        "route_config": {"name": route, "virtual_hosts": virtual_hosts},
                        // Istio's order (Istio-only filters such as istio.stats, istio.alpn and
                        // metadata exchange do not exist in upstream Envoy and are left out):
                        // CORS, fault, the router. The EnvoyFilter inserts Switchyard's.
                        "http_filters": [
                            {"name": "envoy.filters.http.cors", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}},
                            {"name": "envoy.filters.http.fault", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault"}},
                            {"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
                        ]
                    }
                }]}]
            }],
            "clusters": clusters
        }
    })
}

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
                                    if let Some(f) = filters.get_mut(at) {
                                        merge(&mut f["typed_config"], &value["typed_config"], false);
                                    }
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
            _ => return Err(format!("patch {i}: {apply_to}/{op} is not modelled")),
        }
        if applied == 0 {
            return Err(format!("patch {i} ({apply_to}/{op}) matched nothing in the Istio-shaped config"));
        }
    }
    Ok(())
}

/// Points every ADS config source of the HTTP filters (listener and cluster upstream filters)
/// at files in `dir` (`<name>.yaml`), and writes the extension configs there: Envoy then gets
/// them by ECDS as it would from istiod. A changed file (moved into place) is picked up live.
pub fn serve_extensions_from_files(boot: &mut Value, extensions: &Extensions, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    for (name, ext) in extensions {
        write_extension(dir, name, ext)?;
    }
    fn walk(v: &mut Value, dir: &Path) {
        match v {
            Value::Object(o) => {
                if let (Some(Value::String(name)), Some(cd)) = (o.get("name").cloned(), o.get_mut("config_discovery")) {
                    cd["config_source"] = json!({
                        "path_config_source": {"path": extension_path(dir, &name).to_string_lossy(), "watched_directory": {"path": dir.to_string_lossy()}},
                        "resource_api_version": "V3",
                        "initial_fetch_timeout": "0s"
                    });
                }
                for x in o.values_mut() {
                    walk(x, dir);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, dir)),
            _ => {}
        }
    }
    walk(boot, dir);
    Ok(())
}

pub fn extension_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{}.yaml", name.replace('/', "_")))
}

/// Writes one extension config as an ECDS discovery response, atomically (write + rename), so
/// Envoy's file watch never reads a half-written file.
pub fn write_extension(dir: &Path, name: &str, ext: &Value) -> Result<(), String> {
    let mut resource = ext.clone();
    resource["@type"] = json!("type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig");
    let doc = json!({"version_info": format!("{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)), "resources": [resource]});
    let path = extension_path(dir, name);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, &path).map_err(|e| e.to_string())
}

/// The whole egress-gateway configuration for a catalog, as a proxy would run it (`secret`: the
/// key Secret's data, mounted as the keys patch mounts it): istiod's
/// bootstrap shape, the EnvoyFilter applied (its extension configs), the ConfigMap mounted, and the
/// extension configs localized by istio-agent (module checked against `digest`). The entry
/// host is the catalog's `service_host`.
pub fn gateway_config(
    c: &Catalog,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
) -> Result<(Value, Extensions), String> {
    proxy_config(c, Variant::EgressGateway, ca_file, module, digest, secret)
}

/// Adds the cluster istiod generates for an in-mesh Kubernetes Service port named `grpc`
/// (protocol GRPC, so HTTP/2 to the workload): `outbound|<port>||<host>`, its endpoint the
/// workload at 127.0.0.1:`target` (EDS in a real mesh). The rate limit service is one.
pub fn add_grpc_service(boot: &mut Value, host: &str, port: u16, target: u16) -> Result<(), String> {
    let name = crate::catalog::istio_cluster(host, port);
    let clusters = boot
        .pointer_mut("/static_resources/clusters")
        .and_then(Value::as_array_mut)
        .ok_or("no clusters in the proxy configuration")?;
    if clusters.iter().any(|c| c["name"] == json!(name)) {
        return Err(format!("cluster {name} already exists"));
    }
    clusters.push(json!({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "lb_policy": "LEAST_REQUEST",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": target}}}}]}]},
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}}
    }));
    Ok(())
}

/// Another mesh service (plain HTTP on port 80) on the proxy's listener.
#[derive(Clone, Debug)]
pub struct MeshService {
    pub host: String,
    /// Where its workload listens (127.0.0.1).
    pub port: u16,
}

/// As `gateway_config`, for either variant. `secret`: the key Secret's data (mounted for
/// `keys: files`).
pub fn proxy_config(
    c: &Catalog,
    v: Variant,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
) -> Result<(Value, Extensions), String> {
    proxy_config_with_services(c, v, ca_file, module, digest, secret, &[])
}

/// As `proxy_config`, with other services' virtual hosts on the same listener.
pub fn proxy_config_with_services(
    c: &Catalog,
    v: Variant,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
    services: &[MeshService],
) -> Result<(Value, Extensions), String> {
    use crate::istio::{envoy_filter, providers_resources, sds_config_map, KEYS_MOUNT, SDS_MOUNT};
    let cfg = c.envoy_stack(module.to_path_buf(), &BTreeMap::new());
    let mut boot = proxy_bootstrap(
        c,
        v,
        ca_file,
        cfg.max_concurrent_failovers,
        &c.istio.service_host,
        &providers_resources(c, v, &cfg),
        services,
    );
    let mut extensions = BTreeMap::new();
    let ef = envoy_filter(c, v, &cfg, digest);
    apply_envoy_filter(&mut boot, &ef, v.context(), &mut extensions)?;
    for ext in extensions.values_mut() {
        agent_localize(ext, digest, module)?;
    }
    let config_map = sds_config_map(c, &cfg);
    let volumes = [
        Volume {
            mount: SDS_MOUNT.into(),
            files: config_map["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
        },
        Volume { mount: KEYS_MOUNT.into(), files: secret.to_vec() },
    ];
    mount_volumes(&mut boot, &volumes, &crate::envoy::work_dir("istio-volumes"))?;
    Ok((boot, extensions))
}

/// A volume mounted into istio-proxy (as `keys_patch` mounts the ConfigMap and the key Secret):
/// its files by name.
pub struct Volume {
    pub mount: String,
    pub files: Vec<(String, String)>,
}

/// Mounts `volumes` the way the kubelet would: each one's files written to its own directory
/// under `dir`, and every path under a mount, in the configuration and in the volumes' own
/// (JSON) files, pointed there. A path under a mount that its volume does not hold is an error,
/// as the proxy would find no such file.
pub fn mount_volumes(boot: &mut Value, volumes: &[Volume], dir: &Path) -> Result<(), String> {
    let dirs: Vec<PathBuf> = (0..volumes.len()).map(|i| dir.join(format!("volume-{i}"))).collect();
    let local = |path: &str| -> Result<Option<String>, String> {
        for (v, d) in volumes.iter().zip(&dirs) {
            if path == v.mount {
                return Ok(Some(d.to_string_lossy().into_owned()));
            }
            if let Some(file) = path.strip_prefix(v.mount.as_str()).and_then(|f| f.strip_prefix('/')) {
                if !v.files.iter().any(|(n, _)| n == file) {
                    return Err(format!("{path}: not in the volume mounted at {}", v.mount));
                }
                return Ok(Some(d.join(file).to_string_lossy().into_owned()));
            }
        }
        Ok(None)
    };
    fn walk(v: &mut Value, local: &dyn Fn(&str) -> Result<Option<String>, String>) -> Result<(), String> {
        match v {
            Value::String(path) => {
                if let Some(p) = local(path)? {
                    *path = p;
                }
            }
            Value::Object(o) => o.values_mut().try_for_each(|x| walk(x, local))?,
            Value::Array(a) => a.iter_mut().try_for_each(|x| walk(x, local))?,
            _ => {}
        }
        Ok(())
    }
    for (v, d) in volumes.iter().zip(&dirs) {
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
        for (name, content) in &v.files {
            let text = match serde_json::from_str::<Value>(content) {
                Ok(mut doc) if doc.is_object() => {
                    walk(&mut doc, &local)?;
                    doc.to_string()
                }
                _ => content.clone(),
            };
            std::fs::write(d.join(name), text).map_err(|e| e.to_string())?;
        }
    }
    walk(boot, &local)
}

/// The Envoy inside the claimed Istio release's istio-proxy (`make envoy-matrix` installs it).
pub fn istio_envoy() -> PathBuf {
    let (release, envoy) = crate::istio::ISTIO_RELEASES[0];
    let path = crate::envoy::envoy_release(envoy);
    assert!(path.exists(), "Envoy {envoy} (Istio {release}'s) is not installed: run `make envoy-matrix`");
    path
}

/// The key Secret's data tests mount: `key-for-<name>` per `credential.env`.
pub fn test_secret(c: &Catalog) -> Vec<(String, String)> {
    c.env_keys().into_iter().map(|k| (k.clone(), format!("key-for-{k}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot() -> Value {
        json!({"static_resources": {
            "listeners": [{"name": "0.0.0.0_8080", "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {"http_filters": [{"name": "a"}, {"name": "envoy.filters.http.router"}],
                                 "route_config": {"virtual_hosts": [{"name": "h:80", "routes": [{"name": "vs"}]}]}}}]}]}],
            "clusters": [{"name": "outbound|443||p", "circuit_breakers": {"thresholds": [{"max_retries": 3}]},
                          "typed_extension_protocol_options": {"k": {"istio": true, "x": 1}}}]
        }})
    }

    fn ef(patches: Value) -> Value {
        json!({"spec": {"configPatches": patches}})
    }

    #[test]
    fn patches_apply_with_istio_semantics() {
        let mut b = boot();
        let mut ext = Extensions::new();
        let sub = |n: &str| json!({"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": n}}}}});
        let patches = json!([
            {"applyTo": "HTTP_FILTER", "match": sub("envoy.filters.http.router"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "b"}}},
            {"applyTo": "HTTP_FILTER", "match": sub("a"), "patch": {"operation": "REPLACE", "value": {"name": "a2"}}},
            {"applyTo": "HTTP_FILTER", "match": sub("envoy.filters.http.router"), "patch": {"operation": "MERGE", "value": {"name": "envoy.filters.http.router", "typed_config": {"suppress_envoy_headers": true}}}},
            // Another context: skipped.
            {"applyTo": "HTTP_FILTER", "match": {"context": "SIDECAR_OUTBOUND", "listener": {"filterChain": {"filter": {"name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": "a2"}}}}}, "patch": {"operation": "INSERT_BEFORE", "value": {"name": "nope"}}},
            {"applyTo": "HTTP_ROUTE", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "h:80"}}}, "patch": {"operation": "INSERT_FIRST", "value": {"name": "routed"}}},
            {"applyTo": "VIRTUAL_HOST", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "h:80"}}}, "patch": {"operation": "MERGE", "value": {"include_request_attempt_count": true}}},
            {"applyTo": "CLUSTER", "match": {"context": "GATEWAY", "cluster": {"name": "outbound|443||p"}}, "patch": {"operation": "MERGE", "value": {
                "circuit_breakers": {"thresholds": [{"max_retries": 9}]},
                "typed_extension_protocol_options": {"k": {"mine": true}}}}},
            {"applyTo": "EXTENSION_CONFIG", "patch": {"operation": "ADD", "value": {"name": "e", "typed_config": {}}}}
        ]);
        apply_envoy_filter(&mut b, &ef(patches), "GATEWAY", &mut ext).unwrap();
        let hcm = &b["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
        let names: Vec<&str> =
            hcm["http_filters"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["a2", "b", "envoy.filters.http.router"]);
        assert_eq!(hcm["http_filters"][2]["typed_config"], json!({"suppress_envoy_headers": true}));
        assert_eq!(hcm["route_config"]["virtual_hosts"][0]["routes"], json!([{"name": "routed"}, {"name": "vs"}]));
        assert_eq!(hcm["route_config"]["virtual_hosts"][0]["include_request_attempt_count"], true);
        let c = &b["static_resources"]["clusters"][0];
        // Lists append (as proto merge does); map values are replaced whole, not merged.
        assert_eq!(c["circuit_breakers"]["thresholds"].as_array().unwrap().len(), 2);
        assert_eq!(c["typed_extension_protocol_options"]["k"], json!({"mine": true}));
        assert!(ext.contains_key("e"));
    }

    #[test]
    fn unmodelled_or_unmatched_patches_are_errors() {
        let mut ext = Extensions::new();
        let unknown = json!([{"applyTo": "LISTENER", "match": {"context": "GATEWAY"}, "patch": {"operation": "ADD", "value": {}}}]);
        assert!(apply_envoy_filter(&mut boot(), &ef(unknown), "GATEWAY", &mut ext)
            .unwrap_err()
            .contains("not modelled"));
        let filter = |port: u16, name: &str| {
            json!({"context": "GATEWAY", "listener": {"portNumber": port, "filterChain": {"filter": {
            "name": "envoy.filters.network.http_connection_manager", "subFilter": {"name": name}}}}})
        };
        for unmatched in [
            json!({"applyTo": "CLUSTER", "match": {"context": "GATEWAY", "cluster": {"name": "outbound|443||other"}}, "patch": {"operation": "MERGE", "value": {}}}),
            // A filter another release names differently: istiod would skip it silently.
            json!({"applyTo": "HTTP_FILTER", "match": filter(8080, "absent"), "patch": {"operation": "REPLACE", "value": {"name": "zz"}}}),
            // The right filter on another listener port.
            json!({"applyTo": "HTTP_FILTER", "match": filter(80, "a"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "zz"}}}),
            json!({"applyTo": "VIRTUAL_HOST", "match": {"context": "GATEWAY", "routeConfiguration": {"vhost": {"name": "other:80"}}}, "patch": {"operation": "MERGE", "value": {}}}),
        ] {
            let err = apply_envoy_filter(&mut boot(), &ef(json!([unmatched])), "GATEWAY", &mut ext).unwrap_err();
            assert!(err.contains("matched nothing"), "{err}");
        }
        assert!(apply_envoy_filter(
            &mut boot(),
            &ef(json!([{"applyTo": "HTTP_FILTER", "match": filter(8080, "a"), "patch": {"operation": "INSERT_BEFORE", "value": {"name": "ok"}}}])),
            "GATEWAY",
            &mut ext
        )
        .is_ok());
    }

    #[test]
    fn agent_checks_the_digest() {
        let mut e = json!({"typed_config": {"config": {"vm_config": {"code": {"remote": {"http_uri": {"uri": "oci://r/x:1"}, "sha256": "aa"}}}}}});
        assert!(agent_localize(&mut e.clone(), "bb", Path::new("/m.wasm")).unwrap_err().contains("does not match"));
        agent_localize(&mut e, "aa", Path::new("/m.wasm")).unwrap();
        assert_eq!(e["typed_config"]["config"]["vm_config"]["code"], json!({"local": {"filename": "/m.wasm"}}));
    }
}

/// What istio-agent adds to Envoy's command line for a pod annotated with a bootstrap override
/// (Istio 1.31, read from its source): the injection template mounts the ConfigMap that
/// `sidecar.istio.io/bootstrapOverride` names and sets `ISTIO_BOOTSTRAP_OVERRIDE` to its
/// `custom_bootstrap.json`; istio-agent passes that file's JSON as `--config-yaml`
/// (`pkg/envoy/proxy.go`), which Envoy merges into the bootstrap. Fails when the pod patch names
/// no override, or names a ConfigMap that is not rendered or has no such file.
pub fn bootstrap_override_args(pod_patch: &Value, config_maps: &[Value]) -> Result<Vec<String>, String> {
    let name = pod_patch["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/bootstrapOverride"]
        .as_str()
        .ok_or("the pod patch has no sidecar.istio.io/bootstrapOverride annotation")?;
    let map = config_maps
        .iter()
        .find(|m| m["kind"] == "ConfigMap" && m["metadata"]["name"] == name)
        .ok_or_else(|| format!("no ConfigMap {name} is rendered"))?;
    let file = map["data"]["custom_bootstrap.json"]
        .as_str()
        .ok_or_else(|| format!("ConfigMap {name} has no custom_bootstrap.json (the file istio-agent reads)"))?;
    let parsed: Value = serde_json::from_str(file).map_err(|e| format!("custom_bootstrap.json: {e}"))?;
    Ok(vec!["--config-yaml".to_string(), parsed.to_string()])
}
