//! A model of what Istio 1.31 makes of the rendered manifests, to run real Envoy on it (no
//! Kubernetes API server, istiod or istio-agent can run here). Each rule below was read in
//! istio/istio at release-1.31 (the file is named where the rule is applied), and the model
//! refuses what the real thing would refuse rather than guess:
//!
//! - Three install paths (`Install`): the Helm `gateway` chart (injected, its listener binds the
//!   Service's target port 80: `0.0.0.0_80`), istioctl's `istio-egress` chart (not injected,
//!   `0.0.0.0_8080`) and an injected application sidecar (outbound `0.0.0.0_80`), each a pod in
//!   its own namespace with the chart's labels.
//! - The keys patch applied to the pod template as a strategic merge patch, then checked as the
//!   API server would (a container needs an image), then injection (only where the chart
//!   injects: `image: auto` replaced, the bootstrap override annotation honoured), then the
//!   kubelet's mounts (a ConfigMap or Secret volume from the pod's own namespace, not optional).
//! - istio-agent: `ISTIO_BOOTSTRAP_OVERRIDE` -> `--config-yaml` (read from the mounted file),
//!   the Wasm module fetched and checked against `sha256`, or the deny-all RBAC substitute when
//!   it cannot be fetched.
//! - istiod: clusters from the ServiceEntries and DestinationRules exported to the proxy's
//!   namespace (host, port, TLS mode, SNI, subjectAltNames, circuit breakers, HTTP/2, subsets,
//!   all read from the manifests), the virtual host from the Gateway or the entry ServiceEntry
//!   and the VirtualService, EnvoyFilters selected by namespace (the root namespace applies
//!   everywhere, another only there) and `workloadSelector`, Telemetry by namespace.
//! - The EnvoyFilter's patches applied with istiod's semantics (listener `portNumber` against
//!   the listener's port, context, filter names). Stricter than istiod in two ways, both
//!   deliberate: a patch that matches nothing is an error here (istiod skips it silently, which
//!   is exactly how a wrong port went unnoticed), and so is an `HTTP_FILTER` `MERGE` on a filter
//!   without `typed_config` (istiod skips that too).
//!
//! Extension configs arrive by ECDS from files (Istio sends them over ADS).
//!
//! The native build (`istio_native`) adds: the sidecar template's `userVolume` annotations, the
//! kubelet's image volumes (the pinned image's layer unpacked into the volume) and the rule
//! that a dynamic module's library is a file of a volume mounted into `istio-proxy`
//! (`image_volumes`).

pub mod envoy_filter;
pub mod image_volumes;
mod pod;

pub use envoy_filter::apply_envoy_filter;
pub use pod::strategic_merge;
use pod::{admitted_pod, agent_override_args, proxy_volumes};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::catalog::Catalog;
use crate::istio::{Variant, VariantManifests};
use crate::oci::Image;

/// The extension configs (ECDS) a proxy receives, by name.
pub type Extensions = BTreeMap<String, Value>;

/// The mesh's root namespace (Istio's default `rootNamespace`): its EnvoyFilters apply to every
/// proxy (`PushContext::EnvoyFilters`, `pilot/pkg/model/push_context.go`).
pub const ROOT_NAMESPACE: &str = "istio-system";
/// The namespace the modelled application pod runs in (sidecar install path).
pub const APP_NAMESPACE: &str = "apps";
/// The proxy image the injector puts where a pod says `image: auto`.
const PROXY_IMAGE: &str = "docker.io/istio/proxyv2:1.31.0";

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

/// What istio-agent sends Envoy instead of a Wasm extension config whose module it cannot fetch
/// (`MaybeConvertWasmExtensionConfig`, `pkg/wasm/convert.go`): the same name, an HTTP RBAC filter
/// that denies everything (`rules: {}`), or allows everything for a `FAIL_OPEN` config.
pub fn agent_failed_pull(ext: &Value) -> Value {
    let fail_open = ext.pointer("/typed_config/config/failure_policy") == Some(&json!("FAIL_OPEN"));
    let rbac = if fail_open {
        json!({"@type": crate::istio::RBAC_TYPE_URL, "rules_stat_prefix": "wasm-default-allow"})
    } else {
        json!({"@type": crate::istio::RBAC_TYPE_URL, "rules": {}, "rules_stat_prefix": "wasm-default-deny"})
    };
    json!({"name": ext["name"], "typed_config": rbac})
}

