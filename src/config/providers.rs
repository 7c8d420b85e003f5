//! `providers`: each provider's clusters, authority, key, data policy and the APIs it serves.

use std::collections::BTreeMap;

use serde::Deserialize;

use std::sync::Arc;

use super::{err, ConfigError};
use crate::api::{Api, ApiSet};
use crate::providers::Kind;
use crate::tokens::{azure, google, service_account, Identity, TokenSource, CLOUD_PLATFORM_SCOPE};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    cluster: String,
    /// What kind of provider this is (`standard`, `azure`, `bedrock`; see
    /// `crate::providers::KINDS`): its paths, key header, body, stream and error quirks. Default
    /// `standard`. A kind that rewrites every attempt (`bedrock`) takes no `first_attempt_cluster`.
    #[serde(default)]
    kind: Option<String>,
    /// The kind's own settings (Azure: `path`, `api_version`), checked by the kind.
    #[serde(default)]
    kind_options: Option<serde_json::Value>,
    /// A second cluster to the same provider whose upstream filter chain has no per-attempt Wasm
    /// (only the hook that reports a failed answer, see the README): the first attempt of a
    /// single-model plan goes there, prepared by the decision filter.
    #[serde(default)]
    first_attempt_cluster: Option<String>,
    authority: String,
    #[serde(default = "default_path_prefix")]
    path_prefix: String,
    #[serde(default)]
    credential: Option<RawCredential>,
    #[serde(default)]
    byok: bool,
    /// With `byok`: this key is the only way to its provider (OpenRouter's "Always use for this
    /// provider"): the same provider's other, non-BYOK endpoints are never planned.
    #[serde(default)]
    byok_always: bool,
    #[serde(default)]
    data_policy: RawDataPolicy,
    /// Operator labels (`eu`, `hipaa`, `contract-2026`) that policies' `require_tags` select on.
    #[serde(default)]
    tags: Vec<String>,
    /// The APIs this provider serves, each with its own path prefix; absent = OpenAI only.
    #[serde(default)]
    apis: Option<BTreeMap<String, RawApi>>,
}

/// One API a provider serves (`providers[..].apis.<api>`).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawApi {
    /// OpenAI, OpenAI Responses and Anthropic: replaces the request path's `/v1` (default `/v1`;
    /// OpenAI: the provider's `path_prefix`; Responses: OpenAI's). Google: put before the caller's `/{version}/models/...`
    /// (default empty).
    #[serde(default)]
    path_prefix: Option<String>,
}

fn default_path_prefix() -> String {
    "/v1".to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCredential {
    /// The key's header (default: the kind's, `authorization`; Azure `api-key`).
    #[serde(default)]
    header: Option<String>,
    /// The text before the key (default: the kind's, `Bearer `; Azure none).
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    env: Option<String>,
    /// The provider's cluster adds the key itself (`credential_injector` fed by SDS, e.g. from a
    /// mounted Kubernetes Secret): the filter never holds it, and keeps the header the cluster
    /// wrote for the attempt's API while removing every other credential header.
    #[serde(default)]
    injected: bool,
    /// An OAuth2 access token from the GKE / GCE metadata server (Workload Identity), fetched
    /// by the module once for all workers, refreshed before it expires, and put on each of the
    /// provider's attempts as `authorization: Bearer <token>` by its per-attempt filter.
    #[serde(default)]
    google_metadata: Option<RawGoogleMetadata>,
    /// An OAuth2 access token for a Google service-account key file (outside GKE, or without
    /// Workload Identity): the module signs a JWT assertion with the key (RS256) and trades it
    /// at the key's `token_uri`, once for all workers, refreshed before it expires, and puts
    /// it on each attempt as `authorization: Bearer <token>`.
    #[serde(default)]
    google_service_account: Option<RawGoogleServiceAccount>,
    /// A Microsoft Entra access token from the Azure Instance Metadata Service (a managed
    /// identity of the VM / VMSS / AKS node the proxy runs on), fetched and refreshed the same
    /// way and put on each attempt as `authorization: Bearer <token>` (Azure OpenAI takes it in
    /// place of `api-key`).
    #[serde(default)]
    azure_managed_identity: Option<RawAzureManagedIdentity>,
}

/// `credential.azure_managed_identity`: which IMDS, which identity, which audience.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAzureManagedIdentity {
    /// The Envoy cluster of IMDS (`169.254.169.254:80`, plain HTTP; the generators render it).
    /// Never a provider's cluster.
    cluster: String,
    /// A user-assigned identity by its client id (a GUID). At most one of `client_id`,
    /// `object_id`, `msi_res_id`; none: the system-assigned identity.
    #[serde(default)]
    client_id: Option<String>,
    /// A user-assigned identity by its object (principal) id (a GUID).
    #[serde(default)]
    object_id: Option<String>,
    /// A user-assigned identity by its Azure resource id (`/subscriptions/.../userAssignedIdentities/<name>`).
    #[serde(default)]
    msi_res_id: Option<String>,
    /// The token's audience. Default `https://cognitiveservices.azure.com` (Azure OpenAI).
    #[serde(default)]
    resource: Option<String>,
    /// How long a fetch may take before it counts as failed, in ms (default 5000, 100..=60000).
    #[serde(default)]
    timeout_ms: Option<u32>,
}

