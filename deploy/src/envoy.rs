//! Generating an Envoy configuration for Switchyard: the bootstrap of a Switchyard listener
//! (the decision filter, the failover route, provider clusters with the per-attempt filter and
//! their first-attempt twins, key injectors), and the pieces the Istio manifests reuse.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::telemetry::{access_log, hcm_tracing, otlp_cluster, stats_config, with_request_attributes};
pub use crate::telemetry::{AccessLog, Tracing};
use switchyard::answer::errors::{anthropic_type, google_status};
use switchyard::api::MESSAGES_PATH;
use switchyard::protocol::plan::{plan_state_prefix, PLAN_STATE_KEY};
use switchyard::protocol::scope::{
    CLUSTER_SCHEME_KEY, METADATA_NAMESPACE, ROUTE_MARK_KEY, ROUTE_MARK_VALUE, ROUTE_POLICY_KEY,
};
use switchyard::protocol::slots::{keyed_slot_token, next_state_property, slot_token};
use switchyard::wiring::{
    ATTEMPT_ROOT_ID, AUTHORITY_HEADER, DECISION_ROOT_ID, FIRST_ATTEMPT_ROOT_ID, NEXT_CLUSTER_HEADER, OWN_REPLY_HEADER,
    PASSTHROUGH_HEADER, VM_ID,
};

/// Repository root (the integration crate lives one level below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

pub fn wasm_path() -> PathBuf {
    std::env::var_os("SWITCHYARD_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/wasm32-wasip1/release/switchyard.wasm"))
}

/// The native build of the filters: the Envoy dynamic module `make native` builds.
pub fn native_path() -> PathBuf {
    std::env::var_os("SWITCHYARD_NATIVE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/native/libswitchyard.so"))
}

/// Which build of the filters Envoy runs: the proxy-wasm module in V8 (the default, and what
/// Istio delivers) or the same filters as a native dynamic module (`make native`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Build {
    #[default]
    Wasm,
    Native,
}

impl Build {
    /// `wasm` or `native` (the `BUILD` of `make run`, the `SWITCHYARD_BUILD` of the tests).
    pub fn parse(s: &str) -> Result<Build, String> {
        match s {
            "wasm" | "" => Ok(Build::Wasm),
            "native" => Ok(Build::Native),
            other => Err(format!("build {other:?}: wasm or native")),
        }
    }

    /// `SWITCHYARD_BUILD` from the environment (Wasm when unset).
    pub fn from_env() -> Build {
        std::env::var("SWITCHYARD_BUILD").ok().and_then(|b| Build::parse(&b).ok()).unwrap_or_default()
    }
}

/// The native build's stats namespace: the Wasm host's (`wasmcustom`), so both builds' stats
/// have the same names (`wasmcustom.switchyard.*`) and Prometheus series (`switchyard_*`).
pub const NATIVE_METRICS_NAMESPACE: &str = "wasmcustom";

/// The native build's runtime: Envoy registers a dynamic module's stats namespace like the Wasm
/// host's (Prometheus strips it and adds no `envoy_` prefix) only with this flag.
pub fn native_runtime() -> Value {
    json!({"layers": [{"name": "switchyard", "static_layer": {
        "envoy.reloadable_features.dynamic_modules_strip_custom_stat_prefix": true}}]})
}

/// The dynamic-module HTTP filter's configuration type.
pub const DYNAMIC_MODULE_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter";

/// One provider cluster: an Envoy cluster name and the loopback port behind it.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub name: String,
    pub port: u16,
}

/// A provider reached over the network the way real providers are: DNS name, TLS with SNI and
/// certificate validation against a CA bundle, HTTP/2 negotiated by ALPN where supported.
#[derive(Clone, Debug)]
pub struct RemoteCluster {
    /// Envoy cluster name (the catalog renders Istio's `outbound|<port>||<host>`).
    pub name: String,
    /// DNS name: resolved by Envoy, sent as SNI, required in the certificate's SAN.
    pub host: String,
    pub port: u16,
    /// Connect to this IP instead of resolving `host` (tests: 127.0.0.1); SNI and certificate
    /// validation still use `host`.
    pub connect_to: Option<String>,
    /// Offer HTTP/2 by ALPN (falls back to HTTP/1.1 when the provider does not select it).
    pub http2: bool,
    /// PEM bundle of trusted CAs (the system bundle for real providers).
    pub ca_file: String,
}

/// The system CA bundle on Debian/Ubuntu (and the path Istio's proxies use).
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Clone, Debug)]
pub struct StackConfig {
    /// Which build of the filters Envoy loads: `wasm` (V8) or the native dynamic module.
    pub build: Build,
    pub wasm: PathBuf,
    /// The native dynamic module (`Build::Native`).
    pub native: PathBuf,
    /// The Switchyard plugin configuration (JSON).
    pub plugin_config: Value,
    pub clusters: Vec<ClusterSpec>,
    /// Provider clusters over DNS + TLS (real providers, TLS mocks); routed like `clusters`.
    pub remote_clusters: Vec<RemoteCluster>,
    /// Operator's cluster for requests Switchyard does not route (other paths, GET); never a
    /// provider. None: the filter answers them with an OpenAI-style 404/405.
    pub passthrough: Option<ClusterSpec>,
    /// Listener bind address (127.0.0.1 for tests and the demo).
    pub listener_address: String,
    /// 0 = any free port.
    pub listener_port: u16,
    pub admin_port: u16,
    /// Environment variables exposed to the Wasm VM (credential `env` references).
    pub env_keys: Vec<String>,
    /// Envoy's request buffer limit; kept above `routing.max_body_bytes` so the filter's own
    /// OpenAI-style 413 answers first.
    pub buffer_limit_bytes: u64,
    /// Route retry ceiling: attempts per request (the filter lowers it per request).
    pub max_attempts: u32,
    /// Pause between failovers (Envoy's default back-off adds 25-250 ms).
    pub retry_back_off_ms: u32,
    /// An attempt that sends nothing for this long times out and fails over (before the first
    /// response byte); after that a stalled stream is reset. 0 = none.
    pub per_try_idle_timeout_ms: u32,
    /// Extra virtual hosts whose routes carry a policy label in their metadata
    /// (`filter_metadata.switchyard.policy`), for route-selected operator policies.
    pub policy_routes: Vec<PolicyRoute>,
    /// Terminate TLS on the listener and require a client certificate (mTLS callers).
    pub tls: Option<TlsSpec>,
    /// Access log to Envoy's stdout: a text line with Switchyard's audit record, or one JSON
    /// object per request with the decision, tokens and cost (`telemetry::AccessLog`).
    pub access_log: AccessLog,
    /// Traces to an OTLP/gRPC collector with Envoy's OpenTelemetry tracer.
    pub tracing: Option<Tracing>,
    /// Route timeout: bounds the whole request, every attempt and a whole stream included.
    pub route_timeout_ms: u32,
    /// Concurrent requests (and connections, pending requests) per provider cluster.
    pub max_requests_per_cluster: u32,
    /// Concurrent retries (failovers) per provider cluster. See `provider_circuit_breakers`.
    pub max_concurrent_failovers: u32,
    /// Verify `Authorization: Bearer` JWTs with Envoy's `jwt_authn` before Switchyard and put
    /// the payload in dynamic metadata (`jwt_payload`), for JWT-claim-selected policies.
    pub jwt: Option<JwtSpec>,
    /// Give every provider cluster a first-attempt twin without the per-attempt Wasm (see
    /// `first_attempt_cluster`); off, every attempt runs the per-attempt filter.
    pub first_attempt_clusters: bool,
    /// Provider keys from files by SDS instead of the Wasm configuration (see `KeyFiles`).
    pub key_files: Option<KeyFiles>,
    /// Where the rate limit service of `rate_limits.service.cluster` listens (host or IP,
    /// port); its cluster is generated when the plugin configuration has `rate_limits`.
    pub rate_limit_service: Option<(String, u16)>,
    /// Where the metadata server of `credential.google_metadata.cluster` and
    /// `credential.azure_managed_identity.cluster` listens (host or IP, port); None: the clouds'
    /// own, `169.254.169.254:80` (GKE, GCE; Azure IMDS). Its cluster is generated when a provider
    /// names one.
    pub metadata_server: Option<(String, u16)>,
    /// Where the token endpoint of `credential.google_service_account.cluster` listens, plain
    /// HTTP (tests: a local mock); None: `oauth2.googleapis.com:443` over TLS. Its cluster is
    /// generated when a provider names one.
    pub token_endpoint: Option<(String, u16)>,
    /// An AWS credentials file Envoy's SigV4 signing reads (Bedrock providers), watched: a
    /// rewritten file (renamed into place) is used from the next attempt on. None: Envoy's default
    /// credential chain alone (environment, `~/.aws/credentials`, IRSA, metadata).
    pub aws_credentials_file: Option<PathBuf>,
}

