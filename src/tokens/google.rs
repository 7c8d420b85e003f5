//! The GKE / GCE metadata server's token endpoint: the request for a service account's access
//! token, and its answer (`{"access_token": "...", "expires_in": 3599, "token_type": "Bearer"}`).
//! On GKE with Workload Identity the metadata server answers for the Kubernetes service
//! account's bound Google service account; on GCE for the instance's.

use serde::Deserialize;

use super::TokenSource;

/// The metadata server's host name (sent as `:authority`; the cluster connects to its address).
pub const METADATA_HOST: &str = "metadata.google.internal";
/// The metadata server's link-local address and port (plain HTTP), which the generated cluster
/// connects to.
pub const METADATA_ADDRESS: (&str, u16) = ("169.254.169.254", 80);
/// The header every metadata request must carry (the server refuses requests without it, so a
/// redirected browser request cannot read tokens).
pub const METADATA_FLAVOR: (&str, &str) = ("metadata-flavor", "Google");
/// The longest answer read, and the longest token taken.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
const MAX_TOKEN_BYTES: usize = 8 * 1024;

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
pub fn token_path(source: &TokenSource) -> String {
    let mut path = format!("/computeMetadata/v1/instance/service-accounts/{}/token", source.service_account);
    if !source.scopes.is_empty() {
        path.push_str("?scopes=");
        path.push_str(&source.scopes.join(","));
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

/// Why an answer gave no token (the `result` of the fetch metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchError {
    /// No answer at all (connect failure, timeout, an unknown cluster).
    Unreachable,
    /// An answer other than 200.
    Status,
    /// A 200 whose body is not a usable token.
    Malformed,
}

impl FetchError {
    pub fn name(self) -> &'static str {
        match self {
            FetchError::Unreachable => "unreachable",
            FetchError::Status => "http_error",
            FetchError::Malformed => "malformed",
        }
    }
}

/// The token and its lifetime in seconds from the metadata server's answer (`status` 0: none
/// came). The token goes into a header: only visible ASCII is taken.
pub fn parse_answer(status: u16, body: &[u8]) -> Result<(String, u64), FetchError> {
    match status {
        0 => return Err(FetchError::Unreachable),
        200 => {}
        _ => return Err(FetchError::Status),
    }
    let a: RawAnswer = serde_json::from_slice(body).map_err(|_| FetchError::Malformed)?;
    let token_ok = !a.access_token.is_empty()
        && a.access_token.len() <= MAX_TOKEN_BYTES
        && a.access_token.bytes().all(|b| b.is_ascii_graphic());
    let bearer = a.token_type.as_deref().is_none_or(|t| t.eq_ignore_ascii_case("bearer"));
    if !token_ok || !bearer || a.expires_in == 0 {
        return Err(FetchError::Malformed);
    }
    Ok((a.access_token, a.expires_in))
}
