//! The deployment catalog: one file (`catalog/switchyard.json`) that says which providers exist
//! (real hosts, ports, HTTP/2, credentials by environment variable / Kubernetes Secret), which
//! models they serve at what price, and the routing defaults. Everything else is rendered from
//! it: the plugin configuration, the Envoy bootstrap (`envoy/switchyard.yaml`) and the Istio
//! manifests (`k8s/`), so a provider is never written down twice.
//!
//! A catalog provider is a plugin provider (see the README's configuration tables) without
//! `cluster` and `authority` and with where it lives instead:
//! `host` (required), `port` (443), `http2` (false). The renderer derives `cluster` (Istio's name
//! for the ServiceEntry's cluster, `outbound|<port>||<host>`, used by the plain Envoy config too
//! so the plugin configuration is the same everywhere) and `authority` (= `host`). Every other
//! field (`models`, `routing`, `policies`, provider `tags`, ...) is passed to the filter as is and
//! validated by the filter's own parser at render time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::envoy::{Build, RemoteCluster, StackConfig, SYSTEM_CA_BUNDLE};

/// Fields of a catalog provider that describe the deployment, not the filter's view of it.
const DEPLOYMENT_PROVIDER_FIELDS: [&str; 3] = ["host", "port", "http2"];

/// Where one provider lives.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderHost {
    pub slug: String,
    pub host: String,
    pub port: u16,
    pub http2: bool,
    /// Environment variable holding the key (also the key's name in the Kubernetes Secret).
    pub credential_env: Option<String>,
}

impl ProviderHost {
    /// The cluster Istio generates for a ServiceEntry host and port.
    pub fn cluster(&self) -> String {
        istio_cluster(&self.host, self.port)
    }

    /// The cluster Istio generates for the provider's first-attempt `DestinationRule` subset
    /// (same endpoints and TLS; its upstream chain gets the first-attempt hook, not the Wasm).
    pub fn first_attempt_cluster(&self) -> String {
        istio_subset_cluster(&self.host, self.port, FIRST_ATTEMPT_SUBSET)
    }
}

/// The `DestinationRule` subset (no labels: every endpoint of the host) behind each provider's
/// first-attempt cluster on Istio.
pub const FIRST_ATTEMPT_SUBSET: &str = "first";

pub fn istio_cluster(host: &str, port: u16) -> String {
    istio_subset_cluster(host, port, "")
}

/// Istio's name for the cluster of a subset of a service port (`outbound|<port>|<subset>|<host>`;
/// no subset: `outbound|<port>||<host>`).
pub fn istio_subset_cluster(host: &str, port: u16, subset: &str) -> String {
    format!("outbound|{port}|{subset}|{host}")
}

/// How provider keys reach the proxy on Istio (`deployment.istio.keys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyDelivery {
    /// `files` (default): the key Secret mounted into istio-proxy; each provider cluster's
    /// `credential_injector` reads its key by SDS from there, and a Secret update rotates it
    /// without a restart. No key enters the Wasm configuration or the proxy's environment.
    Files,
    /// `env` (fallback): the keys as environment variables of istio-proxy, read by the Wasm
    /// filter; rotating one needs a restart.
    Env,
}