/// Provider keys delivered the way Envoy does natively: each provider cluster's own
/// `credential_injector` reads its key by SDS, from a file per key in `keys_dir` (named like the
/// provider's `credential.env`, as a mounted Kubernetes Secret lays them out), watched so that a
/// replaced file (an atomic directory swap, as the kubelet does) rotates the key without a
/// restart. The plugin configuration then says `credential.injected` for those providers: the
/// keys never enter the Wasm configuration or its environment. Providers with `credential.value`,
/// or sharing a cluster with another key, keep the filter setting the key.
#[derive(Clone, Debug)]
pub struct KeyFiles {
    /// The key files (the mounted Secret).
    pub keys_dir: PathBuf,
    /// Where the SDS resource files naming them go (written with the bootstrap).
    pub sds_dir: PathBuf,
}

/// A provider cluster whose key its own injectors add, by SDS from the key file `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdsKeyed {
    pub cluster: String,
    /// The key file's name (the providers' `credential.env`).
    pub key: String,
    /// One per key header the cluster's providers use (by API), with its prefix.
    pub headers: Vec<(String, String)>,
}

/// The clusters `sds_keyed` applies to in `plugin_config` (see `KeyFiles`), read with the
/// filter's parser.
pub fn sds_keyed(plugin_config: &Value) -> Vec<SdsKeyed> {
    let Some(catalog) = parsed_for_generator(plugin_config) else { return Vec::new() };
    let raw = &plugin_config["providers"];
    let mut out: Vec<Option<SdsKeyed>> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for p in &catalog.providers {
        let this = raw[&p.slug]["credential"]["env"].as_str().map(|env| {
            let mut headers: Vec<(String, String)> = Vec::new();
            for api in p.apis.iter() {
                if let Some((h, v)) = p.credential_for(api) {
                    let prefix = v.strip_suffix(ENV_MARKER).unwrap_or_default().to_string();
                    if !headers.iter().any(|(x, _)| x == h) {
                        headers.push((h.to_string(), prefix));
                    }
                }
            }
            SdsKeyed { cluster: p.cluster.clone(), key: env.to_string(), headers }
        });
        match seen.iter().position(|c| *c == p.cluster) {
            Some(i) => {
                if let Some(slot) = out.get_mut(i) {
                    match (slot.as_mut(), this) {
                        (Some(k), Some(t)) if k.key == t.key => {
                            for h in t.headers {
                                if !k.headers.contains(&h) {
                                    k.headers.push(h);
                                }
                            }
                        }
                        _ => *slot = None,
                    }
                }
            }
            None => {
                seen.push(p.cluster.clone());
                out.push(this);
            }
        }
    }
    out.into_iter().flatten().collect()
}

/// The plugin configuration with the `sds_keyed` providers' keys left to their clusters.
pub fn with_injected_keys(config: &mut Value, keyed: &[SdsKeyed]) {
    if let Some(providers) = config["providers"].as_object_mut() {
        for p in providers.values_mut() {
            let on_keyed = p["cluster"].as_str().is_some_and(|c| keyed.iter().any(|k| k.cluster == c));
            if let (true, Some(cred)) = (on_keyed, p["credential"].as_object_mut()) {
                cred.remove("env");
                cred.insert("injected".into(), json!(true));
            }
        }
    }
}

/// The SDS secret reference of a key file, by the file `sds_file` (a discovery response naming
/// the key file), watched through the key directory.
pub fn sds_file_secret(cluster: &str, sds_file: &str, keys_dir: &str) -> Value {
    json!({"name": twin_secret_name(cluster), "sds_config": {
        "path_config_source": {"path": sds_file, "watched_directory": {"path": keys_dir}},
        "resource_api_version": "V3"
    }})
}

/// The SDS discovery response for a key file.
pub fn sds_file_content(cluster: &str, key_file: &str) -> String {
    json!({"resources": [{
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        "name": twin_secret_name(cluster),
        "generic_secret": {"secret": {"filename": key_file}}
    }]})
    .to_string()
}

/// A file name for a cluster (cluster names may hold `|`).
pub fn file_safe(cluster: &str) -> String {
    cluster.chars().map(|ch| if ch.is_ascii_alphanumeric() || ch == '.' || ch == '-' { ch } else { '_' }).collect()
}

/// The injectors of an SDS-keyed cluster, one per key header (they run before the per-attempt
/// filter, which keeps the one of its attempt's API and removes every other credential header).
pub fn key_injectors(k: &SdsKeyed, secret: &Value) -> Vec<Value> {
    k.headers
        .iter()
        .map(|(h, prefix)| {
            let key =
                TwinKey { header: h.clone(), source: KeySource::Env { name: k.key.clone(), prefix: prefix.clone() } };
            credential_injector(&key, secret.clone())
        })
        .collect()
}

impl StackConfig {
    /// The SDS-keyed clusters of this configuration (none without `key_files`).
    pub fn sds_keyed(&self) -> Vec<SdsKeyed> {
        if self.key_files.is_none() {
            return Vec::new();
        }
        let names = generated_cluster_names(self);
        sds_keyed(&self.plugin_config).into_iter().filter(|k| names.contains(&k.cluster.as_str())).collect()
    }

    /// The SDS secret reference of an SDS-keyed cluster's key.
    fn key_secret(&self, cluster: &str) -> Option<Value> {
        let kf = self.key_files.as_ref()?;
        let sds = kf.sds_dir.join(format!("{}.json", file_safe(cluster)));
        Some(sds_file_secret(cluster, &sds.to_string_lossy(), &kf.keys_dir.to_string_lossy()))
    }

    /// The SDS resource files the bootstrap names (written before Envoy starts).
    pub fn sds_files(&self) -> Vec<(PathBuf, String)> {
        let Some(kf) = &self.key_files else { return Vec::new() };
        self.sds_keyed()
            .iter()
            .map(|k| {
                let key_file = kf.keys_dir.join(&k.key);
                (
                    kf.sds_dir.join(format!("{}.json", file_safe(&k.cluster))),
                    sds_file_content(&k.cluster, &key_file.to_string_lossy()),
                )
            })
            .collect()
    }

    /// The upstream filters of a provider cluster: its key injectors (SDS-keyed), the per-attempt
    /// Wasm, Envoy's SigV4 signing for a provider Envoy signs (Bedrock), the codec.
    fn provider_filters(&self, cluster: &str) -> Value {
        let upstream = wasm_filter(self, ATTEMPT_ROOT_ID, &plugin_json(self), false);
        let mut filters = upstream_filters(upstream);
        let keyed = self.sds_keyed();
        if let (Some(k), Some(secret), Some(list)) =
            (keyed.iter().find(|k| k.cluster == cluster), self.key_secret(cluster), filters.as_array_mut())
        {
            for (i, inj) in key_injectors(k, &secret).into_iter().enumerate() {
                list.insert(i, inj);
            }
        }
        with_aws_signing(&mut filters, &self.plugin_config, cluster, self.aws_credentials_file.as_deref());
        filters
    }
}

/// One `jwt_authn` provider: the tokens' issuer and the JWKS (JSON) that verifies them. A
/// request without a token passes unauthenticated; a bad token is refused by Envoy (401).
#[derive(Clone, Debug)]
pub struct JwtSpec {
    pub issuer: String,
    pub jwks: String,
}

/// A virtual host (by `:authority`) whose routes name an operator policy.
#[derive(Clone, Debug)]
pub struct PolicyRoute {
    pub domain: String,
    pub policy: String,
}

/// The listener's server certificate and the CA its clients' certificates must chain to.
#[derive(Clone, Debug)]
pub struct TlsSpec {
    pub cert_chain: PathBuf,
    pub private_key: PathBuf,
    pub client_ca: PathBuf,
}

impl StackConfig {
    /// A Switchyard stack with the defaults tests and tools use: any free ports, 1 MiB buffer
    /// limit, 4 attempts, 2 ms back-off, 60 s per-attempt idle timeout.
    pub fn new(plugin_config: Value, clusters: Vec<ClusterSpec>, passthrough: Option<ClusterSpec>) -> StackConfig {
        StackConfig {
            build: Build::default(),
            wasm: wasm_path(),
            native: native_path(),
            plugin_config,
            clusters,
            remote_clusters: Vec::new(),
            passthrough,
            listener_address: "127.0.0.1".into(),
            listener_port: 0,
            admin_port: 0,
            env_keys: Vec::new(),
            buffer_limit_bytes: 1024 * 1024,
            max_attempts: 4,
            retry_back_off_ms: 2,
            per_try_idle_timeout_ms: 60_000,
            aws_credentials_file: None,
            policy_routes: Vec::new(),
            tls: None,
            access_log: AccessLog::Off,
            tracing: None,
            jwt: None,
            route_timeout_ms: 300_000,
            max_requests_per_cluster: DEFAULT_MAX_REQUESTS_PER_CLUSTER,
            max_concurrent_failovers: DEFAULT_MAX_REQUESTS_PER_CLUSTER,
            first_attempt_clusters: true,
            key_files: None,
            rate_limit_service: None,
            metadata_server: None,
            token_endpoint: None,
        }
    }
}