/// `credential.google_service_account`: where the key file is, where its tokens come from.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGoogleServiceAccount {
    /// The VM environment variable holding the key file's JSON (as `credential.env` passes a
    /// key: the Wasm VM's `environment_variables`, the native module's process environment).
    env: String,
    /// The Envoy cluster of the key's `token_uri` (`oauth2.googleapis.com:443` over TLS; the
    /// generators render it). Never a provider's cluster.
    cluster: String,
    /// The OAuth2 scopes asked for. Default `["https://www.googleapis.com/auth/cloud-platform"]`.
    #[serde(default)]
    scopes: Option<Vec<String>>,
    /// How long a fetch may take before it counts as failed, in ms (default 5000, 100..=60000).
    #[serde(default)]
    timeout_ms: Option<u32>,
}

/// `credential.google_metadata`: which metadata server, which service account, which scopes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGoogleMetadata {
    /// The Envoy cluster of the metadata server (`169.254.169.254:80`, plain HTTP; the
    /// generators render it). Never a provider's cluster.
    cluster: String,
    /// The Google service account whose token is asked for: `default` (the workload's: on GKE
    /// the one its Kubernetes service account is bound to) or an email. Default `default`.
    #[serde(default)]
    service_account: Option<String>,
    /// The OAuth2 scopes asked for. Default `["https://www.googleapis.com/auth/cloud-platform"]`.
    #[serde(default)]
    scopes: Option<Vec<String>>,
    /// How long a fetch may take before it counts as failed, in ms (default 5000, 100..=60000).
    #[serde(default)]
    timeout_ms: Option<u32>,
}

/// Unknown data handling is assumed to be the unsafe kind, so compliance filters
/// (`data_collection: deny`, `zdr`) never pass a provider whose policy was not declared.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDataPolicy {
    #[serde(default = "yes")]
    retains_data: bool,
    #[serde(default = "yes")]
    trains_on_data: bool,
    #[serde(default)]
    zdr: bool,
}

fn yes() -> bool {
    true
}

impl Default for RawDataPolicy {
    fn default() -> Self {
        RawDataPolicy { retains_data: true, trains_on_data: true, zdr: false }
    }
}

#[derive(Clone)]
pub struct Credential {
    /// Lower-case header name.
    pub header: String,
    /// Full header value (prefix + secret). Never logged.
    pub value: String,
    /// The secret alone (Anthropic's `x-api-key` and Google's `x-goog-api-key` carry it bare).
    pub secret: String,
    /// The provider's cluster injects the key (`credential.injected`): `value` and `secret` are
    /// empty, and the filter sets nothing.
    pub injected: bool,
    /// An access token from this source (`credential.google_metadata` or
    /// `credential.azure_managed_identity`): `value` and `secret` are empty; the per-attempt filter puts `<header>: Bearer <token>` on every attempt.
    pub token: Option<Arc<TokenSource>>,
}

