//! Istio manifests rendered from the catalog (`k8s/`), and a small model of how Istio turns
//! them into Envoy configuration, so tests can run real Envoy on what Istio would generate.
//!
//! What goes where, and why:
//! - `ServiceEntry` + `DestinationRule` per provider: Istio creates the cluster
//!   `outbound|443||<host>` with DNS resolution, TLS origination (SNI, certificate checked
//!   against the system CA bundle and the host name) and the circuit breakers failover needs.
//! - `EnvoyFilter` `switchyard-failover`: everything Switchyard adds to the proxy: the decision
//!   filter before the router and the per-attempt filter in each provider cluster's upstream
//!   chain (both Wasm, delivered as extension configs by ECDS with the module's OCI URL and
//!   sha256, which istio-agent pulls and verifies), the failover route (the matcher cluster
//!   specifier on the slot headers + retry policy, marked as Switchyard's), and the attempt
//!   count on the virtual host. No WasmPlugin (see `envoy_filter`).
//! - First attempts without the per-attempt Wasm (as in the plain-Envoy configuration): each
//!   `DestinationRule` has a subset `first` without labels, so Istio builds a second cluster to
//!   the same endpoints with the same TLS, `outbound|<port>|first|<host>`; the EnvoyFilter gives
//!   it the first-attempt hook and the provider's key injector (its key by SDS from a file of the
//!   ConfigMap `switchyard-sds`) instead of the Wasm, maps it in the failover route, and makes the
//!   router add no `x-envoy-*` headers; the plugin configuration names it per provider
//!   (`first_attempt_cluster`).
//! - The native build (`deployment.istio.build: native`): the same filters as an Envoy dynamic
//!   module, inserted inline instead of the Wasm extension configs, the library mounted into
//!   `istio-proxy` from an image volume (`istio_native`).

use serde_json::{json, Value};
use switchyard::answer::errors::{anthropic_type, google_status};
use switchyard::wiring::{ATTEMPT_ROOT_ID, DECISION_ROOT_ID, FIRST_ATTEMPT_ROOT_ID, OWN_REPLY_HEADER};

use crate::catalog::KeyDelivery;
use crate::catalog::{Catalog, ProviderHost, FIRST_ATTEMPT_SUBSET};
use crate::envoy::{
    anthropic_path_regex, credential_injector, file_safe, first_attempt_filters, first_attempt_twins,
    google_path_regex, key_injectors, local_reply_config, mark_route, provider_protocol_options, route_mark_filter,
    routed_route, sds_file_content, sds_file_secret, sds_keyed, tls_scheme_metadata, twin_secret, unrouted_route,
    upstream_filters, with_aws_signing, with_first_attempt_clusters, with_handoff, with_injected_keys, HandoffWiring,
    SdsKeyed, StackConfig, Twin, DECISION_FILTER, FIRST_ATTEMPT_CONFIGURATION,
};
use crate::istio_native;
// Defined apart so that `istio_native` can use it without importing this file; still named
// `istio::Variant` by its users.
pub use crate::istio_variant::Variant;
use crate::workload_identity;

pub const WASM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
/// What istio-agent serves instead of a Wasm extension config whose module it cannot fetch
/// (`pkg/wasm/convert.go` at release-1.31): the same name with an HTTP RBAC filter, deny-all
/// (`rules: {}`, stat prefix `wasm-default-deny`) unless the config is `FAIL_OPEN`.
pub const RBAC_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC";
/// The Istio releases the manifests are for, each with the Envoy release inside its istio-proxy
/// (the version-matrix test runs the Istio-shaped configuration on that Envoy). 1.28-1.29 build
/// no matcher cluster specifier, and 1.30's Envoy 1.38 has no `refresh_cluster_on_retry`.
pub const ISTIO_RELEASES: [(&str, &str); 1] = [("1.31", "1.39.3")];
/// The releases the manifests do not support, and what they lack (checked by a test).
pub const ISTIO_UNSUPPORTED: [(&str, &str); 3] = [
    ("1.28", "envoy.router.cluster_specifier_plugin.matcher is not built"),
    ("1.29", "envoy.router.cluster_specifier_plugin.matcher is not built"),
    ("1.30", "its Envoy 1.38 has no refresh_cluster_on_retry"),
];

fn metadata(name: &str, c: &Catalog) -> Value {
    metadata_in(name, &c.istio.namespace)
}