fn cluster(c: &ClusterSpec) -> Value {
    json!({
        "name": c.name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": c.name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": c.port}}}}]}]
        }
    })
}

/// The environment variables the Wasm VM reads: the keys that are not delivered by SDS.
fn vm_env_keys(cfg: &StackConfig) -> Vec<String> {
    let keyed = cfg.sds_keyed();
    cfg.env_keys.iter().filter(|e| !keyed.iter().any(|k| k.key == **e)).cloned().collect()
}

/// The Wasm filter config for one of the module's roles; every role shares one VM (`vm_id`),
/// hence one set of shared data.
fn wasm_filter(cfg: &StackConfig, root_id: &str, configuration: &str, stop_on_headers: bool) -> Value {
    if cfg.build == Build::Native {
        return native_filter(cfg, root_id, configuration);
    }
    let mut config = json!({
        "name": root_id,
        "root_id": root_id,
        "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": configuration},
        "vm_config": {
            "vm_id": VM_ID,
            "runtime": "envoy.wasm.runtime.v8",
            "code": {"local": {"filename": cfg.wasm.to_string_lossy()}},
            "environment_variables": {"host_env_keys": vm_env_keys(cfg)}
        }
    });
    // If the VM fails (a trap), requests on that worker get a JSON 503 and the VM is reloaded
    // (1 s back-off): never FAIL_OPEN, which would skip the filter and let a caller's forged
    // internal headers through.
    config["failure_policy"] = json!("FAIL_RELOAD");
    if stop_on_headers {
        // The router pauses headers until the body is complete.
        config["allow_on_headers_stop_iteration"] = json!(true);
    }
    json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm", "config": config})
}

/// The native build's filter config for one role: the same configuration string and role names
/// (`filter_name` is the Wasm `root_id`). The module is loaded once per process (its workers
/// share its state) and never unloaded; its stats are in the Wasm host's namespace. The
/// process environment is the module's: credential `env` references read it directly. Always a
/// local file (`module.local`): a `remote` module Envoy could not fetch leaves the filter out
/// (fail-open), which must never happen to the filter that strips forged internal headers.
/// The Istio EnvoyFilter's native build inserts exactly these (`istio_native`).
pub fn native_filter(cfg: &StackConfig, root_id: &str, configuration: &str) -> Value {
    json!({
        "@type": DYNAMIC_MODULE_TYPE_URL,
        "dynamic_module_config": {
            "module": {"local": {"filename": cfg.native.to_string_lossy()}},
            "do_not_close": true,
            "metrics_namespace": NATIVE_METRICS_NAMESPACE
        },
        "filter_name": root_id,
        "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": configuration}
    })
}

/// The HTTP filter entry of a module filter config (Wasm or native), by its type.
fn module_filter_entry(typed_config: Value) -> Value {
    let name = if typed_config["@type"] == json!(DYNAMIC_MODULE_TYPE_URL) {
        "envoy.filters.http.dynamic_modules"
    } else {
        "envoy.filters.http.wasm"
    };
    json!({"name": name, "typed_config": typed_config})
}

/// The plugin configuration as Envoy receives it (pretty, so the YAML shows it as a block).
/// With a pass-through cluster, `routing.passthrough_cluster` names it, so the filter and the
/// route always agree.
fn plugin_json(cfg: &StackConfig) -> String {
    let mut config = cfg.plugin_config.clone();
    if let (Some(pt), Some(obj)) = (&cfg.passthrough, config.as_object_mut()) {
        let routing = obj.entry("routing").or_insert_with(|| json!({}));
        if let Some(r) = routing.as_object_mut() {
            r.entry("passthrough_cluster").or_insert_with(|| json!(pt.name));
        }
    }
    let generated = generated_cluster_names(cfg);
    with_first_attempt_clusters(&mut config, cfg.first_attempt_clusters, &generated, &first_attempt_cluster_name);
    with_injected_keys(&mut config, &cfg.sds_keyed());
    with_handoff(&mut config, None);
    // The custom tags and the JSON log read the attributes the filter writes.
    if cfg.tracing.is_some() || cfg.access_log == AccessLog::Json {
        with_request_attributes(&mut config);
    }
    serde_json::to_string_pretty(&config).unwrap_or_else(|_| config.to_string())
}

/// The provider clusters this configuration generates (loopback mocks, then remote providers).
fn generated_cluster_names(cfg: &StackConfig) -> Vec<&str> {
    cfg.clusters.iter().map(|c| c.name.as_str()).chain(cfg.remote_clusters.iter().map(|r| r.name.as_str())).collect()
}

/// The name of a provider cluster's first-attempt twin in a generated Envoy configuration.
pub fn first_attempt_cluster_name(cluster: &str) -> String {
    format!("{cluster}-first")
}

/// The key a first-attempt twin adds to its attempts: its own upstream filter
/// (`credential_injector`) injects it on the way to that provider, so no key is ever written
/// into the downstream request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwinKey {
    /// The header (the filter's own rule per API: `credential.header` for OpenAI, `x-api-key`,
    /// `x-goog-api-key`).
    pub header: String,
    pub source: KeySource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// The whole header value (`credential.value` with its prefix).
    Inline(String),
    /// `credential.env`: the proxy's environment variable, and the prefix put before it
    /// (`header_value_prefix`, Envoy 1.38+).
    Env { name: String, prefix: String },
}

/// A first-attempt twin: the provider cluster it copies, the host its attempts carry, the key
/// it injects (None: its providers have no credential).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Twin {
    pub cluster: String,
    pub authority: String,
    pub key: Option<TwinKey>,
}

/// Stands in for `credential.env` values when the generator reads the plugin configuration with
/// the filter's parser: what precedes it in a header value is the configured prefix.
const ENV_MARKER: &str = "SWITCHYARD-GENERATOR-ENV-SECRET";

/// The plugin configuration read with the filter's own parser, every `credential.env` standing for
/// `ENV_MARKER` (None: a configuration the filter would refuse).
fn parsed_for_generator(plugin_config: &Value) -> Option<switchyard::config::Catalog> {
    let config = crate::gcp::for_generator(plugin_config);
    switchyard::config::Catalog::from_json(config.to_string().as_bytes(), &|_| Some(ENV_MARKER.into())).ok()
}

/// The provider clusters among `clusters` that get a first-attempt twin, read with the filter's
/// own parser: those whose providers agree on one `authority` (the decision filter names it for
/// the route's `host_rewrite_header`), serve exactly one API and have the same key
/// (the twin injects one key header), and are of a kind that needs no per-attempt filter
/// (`bedrock` does). A configuration the filter would refuse gets none.
pub fn first_attempt_twins(plugin_config: &Value, clusters: &[&str]) -> Vec<Twin> {
    let Some(catalog) = parsed_for_generator(plugin_config) else { return Vec::new() };
    let raw = &plugin_config["providers"];
    let mut twins: Vec<Option<Twin>> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for p in &catalog.providers {
        if !clusters.contains(&p.cluster.as_str()) {
            continue;
        }
        let mut apis = p.apis.keyed();
        let twin = match (apis.next(), apis.next()) {
            // A kind that rewrites every attempt's body and answer needs the per-attempt filter,
            // and so does an access token (only that filter puts it on an attempt).
            _ if p.needs_attempt_filter() => None,
            (Some(api), None) => Some(Twin {
                cluster: p.cluster.clone(),
                authority: p.authority.clone(),
                key: p.credential_for(api).map(|(header, value)| TwinKey {
                    header: header.to_string(),
                    source: match raw[&p.slug]["credential"]["env"].as_str() {
                        Some(name) => KeySource::Env {
                            name: name.to_string(),
                            prefix: value.strip_suffix(ENV_MARKER).unwrap_or_default().to_string(),
                        },
                        None => KeySource::Inline(value.to_string()),
                    },
                }),
            }),
            _ => None,
        };
        match seen.iter().position(|c| *c == p.cluster) {
            Some(i) => {
                if let Some(slot) = twins.get_mut(i) {
                    if slot.as_ref() != twin.as_ref() {
                        *slot = None;
                    }
                }
            }
            None => {
                seen.push(&p.cluster);
                twins.push(twin);
            }
        }
    }
    twins.into_iter().flatten().collect()
}

/// The name of a twin's key in the bootstrap's secrets.
pub fn twin_secret_name(cluster: &str) -> String {
    format!("switchyard-key-{cluster}")
}

