//! Access tokens a provider's attempts carry: OAuth2 tokens from Google's metadata server
//! (`credential.google_metadata`, [`google`]) or for a service-account key file
//! (`credential.google_service_account`, [`service_account`]: an RS256-signed JWT assertion),
//! and Microsoft Entra tokens from Azure's Instance Metadata Service
//! (`credential.azure_managed_identity`, [`azure`]). Where they come from, when
//! to fetch one, and the record all workers share. Pure logic, tested natively; the host calls
//! are in `crate::filters::tokens`.
//!
//! One record per token source in shared data (`key`): the token, when it expires, when to
//! refresh it, and a lease. Every worker's tick reads it; the worker whose compare-and-swap
//! takes the lease fetches, the others wait, and every attempt reads the token from the record.
//! So one fetch serves all workers, a token is refreshed well before it expires, and no
//! request ever waits for a fetch. The lease, the schedule and the record are the same for
//! every cloud; only the request and the answer's shape differ ([`Identity`]).

pub mod azure;
pub mod bignum;
pub mod der;
pub mod google;
pub mod rsa;
#[cfg(test)]
pub(crate) mod sa_tests;
pub mod service_account;
pub mod sha256;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::protocol::bytes::u64_at;

/// Google's scope for Vertex AI and every other Cloud API.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The metadata servers' link-local address and port (plain HTTP), Google's and Azure's alike,
/// which the generated clusters connect to.
pub const METADATA_ADDRESS: (&str, u16) = ("169.254.169.254", 80);
/// The longest answer read (both builds' callouts cut there), and the longest token taken.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024;
const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Where a provider's access token comes from: a metadata server behind `cluster`, and who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSource {
    /// The Envoy cluster of the metadata server (plain HTTP, `169.254.169.254:80`).
    pub cluster: String,
    /// How long a fetch may take.
    pub timeout_ms: u32,
    /// Which cloud's server, and the identity whose token is asked for.
    pub identity: Identity,
}

/// The identity a token is asked for, by cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// GKE / GCE metadata server: a Google service account and the OAuth2 scopes.
    Google {
        /// `default`, or the service account's email.
        service_account: String,
        /// OAuth2 scopes asked for (default: `cloud-platform`).
        scopes: Vec<String>,
    },
    /// A service-account key file: the key signs an assertion the tick POSTs to its
    /// `token_uri` (Google's OAuth2 token endpoint).
    GoogleServiceAccount {
        /// The key file's service account, key and token endpoint (`Debug` redacts the key).
        key: Arc<service_account::ServiceAccountKey>,
        /// OAuth2 scopes asked for (default: `cloud-platform`).
        scopes: Vec<String>,
    },
    /// Azure IMDS: the token's audience and, for a user-assigned identity, which one.
    Azure {
        /// The resource (audience) the token is for (`https://cognitiveservices.azure.com`).
        resource: String,
        /// A user-assigned identity: `(client_id | object_id | msi_res_id, value)`. None: the
        /// system-assigned identity (or the only user-assigned one).
        user_assigned: Option<(azure::IdParam, String)>,
    },
}

impl TokenSource {
    /// The shared-data key of this source's record: one per cluster and identity, so providers
    /// sharing a source share its token (and its one fetch).
    pub fn key(&self) -> String {
        match &self.identity {
            Identity::Google { service_account, scopes } => {
                format!("sy/token/{}/{}/{}", self.cluster, service_account, scopes.join(","))
            }
            Identity::GoogleServiceAccount { key, scopes } => format!(
                "sy/token/gsa/{}/{}/{}/{}",
                self.cluster,
                key.client_email,
                key.private_key_id,
                scopes.join(",")
            ),
            Identity::Azure { resource, user_assigned } => {
                let who = user_assigned.as_ref().map_or_else(String::new, |(p, v)| format!("{}={v}", p.name()));
                format!("sy/token/azure/{}/{}/{}", self.cluster, resource, who)
            }
        }
    }

