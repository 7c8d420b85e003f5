//! Google service-account key files (`credential.google_service_account`): the key file's
//! JSON checked at load, and the token request the tick signs: a JWT assertion (RS256,
//! RFC 7523) POSTed form-encoded to the key's `token_uri`, answered like the metadata server
//! (`{"access_token", "expires_in", "token_type"}`).

use serde::Deserialize;

use super::rsa::RsaKey;
use crate::protocol::base64;

/// How long an assertion is valid (Google takes at most an hour).
pub const ASSERTION_LIFE_S: u64 = 3_600;
/// The grant type of a JWT assertion, form-encoded.
const GRANT_TYPE: &str = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";

/// A service account's key, read from its key file. `Debug` never prints the private key.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceAccountKey {
    /// The service account (`iss` of the assertion).
    pub client_email: String,
    /// The key's id (`kid` of the assertion's header).
    pub private_key_id: String,
    /// Where tokens are asked for (`aud` of the assertion), `https://oauth2.googleapis.com/token`.
    pub token_uri: String,
    /// `token_uri`'s host (the request's `:authority`) and path.
    pub authority: String,
    pub path: String,
    key: RsaKey,
}

impl std::fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri)
            .field("private_key", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
struct RawKeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
}

/// A key file's error: the JSON field at fault (empty: the whole file) and why. Never holds
/// any of the key.
pub type KeyFileError = (&'static str, String);

/// Reads a key file's JSON (Google's format: `type`, `client_email`, `private_key`,
/// `private_key_id`, `token_uri`, and fields not needed here).
pub fn parse_key_file(json: &str) -> Result<ServiceAccountKey, KeyFileError> {
    let raw: RawKeyFile = serde_json::from_str(json)
        // serde's message may quote the input: only its position is kept.
        .map_err(|e| ("", format!("is not a JSON object (line {}, column {})", e.line(), e.column())))?;
    if raw.kind.as_deref() != Some("service_account") {
        return Err(("type", "must be \"service_account\" (a service-account key file)".to_string()));
    }
    let client_email = raw.client_email.unwrap_or_default();
    if !super::google::valid_service_account(&client_email) || !client_email.contains('@') {
        return Err(("client_email", "must be the service account's email".to_string()));
    }
    let private_key_id = raw.private_key_id.unwrap_or_default();
    if private_key_id.is_empty()
        || private_key_id.len() > 128
        || !private_key_id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(("private_key_id", "must be the key's id (letters and digits)".to_string()));
    }
    let token_uri = raw.token_uri.unwrap_or_default();
    let (authority, path) = split_uri(&token_uri)
        .ok_or(("token_uri", "must be an https:// URL such as https://oauth2.googleapis.com/token".to_string()))?;
    let key = RsaKey::from_pkcs8_pem(raw.private_key.as_deref().unwrap_or_default())
        .map_err(|e| ("private_key", e.reason().to_string()))?;
    Ok(ServiceAccountKey { client_email, private_key_id, token_uri, authority, path, key })
}

/// `https://host[:port]/path` -> (authority, path). `http://` is taken for local test
/// endpoints only (the cluster decides the transport; the URI is the assertion's audience).
fn split_uri(uri: &str) -> Option<(String, String)> {
    let rest = uri.strip_prefix("https://").or_else(|| uri.strip_prefix("http://"))?;
    if !uri.bytes().all(|b| b.is_ascii_graphic()) || uri.contains(['#', '?']) {
        return None;
    }
    let (authority, path) =
        rest.find('/').map_or((rest, "/"), |i| (rest.get(..i).unwrap_or(""), rest.get(i..).unwrap_or("/")));
    (!authority.is_empty()).then(|| (authority.to_string(), path.to_string()))
}

impl ServiceAccountKey {
    /// The signed assertion asking for `scopes` at `now_s` (seconds since the epoch); None
    /// only if the key fails its signing check.
    pub fn assertion(&self, scopes: &[String], now_s: u64) -> Option<String> {
        let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": self.private_key_id});
        let claims = serde_json::json!({
            "iss": self.client_email,
            "scope": scopes.join(" "),
            "aud": self.token_uri,
            "iat": now_s,
            "exp": now_s.saturating_add(ASSERTION_LIFE_S),
        });
        let signing_input = format!(
            "{}.{}",
            base64::encode_url(crate::json::to_text(&header).as_bytes()),
            base64::encode_url(crate::json::to_text(&claims).as_bytes())
        );
        let signature = self.key.sign(signing_input.as_bytes())?;
        Some(format!("{signing_input}.{}", base64::encode_url(&signature)))
    }

    /// The token request's form body with the assertion.
    pub fn request_body(&self, scopes: &[String], now_s: u64) -> Option<Vec<u8>> {
        // base64url and dots need no form encoding.
        let jwt = self.assertion(scopes, now_s)?;
        Some(format!("grant_type={GRANT_TYPE}&assertion={jwt}").into_bytes())
    }

    /// The signing key's size in bits (logged at load).
    pub fn bits(&self) -> usize {
        self.key.bits()
    }
}