/// The bootstrap secret a twin's `credential_injector` reads.
pub fn twin_secret(twin: &Twin) -> Option<Value> {
    let key = twin.key.as_ref()?;
    let data = match &key.source {
        KeySource::Inline(v) => json!({"inline_string": v}),
        KeySource::Env { name, .. } => json!({"environment_variable": name}),
    };
    Some(json!({"name": twin_secret_name(&twin.cluster), "generic_secret": {"secret": data}}))
}

/// `credential_injector` for a twin's key: it replaces any header of that name (the decision
/// filter removed the caller's already) and refuses to send an attempt without the key.
pub fn credential_injector(key: &TwinKey, secret: Value) -> Value {
    let mut generic = json!({
        "@type": "type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic",
        "credential": secret,
        "header": key.header
    });
    if let KeySource::Env { prefix, .. } = &key.source {
        if !prefix.is_empty() {
            generic["header_value_prefix"] = json!(prefix);
        }
    }
    json!({"name": "envoy.filters.http.credential_injector", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
        "overwrite": true,
        "allow_request_without_credential": false,
        "credential": {"name": "envoy.http.injected_credentials.generic", "typed_config": generic}
    }})
}

/// Names each provider's first-attempt twin (`first_attempt_cluster`) in the plugin
/// configuration, unless the configuration names one itself; `on`: false leaves it unchanged.
pub fn with_first_attempt_clusters(config: &mut Value, on: bool, clusters: &[&str], name: &dyn Fn(&str) -> String) {
    if !on {
        return;
    }
    let twins = first_attempt_twins(config, clusters);
    if let Some(providers) = config["providers"].as_object_mut() {
        for p in providers.values_mut() {
            let Some(cluster) = p["cluster"].as_str().map(str::to_string) else { continue };
            if twins.iter().any(|t| t.cluster == cluster) {
                if let Some(obj) = p.as_object_mut() {
                    obj.entry("first_attempt_cluster").or_insert_with(|| json!(name(&cluster)));
                }
            }
        }
    }
}

/// The first-attempt filter's configuration: it needs none (the decision filter prepared the
/// attempt), so it gets an empty object rather than a second copy of the catalog.
pub const FIRST_ATTEMPT_CONFIGURATION: &str = "{}";

/// The upstream filters of a first-attempt cluster: the first-attempt filter (`first`: the
/// module's `switchyard_first` role, which takes every internal header off the attempt and notes
/// a failed answer for the next attempt's filter), the provider's key (`key`: its
/// `credential_injector`), then the codec.
pub fn first_attempt_filters(first: Value, key: Option<Value>) -> Value {
    let first = module_filter_entry(first);
    let codec = json!({"name": "envoy.filters.http.upstream_codec", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}});
    Value::Array([Some(first), key, Some(codec)].into_iter().flatten().collect())
}

/// A provider cluster's first-attempt twin: the same cluster (address, TLS, limits) under
/// another name, with the first-attempt filter and the provider's key injector instead of the
/// per-attempt Wasm.
fn first_attempt_twin(cfg: &StackConfig, regular: &Value, twin: &Twin, http2: bool, secret: Value) -> Value {
    let mut v = regular.clone();
    let name = first_attempt_cluster_name(regular["name"].as_str().unwrap_or_default());
    v["name"] = json!(name);
    v["load_assignment"]["cluster_name"] = json!(name);
    let injector = twin.key.as_ref().map(|k| credential_injector(k, secret));
    let first = wasm_filter(cfg, FIRST_ATTEMPT_ROOT_ID, FIRST_ATTEMPT_CONFIGURATION, false);
    v["typed_extension_protocol_options"] = provider_protocol_options(http2, first_attempt_filters(first, injector));
    v
}

/// The upstream (per-attempt) HTTP filters of every provider cluster.
pub fn upstream_filters(upstream_wasm: Value) -> Value {
    json!([
        module_filter_entry(upstream_wasm),
        {"name": "envoy.filters.http.upstream_codec", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
    ])
}

/// Envoy's AWS SigV4 signing of a provider cluster's attempts
/// (`envoy.filters.http.aws_request_signing`), when its providers are of a kind Envoy signs and
/// have no credential (`Kind::aws_signing`: Bedrock); all the cluster's providers must agree.
/// The payload is signed (`use_unsigned_payload: false`: the filter buffers each attempt's body),
/// with Envoy's default credential chain: environment, credentials file, IRSA web identity,
/// container and instance metadata, refreshed as they expire. The module never holds the keys.
///
/// `credentials_file`: a credentials file added to that chain, watched (its directory) so a
/// rotated file is read without a restart.
pub fn aws_signing_filter(plugin_config: &Value, cluster: &str, credentials_file: Option<&Path>) -> Option<Value> {
    let catalog = parsed_for_generator(plugin_config)?;
    let mut signing = None;
    for p in catalog.providers.iter().filter(|p| p.cluster == cluster) {
        let this = if p.credential.is_none() { p.kind.aws_signing(&p.authority) } else { None };
        match &signing {
            None => signing = Some(this),
            Some(s) if *s != this => return None,
            Some(_) => {}
        }
    }
    let s = signing.flatten()?;
    let mut config = json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.aws_request_signing.v3.AwsRequestSigning",
        "service_name": s.service,
        "region": s.region,
        "use_unsigned_payload": false
    });
    if let Some(file) = credentials_file {
        let dir = file.parent().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
        config["credential_provider"] = json!({"credentials_file_provider": {"credentials_data_source": {
            "filename": file.to_string_lossy(), "watched_directory": {"path": dir}}}});
    }
    Some(json!({"name": "envoy.filters.http.aws_request_signing", "typed_config": config}))
}

/// Adds the cluster's SigV4 signing (`aws_signing_filter`) to its upstream filters, right before
/// the codec: after the per-attempt filter, so what is signed is each attempt's final path and
/// body.
pub fn with_aws_signing(filters: &mut Value, plugin_config: &Value, cluster: &str, credentials_file: Option<&Path>) {
    let Some(signing) = aws_signing_filter(plugin_config, cluster, credentials_file) else { return };
    if let Some(list) = filters.as_array_mut() {
        let codec = list.len().saturating_sub(1);
        list.insert(codec, signing);
    }
}

/// `HttpProtocolOptions` of a provider cluster: the protocol (HTTP/1.1, or HTTP/2 offered by
/// ALPN) and the per-attempt filter chain where the attempt rewrites run.
pub fn provider_protocol_options(http2: bool, filters: Value) -> Value {
    let protocol = if http2 {
        // ALPN picks h2 when the provider offers it, else HTTP/1.1.
        json!({"auto_config": {"http_protocol_options": {}, "http2_protocol_options": {}}})
    } else {
        json!({"explicit_http_config": {"http_protocol_options": {}}})
    };
    let mut options = json!({"@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"});
    if let (Some(o), Some(p)) = (options.as_object_mut(), protocol.as_object()) {
        o.extend(p.clone());
        o.insert("http_filters".into(), filters);
    }
    json!({"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": options})
}

/// TLS to a provider: SNI = host, the certificate must chain to `ca_file` and name `host`.
pub fn upstream_tls(host: &str, ca_file: &str, http2: bool) -> Value {
    let alpn: Vec<&str> = if http2 { vec!["h2", "http/1.1"] } else { vec!["http/1.1"] };
    json!({
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": host,
            "common_tls_context": {
                "alpn_protocols": alpn,
                "validation_context": {
                    "trusted_ca": {"filename": ca_file},
                    "match_typed_subject_alt_names": [{"san_type": "DNS", "matcher": {"exact": host}}]
                }
            }
        }
    })
}

/// Envoy's own default for concurrent requests per cluster, kept as our default.
pub const DEFAULT_MAX_REQUESTS_PER_CLUSTER: u32 = 1024;

/// Circuit breakers of a provider cluster, set deliberately.
///
/// Envoy's default allows only 3 concurrent retries per cluster, and a retry holds its slot while
/// the retried attempt runs. Every Switchyard failover is an Envoy retry, so under concurrent
/// faults on one provider (exactly when failover is needed) Envoy silently refuses failovers
/// (`upstream_rq_retry_overflow`) and the request ends after one attempt. The retry breaker
/// exists to stop retry storms against the failing upstream itself; here each retry goes to a
/// *different* provider, and amplification is already bounded per request by the plan
/// (`routing.max_attempts`). So failovers get the same concurrency as first attempts.
pub fn provider_circuit_breakers(max_requests: u32, max_failovers: u32) -> Value {
    json!({"thresholds": [{
        "priority": "DEFAULT",
        "max_connections": max_requests,
        "max_pending_requests": max_requests,
        "max_requests": max_requests,
        "max_retries": max_failovers
    }]})
}

/// A provider cluster: per-attempt rewrites run in its upstream filter chain.
fn provider_cluster(cfg: &StackConfig, c: &ClusterSpec) -> Value {
    let mut v = cluster(c);
    v["circuit_breakers"] = provider_circuit_breakers(cfg.max_requests_per_cluster, cfg.max_concurrent_failovers);
    v["typed_extension_protocol_options"] = provider_protocol_options(false, cfg.provider_filters(&c.name));
    v
}