/// Where the proxy runs: the chart or the sidecar that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Install {
    /// The Helm `gateway` chart (`manifests/charts/gateway`): Service 80 -> target 80, the
    /// gateway's listener binds 80; the Deployment's `istio-proxy` is `image: auto` and
    /// injected with the gateway template.
    HelmGateway,
    /// istioctl's `istio-egress` chart (`manifests/charts/gateways/istio-egress`): Service 80 ->
    /// 8080, the listener binds 8080; the pod is not injected (`sidecar.istio.io/inject:
    /// "false"`) and its `istio-proxy` names its image.
    IstioctlGateway,
    /// An application pod in `APP_NAMESPACE` with an injected sidecar (outbound listener 80).
    Sidecar,
}

impl Install {
    pub const ALL: [Install; 3] = [Install::HelmGateway, Install::IstioctlGateway, Install::Sidecar];

    pub fn variant(self) -> Variant {
        match self {
            Install::HelmGateway | Install::IstioctlGateway => Variant::EgressGateway,
            Install::Sidecar => Variant::Sidecar,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Install::HelmGateway => "helm-gateway",
            Install::IstioctlGateway => "istioctl-egress",
            Install::Sidecar => "sidecar",
        }
    }

    /// The listener Switchyard's host is served on and its route configuration's name: a
    /// gateway's named by the bound port (the Service's target port,
    /// `pilot/pkg/model/gateway.go`), a sidecar's outbound HTTP listener by the service port.
    pub fn listener(self) -> (u16, &'static str) {
        match self {
            Install::HelmGateway => (80, "http.80"),
            Install::IstioctlGateway => (8080, "http.8080"),
            Install::Sidecar => (80, "80"),
        }
    }

    fn injected(self) -> bool {
        self != Install::IstioctlGateway
    }

    /// The pod as its chart (or the application) declares it, before the keys patch: its
    /// namespace, labels and containers. The gateways' labels are the charts' defaults for an
    /// egress gateway (`istio: egressgateway`), the application's the ones docs/istio.md asks
    /// for; none is read from the catalog, so a selector that does not match them fails.
    pub fn pod(self) -> Value {
        match self {
            Install::HelmGateway => json!({
                "metadata": {"namespace": ROOT_NAMESPACE,
                             "labels": {"app": "istio-egressgateway", "istio": "egressgateway", "sidecar.istio.io/inject": "true"},
                             "annotations": {"inject.istio.io/templates": "gateway"}},
                "spec": {"containers": [{"name": "istio-proxy", "image": "auto"}]}
            }),
            Install::IstioctlGateway => json!({
                "metadata": {"namespace": ROOT_NAMESPACE,
                             "labels": {"app": "istio-egressgateway", "istio": "egressgateway", "sidecar.istio.io/inject": "false"},
                             "annotations": {"sidecar.istio.io/inject": "false"}},
                "spec": {"containers": [{"name": "istio-proxy", "image": PROXY_IMAGE, "args": ["proxy", "router"]}]}
            }),
            Install::Sidecar => json!({
                "metadata": {"namespace": APP_NAMESPACE,
                             "labels": {"app": "llm-app", "switchyard.io/llm-client": "true"}},
                "spec": {"containers": [{"name": "app", "image": "registry.example/llm-app:1"}]}
            }),
        }
    }
}