    /// The credential's configuration field (`google_metadata`, `azure_managed_identity`).
    pub fn field(&self) -> &'static str {
        match self.identity {
            Identity::Google { .. } => "google_metadata",
            Identity::GoogleServiceAccount { .. } => "google_service_account",
            Identity::Azure { .. } => "azure_managed_identity",
        }
    }

    /// Who the token is asked for, for logs (never a secret).
    pub fn who(&self) -> String {
        match &self.identity {
            Identity::Google { service_account, .. } => format!("service account {service_account}"),
            Identity::GoogleServiceAccount { key, .. } => {
                format!("service account {} (key {})", key.client_email, key.private_key_id)
            }
            Identity::Azure { user_assigned: None, .. } => "the system-assigned managed identity".to_string(),
            Identity::Azure { user_assigned: Some((p, v)), .. } => format!("managed identity {}={v}", p.name()),
        }
    }

    /// The token request's path (with its query).
    pub fn path(&self) -> String {
        match &self.identity {
            Identity::Google { service_account, scopes } => google::token_path(service_account, scopes),
            Identity::GoogleServiceAccount { key, .. } => key.path.clone(),
            Identity::Azure { resource, user_assigned } => azure::token_path(resource, user_assigned.as_ref()),
        }
    }

    /// The token request's headers (`path`: from [`TokenSource::path`]).
    pub fn request_headers<'a>(&'a self, path: &'a str) -> [(&'a str, &'a str); 4] {
        match &self.identity {
            Identity::Google { .. } => google::request_headers(path),
            Identity::GoogleServiceAccount { key, .. } => [
                (":method", "POST"),
                (":path", path),
                (":authority", key.authority.as_str()),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            Identity::Azure { .. } => azure::request_headers(path),
        }
    }

    /// The token request's body at `now` (the host's clock): empty for the metadata servers'
    /// GETs; for a key file the assertion, signed here, in the tick that starts the fetch.
    pub fn request_body(&self, now_ms: u64) -> Result<Vec<u8>, FetchError> {
        match &self.identity {
            Identity::GoogleServiceAccount { key, scopes } => {
                key.request_body(scopes, now_ms / 1000).ok_or(FetchError::Signing)
            }
            Identity::Google { .. } | Identity::Azure { .. } => Ok(Vec::new()),
        }
    }

    /// The token and its lifetime in seconds from the server's answer (`status` 0: none came).
    pub fn parse_answer(&self, status: u16, body: &[u8]) -> Result<(String, u64), FetchError> {
        match self.identity {
            Identity::Google { .. } | Identity::GoogleServiceAccount { .. } => google::parse_answer(status, body),
            Identity::Azure { .. } => azure::parse_answer(status, body),
        }
    }
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
    /// The assertion could not be signed (the key failed its check; never sent).
    Signing,
}

impl FetchError {
    pub fn name(self) -> &'static str {
        match self {
            FetchError::Unreachable => "unreachable",
            FetchError::Status => "http_error",
            FetchError::Malformed => "malformed",
            FetchError::Signing => "signing_error",
        }
    }
}

/// The status check every cloud's answer goes through first.
fn answered(status: u16) -> Result<(), FetchError> {
    match status {
        0 => Err(FetchError::Unreachable),
        200 => Ok(()),
        _ => Err(FetchError::Status),
    }
}

/// Whether a token, a type and a life make a usable bearer: the token goes into a header, so
/// only visible ASCII is taken; a type other than Bearer, or no life, is not one.
fn usable_bearer(token: &str, token_type: Option<&str>, life_s: u64) -> bool {
    let token_ok = !token.is_empty() && token.len() <= MAX_TOKEN_BYTES && token.bytes().all(|b| b.is_ascii_graphic());
    token_ok && token_type.is_none_or(|t| t.eq_ignore_ascii_case("bearer")) && life_s > 0
}

/// A token source's shared record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenRecord {
    /// The access token (empty: none yet). Never logged.
    pub token: String,
    /// When the token expires (ms since the epoch): no attempt carries it after.
    pub expires_at_ms: u64,
    /// Requests are planned on the token until then: a margin before it expires, so a later
    /// attempt of the same request still has it.
    pub usable_until_ms: u64,
    /// The next fetch is due then (a refresh well before expiry, or a retry after a failure).
    pub refresh_at_ms: u64,
    /// A worker is fetching until then; after it, another may take over (the fetcher died).
    pub lease_until_ms: u64,
    /// Consecutive failed fetches (the retry back-off).
    pub failures: u32,
}

/// The record's encoding version (the first byte).
const VERSION: u8 = 1;