/// A provider over DNS and TLS (LOGICAL_DNS: API hosts sit behind large, changing address
/// pools; Envoy connects to whichever address DNS returns first).
fn remote_cluster(cfg: &StackConfig, r: &RemoteCluster) -> Value {
    let (kind, address) = match &r.connect_to {
        Some(ip) => ("STATIC", ip.as_str()),
        None => ("LOGICAL_DNS", r.host.as_str()),
    };
    let mut v = json!({
        "name": r.name,
        "type": kind,
        "connect_timeout": "5s",
        "lb_policy": "ROUND_ROBIN",
        "load_assignment": {
            "cluster_name": r.name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": address, "port_value": r.port}}}}]}]
        },
        "transport_socket": upstream_tls(&r.host, &r.ca_file, r.http2),
        "metadata": tls_scheme_metadata(),
        "typed_extension_protocol_options": provider_protocol_options(r.http2, cfg.provider_filters(&r.name)),
        "circuit_breakers": provider_circuit_breakers(cfg.max_requests_per_cluster, cfg.max_concurrent_failovers)
    });
    if r.connect_to.is_none() {
        v["dns_lookup_family"] = json!("V4_PREFERRED");
    }
    v
}

/// The last route of Switchyard's virtual host: an OpenAI-style 404. The filter answers unrouted
/// requests itself, so this only serves a request the filter never saw; marked like the others,
/// it is also the route a request on Switchyard's host matches before the filter routes it.
pub fn unrouted_route() -> Value {
    let mut r = json!({
        "match": {"prefix": "/"},
        "direct_response": {"status": 404, "body": {"inline_string":
            "{\"error\":{\"message\":\"no such endpoint\",\"type\":\"invalid_request_error\",\"code\":\"not_found\",\"param\":null}}"}},
        "response_headers_to_add": [{"header": {"key": "content-type", "value": "application/json"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}]
    });
    mark_route(&mut r, None);
    r
}

/// What enables the decision filter on a route: Envoy enables a filter held `disabled` where a
/// route carries a valid per-route configuration for it, and the Wasm filter reads none. So the
/// configuration is one Envoy always builds and the Wasm filter ignores: RBAC's per-route
/// configuration, denying every request. It takes effect only if the filter under that name is
/// RBAC: the deny-all filter istio-agent substitutes for a module it could not pull, which then
/// refuses Switchyard's routes, as it would anyway, and no other host's.
pub fn decision_filter_enabled() -> Value {
    json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute",
        "rbac": {"rules": {"action": "DENY", "policies": {"switchyard-module-unavailable": {
            "permissions": [{"any": true}], "principals": [{"any": true}]}}}}})
}

/// The name of the generated listener's response compressor (gzip for callers that accept it).
pub const COMPRESSOR_FILTER: &str = "envoy.filters.http.compressor";

/// What enables the compressor, held `disabled` on the listener, on a route: a valid per-route
/// configuration for it that overrides nothing (an empty response-direction override; Envoy
/// 1.39.3 and 1.40.0 then compress that route's answers as the listener's configuration says).
pub fn compressor_enabled() -> Value {
    json!({"@type": "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.CompressorPerRoute",
        "overrides": {"response_direction_config": {}}})
}

/// The decision filter's name in the HTTP filter chain (the generated Envoy configuration and
/// the Istio EnvoyFilter's ECDS resource alike).
pub const DECISION_FILTER: &str = "switchyard-decision";

/// Marks a route as Switchyard's (route metadata `switchyard.route`, see the filter's `scope`
/// module): the decision filter acts only on requests whose route carries it. `policy` also
/// labels it for route-selected operator policies (`switchyard.policy`). It also enables the
/// decision filter, which the listener's chain holds disabled (`HttpFilter.disabled`): other
/// hosts on the listener never run it, and an extension config that did not arrive (a failed
/// module pull) fails only Switchyard's routes.
pub fn mark_route(route: &mut Value, policy: Option<&str>) {
    let mut ours = json!({ROUTE_MARK_KEY: ROUTE_MARK_VALUE});
    if let Some(p) = policy {
        ours[ROUTE_POLICY_KEY] = json!(p);
    }
    route["metadata"] = json!({"filter_metadata": {METADATA_NAMESPACE: ours}});
    route["typed_per_filter_config"] = json!({DECISION_FILTER: decision_filter_enabled()});
}

/// An access-log filter (the form local-reply mappers and access logs take) selecting the
/// requests of Switchyard's marked routes (`mark_route`): the CEL access-log filter on the route
/// metadata, non-empty as the decision filter reads it (`scope::is_marked`). Nothing else keys on
/// the mark, so a virtual host added to a shared listener is left alone without being declared
/// anywhere. A request without a route (or a route without the mark) fails the expression, which
/// the filter counts as no match. Built into Envoy and istio-proxy alike
/// (`envoy.access_loggers.extension_filters.cel`).
pub fn route_mark_filter() -> Value {
    json!({"extension_filter": {
        "name": "envoy.access_loggers.extension_filters.cel",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
            "expression": format!("xds.route_metadata.filter_metadata['{METADATA_NAMESPACE}']['{ROUTE_MARK_KEY}'] != ''")
        }
    }})
}

/// Where the routed route's matcher finds the next attempt's cluster token (the filter's
/// `protocol::slots`): the generator and the plugin configuration must agree.
#[derive(Clone, Copy, Debug)]
pub enum HandoffWiring<'a> {
    /// Filter state, one key per attempt (`wasm.switchyard_next_<k>`): nothing reaches a
    /// provider. Needs Envoy's filter-state matcher input (plain Envoy builds it).
    FilterState { max_attempts: u32 },
    /// The request header `x-switchyard-next` with tokens keyed by the deployment's secret
    /// (istio-proxy builds no filter-state matcher input).
    Header { key: &'a [u8; 16] },
}

/// The plugin configuration's `routing.handoff` as the generated routes read it: by filter
/// state (`key` None, the filter's default; whatever the catalog says is replaced) or by the
/// keyed header.
pub fn with_handoff(config: &mut Value, key: Option<&[u8; 16]>) {
    let Some(obj) = config.as_object_mut() else { return };
    let routing = obj.entry("routing").or_insert_with(|| json!({}));
    let Some(r) = routing.as_object_mut() else { return };
    match key {
        None => {
            r.remove("handoff");
            r.remove("handoff_key");
        }
        Some(k) => {
            r.insert("handoff".into(), json!("header"));
            r.insert("handoff_key".into(), json!(k.iter().map(|b| format!("{b:02x}")).collect::<String>()));
        }
    }
}

/// Envoy's `ClusterAction` for each token of `cluster_names`.
fn token_map(cluster_names: &[&str], token: &dyn Fn(&str) -> String) -> Value {
    let map: serde_json::Map<String, Value> = cluster_names
        .iter()
        .map(|c| {
            let action = json!({"action": {"name": "cluster", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.ClusterAction",
                "cluster": c}}});
            (token(c), action)
        })
        .collect();
    json!({"map": map})
}

/// The filter-state matcher input reading attempt `k`'s token.
fn next_state_input(k: u32) -> Value {
    json!({"name": "envoy.matching.inputs.filter_state", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.matching.common_inputs.network.v3.FilterStateInput",
        "key": format!("wasm.{}", next_state_property(k as usize))}})
}

/// The cluster specifier of the routed route: Envoy's matcher picks the cluster the next
/// attempt's token names (the decision filter writes the first attempt's, each attempt's filter
/// the next one's, and `refresh_cluster_on_retry` runs the matcher again before every retry).
/// It maps exactly the tokens of the configuration's clusters; anything else matches none.
/// By filter state: the highest attempt's key present wins (attempt k + 1's key is written by
/// attempt k, so it is the newest), one exact map per attempt.
pub fn cluster_matcher(cluster_names: &[&str], handoff: HandoffWiring) -> Value {
    match handoff {
        HandoffWiring::Header { key } => json!({"matcher_tree": {
            "input": {"name": "next", "typed_config": {
                "@type": "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
                "header_name": NEXT_CLUSTER_HEADER}},
            "exact_match_map": token_map(cluster_names, &|c| keyed_slot_token(key, c))
        }}),
        HandoffWiring::FilterState { max_attempts } => {
            let map = token_map(cluster_names, &|c| slot_token(c));
            let matchers: Vec<Value> = (1..=max_attempts.max(1))
                .rev()
                .map(|k| {
                    json!({
                        "predicate": {"single_predicate": {"input": next_state_input(k),
                            "value_match": {"safe_regex": {"google_re2": {}, "regex": "^[0-9a-f]{16}$"}}}},
                        "on_match": {"matcher": {"matcher_tree": {"input": next_state_input(k), "exact_match_map": map.clone()}}}
                    })
                })
                .collect();
            json!({"matcher_list": {"matchers": matchers}})
        }
    }
}