fn labels_match(selector: &Value, labels: &Value) -> bool {
    selector.as_object().into_iter().flatten().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether a resource's `exportTo` lets a proxy in `ns` see it (absent: everywhere; `.`: its own
/// namespace; `*`: everywhere; else the namespaces named).
fn exported_to(resource: &Value, ns: &str) -> bool {
    let Some(list) = resource["spec"]["exportTo"].as_array() else { return true };
    let own = resource["metadata"]["namespace"].as_str().unwrap_or_default();
    list.iter().filter_map(Value::as_str).any(|e| e == "*" || e == ns || (e == "." && own == ns))
}

/// The EnvoyFilters istiod applies to a proxy (`PushContext::EnvoyFilters`): those of the root
/// namespace and of the proxy's own namespace whose `workloadSelector` matches the pod's labels.
pub fn envoy_filters_for<'a>(pod: &Value, resources: &'a [Value]) -> Vec<&'a Value> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    resources
        .iter()
        .filter(|r| r["kind"] == "EnvoyFilter")
        .filter(|r| {
            let at = r["metadata"]["namespace"].as_str().unwrap_or_default();
            at == ROOT_NAMESPACE || at == ns
        })
        .filter(|r| labels_match(&r["spec"]["workloadSelector"]["labels"], &pod["metadata"]["labels"]))
        .collect()
}

/// The Telemetry resources istiod applies to a proxy (`pilot/pkg/model/telemetry.go`): the root
/// namespace's without a selector, and those of the proxy's namespace without a selector or whose
/// selector matches the pod. A selector-based Telemetry elsewhere applies to nobody.
pub fn telemetries_for<'a>(pod: &Value, resources: &'a [Value]) -> Vec<&'a Value> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    resources
        .iter()
        .filter(|r| r["kind"] == "Telemetry")
        .filter(|r| {
            let at = r["metadata"]["namespace"].as_str().unwrap_or_default();
            let selector = &r["spec"]["selector"]["matchLabels"];
            let unselected = selector.as_object().is_none_or(|o| o.is_empty());
            (at == ROOT_NAMESPACE && unselected)
                || (at == ns && (unselected || labels_match(selector, &pod["metadata"]["labels"])))
        })
        .collect()
}