impl TokenRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(37 + self.token.len());
        v.push(VERSION);
        v.extend_from_slice(&self.expires_at_ms.to_le_bytes());
        v.extend_from_slice(&self.usable_until_ms.to_le_bytes());
        v.extend_from_slice(&self.refresh_at_ms.to_le_bytes());
        v.extend_from_slice(&self.lease_until_ms.to_le_bytes());
        v.extend_from_slice(&self.failures.to_le_bytes());
        v.extend_from_slice(self.token.as_bytes());
        v
    }

    /// None for bytes this version did not write (read as "no record": fetched anew).
    pub fn decode(b: &[u8]) -> Option<TokenRecord> {
        if b.first() != Some(&VERSION) {
            return None;
        }
        let failures = b.get(33..37).and_then(|s| <[u8; 4]>::try_from(s).ok()).map(u32::from_le_bytes)?;
        let token = std::str::from_utf8(b.get(37..)?).ok()?.to_string();
        Some(TokenRecord {
            token,
            expires_at_ms: u64_at(b, 1)?,
            usable_until_ms: u64_at(b, 9)?,
            refresh_at_ms: u64_at(b, 17)?,
            lease_until_ms: u64_at(b, 25)?,
            failures,
        })
    }

    /// The token, if a request decided at `now` may plan on it (it lives past the margin).
    pub fn usable(&self, now_ms: u64) -> Option<&str> {
        (!self.token.is_empty() && now_ms < self.usable_until_ms).then_some(self.token.as_str())
    }

    /// The token, if it has not expired at `now`: what an attempt of a request planned on it
    /// sends (the margin covers the time between the decision and a later attempt).
    pub fn unexpired(&self, now_ms: u64) -> Option<&str> {
        (!self.token.is_empty() && now_ms < self.expires_at_ms).then_some(self.token.as_str())
    }
}

/// A fetch is never scheduled sooner than this after the last (a server handing out very short
/// tokens cannot make the workers spin).
pub const MIN_REFRESH_MS: u64 = 1_000;
/// Refresh at the latest this long before expiry (Google's own clients use 5 minutes)...
pub const REFRESH_BEFORE_EXPIRY_MS: u64 = 300_000;
/// ...and at the latest a token's use stops this long before it expires.
pub const MAX_USE_MARGIN_MS: u64 = 10_000;
/// Retries after a failed fetch: 500 ms, doubling, at most this.
pub const MAX_BACKOFF_MS: u64 = 10_000;
/// A lease outlives its fetch's timeout by this much before another worker takes over.
pub const LEASE_MARGIN_MS: u64 = 1_000;

/// When a token that lives `life_ms` from `now` is refreshed: at two thirds of its life or five
/// minutes before it expires, whichever is sooner, but never before half its life (a short-lived
/// token would otherwise be refreshed at once, forever) nor within `MIN_REFRESH_MS`.
pub fn refresh_at(now_ms: u64, life_ms: u64) -> u64 {
    let two_thirds = life_ms / 3 * 2;
    let before_expiry = life_ms.saturating_sub(REFRESH_BEFORE_EXPIRY_MS);
    let after = two_thirds.min(before_expiry).max(life_ms / 2).max(MIN_REFRESH_MS);
    now_ms.saturating_add(after)
}

/// Until when a token that lives `life_ms` from `now` goes on attempts: until a sixth of its
/// life (at most `MAX_USE_MARGIN_MS`) before it expires.
pub fn usable_until(now_ms: u64, life_ms: u64) -> u64 {
    now_ms.saturating_add(life_ms.saturating_sub((life_ms / 6).min(MAX_USE_MARGIN_MS)))
}

/// The pause before retrying after the `failures`-th failed fetch in a row.
pub fn backoff_ms(failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(16);
    (500u64 << doublings).min(MAX_BACKOFF_MS)
}

/// What a worker's tick does about a source whose record is `current` (None: none yet): the
/// record that takes the lease, to be written with compare-and-swap before fetching, or None
/// when no fetch is due or another worker holds the lease.
pub fn take_lease(current: Option<&TokenRecord>, now_ms: u64, timeout_ms: u32) -> Option<TokenRecord> {
    let mut r = current.cloned().unwrap_or_default();
    if current.is_some() && (now_ms < r.lease_until_ms || now_ms < r.refresh_at_ms) {
        return None;
    }
    r.lease_until_ms = now_ms.saturating_add(u64::from(timeout_ms)).saturating_add(LEASE_MARGIN_MS);
    Some(r)
}

/// The record after a successful fetch at `now` of a token living `expires_in_s`.
pub fn fetched(token: String, expires_in_s: u64, now_ms: u64) -> TokenRecord {
    let life = expires_in_s.saturating_mul(1000);
    TokenRecord {
        token,
        expires_at_ms: now_ms.saturating_add(life),
        usable_until_ms: usable_until(now_ms, life),
        refresh_at_ms: refresh_at(now_ms, life),
        lease_until_ms: 0,
        failures: 0,
    }
}

/// The record after a failed fetch at `now`: the token it had stays usable until its own
/// time, and the next fetch is due after the back-off.
pub fn failed(current: Option<&TokenRecord>, now_ms: u64) -> TokenRecord {
    let mut r = current.cloned().unwrap_or_default();
    r.failures = r.failures.saturating_add(1);
    r.refresh_at_ms = now_ms.saturating_add(backoff_ms(r.failures));
    r.lease_until_ms = 0;
    r
}