/// The route for requests the filter routed: it wrote the plan in filter state, which the match
/// requires, and the first attempt's token. Only the decision filter writes that filter state,
/// so a request it did not plan (the filter absent, skipped or failed open) matches no route to a
/// provider, whatever headers it forges: it falls through to the marked 404. The matcher cluster
/// specifier and Envoy's retry policy move from one cluster to the next.
pub fn routed_route(cluster_names: &[&str], cfg: &StackConfig, handoff: HandoffWiring) -> Value {
    let mut retry_policy = json!({
        "retry_on": "connect-failure,refused-stream,reset,5xx,retriable-status-codes",
        "retriable_status_codes": [408, 429],
        "num_retries": cfg.max_attempts.saturating_sub(1),
        "refresh_cluster_on_retry": true,
        "retry_back_off": {"base_interval": format!("{}s", f64::from(cfg.retry_back_off_ms.max(1)) / 1000.0), "max_interval": format!("{}s", f64::from(cfg.retry_back_off_ms.max(1) * 4) / 1000.0)}
    });
    if cfg.per_try_idle_timeout_ms > 0 {
        retry_policy["per_try_idle_timeout"] = json!(format!("{}s", f64::from(cfg.per_try_idle_timeout_ms) / 1000.0));
    }
    let mut matched = json!({"prefix": "/",
        "filter_state": [{"key": PLAN_STATE_KEY, "string_match": {"prefix": plan_state_prefix()}}]});
    if let HandoffWiring::Header { .. } = handoff {
        matched["headers"] = json!([{"name": NEXT_CLUSTER_HEADER, "present_match": true}]);
    }
    json!(
        {
            "match": matched,
            "route": {
                "inline_cluster_specifier_plugin": {"extension": {
                    "name": "envoy.router.cluster_specifier_plugin.matcher",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.router.cluster_specifiers.matcher.v3.MatcherClusterSpecifier",
                        "cluster_matcher": cluster_matcher(cluster_names, handoff)
                    }
                }},
                "timeout": format!("{}s", f64::from(cfg.route_timeout_ms) / 1000.0),
                // A first attempt on a first-attempt cluster gets the provider's host from the
                // header the decision filter wrote (it must not change `:authority` before the
                // route is resolved); the per-attempt filter sets the same on the others. Not
                // `auto_host_rewrite`: at connection time it adds `x-envoy-original-host`, after
                // the attempt's filter could take it off.
                "host_rewrite_header": AUTHORITY_HEADER,
                "retry_policy": retry_policy
            }
        }
    )
}

/// Request paths of Anthropic's API: the caller's Messages path and the paths under it
/// (`/v1/messages/count_tokens`, `/v1/messages/batches...`), or after an attempt's rewrite the
/// provider's, which keeps the method (`<prefix>/messages`).
pub fn anthropic_path_regex() -> String {
    format!(r"^([^?]*/messages|{MESSAGES_PATH}/[^?]*)(\?.*)?$")
}

/// Request paths of Google's API: every caller path under `/v1beta/` (the filter's
/// `Api::of_path`: listings, `:countTokens`, ...), and a generateContent method anywhere (the
/// caller's `/v1/models/...`, or a provider's path after an attempt's rewrite).
pub fn google_path_regex() -> String {
    format!(r"^({GOOGLE_BETA_PREFIX}[^?]*|[^?]*:(generateContent|streamGenerateContent))(\?.*)?$")
}

/// The version prefix every Google path has (the filter's `GOOGLE_MODELS_PREFIX` without `models/`).
const GOOGLE_BETA_PREFIX: &str = "/v1beta/";