/// The clusters istiod builds for a proxy in `ns` from the ServiceEntries and DestinationRules
/// exported there (`pilot/pkg/networking/core/cluster_builder.go`, `cluster_traffic_policy.go`):
/// `outbound|<port>||<host>` per ServiceEntry host and port, one more per DestinationRule subset
/// (`outbound|<port>|<subset>|<host>`, the same policy), TLS origination from the port's `tls`
/// (`SIMPLE`: `sni`, `subjectAltNames`, the CA bundle: `ca_file` stands for the system one),
/// HTTP/2 with `h2UpgradePolicy: UPGRADE`, and the circuit breakers of `connectionPool`
/// (istiod's defaults are unlimited once a connection pool is set; Envoy's, 3 retries, without).
/// A `resolution: DNS` endpoint is 127.0.0.1 at the ServiceEntry's port, named by its host (as
/// Envoy names the host of a DNS cluster); the host and port come from the manifests only.
pub fn clusters_from_manifests(resources: &[Value], ns: &str, ca_file: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for se in resources.iter().filter(|r| r["kind"] == "ServiceEntry" && exported_to(r, ns)) {
        let spec = &se["spec"];
        for host in spec["hosts"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            for port in spec["ports"].as_array().into_iter().flatten() {
                let number =
                    port["number"].as_u64().ok_or_else(|| format!("ServiceEntry {host}: a port without number"))?;
                let endpoint = match spec["resolution"].as_str() {
                    Some("DNS") => {
                        json!({"address": {"socket_address": {"address": "127.0.0.1", "port_value": number}}, "hostname": host})
                    }
                    Some("STATIC") => {
                        let address = spec["endpoints"][0]["address"]
                            .as_str()
                            .ok_or("a STATIC ServiceEntry without endpoints")?;
                        json!({"address": {"socket_address": {"address": address, "port_value": number}}})
                    }
                    other => return Err(format!("ServiceEntry {host}: resolution {other:?} is not modelled")),
                };
                let dr = resources
                    .iter()
                    .find(|r| r["kind"] == "DestinationRule" && r["spec"]["host"] == host && exported_to(r, ns));
                let name = crate::catalog::istio_cluster(host, number as u16);
                let mut cluster = json!({
                    "name": name, "type": "STATIC", "connect_timeout": "10s", "lb_policy": "LEAST_REQUEST",
                    "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": endpoint}]}]},
                    "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                        "common_http_protocol_options": {"idle_timeout": "3600s"},
                        "explicit_http_config": {"http_protocol_options": {}}}}
                });
                let mut subsets = Vec::new();
                if let Some(dr) = dr {
                    let policy = &dr["spec"]["trafficPolicy"];
                    let pool = &policy["connectionPool"];
                    if pool.is_object() {
                        let pick = |v: &Value| v.as_u64().filter(|n| *n > 0).unwrap_or(u64::from(u32::MAX));
                        cluster["circuit_breakers"] = json!({"thresholds": [{
                            "max_connections": pick(&pool["tcp"]["maxConnections"]),
                            "max_pending_requests": pick(&pool["http"]["http1MaxPendingRequests"]),
                            "max_requests": pick(&pool["http"]["http2MaxRequests"]),
                            "max_retries": pick(&pool["http"]["maxRetries"])
                        }]});
                    }
                    let http2 = pool["http"]["h2UpgradePolicy"] == "UPGRADE";
                    if http2 {
                        cluster["typed_extension_protocol_options"]
                            ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]["explicit_http_config"] =
                            json!({"http2_protocol_options": {}});
                    }
                    let port_tls = policy["portLevelSettings"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|s| s["port"]["number"].as_u64() == Some(number))
                        .map(|s| &s["tls"])
                        .filter(|t| t.is_object())
                        .unwrap_or(&policy["tls"]);
                    match port_tls["mode"].as_str() {
                        None | Some("DISABLE") => {}
                        Some("SIMPLE") => {
                            let sans: Vec<Value> = port_tls["subjectAltNames"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|s| json!({"san_type": "DNS", "matcher": {"exact": s}}))
                                .collect();
                            let mut validation = json!({"trusted_ca": {"filename": ca_file}});
                            if !sans.is_empty() {
                                validation["match_typed_subject_alt_names"] = json!(sans);
                            }
                            let alpn = if http2 { json!(["h2", "http/1.1"]) } else { json!(["http/1.1"]) };
                            let mut tls = json!({
                                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                                "common_tls_context": {"alpn_protocols": alpn, "validation_context": validation}
                            });
                            if let Some(sni) = port_tls["sni"].as_str() {
                                tls["sni"] = json!(sni);
                            }
                            cluster["transport_socket"] =
                                json!({"name": "envoy.transport_sockets.tls", "typed_config": tls});
                        }
                        Some(other) => return Err(format!("DestinationRule {host}: tls mode {other} is not modelled")),
                    }
                    for subset in dr["spec"]["subsets"].as_array().into_iter().flatten() {
                        if subset.get("labels").is_some() || subset.get("trafficPolicy").is_some() {
                            return Err(format!(
                                "DestinationRule {host}: a subset with labels or its own policy is not modelled"
                            ));
                        }
                        let sub = subset["name"].as_str().ok_or("a subset without a name")?;
                        let sub_name = crate::catalog::istio_subset_cluster(host, number as u16, sub);
                        let mut twin = cluster.clone();
                        twin["name"] = json!(sub_name);
                        twin["load_assignment"]["cluster_name"] = json!(sub_name);
                        subsets.push(twin);
                    }
                }
                out.push(cluster);
                out.extend(subsets);
            }
        }
    }
    Ok(out)
}