/// Hand-written so that `{:?}` of a provider (or the whole catalog) never prints a key.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("header", &self.header)
            .field("value", &"<redacted>")
            .field("token", &self.token)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct Provider {
    /// The key in `providers`: `name` or `name/variant`.
    pub slug: String,
    pub cluster: String,
    /// The cluster a prepared first attempt goes to (no per-attempt Wasm), if configured.
    pub first_attempt_cluster: Option<String>,
    pub authority: String,
    pub path_prefix: String,
    pub credential: Option<Credential>,
    pub byok: bool,
    /// The provider's traffic stays on this BYOK key (see `Catalog::byok_always_bases`).
    pub byok_always: bool,
    pub retains_data: bool,
    pub trains_on_data: bool,
    pub zdr: bool,
    /// Operator labels for data residency and contract scope (policy `require_tags`).
    pub tags: Vec<String>,
    /// The APIs it serves.
    pub apis: ApiSet,
    /// Path prefix per API (indexed by `Api::index`; empty for APIs it does not serve).
    pub api_prefixes: [String; 4],
    /// Its kind (`kind`): paths, key header, stream quirks.
    pub kind: Arc<dyn Kind>,
}

impl Provider {
    /// The path prefix of `api` on this provider.
    pub fn prefix(&self, api: Api) -> &str {
        self.api_prefixes.get(api.index()).map_or("", String::as_str)
    }

    /// The credential header and value an attempt in `api` carries: the configured header for
    /// OpenAI, `x-api-key` for Anthropic, `x-goog-api-key` for Google (both with the bare secret).
    /// None when the provider's cluster injects the key itself (`credential.injected`).
    /// A kind may take the configured header in another API too (`Kind::key_as_configured`:
    /// Bedrock's API key, `authorization: Bearer`, on the Anthropic API).
    pub fn credential_for(&self, api: Api) -> Option<(&str, &str)> {
        let c = self.credential.as_ref().filter(|c| !c.injected && c.token.is_none())?;
        let header = self.key_header(api)?;
        Some((header, if self.kind.key_as_configured(api) { c.value.as_str() } else { c.secret.as_str() }))
    }

    /// The header an attempt in `api` carries the key in (set by the filter, or by the cluster
    /// for an injected credential).
    pub fn key_header(&self, api: Api) -> Option<&str> {
        let c = self.credential.as_ref()?;
        Some(match api {
            // An OAuth2 token goes in `authorization` whatever the API.
            _ if c.token.is_some() => c.header.as_str(),
            _ if self.kind.key_as_configured(api) => c.header.as_str(),
            Api::Anthropic => ANTHROPIC_KEY_HEADER,
            Api::Google => GOOGLE_KEY_HEADER,
            // A kind that does not take OpenAI's key as configured has no other header for it.
            Api::OpenAi | Api::Responses => c.header.as_str(),
        })
    }

    /// The header the provider's cluster injected the key in for `api`, which the filter must
    /// keep (None: the filter sets the key, or there is none).
    pub fn injected_header(&self, api: Api) -> Option<&str> {
        self.credential.as_ref().filter(|c| c.injected)?;
        self.key_header(api)
    }

    /// The source of the access token its attempts carry (`credential.google_metadata`,
    /// `credential.azure_managed_identity`).
    pub fn token_source(&self) -> Option<&Arc<TokenSource>> {
        self.credential.as_ref()?.token.as_ref()
    }

    /// Whether every attempt must go through the per-attempt filter: its kind rewrites every
    /// attempt (`Kind::needs_attempt_filter`), or the filter puts its access token on each
    /// (a first-attempt cluster has no filter that could). Such a provider has no first-attempt
    /// cluster.
    pub fn needs_attempt_filter(&self) -> bool {
        self.kind.needs_attempt_filter() || self.token_source().is_some()
    }
}

/// Anthropic's and Google's API key headers.
pub const ANTHROPIC_KEY_HEADER: &str = "x-api-key";
pub const GOOGLE_KEY_HEADER: &str = "x-goog-api-key";

/// The default path prefix of an API. OpenAI and Anthropic: what the request's `/v1` is replaced
/// with. Google: what goes before the caller's `/{version}/models/...` (its clients choose the
/// API version, `v1beta` or `v1`, so the version is kept).
fn default_api_prefix(api: Api) -> &'static str {
    match api {
        Api::OpenAi | Api::Anthropic | Api::Responses => "/v1",
        Api::Google => "",
    }
}