fn metadata_in(name: &str, namespace: &str) -> Value {
    json!({"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "switchyard"}})
}

/// Provider cluster settings shared by the plain Envoy config and the DestinationRule.
pub struct PoolLimits {
    pub max_requests: u32,
    pub max_retries: u32,
}

impl PoolLimits {
    /// The same limits the Envoy generator sets (`envoy::provider_circuit_breakers`).
    pub fn of(cfg: &StackConfig) -> PoolLimits {
        PoolLimits { max_requests: cfg.max_requests_per_cluster, max_retries: cfg.max_concurrent_failovers }
    }
}

fn provider_cluster_names(c: &Catalog) -> Vec<String> {
    c.providers.iter().map(ProviderHost::cluster).collect()
}

/// The providers whose cluster gets a first-attempt twin (the subset `first`), one per cluster,
/// with the twin's key: with `cfg.first_attempt_clusters` on, those the plain-Envoy generator's
/// rule picks (`first_attempt_twins`; on Istio a cluster's authority is always its host).
pub fn first_attempt_providers<'a>(c: &'a Catalog, cfg: &StackConfig) -> Vec<(&'a ProviderHost, Twin)> {
    if !cfg.first_attempt_clusters {
        return Vec::new();
    }
    let names = provider_cluster_names(c);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    first_attempt_twins(&c.plugin_config(), &refs)
        .into_iter()
        .filter_map(|t| Some((c.providers.iter().find(|p| p.cluster() == t.cluster)?, t)))
        .collect()
}

/// Where the proxy finds the key files' SDS resources: the ConfigMap `SDS_CONFIG_MAP` mounted
/// into the `istio-proxy` container (`keys_patch`). Istio has no bootstrap secrets and its own SDS
/// serves certificates only, so a cluster's `credential_injector` reads its key by SDS from a
/// file there. Each file names where the key is: a file of the key Secret mounted at
/// `KEYS_MOUNT` (`deployment.istio.keys: files`), or the proxy's environment variable (`env`);
/// it holds no key itself.
pub const SDS_MOUNT: &str = "/etc/switchyard/sds";
pub const SDS_CONFIG_MAP: &str = "switchyard-sds";
/// Where the key Secret is mounted (`keys: files`), one file per `credential.env` name.
pub const KEYS_MOUNT: &str = "/etc/switchyard/keys";

/// The clusters whose own injectors add their providers' keys from the mounted Secret
/// (`keys: files`; the plain-Envoy generator's rule, `sds_keyed`).
pub fn keyed_clusters(c: &Catalog) -> Vec<SdsKeyed> {
    match c.istio.keys {
        KeyDelivery::Files => sds_keyed(&c.plugin_config()),
        KeyDelivery::Env => Vec::new(),
    }
}

/// The SDS file of a cluster's key.
fn sds_file(cluster: &str) -> String {
    format!("{}.json", file_safe(cluster))
}

/// The `credential_injector` secret reference of a cluster's key on Istio (a twin reads the one
/// of the cluster it copies): by SDS from its file, watched through the mounted directories (a
/// Secret or ConfigMap update swaps them).
fn sds_secret_ref(cluster: &str, watched: &str) -> Value {
    sds_file_secret(cluster, &format!("{SDS_MOUNT}/{}", sds_file(cluster)), watched)
}

/// The ConfigMap of SDS files in `namespace` (the proxy's: a pod mounts ConfigMaps from its own
/// namespace): one per keyed cluster (naming its key file), and one per other first-attempt twin
/// (naming the environment variable).
pub fn sds_config_map(c: &Catalog, cfg: &StackConfig, namespace: &str) -> Value {
    let mut data = serde_json::Map::new();
    let keyed = keyed_clusters(c);
    for k in &keyed {
        data.insert(sds_file(&k.cluster), json!(sds_file_content(&k.cluster, &format!("{KEYS_MOUNT}/{}", k.key))));
    }
    for (_, twin) in first_attempt_providers(c, cfg) {
        if keyed.iter().any(|k| k.cluster == twin.cluster) {
            continue;
        }
        if let Some(mut secret) = twin_secret(&twin) {
            secret["@type"] = json!("type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret");
            data.insert(sds_file(&twin.cluster), json!(json!({"resources": [secret]}).to_string()));
        }
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata_in(SDS_CONFIG_MAP, namespace), "data": data})
}

/// What an SDS file's watch follows: the key Secret's mount for keyed clusters (a rotated key
/// swaps it), else the ConfigMap's.
fn watched_for(c: &Catalog, cluster: &str) -> &'static str {
    if keyed_clusters(c).iter().any(|k| k.cluster == cluster) {
        KEYS_MOUNT
    } else {
        SDS_MOUNT
    }
}

/// The key variables the Wasm VM still reads (none with `keys: files` but a provider on a
/// cluster shared with another key).
fn vm_env_keys(c: &Catalog) -> Vec<String> {
    let keyed = keyed_clusters(c);
    c.env_keys().into_iter().filter(|e| !keyed.iter().any(|k| k.key == *e)).collect()
}

/// The plugin configuration on Istio: the catalog's, each provider naming its first-attempt
/// cluster, Istio's cluster of its `first` subset (the same rule as the plain-Envoy generator's).
pub fn plugin_config(c: &Catalog, cfg: &StackConfig) -> Value {
    let mut config = c.plugin_config();
    let names = provider_cluster_names(c);
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let twin = |cluster: &str| {
        c.providers.iter().find(|p| p.cluster() == cluster).map(ProviderHost::first_attempt_cluster).unwrap_or_default()
    };
    with_first_attempt_clusters(&mut config, cfg.first_attempt_clusters, &refs, &twin);
    with_injected_keys(&mut config, &keyed_clusters(c));
    with_handoff(&mut config, Some(&c.istio.handoff_key));
    if c.istio.tracing {
        crate::telemetry::with_request_attributes(&mut config);
    }
    config
}

