//! Azure's Instance Metadata Service (IMDS) token endpoint: the request for a managed identity's
//! Microsoft Entra access token, and its answer. On a VM / VMSS (and an AKS node pool, whose
//! nodes are VMSS instances) IMDS answers for the system-assigned identity, or for a
//! user-assigned one named by `client_id`, `object_id` or `msi_res_id`.
//!
//! `GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=<audience>` with
//! `Metadata: true` answers `{"access_token": "eyJ0...", "expires_in": "86399", "expires_on":
//! "1733560000", "not_before": "...", "resource": "...", "token_type": "Bearer"}`: the times
//! are strings of seconds. The life is taken from `expires_in` (relative: a skewed clock on the
//! proxy cannot stretch it), a number accepted too.

use serde::Deserialize;

use super::{answered, usable_bearer, FetchError};

/// The audience of Azure OpenAI (and every Azure AI service): the default `resource`.
pub const COGNITIVE_SERVICES_RESOURCE: &str = "https://cognitiveservices.azure.com";
/// IMDS's host (sent as `:authority`; the cluster connects to `super::METADATA_ADDRESS`).
pub const IMDS_HOST: &str = "169.254.169.254";
/// The header every IMDS request must carry (IMDS refuses requests without it, so a redirected
/// browser request cannot read tokens).
pub const METADATA_HEADER: (&str, &str) = ("metadata", "true");
/// The token endpoint's API version.
pub const API_VERSION: &str = "2018-02-01";

/// How a user-assigned identity is named in the token request's query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdParam {
    /// The identity's client (application) id, a GUID.
    ClientId,
    /// Its object (principal) id, a GUID.
    ObjectId,
    /// Its Azure resource id (`/subscriptions/.../userAssignedIdentities/<name>`).
    MsiResId,
}

impl IdParam {
    /// The query parameter's (and the configuration field's) name.
    pub fn name(self) -> &'static str {
        match self {
            IdParam::ClientId => "client_id",
            IdParam::ObjectId => "object_id",
            IdParam::MsiResId => "msi_res_id",
        }
    }

    /// Whether `v` may be sent as this parameter: a GUID for the ids; for the resource id an
    /// ARM path under `/subscriptions/` of letters, digits and `/ - _ . ( )`. Never `&`, `#`,
    /// `%` or a space, so it cannot escape its query parameter.
    pub fn valid(self, v: &str) -> bool {
        match self {
            IdParam::ClientId | IdParam::ObjectId => is_guid(v),
            IdParam::MsiResId => {
                v.len() <= 512
                    && v.starts_with("/subscriptions/")
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"/-_.()".contains(&b))
            }
        }
    }
}

/// `8-4-4-4-12` hex digits.
fn is_guid(v: &str) -> bool {
    let groups: Vec<&str> = v.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `resource` may be asked for: an `https://` URI of letters, digits and `: / . - _`
/// (Entra's resource URIs), so it goes in the query as it is.
pub fn valid_resource(resource: &str) -> bool {
    resource.len() <= 256
        && resource.strip_prefix("https://").is_some_and(|rest| !rest.is_empty())
        && resource.bytes().all(|b| b.is_ascii_alphanumeric() || b":/.-_".contains(&b))
}

/// The token request's path and query.
pub fn token_path(resource: &str, user_assigned: Option<&(IdParam, String)>) -> String {
    let mut path = format!("/metadata/identity/oauth2/token?api-version={API_VERSION}&resource={resource}");
    if let Some((param, value)) = user_assigned {
        path.push('&');
        path.push_str(param.name());
        path.push('=');
        path.push_str(value);
    }
    path
}

/// The token request's headers (HTTP/1.1 to IMDS, plain text: it is only ever link-local). No
/// `x-forwarded-for`: IMDS refuses a request that carries one (Envoy's callouts add none).
pub fn request_headers(path: &str) -> [(&str, &str); 4] {
    [(":method", "GET"), (":path", path), (":authority", IMDS_HOST), METADATA_HEADER]
}

/// Seconds as IMDS writes them (a string), or as a number.
#[derive(Deserialize)]
#[serde(untagged)]
enum Seconds {
    Text(String),
    Number(u64),
}

impl Seconds {
    fn get(&self) -> Option<u64> {
        match self {
            Seconds::Text(s) => s.trim().parse().ok(),
            Seconds::Number(n) => Some(*n),
        }
    }
}

#[derive(Deserialize)]
struct RawAnswer {
    access_token: String,
    expires_in: Seconds,
    #[serde(default)]
    token_type: Option<String>,
}

/// The token and its lifetime in seconds from IMDS's answer (`status` 0: none came).
pub fn parse_answer(status: u16, body: &[u8]) -> Result<(String, u64), FetchError> {
    answered(status)?;
    let a: RawAnswer = crate::json::from_slice(body).map_err(|_| FetchError::Malformed)?;
    let life = a.expires_in.get().ok_or(FetchError::Malformed)?;
    if !usable_bearer(&a.access_token, a.token_type.as_deref(), life) {
        return Err(FetchError::Malformed);
    }
    Ok((a.access_token, life))
}