/// Envoy's own local replies in the shape of the caller's API (OpenAI, Anthropic Messages,
/// Google generateContent), told apart by the request path, on Switchyard's marked routes only
/// (`route_mark_filter`): another host of a shared listener keeps Envoy's own replies, whether
/// or not anyone listed it. Replies Switchyard shaped itself (`x-switchyard-own-reply`) are left
/// alone. Mappers apply in order: the first match wins.
pub fn local_reply_config() -> Value {
    let not_own =
        json!({"header_filter": {"header": {"name": OWN_REPLY_HEADER, "present_match": true, "invert_match": true}}});
    let flags = |list: &[&str]| json!({"response_flag_filter": {"flags": list}});
    let status_503 = json!({"status_code_filter": {"comparison": {"op": "EQ", "value": {"default_value": 503, "runtime_key": "switchyard.local_503"}}}});
    let on_path = |regex: &str| json!({"header_filter": {"header": {"name": ":path", "string_match": {"safe_regex": {"regex": regex}}}}});
    let all = |mut filters: Vec<Value>| {
        filters.push(route_mark_filter());
        json!({"and_filter": {"filters": filters}})
    };
    let mapper = |filter: Value, body: Value| json!({"filter": filter, "body_format_override": {"json_format": body, "content_type": "application/json"}});
    // Upstream failures Envoy answers itself: no healthy upstream, connect failure, reset,
    // overflow, no route, timeout (UT), a downstream protocol error (DPE).
    const UPSTREAM: [&str; 11] = ["UF", "UH", "NR", "UT", "URX", "UC", "UO", "NC", "UR", "UMSDR", "DPE"];
    let anthropic = |status: u32| json!({"type": "error", "error": {"type": anthropic_type(status), "message": "%LOCAL_REPLY_BODY%", "code": "%RESPONSE_CODE_DETAILS%"}});
    let google = |status: u32| {
        json!({"error": {"code": "%RESPONSE_CODE%", "message": "%LOCAL_REPLY_BODY%", "status": google_status(status), "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "%RESPONSE_CODE_DETAILS%", "domain": "switchyard"}]}})
    };
    let openai = |kind: &str| json!({"error": {"message": "%LOCAL_REPLY_BODY%", "type": kind, "code": "%RESPONSE_CODE_DETAILS%", "param": null}});
    let mappers = vec![
        // Anthropic Messages callers.
        // (UT is Envoy's 504, the other flags and a failed VM its 503: the filter's error type
        // and status name for those statuses.)
        mapper(all(vec![flags(&["UT"]), on_path(&anthropic_path_regex()), not_own.clone()]), anthropic(504)),
        mapper(all(vec![flags(&UPSTREAM), on_path(&anthropic_path_regex()), not_own.clone()]), anthropic(503)),
        mapper(all(vec![status_503.clone(), on_path(&anthropic_path_regex()), not_own.clone()]), anthropic(503)),
        // Google callers.
        mapper(all(vec![flags(&["UT"]), on_path(&google_path_regex()), not_own.clone()]), google(504)),
        mapper(all(vec![flags(&UPSTREAM), on_path(&google_path_regex()), not_own.clone()]), google(503)),
        mapper(all(vec![status_503.clone(), on_path(&google_path_regex()), not_own.clone()]), google(503)),
        // Everyone else: OpenAI's shape.
        mapper(all(vec![flags(&UPSTREAM), not_own.clone()]), openai("upstream_error")),
        // Envoy's other local 503s (a failed Wasm VM: `wasm_fail_stream`) as JSON too.
        mapper(all(vec![status_503, not_own]), openai("server_error")),
    ];
    json!({ "mappers": mappers })
}

/// The Envoy bootstrap for a Switchyard listener, as JSON (also valid YAML).
pub fn bootstrap(cfg: &StackConfig) -> Value {
    bootstrap_inner(cfg)
}

/// A provider cluster's metadata naming the scheme of its attempts: `https` over the TLS it
/// originates (HTTP/2 sends `:scheme`, and Envoy would otherwise forward the caller's `http`).
/// Each attempt's filter sets it (see the filter's `scope::CLUSTER_SCHEME_KEY`), so no
/// listener-wide `scheme_header_transformation` changes another host's requests.
pub fn tls_scheme_metadata() -> Value {
    json!({"filter_metadata": {METADATA_NAMESPACE: {CLUSTER_SCHEME_KEY: "https"}}})
}

fn bootstrap_inner(cfg: &StackConfig) -> Value {
    let mut clusters: Vec<Value> = cfg.clusters.iter().map(|c| provider_cluster(cfg, c)).collect();
    clusters.extend(cfg.remote_clusters.iter().map(|r| remote_cluster(cfg, r)));
    let generated = generated_cluster_names(cfg);
    let twins =
        if cfg.first_attempt_clusters { first_attempt_twins(&cfg.plugin_config, &generated) } else { Vec::new() };
    let mut twin_names: Vec<String> = Vec::new();
    let mut secrets: Vec<Value> = Vec::new();
    let keyed = cfg.sds_keyed();
    for twin in &twins {
        let http2 = cfg.remote_clusters.iter().any(|r| r.name == twin.cluster && r.http2);
        if let Some(regular) = clusters.iter().find(|c| c["name"] == json!(twin.cluster)).cloned() {
            // The twin reads the key its cluster's injectors read (SDS-keyed), or a bootstrap
            // secret of its own.
            let secret = match cfg.key_secret(&twin.cluster).filter(|_| keyed.iter().any(|k| k.cluster == twin.cluster))
            {
                Some(sds) => sds,
                None => {
                    secrets.extend(twin_secret(twin));
                    json!({"name": twin_secret_name(&twin.cluster)})
                }
            };
            clusters.push(first_attempt_twin(cfg, &regular, twin, http2, secret));
            twin_names.push(first_attempt_cluster_name(&twin.cluster));
        }
    }
    if let Some(pt) = &cfg.passthrough {
        clusters.push(cluster(pt));
    }
    clusters.extend(crate::ratelimit::service_cluster(&cfg.plugin_config, cfg.rate_limit_service.as_ref()));
    clusters.extend(crate::gcp::metadata_clusters(&cfg.plugin_config, cfg.metadata_server.as_ref()));
    clusters.extend(crate::gcp::token_endpoint_clusters(
        &cfg.plugin_config,
        cfg.token_endpoint.as_ref(),
        SYSTEM_CA_BUNDLE,
    ));
    clusters.extend(cfg.tracing.as_ref().map(otlp_cluster));
    let names: Vec<&str> = generated.iter().copied().chain(twin_names.iter().map(String::as_str)).collect();
    // The routes of a virtual host; `policy` labels each of them (route metadata
    // `filter_metadata.switchyard.policy`) for route-selected operator policies.
    let routes = |policy: Option<&str>| -> Value {
        let mut routes: Vec<Value> =
            vec![routed_route(&names, cfg, HandoffWiring::FilterState { max_attempts: cfg.max_attempts })];
        // Unrouted requests the filter marked with the operator's pass-through cluster (the exact
        // value, so a forged header can only ever reach that cluster).
        if let Some(pt) = &cfg.passthrough {
            routes.push(json!({
                "match": {"prefix": "/", "headers": [{"name": PASSTHROUGH_HEADER, "string_match": {"exact": pt.name}}]},
                "route": {"cluster": pt.name, "timeout": "60s"},
                "request_headers_to_remove": [PASSTHROUGH_HEADER]
            }));
        }
        // Nothing else reaches any cluster: the filter answers unrouted requests itself, so this
        // only serves a request the filter never saw. (It is also the route a request matches
        // when the filter reads the route's policy label, before it routes.)
        routes.push(unrouted_route());
        for r in routes.iter_mut() {
            mark_route(r, policy);
            // The listener's reply filters are held disabled too: they act on Switchyard's
            // marked routes only.
            r["typed_per_filter_config"][COMPRESSOR_FILTER] = compressor_enabled();
            if cfg.access_log == AccessLog::Json {
                r["typed_per_filter_config"][crate::telemetry::TYPED_NUMBERS_FILTER] =
                    crate::telemetry::typed_numbers_enabled();
            }
        }
        Value::Array(routes)
    };
    let mut virtual_hosts: Vec<Value> = cfg
        .policy_routes
        .iter()
        .map(|r| {
            json!({"name": format!("policy-{}", r.domain), "domains": [r.domain], "routes": routes(Some(&r.policy))})
        })
        .collect();
    virtual_hosts.push(json!({"name": "llm", "domains": ["*"], "routes": routes(None)}));
    let mut boot = json!({
        // SDS (the key files) needs a node identity.
        "node": {"id": "switchyard", "cluster": "switchyard"},
        // Switchyard metrics carry model/endpoint/outcome as `.name.value` segments.
        "stats_config": stats_config(),
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": cfg.admin_port}}},
        "static_resources": {
            "listeners": [{
                "name": "switchyard",
                "address": {"socket_address": {"address": cfg.listener_address, "port_value": cfg.listener_port}},
                "enable_reuse_port": false,
                "per_connection_buffer_limit_bytes": cfg.buffer_limit_bytes,
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "switchyard",
                        "route_config": {"name": "switchyard", "virtual_hosts": virtual_hosts},
                        // Envoy's own errors (no upstream, reset, timeout, a failed VM) as JSON
                        // in the caller's API shape.
                        "local_reply_config": local_reply_config(),
                        "http_filters": [
                            // 0. Compress for callers that accept it. Switchyard asks providers for
                            //    unencoded answers (it rewrites them); this filter runs last on the
                            //    response, after the rewrite. Disabled but on Switchyard's own
                            //    routes (`compressor_enabled`): another host's answers are never
                            //    compressed or given a `vary` by it.
                            {"name": COMPRESSOR_FILTER, "disabled": true, "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.http.compressor.v3.Compressor",
                                "compressor_library": {"name": "gzip", "typed_config": {
                                    "@type": "type.googleapis.com/envoy.extensions.compression.gzip.compressor.v3.Gzip"}}
                            }},
                            // 1. Parse the body, plan the endpoints, write the slot headers.
                            //    Disabled but on Switchyard's own routes (`mark_route` enables it): no
                            //    other host on the listener runs it.
                            {"name": DECISION_FILTER, "disabled": true,
                             "typed_config": wasm_filter(cfg, DECISION_ROOT_ID, &plugin_json(cfg), true)},
                            // Every attempt's upstream filter (per-attempt or first-attempt) takes
                            // the router's x-envoy-* headers off before the provider sees them.
                            {"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
                        ]
                    }
                }]}]
            }],
            "clusters": clusters,
            "secrets": secrets
        }
    });
    if cfg.build == Build::Native {
        boot["layered_runtime"] = native_runtime();
    }
    let chain = &mut boot["static_resources"]["listeners"][0]["filter_chains"][0];
    if let Some(log) = access_log(cfg.access_log) {
        chain["filters"][0]["typed_config"]["access_log"] = log;
    }
    if cfg.access_log == AccessLog::Json {
        // Before the decision filter: on the response it runs after it (see the function).
        if let Some(filters) = chain["filters"][0]["typed_config"]["http_filters"].as_array_mut() {
            filters.insert(1, crate::telemetry::typed_numbers_filter());
        }
    }
    if let Some(t) = &cfg.tracing {
        chain["filters"][0]["typed_config"]["tracing"] = hcm_tracing(t);
    }
    if let Some(jwt) = &cfg.jwt {
        let authn = json!({"name": "envoy.filters.http.jwt_authn", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
            "providers": {"caller": {
                "issuer": jwt.issuer,
                "local_jwks": {"inline_string": jwt.jwks},
                // Claims land in dynamic metadata `envoy.filters.http.jwt_authn` / `jwt_payload`.
                "payload_in_metadata": "jwt_payload",
                "forward": false
            }},
            "rules": [{"match": {"prefix": "/"}, "requires": {"requires_any": {"requirements": [
                {"provider_name": "caller"}, {"allow_missing": {}}
            ]}}}]
        }});
        if let Some(filters) = chain["filters"][0]["typed_config"]["http_filters"].as_array_mut() {
            filters.insert(0, authn);
        }
    }
    if let Some(tls) = &cfg.tls {
        // mTLS: callers must present a certificate from `client_ca`; its URI SAN (a SPIFFE id)
        // is what `policy_selection.rules[].peer_uri_san` matches.
        chain["transport_socket"] = json!({
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                "require_client_certificate": true,
                "common_tls_context": {
                    "tls_certificates": [{
                        "certificate_chain": {"filename": tls.cert_chain.to_string_lossy()},
                        "private_key": {"filename": tls.private_key.to_string_lossy()}
                    }],
                    "validation_context": {"trusted_ca": {"filename": tls.client_ca.to_string_lossy()}}
                }
            }
        });
    }
    boot
}

/// Plain Envoy with the same listener settings routing straight to one cluster: the baseline
/// the benchmark compares Switchyard against.
pub fn plain_bootstrap(upstream: &ClusterSpec, listener_port: u16, admin_port: u16) -> Value {
    json!({
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [{
                "name": "plain",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": listener_port}},
                "enable_reuse_port": false,
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "plain",
                        "route_config": {"name": "plain", "virtual_hosts": [{"name": "all", "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": upstream.name, "timeout": "300s"}}]}]},
                        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}]
                    }
                }]}]
            }],
            "clusters": [cluster(upstream)]
        }
    })
}