/// Switchyard's virtual host on the proxy: the VirtualService's host (exported to the proxy) as
/// istiod names it, `<host>:<port>` with the Gateway server's port (a gateway, whose Gateway must
/// select the pod and be the one the VirtualService names) or the entry ServiceEntry's port (a
/// sidecar, which must see that ServiceEntry). The VirtualService's direct response becomes its
/// route.
fn entry_virtual_host(install: Install, pod: &Value, resources: &[Value]) -> Result<Value, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let vs = resources
        .iter()
        .find(|r| r["kind"] == "VirtualService" && exported_to(r, ns))
        .ok_or_else(|| format!("{}: no VirtualService is exported to namespace {ns}", install.name()))?;
    let host = vs["spec"]["hosts"][0].as_str().ok_or("a VirtualService without hosts")?;
    let port = match install.variant() {
        Variant::EgressGateway => {
            let gw_name = vs["spec"]["gateways"][0].as_str().ok_or("the VirtualService names no gateway")?;
            let gw = resources
                .iter()
                .find(|r| {
                    r["kind"] == "Gateway"
                        && r["metadata"]["name"] == gw_name
                        && r["metadata"]["namespace"] == vs["metadata"]["namespace"]
                })
                .ok_or_else(|| format!("no Gateway {gw_name} beside the VirtualService"))?;
            if !labels_match(&gw["spec"]["selector"], &pod["metadata"]["labels"]) {
                return Err(format!("{}: Gateway {gw_name} does not select the gateway pod", install.name()));
            }
            gw["spec"]["servers"][0]["port"]["number"].as_u64().ok_or("a Gateway server without a port")?
        }
        Variant::Sidecar => resources
            .iter()
            .find(|r| r["kind"] == "ServiceEntry" && exported_to(r, ns) && r["spec"]["hosts"][0] == host)
            .and_then(|se| se["spec"]["ports"][0]["number"].as_u64())
            .ok_or_else(|| format!("{}: no ServiceEntry for {host} is exported to namespace {ns}", install.name()))?,
    };
    let direct = &vs["spec"]["http"][0]["directResponse"];
    let route = json!({"name": vs["spec"]["http"][0]["name"], "match": {"prefix": "/"},
        "direct_response": {"status": direct["status"], "body": {"inline_string": direct["body"]["string"]}}});
    Ok(json!({"name": format!("{host}:{port}"), "domains": [host, format!("{host}:{port}")], "routes": [route]}))
}

/// A proxy's configuration before EnvoyFilter patches, as istiod would generate it: the listener
/// of the install path (`Install::listener`, Istio's HTTP filters CORS, fault, router), Switchyard's
/// virtual host, other services' virtual hosts beside it (`services`), and the clusters of the
/// rendered ServiceEntries and DestinationRules.
pub fn proxy_bootstrap(
    install: Install,
    pod: &Value,
    resources: &[Value],
    ca_file: &str,
    services: &[MeshService],
) -> Result<Value, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let node = match install.variant() {
        Variant::EgressGateway => {
            json!({"id": format!("router~127.0.0.1~istio-egressgateway-0.{ns}~{ns}.svc.cluster.local"), "cluster": format!("istio-egressgateway.{ns}")})
        }
        Variant::Sidecar => {
            json!({"id": format!("sidecar~127.0.0.1~llm-app-0.{ns}~{ns}.svc.cluster.local"), "cluster": format!("llm-app.{ns}")})
        }
    };
    let (port, route) = install.listener();
    let listener = format!("0.0.0.0_{port}");
    let mut clusters = clusters_from_manifests(resources, ns, ca_file)?;
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
    virtual_hosts.push(entry_virtual_host(install, pod, resources)?);
    Ok(json!({
        // Istio's node identity (ECDS needs one).
        "node": node,
        // Istio's runtime layers (`tools/packaging/common/envoy_bootstrap.json`): a bootstrap
        // override's layers are appended after them.
        "layered_runtime": {"layers": [{"name": "global config", "static_layer": {}}, {"name": "admin", "admin_layer": {}}]},
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
    }))
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

/// One proxy as its install path runs it: the Envoy configuration (volumes mounted), the
/// extension configs istio-agent hands Envoy, and the agent's extra Envoy arguments (the
/// bootstrap override's `--config-yaml`).
pub struct Proxy {
    pub boot: Value,
    pub extensions: Extensions,
    pub args: Vec<String>,
    /// The pod after the keys patch and injection.
    pub pod: Value,
}

/// Every step from the rendered manifests of a variant to a runnable proxy on an install path:
/// the keys patch admitted and injected, the volumes mounted from the pod's namespace,
/// istio-agent's bootstrap override, istiod's clusters and listener, the EnvoyFilters that select
/// the pod applied, and the extension configs fetched (`failed_pulls`: the names whose module
/// istio-agent cannot fetch; it substitutes its RBAC filter). `secret`: the key Secret's data.
#[allow(clippy::too_many_arguments)]
pub fn install_proxy(
    manifests: &VariantManifests,
    install: Install,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
    services: &[MeshService],
    failed_pulls: &[&str],
) -> Result<Proxy, String> {
    let registry = Registry { images: &[] };
    install_proxy_from(manifests, install, ca_file, module, digest, secret, services, failed_pulls, &registry)
}