/// Istio settings of the catalog (`deployment.istio`).
#[derive(Clone, Debug)]
pub struct IstioSettings {
    pub namespace: String,
    pub keys: KeyDelivery,
    /// `oci://registry/repository:tag` of the filter image.
    pub image: String,
    pub image_pull_policy: String,
    /// A `kubernetes.io/dockerconfigjson` Secret for a private registry: mounted into the proxy,
    /// where istio-agent's default keychain (`DOCKER_CONFIG`) uses it for every Wasm pull.
    pub image_pull_secret: Option<String>,
    /// Kubernetes Secret holding the provider keys, one entry per credential `env` name.
    pub keys_secret: String,
    /// Labels of the egress gateway pods (egress-gateway variant).
    pub gateway_labels: BTreeMap<String, String>,
    /// Labels of the application pods whose sidecars route (sidecar variant).
    pub sidecar_labels: BTreeMap<String, String>,
    /// The namespaces of those application pods (sidecar variant, default `["default"]`): the
    /// ConfigMaps the sidecar mounts and the selector-based Telemetry are rendered into each
    /// (Istio's injected volumes mount from the pod's own namespace, and a Telemetry with a
    /// selector applies only in its own namespace), and the provider ServiceEntries,
    /// DestinationRules and the entry point are exported to exactly these namespaces.
    pub sidecar_namespaces: Vec<String>,
    /// The host applications call (`http://<service_host>/v1/chat/completions`).
    pub service_host: String,
    /// Render a Telemetry resource putting the GenAI attributes on the proxy's spans (and turn
    /// on the filter's `telemetry.request_attributes`, which they read).
    pub tracing: bool,
    /// Which build of the filters the proxies run (`deployment.istio.build`): `wasm` (the
    /// default: the module from `image`, pulled by istio-agent) or `native` (the dynamic module
    /// from `native_image`, mounted into istio-proxy as a Kubernetes image volume; see
    /// `istio_native`).
    pub build: Build,
    /// `registry/repository:tag` of the native library's image (required with `build: native`,
    /// no `oci://`, no digest: the renderer pins the digest of the image it built).
    pub native_image: Option<String>,
    /// GKE Workload Identity: the Google service account the proxy's Kubernetes ServiceAccount
    /// is bound to (`iam.gke.io/gcp-service-account`), whose tokens `credential.google_metadata`
    /// providers (Vertex AI) get from the metadata server.
    pub gcp_service_account: Option<String>,
    /// EKS IRSA: the IAM role the proxy's ServiceAccount assumes (`eks.amazonaws.com/role-arn`),
    /// whose credentials Envoy signs Bedrock's requests with.
    pub aws_role_arn: Option<String>,
    /// The secret that keys the next-attempt tokens istio-proxy's retries read from a request
    /// header (`deployment.istio.handoff_key`, 32 hex digits; the filter's `routing.handoff_key`):
    /// a provider cannot tell from a token which provider comes next. Absent, it is derived from
    /// the deployment's namespace and service host: stable across catalog changes (the route and
    /// the filter's configuration may update at different moments) but not secret: set one.
    pub handoff_key: [u8; 16],
}

/// Plain Envoy settings of the catalog (`deployment.envoy`).
#[derive(Clone, Debug)]
pub struct EnvoySettings {
    pub listener_address: String,
    pub listener_port: u16,
    pub admin_port: u16,
    pub ca_file: String,
    pub per_try_idle_timeout_ms: u32,
}

#[derive(Clone, Debug)]
pub struct Catalog {
    /// The file as written (for passing the filter's fields through unchanged).
    raw: Value,
    pub providers: Vec<ProviderHost>,
    pub istio: IstioSettings,
    pub envoy: EnvoySettings,
    /// Where the clouds' metadata server listens for the token sources
    /// (`credential.google_metadata`, `credential.azure_managed_identity`); None: their own,
    /// `169.254.169.254:80`. Not a catalog field: tests point it at a local mock
    /// ([`Catalog::with_metadata_server`]).
    pub metadata_server: Option<(String, u16)>,
}

fn field_str(v: &Value, path: &str, key: &str, default: Option<&str>) -> Result<String, String> {
    match v.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(other) => Err(format!("{path}.{key}: expected a non-empty string, got {other}")),
        None => default.map(str::to_string).ok_or_else(|| format!("{path}.{key}: required")),
    }
}

fn field_u64(v: &Value, path: &str, key: &str, default: u64, max: u64) -> Result<u64, String> {
    match v.get(key) {
        None => Ok(default),
        Some(x) => x
            .as_u64()
            .filter(|n| *n <= max)
            .ok_or_else(|| format!("{path}.{key}: expected an integer 0..={max}, got {x}")),
    }
}