/// With `deployment.istio.tracing`: a Telemetry resource for the variant's workloads whose
/// tracing custom tags are the request attributes (the same table as the plain-Envoy tracer's;
/// Istio 1.29+ turns a `formatter` tag into Envoy's `value` tag, read at release-1.31 in
/// `pilot/pkg/networking/core/tracing.go`). No provider is named: the mesh's default tracing
/// provider (or a namespace Telemetry's) is inherited, and so is its sampling. Istio replaces,
/// not merges, custom tags set at the mesh or namespace level for these workloads. In
/// `namespace`, the proxy's: istiod reads a Telemetry with a selector only in the proxy's own
/// namespace (`pilot/pkg/model/telemetry.go` at release-1.31; the root namespace's apply
/// mesh-wide only without a selector).
pub fn telemetry_resource(c: &Catalog, v: Variant, namespace: &str) -> Value {
    let mut tags = serde_json::Map::new();
    for a in crate::telemetry::REQUEST_ATTRIBUTES {
        let tag = match a.source {
            crate::telemetry::Source::Literal(value) => json!({"literal": {"value": value}}),
            s => json!({"formatter": {"value": s.format()}}),
        };
        tags.insert(a.span.to_string(), tag);
    }
    json!({
        "apiVersion": "telemetry.istio.io/v1",
        "kind": "Telemetry",
        "metadata": metadata_in("switchyard-genai", namespace),
        "spec": {"selector": {"matchLabels": v.labels(c)}, "tracing": [{"customTags": tags}]}
    })
}

/// Every provider's ServiceEntry + DestinationRule for a variant.
pub fn providers_resources(c: &Catalog, v: Variant, cfg: &StackConfig) -> Vec<Value> {
    let limits = PoolLimits::of(cfg);
    let firsts = first_attempt_providers(c, cfg);
    c.providers.iter().flat_map(|p| provider_resources(p, c, v, &limits, firsts.iter().any(|(f, _)| *f == p))).collect()
}

/// ServiceEntry + DestinationRule for one provider; `first_attempt`: with the subset `first`.
pub fn provider_resources(
    p: &ProviderHost,
    c: &Catalog,
    v: Variant,
    limits: &PoolLimits,
    first_attempt: bool,
) -> Vec<Value> {
    let name = format!("switchyard-{}", p.slug.replace(['/', '_', '.'], "-"));
    let service_entry = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "ServiceEntry",
        "metadata": metadata(&name, c),
        "spec": {
            "hosts": [p.host],
            "location": "MESH_EXTERNAL",
            "resolution": "DNS",
            // Plain HTTP inside the proxy: the DestinationRule originates TLS, so the filters
            // see (and rewrite) the request before it is encrypted.
            "ports": [{"number": p.port, "name": "http-provider", "protocol": "HTTP"}],
            "exportTo": v.export_to(c)
        }
    });
    let mut http = json!({
        // Every failover is an Envoy retry: the default of 3 concurrent retries per cluster
        // silently cuts failovers under load.
        "maxRetries": limits.max_retries,
        "http1MaxPendingRequests": limits.max_requests,
        "http2MaxRequests": limits.max_requests
    });
    if p.http2 {
        http["h2UpgradePolicy"] = json!("UPGRADE");
    }
    let mut destination_rule = json!({
        "apiVersion": "networking.istio.io/v1",
        "kind": "DestinationRule",
        "metadata": metadata(&name, c),
        "spec": {
            "host": p.host,
            "exportTo": v.export_to(c),
            "trafficPolicy": {
                "connectionPool": {"tcp": {"maxConnections": limits.max_requests}, "http": http},
                "portLevelSettings": [{
                    "port": {"number": p.port},
                    // No caCertificates: the proxy checks the provider against the system CA
                    // bundle; subjectAltNames pins the host name.
                    "tls": {"mode": "SIMPLE", "sni": p.host, "subjectAltNames": [p.host]}
                }]
            }
        }
    });
    if first_attempt {
        // No labels: every endpoint of the host. The subset inherits the traffic policy above
        // (TLS origination, limits); Istio names its cluster `outbound|<port>|first|<host>`.
        destination_rule["spec"]["subsets"] = json!([{"name": FIRST_ATTEMPT_SUBSET}]);
    }
    vec![service_entry, destination_rule]
}

/// The Wasm filter config of one of the module's roles, as the EnvoyFilter adds it (ECDS):
/// empty `vm_id` (every role shares one VM and its shared data), code from the OCI image that
/// istio-agent pulls and checks against `sha256` (the pull policy and a version that changes with
/// the module, in the keys the agent reads), keys from the proxy's environment, and
/// `FAIL_RELOAD`: a router that enforces compliance routes and injects provider keys must not be
/// skipped; a failed VM answers a JSON 503 and is reloaded (`FAIL_OPEN` would send requests on
/// without policy, `FAIL_CLOSED` would leave the worker failing until a restart).
pub fn wasm_extension(c: &Catalog, name: &str, root_id: &str, configuration: &str, sha256: &str) -> Value {
    json!({
        "name": name,
        "typed_config": {
            "@type": WASM_TYPE_URL,
            "config": {
                "name": name,
                "root_id": root_id,
                "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": configuration},
                "failure_policy": "FAIL_RELOAD",
                "vm_config": {
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"remote": {"http_uri": {"uri": c.istio.image, "cluster": "_", "timeout": "30s"}, "sha256": sha256}},
                    "environment_variables": {
                        "host_env_keys": vm_env_keys(c),
                        "key_values": {"ISTIO_META_WASM_IMAGE_PULL_POLICY": c.istio.image_pull_policy}
                    }
                }
            }
        }
    })
}