fn valid_header_name(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Bytes never allowed in a header value (HTAB is).
fn is_control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

pub(super) fn valid_slug(s: &str) -> bool {
    let mut parts = s.split('/');
    let ok_part =
        |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(a), None, None) => ok_part(a),
        (Some(a), Some(b), None) => ok_part(a) && ok_part(b),
        _ => false,
    }
}

/// One provider: its slug, clusters, authority, path prefix, key and the APIs it serves.
pub(super) fn compile_provider(
    slug: &str,
    p: &RawProvider,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Provider, ConfigError> {
    let field = format!("providers[\"{slug}\"]");
    if !valid_slug(slug) {
        return Err(err(&field, "provider slug must be `name` or `name/variant` (letters, digits, - _ .)"));
    }
    if p.cluster.is_empty() {
        return Err(err(format!("{field}.cluster"), "must name the Envoy cluster of this provider"));
    }
    if p.byok_always && !p.byok {
        return Err(err(
            format!("{field}.byok_always"),
            "needs `byok: true`: it keeps the provider's traffic on this BYOK key",
        ));
    }
    if p.authority.is_empty() {
        return Err(err(format!("{field}.authority"), "must be the provider's host (sent as :authority)"));
    }
    if let Some(first) = &p.first_attempt_cluster {
        if first.is_empty() || *first == p.cluster {
            return Err(err(
                format!("{field}.first_attempt_cluster"),
                "must name a second cluster to this provider, other than `cluster`",
            ));
        }
    }
    if !p.path_prefix.starts_with('/') {
        return Err(err(format!("{field}.path_prefix"), "must start with '/'"));
    }
    let kind = crate::providers::compile(&field, p.kind.as_deref(), p.kind_options.as_ref())?;
    if kind.needs_attempt_filter() && p.first_attempt_cluster.is_some() {
        return Err(err(
            format!("{field}.first_attempt_cluster"),
            format!("kind {} rewrites every attempt in the per-attempt filter: no first-attempt cluster", kind.name()),
        ));
    }
    let credential = match &p.credential {
        None => None,
        Some(c) => Some(compile_credential(&field, c, kind.default_credential(), env)?),
    };
    if credential.as_ref().is_some_and(|c| c.token.is_some()) && p.first_attempt_cluster.is_some() {
        return Err(err(
            format!("{field}.first_attempt_cluster"),
            format!(
                "the access token (credential.{}) is put on each attempt by the per-attempt filter, which a first-attempt cluster does not run: no first-attempt cluster",
                credential.as_ref().and_then(|c| c.token.as_ref()).map_or("", |t| t.field())
            ),
        ));
    }
    kind.check_provider(&field, &p.authority, credential.is_some())?;
    for (i, t) in p.tags.iter().enumerate() {
        if t.is_empty() || t.contains(char::is_whitespace) {
            return Err(err(format!("{field}.tags[{i}]"), "a tag must be non-empty without whitespace"));
        }
    }
    let (apis, api_prefixes) = compile_apis(&field, p)?;
    if let Some(api) = apis.iter().find(|a| !kind.apis().contains(a)) {
        return Err(err(
            format!("{field}.apis.{}", api.name()),
            format!("a provider of kind {} does not serve this API", kind.name()),
        ));
    }
    Ok(Provider {
        slug: slug.to_string(),
        cluster: p.cluster.clone(),
        first_attempt_cluster: p.first_attempt_cluster.clone(),
        authority: p.authority.clone(),
        path_prefix: p.path_prefix.trim_end_matches('/').to_string(),
        credential,
        byok: p.byok,
        byok_always: p.byok_always,
        retains_data: p.data_policy.retains_data,
        trains_on_data: p.data_policy.trains_on_data,
        zdr: p.data_policy.zdr,
        tags: p.tags.clone(),
        apis,
        api_prefixes,
        kind,
    })
}

/// A provider's `credential`: its header and the secret, read from the value or the VM's
/// environment (or left to the Envoy configuration with `injected`).
fn compile_credential(
    field: &str,
    c: &RawCredential,
    (default_header, default_prefix): (&str, &str),
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credential, ConfigError> {
    match (&c.google_metadata, &c.google_service_account, &c.azure_managed_identity) {
        (Some(g), None, None) => return token_credential(field, c, "google_metadata", google_source(field, g)?),
        (None, Some(k), None) => {
            return token_credential(field, c, "google_service_account", key_file_source(field, k, env)?)
        }
        (None, None, Some(a)) => return token_credential(field, c, "azure_managed_identity", azure_source(field, a)?),
        (None, None, None) => {}
        _ => return Err(err(format!("{field}.credential"), EXACTLY_ONE)),
    }
    let header = c.header.as_deref().unwrap_or(default_header).to_ascii_lowercase();
    let prefix = c.prefix.as_deref().unwrap_or(default_prefix);
    if !valid_header_name(&header) || header.starts_with(':') {
        return Err(err(format!("{field}.credential.header"), "must be a plain header name"));
    }
    let secret = match (&c.value, &c.env, c.injected) {
        (Some(v), None, false) => v.clone(),
        (None, Some(name), false) => env(name).ok_or_else(|| {
            err(
                format!("{field}.credential.env"),
                format!(
                    "environment variable {name} is not set in the Wasm VM (add it to vm_config.environment_variables)"
                ),
            )
        })?,
        (None, None, true) => String::new(),
        _ => {
            return Err(err(format!("{field}.credential"), EXACTLY_ONE));
        }
    };
    // A control character (CR/LF above all) in a header value would let the
    // configuration inject headers into every upstream request.
    if prefix.bytes().any(is_control) {
        return Err(err(format!("{field}.credential.prefix"), "contains a control character (CR, LF, ...)"));
    }
    if (secret.is_empty() && !c.injected) || secret.bytes().any(is_control) {
        return Err(err(
            format!("{field}.credential"),
            "the secret is empty or contains a control character (CR, LF, ...)",
        ));
    }
    let value = if c.injected { String::new() } else { format!("{prefix}{secret}") };
    Ok(Credential { header, value, secret, injected: c.injected, token: None })
}

const EXACTLY_ONE: &str = "set exactly one of `value`, `env`, `injected: true`, `google_metadata`, \
     `google_service_account` or `azure_managed_identity`";

/// A credential whose access token comes from `source` (`name`: its field), alone: a token goes
/// in `authorization: Bearer`, so neither `header` nor `prefix` applies.
fn token_credential(
    field: &str,
    c: &RawCredential,
    name: &str,
    source: TokenSource,
) -> Result<Credential, ConfigError> {
    if c.value.is_some() || c.env.is_some() || c.injected {
        return Err(err(format!("{field}.credential"), EXACTLY_ONE));
    }
    if c.header.is_some() || c.prefix.is_some() {
        return Err(err(
            format!("{field}.credential"),
            format!("`header` and `prefix` do not apply to {name}: its access token goes in `authorization: Bearer`"),
        ));
    }
    Ok(Credential {
        header: "authorization".to_string(),
        value: String::new(),
        secret: String::new(),
        injected: false,
        token: Some(Arc::new(source)),
    })
}

/// A metadata server's cluster and fetch timeout, as every token source names them (`of`: the
/// source's field).
fn cluster_and_timeout(of: &str, cluster: &str, timeout_ms: Option<u32>, server: &str) -> Result<u32, ConfigError> {
    if cluster.is_empty() || !cluster.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(err(format!("{of}.cluster"), format!("must name the Envoy cluster of {server}")));
    }
    let timeout_ms = timeout_ms.unwrap_or(5_000);
    if !(100..=60_000).contains(&timeout_ms) {
        return Err(err(format!("{of}.timeout_ms"), "must be between 100 and 60000"));
    }
    Ok(timeout_ms)
}

/// The OAuth2 scopes of a Google source (`of`: its field): default `cloud-platform`.
fn google_scopes(of: &str, scopes: &Option<Vec<String>>) -> Result<Vec<String>, ConfigError> {
    let scopes = scopes.clone().unwrap_or_else(|| vec![CLOUD_PLATFORM_SCOPE.to_string()]);
    if scopes.is_empty() {
        return Err(err(format!("{of}.scopes"), "must name at least one OAuth2 scope"));
    }
    if let Some(i) = scopes.iter().position(|s| !google::valid_scope(s)) {
        return Err(err(format!("{of}.scopes[{i}]"), "a scope is visible ASCII without , & # % + ?"));
    }
    Ok(scopes)
}

/// `credential.google_service_account`: a key file's JSON from the VM's environment, checked
/// here (its type, email, key id, token URI and an RSA PKCS#8 key); no error quotes the key.
fn key_file_source(
    field: &str,
    k: &RawGoogleServiceAccount,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TokenSource, ConfigError> {
    let kf = format!("{field}.credential.google_service_account");
    let timeout_ms =
        cluster_and_timeout(&kf, &k.cluster, k.timeout_ms, "the token endpoint (oauth2.googleapis.com:443)")?;
    let scopes = google_scopes(&kf, &k.scopes)?;
    let json = env(&k.env).filter(|v| !v.is_empty()).ok_or_else(|| {
        err(
            format!("{kf}.env"),
            format!(
                "environment variable {} is not set in the VM (add the key file's JSON to vm_config.environment_variables)",
                k.env
            ),
        )
    })?;
    let key = service_account::parse_key_file(&json).map_err(|(json_field, reason)| {
        let what = if json_field.is_empty() { String::new() } else { format!(": field `{json_field}`") };
        err(format!("{kf}.env"), format!("the key file in {}{what} {reason}", k.env))
    })?;
    Ok(TokenSource {
        cluster: k.cluster.clone(),
        timeout_ms,
        identity: Identity::GoogleServiceAccount { key: Arc::new(key), scopes },
    })
}

/// `credential.google_metadata`: the GKE / GCE metadata server, a service account, its scopes.
fn google_source(field: &str, g: &RawGoogleMetadata) -> Result<TokenSource, ConfigError> {
    let gf = format!("{field}.credential.google_metadata");
    let timeout_ms = cluster_and_timeout(&gf, &g.cluster, g.timeout_ms, "the metadata server")?;
    let service_account = g.service_account.clone().unwrap_or_else(|| "default".to_string());
    if !google::valid_service_account(&service_account) {
        return Err(err(
            format!("{gf}.service_account"),
            "must be `default` or a service account's email (letters, digits, @ . - _)",
        ));
    }
    let scopes = google_scopes(&gf, &g.scopes)?;
    Ok(TokenSource { cluster: g.cluster.clone(), timeout_ms, identity: Identity::Google { service_account, scopes } })
}

/// `credential.azure_managed_identity`: Azure IMDS, the system-assigned identity or one
/// user-assigned identity, and the token's audience.
fn azure_source(field: &str, a: &RawAzureManagedIdentity) -> Result<TokenSource, ConfigError> {
    let af = format!("{field}.credential.azure_managed_identity");
    let timeout_ms = cluster_and_timeout(&af, &a.cluster, a.timeout_ms, "the Instance Metadata Service")?;
    let named = [
        (azure::IdParam::ClientId, &a.client_id),
        (azure::IdParam::ObjectId, &a.object_id),
        (azure::IdParam::MsiResId, &a.msi_res_id),
    ];
    let mut user_assigned = None;
    for (param, value) in named {
        let Some(v) = value else { continue };
        if user_assigned.is_some() {
            return Err(err(
                af.as_str(),
                "name a user-assigned identity by at most one of `client_id`, `object_id`, `msi_res_id`",
            ));
        }
        if !param.valid(v) {
            let what = match param {
                azure::IdParam::MsiResId => {
                    "must be the identity's Azure resource id (/subscriptions/.../userAssignedIdentities/<name>)"
                }
                _ => "must be a GUID (8-4-4-4-12 hex digits)",
            };
            return Err(err(format!("{af}.{}", param.name()), what));
        }
        user_assigned = Some((param, v.clone()));
    }
    let resource = a.resource.clone().unwrap_or_else(|| azure::COGNITIVE_SERVICES_RESOURCE.to_string());
    if !azure::valid_resource(&resource) {
        return Err(err(
            format!("{af}.resource"),
            "must be an https:// resource URI (letters, digits, : / . - _), such as https://cognitiveservices.azure.com",
        ));
    }
    Ok(TokenSource { cluster: a.cluster.clone(), timeout_ms, identity: Identity::Azure { resource, user_assigned } })
}

/// A first-attempt cluster adds its provider's key itself (its own upstream filter, Envoy's
/// `credential_injector`: the decision filter never writes a key into the downstream request),
/// so it must be able to: one API (one key header) per such cluster, and every provider sent
/// to it has the same key.
pub(super) fn check_first_attempt_clusters(providers: &[Provider]) -> Result<(), ConfigError> {
    for (i, p) in providers.iter().enumerate() {
        let Some(first) = &p.first_attempt_cluster else { continue };
        let field = format!("providers[\"{}\"].first_attempt_cluster", p.slug);
        let mut apis = p.apis.keyed();
        let (Some(api), None) = (apis.next(), apis.next()) else {
            return Err(err(
                field,
                "a first-attempt cluster injects one key header, so its provider must serve exactly one API (apis; openai_responses goes with openai, on its key)",
            ));
        };
        let key = |q: &Provider| {
            q.credential.as_ref().map(|c| (q.key_header(api).map(str::to_string), c.value.clone(), c.injected))
        };
        let clash = providers.iter().take(i).find(|q| {
            q.first_attempt_cluster.as_ref() == Some(first) && (q.apis.keyed().ne(p.apis.keyed()) || key(q) != key(p))
        });
        if let Some(q) = clash {
            return Err(err(
                field,
                format!("\"{first}\" is also provider {}'s first-attempt cluster with another API or key; the cluster injects one key", q.slug),
            ));
        }
    }
    Ok(())
}

/// A provider's `apis`: the set it serves and each API's path prefix. Absent = OpenAI only,
/// at the provider's `path_prefix`.
fn compile_apis(field: &str, p: &RawProvider) -> Result<(ApiSet, [String; 4]), ConfigError> {
    let openai_prefix = p.path_prefix.trim_end_matches('/').to_string();
    let mut prefixes: [String; 4] = Default::default();
    let Some(apis) = &p.apis else {
        if let Some(slot) = prefixes.get_mut(Api::OpenAi.index()) {
            *slot = openai_prefix;
        }
        return Ok((ApiSet::OPENAI, prefixes));
    };
    if apis.is_empty() {
        return Err(err(
            format!("{field}.apis"),
            "must name at least one API (openai, anthropic, google, openai_responses)",
        ));
    }
    let mut set = ApiSet::default();
    for (name, a) in apis {
        let af = format!("{field}.apis.{name}");
        let api =
            Api::parse(name).ok_or_else(|| err(&af, "unknown API (openai, anthropic, google, openai_responses)"))?;
        let prefix = match (&a.path_prefix, api) {
            (Some(pp), _) => {
                if !pp.starts_with('/') {
                    return Err(err(format!("{af}.path_prefix"), "must start with '/'"));
                }
                pp.trim_end_matches('/').to_string()
            }
            (None, Api::OpenAi) => openai_prefix.clone(),
            // At the `openai` entry's prefix (set below, once that is known).
            (None, Api::Responses) => String::new(),
            (None, other) => default_api_prefix(other).to_string(),
        };
        if let Some(slot) = prefixes.get_mut(api.index()) {
            *slot = prefix;
        }
        set = set.with(api);
    }
    if set.has(Api::Responses) {
        if !set.has(Api::OpenAi) {
            return Err(err(
                format!("{field}.apis.openai_responses"),
                "requires openai too: a host serving the Responses API serves chat completions, which \
                 Switchyard translates other callers' requests into",
            ));
        }
        let own = apis.get(Api::Responses.name()).is_some_and(|a| a.path_prefix.is_some());
        if !own {
            let openai = prefixes.get(Api::OpenAi.index()).cloned().unwrap_or_default();
            if let Some(slot) = prefixes.get_mut(Api::Responses.index()) {
                *slot = openai;
            }
        }
    }
    Ok((set, prefixes))
}