fn labels(v: &Value, path: &str, key: &str, default: &[(&str, &str)]) -> Result<BTreeMap<String, String>, String> {
    match v.get(key) {
        None => Ok(default.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        Some(Value::Object(o)) if !o.is_empty() => o
            .iter()
            .map(|(k, x)| {
                x.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| format!("{path}.{key}.{k}: expected a string"))
            })
            .collect(),
        Some(other) => Err(format!("{path}.{key}: expected a non-empty object of labels, got {other}")),
    }
}

/// A list of Kubernetes namespace names (DNS labels), non-empty and without repeats.
fn namespaces(v: &Value, path: &str, key: &str, default: &str) -> Result<Vec<String>, String> {
    let Some(x) = v.get(key) else { return Ok(vec![default.to_string()]) };
    let list = x
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| format!("{path}.{key}: expected a non-empty list of namespace names, got {x}"))?;
    let mut out: Vec<String> = Vec::new();
    for (i, n) in list.iter().enumerate() {
        let name = n
            .as_str()
            .filter(|s| is_dns_name(s) && !s.contains('.') && s.len() <= 63)
            .ok_or_else(|| format!("{path}.{key}[{i}]: not a namespace name: {n}"))?;
        if out.iter().any(|o| o == name) {
            return Err(format!("{path}.{key}[{i}]: {name} is listed twice"));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// The first part of a catalog that reads a JWT claim, which the native build refuses at load
/// (`policy_selection.rules[i].jwt_claim`, a mesh-wide limit's `per.jwt_claim`).
fn jwt_claim_reader(raw: &Value) -> Option<String> {
    let rules = raw.pointer("/policy_selection/rules").and_then(Value::as_array);
    if let Some(i) = rules.into_iter().flatten().position(|r| r.get("jwt_claim").is_some()) {
        return Some(format!("policy_selection.rules[{i}].jwt_claim"));
    }
    let limits = raw.pointer("/rate_limits/limits").and_then(Value::as_object);
    limits
        .into_iter()
        .flatten()
        .find(|(_, l)| l.pointer("/per/jwt_claim").is_some())
        .map(|(name, _)| format!("rate_limits.limits[{name:?}].per.jwt_claim"))
}

/// A Kubernetes image reference without a digest (`registry/repository:tag`, as a container's
/// `image` or an image volume's `reference` takes it): the renderer appends `@sha256:<digest>`.
fn image_reference(s: &str, field: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("{field}: {why}, got {s:?} (expected registry/repository:tag)"));
    if s.contains("://") {
        return bad("a Kubernetes image reference has no scheme");
    }
    if s.contains('@') {
        return bad("no digest: the renderer pins the digest of the image it built");
    }
    let (name, tag) = match s.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n, t),
        _ => return bad("a tag is required"),
    };
    let tag_ok = !tag.is_empty()
        && tag.len() <= 128
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && !tag.starts_with(['.', '-']);
    let name_ok = name.contains('/')
        && name
            .split('/')
            .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || "._-:".contains(c)))
        && name.split('/').skip(1).all(|part| !part.chars().any(|c| c.is_ascii_uppercase() || c == ':'));
    if !tag_ok || !name_ok {
        return bad("not an image reference");
    }
    Ok(s.to_string())
}