/// The generated configuration's local-reply mappers, and first the refusals of a decision
/// filter whose module did not arrive: istio-agent's deny-all RBAC substitute (a local 403: Envoy
/// has no response flag for RBAC denials) or no configuration at all (flag `NFCF`), as a JSON 503
/// naming the cause; replies Switchyard shaped itself (its own 403 policy refusals) are left
/// alone. On Switchyard's marked routes only (`route_mark_filter`), like every mapper: another
/// host's Envoy errors stay as Envoy answers them, declared anywhere or not.
pub fn istio_local_replies() -> Value {
    let refused = json!({"or_filter": {"filters": [
        {"response_flag_filter": {"flags": ["NFCF"]}},
        {"status_code_filter": {"comparison": {"op": "EQ", "value": {"default_value": 403, "runtime_key": "switchyard.module_denied"}}}}
    ]}});
    let not_own =
        json!({"header_filter": {"header": {"name": OWN_REPLY_HEADER, "present_match": true, "invert_match": true}}});
    let on_path = |regex: &str| json!({"header_filter": {"header": {"name": ":path", "string_match": {"safe_regex": {"regex": regex}}}}});
    // In the caller's API's shape, told apart by path as the other mappers are (first match wins).
    let unavailable = |path: Option<Value>, body: Value| {
        let mut filters = vec![refused.clone(), not_own.clone()];
        filters.extend(path);
        filters.push(route_mark_filter());
        json!({
            "filter": {"and_filter": {"filters": filters}},
            "status_code": 503,
            "body_format_override": {"content_type": "application/json", "json_format": body}
        })
    };
    const WHY: &str = "Switchyard's filter module is not available on this proxy (its image could not be pulled)";
    let shaped = [
        unavailable(
            Some(on_path(&anthropic_path_regex())),
            json!({"type": "error", "error": {"type": anthropic_type(503), "message": WHY, "code": "module_unavailable"}}),
        ),
        unavailable(
            Some(on_path(&google_path_regex())),
            json!({"error": {"code": 503, "message": WHY, "status": google_status(503), "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "module_unavailable", "domain": "switchyard"}]}}),
        ),
        unavailable(
            None,
            json!({"error": {"message": WHY, "type": "server_error", "code": "module_unavailable", "param": null}}),
        ),
    ];
    let mut replies = local_reply_config();
    if let Some(mappers) = replies["mappers"].as_array_mut() {
        mappers.splice(0..0, shaped);
    }
    replies
}

/// An HTTP filter whose configuration arrives by ECDS (from Istio: over ADS). Envoy accepts
/// only the listed types for it and rejects any other update, so the list holds the Wasm type and
/// the RBAC type istio-agent substitutes when it cannot fetch the module (`RBAC_TYPE_URL`):
/// without it Envoy refuses the substitute and the filter stays without a configuration.
pub fn ecds_filter(name: &str) -> Value {
    json!({"name": name, "config_discovery": {"config_source": {"ads": {}, "initial_fetch_timeout": "0s"}, "type_urls": [WASM_TYPE_URL, RBAC_TYPE_URL]}})
}

/// An HTTP filter that runs only where a route enables it.
fn disabled(mut filter: Value) -> Value {
    filter["disabled"] = json!(true);
    filter
}

/// The listener port the listener patches match, if any. A sidecar: its outbound listener for
/// port 80 (the entry ServiceEntry's port). An egress gateway: none, because the port its
/// listener binds depends on the chart: a gateway listener binds the target port of the
/// gateway Service's port (`pilot/pkg/model/gateway.go` at release-1.31), 80 with the Helm
/// `gateway` chart (Service 80 -> 80) and 8080 with istioctl's `istio-egress` chart (80 ->
/// 8080). Without `portNumber` istiod matches every listener of the context
/// (`listenerMatch` in `pilot/pkg/networking/core/envoyfilter/listener_patch.go`); the HCM
/// filter match keeps the patches on HTTP listeners, and the decision filter acts only on
/// Switchyard's marked routes.
pub fn listener_port(v: Variant) -> Option<u16> {
    match v {
        Variant::EgressGateway => None,
        Variant::Sidecar => Some(80),
    }
}

/// The EnvoyFilter: Switchyard on Istio. No WasmPlugin: istiod delivers a WasmPlugin's filter
/// without `allow_on_headers_stop_iteration` (no field sets it; without it every routed request
/// hangs) and, from Istio 1.30, under a TrafficExtension name an EnvoyFilter cannot replace in
/// place. So this EnvoyFilter inserts the decision filter itself, with its own extension config:
/// the flag and the failure policy are on the filter that runs, the same on every release.
pub fn envoy_filter(c: &Catalog, v: Variant, cfg: &StackConfig, sha256: &str) -> Value {
    let ctx = v.context();
    let plugin = serde_json::to_string(&plugin_config(c, cfg)).unwrap_or_default();
    // Sidecars: only the outbound listener applications reach Switchyard on. Gateways: every
    // HTTP listener of the selected gateway pods, whichever port the chart binds (see
    // `listener_port`). The route mark scopes the decision filter to Switchyard's own host.
    let listener = |filter: Value| {
        let mut l = json!({"filterChain": {"filter": filter}});
        if let Some(port) = listener_port(v) {
            l["portNumber"] = json!(port);
        }
        l
    };
    let before_router = json!({"context": ctx, "listener": listener(json!({
        "name": "envoy.filters.network.http_connection_manager",
        "subFilter": {"name": "envoy.filters.http.router"}
    }))});
    // The native build's filters are inline (no extension configs, nothing served by ECDS).
    let native = istio_native::is_native(c);
    let mut patches = Vec::new();
    if !native {
        // The decision filter holds the request headers until the body is complete, which Envoy
        // honours only with `allow_on_headers_stop_iteration`.
        let mut decision = wasm_extension(c, DECISION_FILTER, DECISION_ROOT_ID, &plugin, sha256);
        decision["typed_config"]["config"]["allow_on_headers_stop_iteration"] = json!(true);
        patches.extend([
            json!({"applyTo": "EXTENSION_CONFIG", "patch": {"operation": "ADD", "value": decision}}),
            json!({"applyTo": "EXTENSION_CONFIG", "patch": {"operation": "ADD",
                "value": wasm_extension(c, "switchyard-upstream", ATTEMPT_ROOT_ID, &plugin, sha256)}}),
        ]);
    }
    let decision_filter =
        if native { istio_native::decision_filter(cfg, &plugin) } else { ecds_filter(DECISION_FILTER) };
    // Right before the router: after Istio's authentication and authorization (a caller is
    // admitted before its body is buffered and before keys are attached) and its stats.
    // Disabled but on Switchyard's marked routes (`mark_route` enables it there): other hosts on
    // the listener never run it, and if its extension config does not arrive (a failed module
    // pull), only Switchyard's routes fail.
    patches.push(json!({"applyTo": "HTTP_FILTER", "match": before_router,
        "patch": {"operation": "INSERT_BEFORE", "value": disabled(decision_filter)}}));
    patches.extend([
        // Envoy's own errors on Switchyard's marked routes come as JSON in the caller's API shape (the
        // same mappers as every generated Envoy configuration). The attempts' `:scheme` comes
        // from each provider cluster's metadata (below), not from a listener-wide setting.
        json!({"applyTo": "NETWORK_FILTER", "match": {"context": ctx, "listener": listener(json!({"name": "envoy.filters.network.http_connection_manager"}))},
               "patch": {"operation": "MERGE", "value": {"name": "envoy.filters.network.http_connection_manager", "typed_config": {
                   "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                   "local_reply_config": istio_local_replies()}}}}),
    ]);
    let firsts = first_attempt_providers(c, cfg);
    if !firsts.is_empty() && !native {
        // The first-attempt clusters' filter (configuration-free: it takes the internal headers
        // off the attempt and notes a failure for the next attempt's filter).
        patches.insert(
            2,
            json!({"applyTo": "EXTENSION_CONFIG", "patch": {"operation": "ADD",
                "value": wasm_extension(c, "switchyard-first", FIRST_ATTEMPT_ROOT_ID, FIRST_ATTEMPT_CONFIGURATION, sha256)}}),
        );
    }
    let names: Vec<String> =
        provider_cluster_names(c).into_iter().chain(firsts.iter().map(|(p, _)| p.first_attempt_cluster())).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // Every route on Switchyard's host is marked as Switchyard's (the filter acts on nothing
    // else of the listener): the routed ones, and a marked 404 before the VirtualService's own
    // catch-all, which is where a request on this host lands before the filter routes it.
    // istio-proxy builds no filter-state matcher input: the next attempt's token travels in a
    // header there, keyed by the deployment's secret (the filter's `protocol::slots`).
    let mut routed = routed_route(&refs, cfg, HandoffWiring::Header { key: &c.istio.handoff_key });
    mark_route(&mut routed, None);
    let routes = [routed, unrouted_route()];
    // INSERT_FIRST puts each route before the others: in reverse, they keep their order.
    for route in routes.into_iter().rev() {
        patches.push(json!({
            "applyTo": "HTTP_ROUTE",
            "match": {"context": ctx, "routeConfiguration": {"vhost": {"name": format!("{}:80", v.entry_host(c))}}},
            "patch": {"operation": "INSERT_FIRST", "value": route}
        }));
    }
    let keyed = keyed_clusters(c);
    let plugin_config = c.plugin_config();
    let mut patched: Vec<String> = Vec::new();
    for p in &c.providers {
        if patched.contains(&p.cluster()) {
            continue;
        }
        patched.push(p.cluster());
        // The cluster's key injectors (keys from the mounted Secret), then the per-attempt Wasm
        // (it keeps the key of its attempt's API, removes every other credential header).
        let mut filters = if native { istio_native::upstream_chain(cfg, &plugin) } else { upstream_filters_ecds() };
        if let (Some(k), Some(list)) = (keyed.iter().find(|k| k.cluster == p.cluster()), filters.as_array_mut()) {
            for (i, inj) in key_injectors(k, &sds_secret_ref(&k.cluster, KEYS_MOUNT)).into_iter().enumerate() {
                list.insert(i, inj);
            }
        }
        // Envoy signs a Bedrock provider's attempts (SigV4) after the per-attempt filter.
        with_aws_signing(&mut filters, &plugin_config, &p.cluster(), None);
        // MERGE replaces the whole HttpProtocolOptions entry (a map value): it carries the
        // protocol as well as the per-attempt filters. The metadata names the attempts' scheme
        // (the DestinationRule originates TLS).
        patches.push(json!({
            "applyTo": "CLUSTER",
            "match": {"context": ctx, "cluster": {"name": p.cluster()}},
            "patch": {"operation": "MERGE", "value": {"typed_extension_protocol_options":
                provider_protocol_options(p.http2, filters), "metadata": tls_scheme_metadata()}}
        }));
    }
    // The metadata server that `credential.google_metadata` and `azure_managed_identity`
    // providers get their access tokens from (plain HTTP to 169.254.169.254: the proxy's own
    // connections are not captured).
    for cluster in crate::gcp::metadata_clusters(&plugin_config, cfg.metadata_server.as_ref()) {
        patches.push(json!({"applyTo": "CLUSTER", "match": {"context": ctx},
            "patch": {"operation": "ADD", "value": cluster}}));
    }
    // Google's token endpoint for `credential.google_service_account` providers (TLS from the
    // proxy itself, checked against the proxy image's CA bundle).
    for cluster in crate::gcp::token_endpoint_clusters(&plugin_config, None, crate::envoy::SYSTEM_CA_BUNDLE) {
        patches.push(json!({"applyTo": "CLUSTER", "match": {"context": ctx},
            "patch": {"operation": "ADD", "value": cluster}}));
    }
    for (p, twin) in &firsts {
        // The first-attempt twin (the subset's cluster): the first-attempt filter and the
        // provider's key injector instead of the per-attempt filter.
        let secret = sds_secret_ref(&twin.cluster, watched_for(c, &twin.cluster));
        let injector = twin.key.as_ref().map(|k| credential_injector(k, secret));
        let chain = if native {
            istio_native::first_attempt_chain(cfg, injector)
        } else {
            first_attempt_filters_ecds(injector)
        };
        patches.push(json!({
            "applyTo": "CLUSTER",
            "match": {"context": ctx, "cluster": {"name": p.first_attempt_cluster()}},
            "patch": {"operation": "MERGE", "value": {"typed_extension_protocol_options":
                provider_protocol_options(p.http2, chain), "metadata": tls_scheme_metadata()}}
        }));
    }
    json!({
        "apiVersion": "networking.istio.io/v1alpha3",
        "kind": "EnvoyFilter",
        "metadata": metadata("switchyard-failover", c),
        "spec": {"workloadSelector": {"labels": v.labels(c)}, "configPatches": patches}
    })
}

/// The upstream filter chain with the per-attempt Wasm filter delivered by ECDS.
fn upstream_filters_ecds() -> Value {
    let mut f = upstream_filters(Value::Null);
    if let Some(first) = f.get_mut(0) {
        *first = ecds_filter("switchyard-upstream");
    }
    f
}

/// A first-attempt cluster's filters with the first-attempt filter delivered by ECDS.
fn first_attempt_filters_ecds(injector: Option<Value>) -> Value {
    let mut f = first_attempt_filters(Value::Null, injector);
    if let Some(first) = f.get_mut(0) {
        *first = ecds_filter("switchyard-first");
    }
    f
}

/// The entry point applications call: `http://<service_host>/v1/...`. Requests the filter does
/// not route get an OpenAI-style 404.
pub fn entry_resources(c: &Catalog, v: Variant) -> Vec<Value> {
    let host = v.entry_host(c);
    let not_found = json!({"status": 404, "body": {"string": "{\"error\":{\"message\":\"not found: Switchyard routes POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages and /v1beta/models/{model}:generateContent\",\"type\":\"invalid_request_error\",\"code\":\"not_found\",\"param\":null}}"}});
    let mut out = Vec::new();
    let mut vs_spec = json!({"hosts": [host], "http": [{"name": "switchyard-unrouted", "directResponse": not_found,
        "headers": {"response": {"set": {"content-type": "application/json"}}}}]});
    match v {
        Variant::EgressGateway => {
            out.push(json!({
                "apiVersion": "networking.istio.io/v1",
                "kind": "Gateway",
                "metadata": metadata("switchyard", c),
                "spec": {"selector": c.istio.gateway_labels, "servers": [{"port": {"number": 80, "name": "http-switchyard", "protocol": "HTTP"}, "hosts": [host]}]}
            }));
            vs_spec["gateways"] = json!(["switchyard"]);
        }
        Variant::Sidecar => {
            // A mesh-internal name with no workload behind it: the sidecar answers it.
            vs_spec["exportTo"] = v.export_to(c);
            out.push(json!({
                "apiVersion": "networking.istio.io/v1",
                "kind": "ServiceEntry",
                "metadata": metadata("switchyard-entry", c),
                "spec": {"hosts": [host], "location": "MESH_INTERNAL", "resolution": "STATIC",
                         "addresses": ["240.240.0.1"], "endpoints": [{"address": "240.240.0.1"}],
                         "ports": [{"number": 80, "name": "http-switchyard", "protocol": "HTTP"}], "exportTo": v.export_to(c)}
            }));
        }
    }
    out.push(json!({"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "metadata": metadata("switchyard", c), "spec": vs_spec}));
    out
}

/// Where a private registry's pull secret is mounted in the proxy (`DOCKER_CONFIG`): istio-agent
/// pulls a Wasm config without a pull secret of its own (as the EnvoyFilter's are) with its default
/// keychain, which reads `$DOCKER_CONFIG/config.json`.
pub const DOCKER_CONFIG_MOUNT: &str = "/etc/switchyard/docker";

/// Where the bootstrap override is mounted, the file istio-agent reads in it, and the
/// ConfigMap holding it (the metrics' label rules, `stats_tags`). istio-agent starts Envoy with
/// `--config-yaml <the file>` when its environment has `ISTIO_BOOTSTRAP_OVERRIDE`
/// (`pkg/envoy/proxy.go` at release-1.31); Envoy merges it into Istio's bootstrap. The keys
/// patch sets that variable and mounts the ConfigMap itself rather than annotating the pod
/// `sidecar.istio.io/bootstrapOverride`: the annotation works only through injection (the
/// injection templates add the variable and the volume), and istioctl's `istio-egress` chart is
/// not injected (`sidecar.istio.io/inject: "false"` in
/// `manifests/charts/gateways/istio-egress/templates/deployment.yaml`). On injected pods the
/// container overlay keeps the variable (no annotation: the template sets none).
pub const BOOTSTRAP_OVERRIDE_ENV: &str = "ISTIO_BOOTSTRAP_OVERRIDE";
pub const BOOTSTRAP_MOUNT: &str = "/etc/switchyard/bootstrap";
pub const BOOTSTRAP_OVERRIDE_KEY: &str = "custom_bootstrap.json";
pub const BOOTSTRAP_CONFIG_MAP: &str = "switchyard-bootstrap";

/// The bootstrap override (the metrics' label rules; on the native build also its runtime
/// flag) as the ConfigMap the keys patch mounts, in the proxy's namespace.
pub fn bootstrap_config_map(c: &Catalog, namespace: &str) -> Value {
    let mut over = crate::telemetry::istio_bootstrap_override();
    istio_native::with_native_runtime(c, &mut over);
    let file = over.to_string();
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata_in(BOOTSTRAP_CONFIG_MAP, namespace),
           "data": {BOOTSTRAP_OVERRIDE_KEY: file}})
}

/// The strategic merge patch of the proxy container (`istio-proxy`): the gateway Deployment's
/// (it has the container: the Helm chart's with `image: auto`, istioctl's with its image) or the
/// application's pod template (sidecars: the container is new there, so it carries
/// `image: auto`, which the injector replaces by its proxy image, `AutoImage` in
/// `pkg/kube/inject/webhook.go` at release-1.31; the API server refuses a container without an
/// image). It mounts the key Secret (or puts the keys in the environment, `keys: env`), the SDS
/// ConfigMap, the bootstrap override and a private registry's pull secret (`DOCKER_CONFIG`).
pub fn keys_patch(c: &Catalog, v: Variant) -> Value {
    // Keys the Wasm filter still reads come from the environment; with `keys: files` the Secret
    // is mounted instead (a Secret update then reaches the proxy without a restart).
    let mut env: Vec<Value> = vm_env_keys(c)
        .iter()
        .map(|k| json!({"name": k, "valueFrom": {"secretKeyRef": {"name": c.istio.keys_secret, "key": k}}}))
        .collect();
    env.push(json!({"name": BOOTSTRAP_OVERRIDE_ENV, "value": format!("{BOOTSTRAP_MOUNT}/{BOOTSTRAP_OVERRIDE_KEY}")}));
    let mut mounts = vec![
        json!({"name": SDS_CONFIG_MAP, "mountPath": SDS_MOUNT, "readOnly": true}),
        json!({"name": BOOTSTRAP_CONFIG_MAP, "mountPath": BOOTSTRAP_MOUNT, "readOnly": true}),
    ];
    let mut volumes = vec![
        json!({"name": SDS_CONFIG_MAP, "configMap": {"name": SDS_CONFIG_MAP}}),
        json!({"name": BOOTSTRAP_CONFIG_MAP, "configMap": {"name": BOOTSTRAP_CONFIG_MAP}}),
    ];
    if !keyed_clusters(c).is_empty() {
        mounts.push(json!({"name": "switchyard-keys", "mountPath": KEYS_MOUNT, "readOnly": true}));
        volumes.push(json!({"name": "switchyard-keys", "secret": {"secretName": c.istio.keys_secret}}));
    }
    // istio-agent pulls only the Wasm build (the native build's library comes by an image volume,
    // which the kubelet pulls with the pod's `imagePullSecrets`: `istio_native`).
    if let Some(secret) = c.istio.image_pull_secret.as_ref().filter(|_| !istio_native::is_native(c)) {
        env.push(json!({"name": "DOCKER_CONFIG", "value": DOCKER_CONFIG_MOUNT}));
        mounts.push(json!({"name": "switchyard-pull-secret", "mountPath": DOCKER_CONFIG_MOUNT, "readOnly": true}));
        volumes.push(json!({"name": "switchyard-pull-secret", "secret": {"secretName": secret,
            "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}}));
    }
    let mut proxy = json!({"name": "istio-proxy", "env": env, "volumeMounts": mounts});
    if v == Variant::Sidecar {
        proxy["image"] = json!("auto");
    }
    json!({"spec": {"template": {"spec": {"containers": [proxy], "volumes": volumes}}}})
}

/// What one variant renders: the providers file's resources, the main file's, the keys patch.
pub struct VariantManifests {
    pub providers: Vec<Value>,
    pub main: Vec<Value>,
    pub keys_patch: Value,
}

/// Every resource of a variant, as `render_k8s` writes them (the simulation reads these).
pub fn variant_manifests(c: &Catalog, v: Variant, cfg: &StackConfig, sha256: &str) -> VariantManifests {
    let mut main = vec![envoy_filter(c, v, cfg, sha256)];
    for ns in v.proxy_namespaces(c) {
        main.push(sds_config_map(c, cfg, &ns));
        main.push(bootstrap_config_map(c, &ns));
        if c.istio.tracing {
            main.push(telemetry_resource(c, v, &ns));
        }
    }
    main.extend(entry_resources(c, v));
    let mut patch = keys_patch(c, v);
    // The native build's library, as an image volume pinned to `sha256`, its image's digest.
    istio_native::with_library_volume(&mut patch, c, v, sha256);
    VariantManifests { providers: providers_resources(c, v, cfg), main, keys_patch: patch }
}

/// Every file under `k8s/` as (relative path, content).
pub fn render_k8s(c: &Catalog, cfg: &StackConfig, sha256: &str) -> Vec<(String, String)> {
    let header = |what: &str| {
        format!(
            "# {what}\n# Generated from catalog/switchyard.json by `make render` (Istio {}); do not edit.\n",
            ISTIO_RELEASES.map(|r| r.0).join(", ")
        )
    };
    let mut files = Vec::new();
    for v in [Variant::EgressGateway, Variant::Sidecar] {
        let VariantManifests { providers, main, keys_patch } = variant_manifests(c, v, cfg, sha256);
        files.push((
            format!("{}/providers.yaml", v.dir()),
            header("One ServiceEntry + DestinationRule per provider (DNS, TLS origination, circuit breakers, the first-attempt subset).")
                + &documents(&providers),
        ));
        files.push((
            format!("{}/switchyard.yaml", v.dir()),
            header("The Switchyard filters and their failover wiring (EnvoyFilter), the first-attempt clusters' key files and the metrics' label rules (ConfigMaps in the proxies' namespace, mounted by keys-patch.yaml), the span attributes (Telemetry, also there) and the entry point.")
                + &documents(&main),
        ));
        files.push((
            format!("{}/keys-patch.yaml", v.dir()),
            header(match v {
                Variant::EgressGateway => "The provider key Secret, the key files' SDS ConfigMap and the bootstrap override (the metrics' labels, ISTIO_BOOTSTRAP_OVERRIDE), mounted into the egress gateway's proxy, with either chart: kubectl -n <ns> patch deployment istio-egressgateway --patch-file keys-patch.yaml",
                Variant::Sidecar => "The provider key Secret, the key files' SDS ConfigMap and the bootstrap override (the metrics' labels, ISTIO_BOOTSTRAP_OVERRIDE), mounted into the application's sidecar: merge into the pod template (image auto: Istio's injector merges a container named istio-proxy into the injected one and sets its image)",
            }) + &crate::envoy::to_yaml(&keys_patch),
        ));
        // The workload identities (GKE Workload Identity, EKS IRSA) of the proxy's ServiceAccount.
        let annotations =
            workload_identity::annotations(c.istio.gcp_service_account.as_deref(), c.istio.aws_role_arn.as_deref());
        if !annotations.is_empty() {
            let (what, doc) = match v {
                Variant::EgressGateway => ("The egress gateway's ServiceAccount annotations (GKE Workload Identity, EKS IRSA), as the gateway chart's values: helm upgrade istio-egressgateway istio/gateway -n <ns> --reuse-values -f serviceaccount.yaml", workload_identity::gateway_values(&annotations)),
                Variant::Sidecar => ("The application's ServiceAccount annotations (GKE Workload Identity, EKS IRSA): kubectl -n <ns> patch serviceaccount <its service account> --patch-file serviceaccount.yaml", workload_identity::service_account_patch(&annotations)),
            };
            files.push((format!("{}/serviceaccount.yaml", v.dir()), header(what) + &crate::envoy::to_yaml(&doc)));
        }
    }
    files
}

fn documents(docs: &[Value]) -> String {
    docs.iter().map(|d| format!("---\n{}", crate::envoy::to_yaml(d))).collect()
}

#[cfg(test)]
#[path = "istio_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "istio_native_tests.rs"]
mod native_tests;
