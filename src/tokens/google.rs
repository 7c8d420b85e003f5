//! The GKE / GCE metadata server's token endpoint: the request for a service account's access
//! token, and its answer (`{"access_token": "...", "expires_in": 3599, "token_type": "Bearer"}`).
//! On GKE with Workload Identity the metadata server answers for the Kubernetes service
//! account's bound Google service account; on GCE for the instance's.

use serde::Deserialize;

use super::{answered, usable_bearer, FetchError};

/// The metadata server's host name (sent as `:authority`; the cluster connects to its address,
/// `super::METADATA_ADDRESS`).
pub const METADATA_HOST: &str = "metadata.google.internal";
/// The header every metadata request must carry (the server refuses requests without it, so a
/// redirected browser request cannot read tokens).
pub const METADATA_FLAVOR: (&str, &str) = ("metadata-flavor", "Google");

/// Whether `sa` may name a service account in the token path: `default` or an email
/// (letters, digits, `@ . - _`), never a path separator or a query.
pub fn valid_service_account(sa: &str) -> bool {
    !sa.is_empty()
        && sa.len() <= 256
        && sa.bytes().all(|b| b.is_ascii_alphanumeric() || b"@.-_".contains(&b))
        && !sa.starts_with('.')
}

/// Whether `scope` may be asked for (a scope URL or name: visible ASCII without `,`, `&`, `#`).
pub fn valid_scope(scope: &str) -> bool {
    !scope.is_empty() && scope.bytes().all(|b| b.is_ascii_graphic() && !b",&#%+?".contains(&b))
}

/// The token request's path: `/computeMetadata/v1/instance/service-accounts/<sa>/token` with the
/// scopes, comma-separated, in the query.
pub fn token_path(service_account: &str, scopes: &[String]) -> String {
    let mut path = format!("/computeMetadata/v1/instance/service-accounts/{service_account}/token");
    if !scopes.is_empty() {
        path.push_str("?scopes=");
        path.push_str(&scopes.join(","));
    }
    path
}

/// The token request's headers (HTTP/1.1 to the metadata server, plain text: it is only ever
/// link-local).
pub fn request_headers(path: &str) -> [(&str, &str); 4] {
    [(":method", "GET"), (":path", path), (":authority", METADATA_HOST), METADATA_FLAVOR]
}

#[derive(Deserialize)]
struct RawAnswer {
    access_token: String,
    expires_in: u64,
    #[serde(default)]
    token_type: Option<String>,
}

/// The token and its lifetime in seconds from the metadata server's answer (`status` 0: none
/// came).
pub fn parse_answer(status: u16, body: &[u8]) -> Result<(String, u64), FetchError> {
    answered(status)?;
    let a: RawAnswer = crate::json::from_slice(body).map_err(|_| FetchError::Malformed)?;
    if !usable_bearer(&a.access_token, a.token_type.as_deref(), a.expires_in) {
        return Err(FetchError::Malformed);
    }
    Ok((a.access_token, a.expires_in))
}