/// The images the registry serves the kubelet (image volumes), by their manifest digest.
pub struct Registry<'a> {
    pub images: &'a [&'a Image],
}

/// `install_proxy` with the images the kubelet can pull (`registry`).
#[allow(clippy::too_many_arguments)]
pub fn install_proxy_from(
    manifests: &VariantManifests,
    install: Install,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
    services: &[MeshService],
    failed_pulls: &[&str],
    registry: &Registry,
) -> Result<Proxy, String> {
    let resources: Vec<Value> = manifests.providers.iter().chain(&manifests.main).cloned().collect();
    let pod = admitted_pod(install, &manifests.keys_patch)?;
    let volumes = proxy_volumes(&pod, &resources, secret, registry.images)?;
    let args = agent_override_args(&pod, &volumes)?;
    let mut boot = proxy_bootstrap(install, &pod, &resources, ca_file, services)?;
    let filters = envoy_filters_for(&pod, &resources);
    if filters.is_empty() {
        return Err(format!("{}: no EnvoyFilter selects the pod", install.name()));
    }
    let mut extensions = BTreeMap::new();
    for ef in filters {
        apply_envoy_filter(&mut boot, ef, install.variant().context(), &mut extensions)?;
    }
    for (name, ext) in extensions.iter_mut() {
        if failed_pulls.contains(&name.as_str()) {
            *ext = agent_failed_pull(ext);
        } else {
            agent_localize(ext, digest, module)?;
        }
    }
    let mounts: Vec<String> = volumes.iter().map(|v| v.mount.clone()).collect();
    image_volumes::check_module_files(&boot, &mounts)?;
    mount_volumes(&mut boot, &volumes, &crate::envoy::work_dir(&format!("istio-volumes-{}", install.name())))?;
    Ok(Proxy { boot, extensions, args, pod })
}

/// The native build (`deployment.istio.build: native`) of what `make render` writes for the
/// catalog, installed with the registry serving `library` (the library image, whose digest the
/// manifests pin): no extension configs, the library mounted from the image volume.
pub fn install_native(
    c: &Catalog,
    install: Install,
    ca_file: &str,
    library: &Image,
    secret: &[(String, String)],
    services: &[MeshService],
) -> Result<Proxy, String> {
    let cfg = c.envoy_stack(PathBuf::from("unused.wasm"), &BTreeMap::new());
    let digest = library.digest();
    let manifests = crate::istio::variant_manifests(c, install.variant(), &cfg, &digest);
    let registry = Registry { images: &[library] };
    install_proxy_from(
        &manifests,
        install,
        ca_file,
        Path::new("unused.wasm"),
        &digest,
        secret,
        services,
        &[],
        &registry,
    )
}

/// `install_proxy` on what `make render` writes for the catalog (module checked against `digest`).
pub fn install_config(
    c: &Catalog,
    install: Install,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
    services: &[MeshService],
) -> Result<Proxy, String> {
    let cfg = c.envoy_stack(module.to_path_buf(), &BTreeMap::new());
    let manifests = crate::istio::variant_manifests(c, install.variant(), &cfg, digest);
    install_proxy(&manifests, install, ca_file, module, digest, secret, services, &[])
}

/// The Helm-chart egress gateway's configuration and extension configs (`install_config`).
pub fn gateway_config(
    c: &Catalog,
    ca_file: &str,
    module: &Path,
    digest: &str,
    secret: &[(String, String)],
) -> Result<(Value, Extensions), String> {
    install_config(c, Install::HelmGateway, ca_file, module, digest, secret, &[]).map(|p| (p.boot, p.extensions))
}

/// A volume mounted into istio-proxy (as `keys_patch` mounts the ConfigMap and the key Secret):
/// its text files by name, and the files of an image volume (`binaries`, written as they are).
#[derive(Debug)]
pub struct Volume {
    pub mount: String,
    pub files: Vec<(String, String)>,
    pub binaries: Vec<(String, Vec<u8>)>,
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
                if !v.files.iter().any(|(n, _)| n == file) && !v.binaries.iter().any(|(n, _)| n == file) {
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
        for (name, bytes) in &v.binaries {
            let path = d.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            std::fs::write(path, bytes).map_err(|e| e.to_string())?;
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
mod tests;