/// The handoff key of a catalog that sets none: SHA-256 of the deployment's identity (namespace
/// and service host), cut to 128 bits. Never of the catalog's contents: a catalog change would
/// change every token, and the route (EnvoyFilter) and the filter's configuration (WasmPlugin)
/// reach the proxies at different moments.
fn derived_handoff_key(namespace: &str, service_host: &str) -> [u8; 16] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"switchyard handoff key\n")
        .chain_update(namespace.as_bytes())
        .chain_update(b"\n")
        .chain_update(service_host.as_bytes())
        .finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl Catalog {
    pub fn load(path: &Path) -> Result<Catalog, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Catalog::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and validates a catalog: deployment fields here, the filter's fields by the
    /// filter's own configuration parser (so a bad catalog fails at render time, naming the field).
    pub fn parse(text: &str) -> Result<Catalog, String> {
        let raw: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Some(top) = raw.as_object() else { return Err("expected a JSON object".into()) };
        let deployment = top.get("deployment").cloned().unwrap_or(json!({}));
        for key in deployment.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            if key != "istio" && key != "envoy" {
                return Err(format!("deployment.{key}: unknown field (expected istio, envoy)"));
            }
        }
        let i = deployment.get("istio").cloned().unwrap_or(json!({}));
        let p = "deployment.istio";
        for key in i.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            let known = [
                "namespace",
                "image",
                "image_pull_policy",
                "image_pull_secret",
                "keys",
                "keys_secret",
                "gateway_labels",
                "sidecar_labels",
                "sidecar_namespaces",
                "service_host",
                "tracing",
                "build",
                "native_image",
                "handoff_key",
                "gcp_service_account",
                "aws_role_arn",
            ];
            if !known.contains(&key.as_str()) {
                return Err(format!("{p}.{key}: unknown field"));
            }
        }
        let image = field_str(&i, p, "image", None)?;
        if !image.starts_with("oci://") {
            return Err(format!("{p}.image: expected oci://registry/repository:tag, got {image:?}"));
        }
        let image_pull_policy = field_str(&i, p, "image_pull_policy", Some("IfNotPresent"))?;
        if !["IfNotPresent", "Always"].contains(&image_pull_policy.as_str()) {
            return Err(format!("{p}.image_pull_policy: expected IfNotPresent or Always"));
        }
        let image_pull_secret = match i.get("image_pull_secret") {
            None => None,
            Some(v) => Some(v.as_str().filter(|s| is_dns_name(s)).map(str::to_string).ok_or_else(|| {
                format!("{p}.image_pull_secret: the name of a kubernetes.io/dockerconfigjson Secret")
            })?),
        };
        let keys = match field_str(&i, p, "keys", Some("files"))?.as_str() {
            "files" => KeyDelivery::Files,
            "env" => KeyDelivery::Env,
            other => return Err(format!("{p}.keys: expected files or env, got {other:?}")),
        };
        let build = match field_str(&i, p, "build", Some("wasm"))?.as_str() {
            "wasm" => Build::Wasm,
            "native" => Build::Native,
            other => return Err(format!("{p}.build: expected wasm or native, got {other:?}")),
        };
        let native_image = match i.get("native_image") {
            None => None,
            Some(_) => Some(image_reference(&field_str(&i, p, "native_image", None)?, &format!("{p}.native_image"))?),
        };
        if build == Build::Native && native_image.is_none() {
            return Err(format!(
                "{p}.native_image: required with build native (the library image, registry/repository:tag)"
            ));
        }
        let handoff_key = match i.get("handoff_key") {
            None => derived_handoff_key(
                &field_str(&i, p, "namespace", Some("istio-system"))?,
                &field_str(&i, p, "service_host", Some("llm.switchyard.internal"))?,
            ),
            Some(v) => v.as_str().and_then(switchyard::protocol::slots::parse_handoff_key).ok_or_else(|| {
                format!("{p}.handoff_key: 32 hex digits, a secret per deployment (e.g. `openssl rand -hex 16`)")
            })?,
        };
        let gcp_service_account = match i.get("gcp_service_account") {
            None => None,
            Some(v) => Some(
                v.as_str().filter(|s| crate::workload_identity::is_google_service_account(s)).map(str::to_string).ok_or_else(
                    || format!("{p}.gcp_service_account: a Google service account's email (name@project.iam.gserviceaccount.com)"),
                )?,
            ),
        };
        let aws_role_arn = match i.get("aws_role_arn") {
            None => None,
            Some(v) => {
                Some(v.as_str().filter(|s| crate::workload_identity::is_role_arn(s)).map(str::to_string).ok_or_else(
                    || format!("{p}.aws_role_arn: an IAM role's ARN (arn:aws:iam::<account>:role/<name>)"),
                )?)
            }
        };
        let istio = IstioSettings {
            gcp_service_account,
            aws_role_arn,
            handoff_key,
            namespace: field_str(&i, p, "namespace", Some("istio-system"))?,
            keys,
            image,
            image_pull_policy,
            image_pull_secret,
            keys_secret: field_str(&i, p, "keys_secret", Some("switchyard-provider-keys"))?,
            gateway_labels: labels(&i, p, "gateway_labels", &[("istio", "egressgateway")])?,
            sidecar_labels: labels(&i, p, "sidecar_labels", &[("switchyard.io/llm-client", "true")])?,
            sidecar_namespaces: namespaces(&i, p, "sidecar_namespaces", "default")?,
            service_host: field_str(&i, p, "service_host", Some("llm.switchyard.internal"))?,
            tracing: match i.get("tracing") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| format!("{p}.tracing: expected true or false"))?,
            },
            build,
            native_image,
        };
        if !is_dns_name(&istio.service_host) {
            return Err(format!("{p}.service_host: not a DNS name: {:?}", istio.service_host));
        }
        let e = deployment.get("envoy").cloned().unwrap_or(json!({}));
        let p = "deployment.envoy";
        let envoy = EnvoySettings {
            listener_address: field_str(&e, p, "listener_address", Some("0.0.0.0"))?,
            listener_port: field_u64(&e, p, "listener_port", 10000, 65535)? as u16,
            admin_port: field_u64(&e, p, "admin_port", 9901, 65535)? as u16,
            ca_file: field_str(&e, p, "ca_file", Some(SYSTEM_CA_BUNDLE))?,
            per_try_idle_timeout_ms: field_u64(&e, p, "per_try_idle_timeout_ms", 60_000, 3_600_000)? as u32,
        };

        let Some(provs) = top.get("providers").and_then(Value::as_object) else {
            return Err("providers: required object".into());
        };
        let mut providers = Vec::new();
        for (slug, v) in provs {
            let path = format!("providers[{slug:?}]");
            for f in ["cluster", "authority"] {
                if v.get(f).is_some() {
                    return Err(format!("{path}.{f}: rendered from host/port, do not set it in the catalog"));
                }
            }
            let host = field_str(v, &path, "host", None)?;
            if !is_dns_name(&host) {
                return Err(format!("{path}.host: not a DNS name: {host:?}"));
            }
            let port = field_u64(v, &path, "port", 443, 65535)? as u16;
            let http2 = match v.get("http2") {
                None => false,
                Some(b) => b.as_bool().ok_or_else(|| format!("{path}.http2: expected a boolean"))?,
            };
            // A key file reaches the VM as a key does: by an environment variable.
            let credential_env = v
                .pointer("/credential/env")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| crate::gcp::key_file_envs(v));
            if v.pointer("/credential/value").is_some() {
                return Err(format!(
                    "{path}.credential.value: a deployment catalog names keys by `env` (from a Secret), never inline"
                ));
            }
            providers.push(ProviderHost { slug: slug.clone(), host, port, http2, credential_env });
        }
        if istio.build == Build::Native {
            if let Some(what) = jwt_claim_reader(&raw) {
                return Err(format!(
                    "deployment.istio.build: native cannot read JWT claims ({what}: the dynamic-module ABI reads no \
                     nested dynamic metadata, and Envoy would refuse the configuration); use the Wasm build"
                ));
            }
        }
        let catalog = Catalog { raw, providers, istio, envoy, metadata_server: None };
        // The filter's own loading: unknown fields, bad prices, unresolved provider slugs, policies
        // against the catalog they name, mesh-wide limits against both.
        crate::ratelimit::compile(&catalog.plugin_config())?;
        Ok(catalog)
    }

    /// The catalog with its provider hosts replaced by stand-ins (tests point the same catalog
    /// at local TLS mock providers: same clusters and SNI logic, other names).
    pub fn with_hosts(&self, hosts: &BTreeMap<String, (String, u16)>) -> Catalog {
        let mut c = self.clone();
        for p in &mut c.providers {
            if let Some((h, port)) = hosts.get(&p.slug) {
                p.host = h.clone();
                p.port = *port;
            }
        }
        c
    }

    /// The catalog with its token sources' metadata server at `addr` (tests: a local mock).
    pub fn with_metadata_server(&self, addr: (String, u16)) -> Catalog {
        let mut c = self.clone();
        c.metadata_server = Some(addr);
        c
    }

    /// The filter's configuration: every provider gets `cluster` and `authority`, the
    /// deployment-only fields are removed, everything else is passed through unchanged.
    pub fn plugin_config(&self) -> Value {
        let mut out = Map::new();
        if let Some(top) = self.raw.as_object() {
            for (k, v) in top {
                if k != "deployment" {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        if let Some(Value::Object(provs)) = out.get_mut("providers") {
            for p in &self.providers {
                if let Some(Value::Object(entry)) = provs.get_mut(&p.slug) {
                    for f in DEPLOYMENT_PROVIDER_FIELDS {
                        entry.remove(f);
                    }
                    entry.insert("cluster".into(), json!(p.cluster()));
                    entry.insert("authority".into(), json!(p.host));
                }
            }
        }
        // The rate limit service, like a provider, is written where it lives (`host`, `port`):
        // its cluster is Istio's name for that service port, in both renderings.
        if let Some((host, port)) = self.rate_limit_service() {
            if let Some(Value::Object(service)) = out.get_mut("rate_limits").and_then(|r| r.get_mut("service")) {
                service.remove("host");
                service.remove("port");
                service.insert("cluster".into(), json!(istio_cluster(&host, port)));
            }
        }
        Value::Object(out)
    }

    /// Where the catalog's rate limit service lives: `rate_limits.service.host` and `port`
    /// (default 8081, envoyproxy/ratelimit's gRPC port).
    pub fn rate_limit_service(&self) -> Option<(String, u16)> {
        let s = self.raw.pointer("/rate_limits/service")?;
        let host = s["host"].as_str()?.to_string();
        let port = s["port"].as_u64().and_then(|p| u16::try_from(p).ok()).unwrap_or(8081);
        Some((host, port))
    }

    /// Environment variables the Wasm VM reads keys from (sorted, unique).
    pub fn env_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.providers.iter().filter_map(|p| p.credential_env.clone()).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// `routing.max_attempts` (the route's retry ceiling follows it).
    pub fn max_attempts(&self) -> u32 {
        self.raw.pointer("/routing/max_attempts").and_then(Value::as_u64).map_or(4, |n| n.clamp(1, 16) as u32)
    }

    /// The plain-Envoy stack for this catalog: one DNS + TLS cluster per provider and no
    /// pass-through cluster (the filter answers requests it does not route). `connect_to` maps
    /// provider slugs to a fixed IP (tests).
    pub fn envoy_stack(&self, wasm: PathBuf, connect_to: &BTreeMap<String, String>) -> StackConfig {
        let mut cfg = StackConfig::new(self.plugin_config(), Vec::new(), None);
        cfg.wasm = wasm;
        cfg.rate_limit_service = self.rate_limit_service();
        cfg.metadata_server = self.metadata_server.clone();
        cfg.remote_clusters = self
            .providers
            .iter()
            .map(|p| RemoteCluster {
                name: p.cluster(),
                host: p.host.clone(),
                port: p.port,
                connect_to: connect_to.get(&p.slug).cloned(),
                http2: p.http2,
                ca_file: self.envoy.ca_file.clone(),
            })
            .collect();
        cfg.listener_address = self.envoy.listener_address.clone();
        cfg.listener_port = self.envoy.listener_port;
        cfg.admin_port = self.envoy.admin_port;
        cfg.env_keys = self.env_keys();
        cfg.max_attempts = self.max_attempts();
        cfg.per_try_idle_timeout_ms = self.envoy.per_try_idle_timeout_ms;
        cfg
    }
}

/// The catalog in the repository.
pub fn default_catalog_path() -> PathBuf {
    crate::envoy::repo_root().join("catalog/switchyard.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> Value {
        json!({
            "deployment": {"istio": {"image": "oci://registry.example/switchyard:1"}},
            "providers": {"p": {"host": "api.p.example", "http2": true, "credential": {"env": "P_KEY"}}},
            "models": {"m/x": {"endpoints": [{"provider": "p", "pricing": {"prompt": 1, "completion": 2}}]}}
        })
    }

    #[test]
    fn providers_get_istio_cluster_names_and_authority() {
        let c = Catalog::parse(&minimal().to_string()).unwrap();
        let cfg = c.plugin_config();
        assert_eq!(cfg["providers"]["p"]["cluster"], "outbound|443||api.p.example");
        assert_eq!(cfg["providers"]["p"]["authority"], "api.p.example");
        assert!(cfg["providers"]["p"].get("host").is_none() && cfg["providers"]["p"].get("http2").is_none());
        assert!(cfg.get("deployment").is_none());
        assert_eq!(c.env_keys(), vec!["P_KEY".to_string()]);
    }

    #[test]
    fn the_rate_limit_service_is_named_like_a_mesh_service_in_both_renderings() {
        let mut v = minimal();
        v["rate_limits"] = json!({"service": {"host": "ratelimit.limits.svc.cluster.local", "port": 8081},
                                  "limits": {"all": {"requests": 10, "window": "minute"}}});
        let c = Catalog::parse(&v.to_string()).unwrap();
        let cluster = "outbound|8081||ratelimit.limits.svc.cluster.local";
        assert_eq!(c.plugin_config()["rate_limits"]["service"], json!({"cluster": cluster}));
        let boot = crate::envoy::bootstrap(&c.envoy_stack("m.wasm".into(), &BTreeMap::new()));
        let clusters = boot["static_resources"]["clusters"].as_array().unwrap();
        let rls = clusters.iter().find(|x| x["name"] == cluster).expect("the service's cluster");
        assert_eq!(rls["type"], "STRICT_DNS");
        assert!(rls["typed_extension_protocol_options"].to_string().contains("http2_protocol_options"));
        // Without a host the cluster is the operator's to provide (as the filter reads it).
        let mut v = minimal();
        v["rate_limits"] = json!({"service": {"cluster": "my_rls"}});
        let c = Catalog::parse(&v.to_string()).unwrap();
        assert_eq!(c.plugin_config()["rate_limits"]["service"]["cluster"], "my_rls");
    }

    #[test]
    fn errors_name_the_field() {
        let mut v = minimal();
        v["providers"]["p"]["host"] = json!("not a host");
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("providers[\"p\"].host"));
        let mut v = minimal();
        v["providers"]["p"]["credential"] = json!({"value": "sk-inline"});
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("credential.value"));
        let mut v = minimal();
        v["models"]["m/x"]["endpoints"][0]["quantization"] = json!("fp9");
        let e = Catalog::parse(&v.to_string()).unwrap_err();
        assert!(e.contains("quantization") && e.contains("fp9"), "{e}");
        let mut v = minimal();
        v["deployment"]["istio"]["tracing"] = json!("yes");
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("deployment.istio.tracing"));
        let mut v = minimal();
        v["deployment"]["istio"]["sidecar_namespaces"] = json!(["apps", "Bad_NS"]);
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("deployment.istio.sidecar_namespaces[1]"));
        v["deployment"]["istio"]["sidecar_namespaces"] = json!([]);
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("deployment.istio.sidecar_namespaces"));
        v["deployment"]["istio"]["sidecar_namespaces"] = json!(["apps", "apps"]);
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("twice"));
        v["deployment"]["istio"]["sidecar_namespaces"] = json!(["apps", "ml"]);
        assert_eq!(Catalog::parse(&v.to_string()).unwrap().istio.sidecar_namespaces, ["apps", "ml"]);
        assert_eq!(Catalog::parse(&minimal().to_string()).unwrap().istio.sidecar_namespaces, ["default"]);
        let mut v = minimal();
        v["deployment"]["istio"]["image"] = json!("ghcr.io/x:1");
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("deployment.istio.image"));
        // The build on Istio: wasm by default; native needs the library image, by reference.
        assert_eq!(Catalog::parse(&minimal().to_string()).unwrap().istio.build, Build::Wasm);
        let mut v = minimal();
        v["deployment"]["istio"]["build"] = json!("v8");
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("deployment.istio.build"));
        v["deployment"]["istio"]["build"] = json!("native");
        let e = Catalog::parse(&v.to_string()).unwrap_err();
        assert!(e.contains("deployment.istio.native_image") && e.contains("required"), "{e}");
        for bad in
            ["oci://ghcr.io/x/lib:1", "ghcr.io/x/lib", "ghcr.io/x/lib:1@sha256:ab", "lib:1", "ghcr.io/X/lib:1", ""]
        {
            v["deployment"]["istio"]["native_image"] = json!(bad);
            let e = Catalog::parse(&v.to_string()).unwrap_err();
            assert!(e.contains("deployment.istio.native_image"), "{bad}: {e}");
        }
        v["deployment"]["istio"]["native_image"] = json!("registry.example:5000/switchyard/native:0.1.0");
        let c = Catalog::parse(&v.to_string()).unwrap();
        assert_eq!(
            (c.istio.build, c.istio.native_image.as_deref()),
            (Build::Native, Some("registry.example:5000/switchyard/native:0.1.0"))
        );
        // The native build cannot read JWT claims: refused at render time, naming the rule.
        v["policies"] = json!({"finance": {"only": ["p"]}});
        v["policy_selection"] =
            json!({"rules": [{"policy": "finance", "jwt_claim": {"claim": "team", "value": "finance"}}]});
        let e = Catalog::parse(&v.to_string()).unwrap_err();
        assert!(e.contains("deployment.istio.build") && e.contains("policy_selection.rules[0].jwt_claim"), "{e}");
        v["deployment"]["istio"]["build"] = json!("wasm");
        assert!(Catalog::parse(&v.to_string()).is_ok(), "the Wasm build reads them");
        // So do mesh-wide limits.
        let mut v = minimal();
        v["rate_limits"] =
            json!({"service": {"host": "rls.example"}, "limits": {"a": {"requests": 1, "window": "week"}}});
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains("rate_limits.limits[\"a\"].window"));
        // Policies pass through to the filter and are checked with its own parser.
        let mut v = minimal();
        v["policies"] = json!({"finance": {"only": ["p"], "zdr": true}});
        v["policy_selection"] = json!({"rules": [{"policy": "finance", "route": "finance"}]});
        let c = Catalog::parse(&v.to_string()).unwrap();
        assert_eq!(c.plugin_config()["policies"]["finance"]["zdr"], true);
        v["policies"]["finance"]["ignore"] = json!(["q"]);
        assert!(Catalog::parse(&v.to_string()).unwrap_err().contains(r#"policies["finance"].ignore[0]"#));
    }
}