/// Renders JSON as block YAML (for the committed, human-read example config).
pub fn to_yaml(v: &Value) -> String {
    fn scalar(v: &Value) -> String {
        match v {
            Value::String(s) => {
                let plain = !s.is_empty()
                    && s.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
                    && !matches!(s.as_str(), "true" | "false" | "null" | "yes" | "no" | "on" | "off")
                    && s.parse::<f64>().is_err();
                if plain {
                    s.clone()
                } else {
                    Value::String(s.clone()).to_string()
                }
            }
            Value::Array(a) if a.is_empty() => "[]".into(),
            Value::Object(o) if o.is_empty() => "{}".into(),
            other => other.to_string(),
        }
    }
    fn is_block(v: &Value) -> bool {
        matches!(v, Value::Array(a) if !a.is_empty()) || matches!(v, Value::Object(o) if !o.is_empty())
    }
    // Small objects and lists on one line in flow style (`{name: c, weight: 1}`): the route
    // tables list every provider cluster per route, which block style spreads over pages.
    fn flow(v: &Value) -> Option<String> {
        let text = match v {
            Value::Object(o) => {
                let parts: Option<Vec<String>> = o
                    .iter()
                    .map(|(k, x)| Some(format!("{}: {}", scalar(&Value::String(k.clone())), flow(x)?)))
                    .collect();
                format!("{{{}}}", parts?.join(", "))
            }
            Value::Array(a) => {
                let parts: Option<Vec<String>> = a.iter().map(flow).collect();
                format!("[{}]", parts?.join(", "))
            }
            Value::String(t) if t.contains('\n') => return None,
            other => scalar(other),
        };
        (text.len() <= 100).then_some(text)
    }
    // Repeated multi-line strings (the plugin configuration on every cluster) become YAML
    // anchors and aliases.
    fn emit(v: &Value, indent: usize, out: &mut String, seen: &mut Vec<String>) {
        let pad = " ".repeat(indent);
        match v {
            Value::Object(o) if !o.is_empty() => {
                for (k, x) in o {
                    let key = scalar(&Value::String(k.clone()));
                    if let Some(f) = is_block(x).then(|| flow(x)).flatten() {
                        out.push_str(&format!("{pad}{key}: {f}\n"));
                    } else if is_block(x) {
                        out.push_str(&format!("{pad}{key}:\n"));
                        emit(x, indent + 2, out, seen);
                    } else if let Some(text) = x.as_str().filter(|t| t.contains('\n')) {
                        if let Some(i) = seen.iter().position(|t| t == text) {
                            out.push_str(&format!("{pad}{key}: *config{i}\n"));
                        } else {
                            // `|` keeps one final line break (an access-log format needs it), `|-` none.
                            let chomp = if text.ends_with('\n') { "|" } else { "|-" };
                            out.push_str(&format!("{pad}{key}: &config{} {chomp}\n", seen.len()));
                            seen.push(text.to_string());
                            for line in text.lines() {
                                out.push_str(&format!("{pad}  {line}\n"));
                            }
                        }
                    } else {
                        out.push_str(&format!("{pad}{key}: {}\n", scalar(x)));
                    }
                }
            }
            Value::Array(a) if !a.is_empty() => {
                for x in a {
                    if let Some(f) = is_block(x).then(|| flow(x)).flatten() {
                        out.push_str(&format!("{pad}- {f}\n"));
                    } else if is_block(x) {
                        let mut inner = String::new();
                        emit(x, indent + 2, &mut inner, seen);
                        let trimmed = inner.trim_start_matches(' ');
                        out.push_str(&format!("{pad}- {trimmed}"));
                    } else {
                        out.push_str(&format!("{pad}- {}\n", scalar(x)));
                    }
                }
            }
            other => out.push_str(&format!("{pad}{}\n", scalar(other))),
        }
    }
    let mut out = String::new();
    emit(v, 0, &mut out, &mut Vec::new());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(build: Build) -> StackConfig {
        let catalog = json!({
            "providers": {"a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "k"}}},
            "models": {"m/x": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}}]}}
        });
        let mut cfg = StackConfig::new(catalog, vec![ClusterSpec { name: "c_a".into(), port: 1 }], None);
        cfg.build = build;
        cfg.native = PathBuf::from("/opt/libswitchyard.so");
        cfg
    }

    #[test]
    fn the_native_build_emits_the_dynamic_module_for_every_role() {
        let text = bootstrap(&stack(Build::Native)).to_string();
        assert!(!text.contains("envoy.extensions.filters.http.wasm.v3.Wasm"), "{text}");
        for role in [DECISION_ROOT_ID, ATTEMPT_ROOT_ID, FIRST_ATTEMPT_ROOT_ID] {
            assert!(text.contains(&format!("\"filter_name\":\"{role}\"")), "{role}");
        }
        assert_eq!(text.matches(DYNAMIC_MODULE_TYPE_URL).count(), 3, "decision, per-attempt, first-attempt");
        assert!(text.contains("/opt/libswitchyard.so") && text.contains("dynamic_modules_strip_custom_stat_prefix"));
        // The routed route reads the plan where the native host writes it.
        assert!(text.contains(&format!("\"key\":\"{PLAN_STATE_KEY}\"")), "{text}");
        assert_eq!(PLAN_STATE_KEY, switchyard::native::state_key(switchyard::protocol::plan::PLAN_PROPERTY));
    }

    #[test]
    fn wasm_stays_the_default_and_has_no_native_parts() {
        let text = bootstrap(&stack(Build::default())).to_string();
        assert!(!text.contains(DYNAMIC_MODULE_TYPE_URL) && !text.contains("layered_runtime"));
        assert_eq!(Build::parse("native"), Ok(Build::Native));
        assert!(Build::parse("v8").is_err());
    }

    #[test]
    fn a_bedrock_provider_gets_no_first_attempt_twin() {
        let catalog = json!({
            "providers": {
                "a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "k"},
                      "apis": {"anthropic": {}}},
                "b": {"kind": "bedrock", "cluster": "c_b", "authority": "bedrock-runtime.us-east-1.amazonaws.com",
                      "apis": {"anthropic": {}}}
            },
            "models": {"m/x": {"endpoints": [
                {"provider": "a", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "b", "upstream_model": "anthropic.x-v1:0", "pricing": {"prompt": 1, "completion": 1}}
            ]}}
        });
        let twins: Vec<String> =
            first_attempt_twins(&catalog, &["c_a", "c_b"]).into_iter().map(|t| t.cluster).collect();
        assert_eq!(twins, ["c_a"]);
        let mut config = catalog.clone();
        with_first_attempt_clusters(&mut config, true, &["c_a", "c_b"], &first_attempt_cluster_name);
        assert!(config["providers"]["b"].get("first_attempt_cluster").is_none(), "{config}");
        switchyard::config::Catalog::from_json(config.to_string().as_bytes(), &|_| None).expect("the filter takes it");
    }

    #[test]
    fn a_bedrock_cluster_is_signed_by_envoy_after_the_attempt_filter() {
        let catalog = json!({
            "providers": {
                "a": {"cluster": "c_a", "authority": "a.example", "credential": {"value": "k"},
                      "apis": {"anthropic": {}}},
                "b": {"kind": "bedrock", "cluster": "c_b", "authority": "bedrock-runtime.us-east-1.amazonaws.com",
                      "apis": {"anthropic": {}}},
                "k": {"kind": "bedrock", "cluster": "c_k", "authority": "bedrock-runtime.us-west-2.amazonaws.com",
                      "credential": {"value": "bedrock-api-key"}, "apis": {"anthropic": {}}}
            },
            "models": {"m/x": {"endpoints": [
                {"provider": "a", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "b", "upstream_model": "anthropic.x-v1:0", "pricing": {"prompt": 1, "completion": 1}},
                {"provider": "k", "upstream_model": "anthropic.x-v1:0", "pricing": {"prompt": 1, "completion": 1}}
            ]}}
        });
        let clusters = ["c_a", "c_b", "c_k"].map(|n| ClusterSpec { name: n.into(), port: 1 });
        let cfg = StackConfig::new(catalog.clone(), clusters.to_vec(), None);
        let names = |c: &str| -> Vec<String> {
            cfg.provider_filters(c)
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["name"].as_str().unwrap().to_string())
                .collect()
        };
        let signed = names("c_b");
        assert_eq!(signed.len(), 3, "{signed:?}");
        assert_eq!(&signed[1..], ["envoy.filters.http.aws_request_signing", "envoy.filters.http.upstream_codec"]);
        let f = aws_signing_filter(&catalog, "c_b", None).unwrap();
        assert_eq!(f["typed_config"]["service_name"], "bedrock");
        assert_eq!(f["typed_config"]["region"], "us-east-1");
        assert_eq!(f["typed_config"]["use_unsigned_payload"], false);
        assert!(f["typed_config"].get("credential_provider").is_none(), "the default chain");
        let f = aws_signing_filter(&catalog, "c_b", Some(Path::new("/etc/aws/credentials"))).unwrap();
        assert_eq!(
            f["typed_config"]["credential_provider"]["credentials_file_provider"]["credentials_data_source"],
            json!({"filename": "/etc/aws/credentials", "watched_directory": {"path": "/etc/aws"}})
        );
        // A provider with its own key (Anthropic's, a Bedrock API key) is not signed.
        for c in ["c_a", "c_k"] {
            assert!(!names(c).iter().any(|n| n.contains("aws_request_signing")), "{c}");
        }
    }
}
