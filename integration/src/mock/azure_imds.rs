//! A mock Azure Instance Metadata Service (IMDS) issuing Microsoft Entra access tokens for a
//! managed identity, as strict as IMDS where a lenient mock would hide a defect. It runs on the
//! metadata server of [`gcp_metadata`](super::gcp_metadata) (its down switch, its
//! [`TokenIssuer`], which the mock Azure resource checks tokens with: `Behavior::azure_tokens`).
//!
//! - `GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=<audience>` with
//!   `Metadata: true` answers IMDS's JSON: `access_token` (JWT-like, `eyJ0...`), and
//!   `expires_in`, `expires_on`, `not_before` as strings of seconds, `resource`,
//!   `token_type: "Bearer"`. Tokens live the configured life (short in tests).
//! - Refused as IMDS refuses them (400 `invalid_request` with its `error_description`): no
//!   `Metadata: true`, an `X-Forwarded-For` header (IMDS refuses proxied requests), no or an
//!   unknown `api-version`, no `resource` or one other than Azure OpenAI's audience, and a
//!   `client_id` / `object_id` / `msi_res_id` that is not the VM's user-assigned identity
//!   ("Identity not found"). Another path: 404.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use serde_json::json;

use super::gcp_metadata::{MetadataServer, TokenIssuer};
use super::query_param;

/// The audience the mock issues for (Azure OpenAI's); a trailing `/` is accepted, as IMDS does.
pub const RESOURCE: &str = "https://cognitiveservices.azure.com";
/// The VM's user-assigned identity: its client id, object id and resource id.
pub const CLIENT_ID: &str = "5e1a1e5e-0c1d-4b7e-9a0a-2f1d3c4b5a69";
pub const OBJECT_ID: &str = "0b2c4d6e-8f0a-4c1e-9d3b-5a7c9e1f3b5d";
pub const MSI_RES_ID: &str =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/switchyard/providers/Microsoft.ManagedIdentity/userAssignedIdentities/switchyard-proxy";
/// The API versions of the token endpoint the mock knows.
const API_VERSIONS: [&str; 2] = ["2018-02-01", "2019-08-01"];

/// Starts a mock IMDS on 127.0.0.1 (any free port) whose tokens live `life` (whole seconds).
pub async fn start(life: Duration) -> std::io::Result<MetadataServer> {
    MetadataServer::serve(Arc::new(move |issuer, req| answer(issuer, life, req))).await
}

fn json_answer(status: u16, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

fn invalid(description: &str) -> Response<Full<Bytes>> {
    json_answer(400, json!({"error": "invalid_request", "error_description": description}))
}

fn answer(issuer: &TokenIssuer, life: Duration, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    if req.method() != hyper::Method::GET || req.uri().path() != "/metadata/identity/oauth2/token" {
        return json_answer(
            404,
            json!({"error": "not_found", "error_description": "The requested path was not found"}),
        );
    }
    if req.headers().get("metadata").and_then(|v| v.to_str().ok()) != Some("true") {
        return invalid("Required metadata header not specified");
    }
    if req.headers().contains_key("x-forwarded-for") {
        return invalid("Request contains X-Forwarded-For header; IMDS does not accept proxied requests");
    }
    let query = req.uri().query().unwrap_or("");
    match query_param(query, "api-version") {
        None | Some("") => return invalid("Required query variable 'api-version' is missing"),
        Some(v) if !API_VERSIONS.contains(&v) => return invalid("Invalid version"),
        Some(_) => {}
    }
    let resource = query_param(query, "resource").unwrap_or("");
    if resource.is_empty() {
        return invalid("Required audience parameter not specified");
    }
    if resource.trim_end_matches('/') != RESOURCE {
        return invalid("Audience is not valid for this mock (Azure OpenAI's only)");
    }
    let named: Vec<(&str, &str)> = [("client_id", CLIENT_ID), ("object_id", OBJECT_ID), ("msi_res_id", MSI_RES_ID)]
        .into_iter()
        .filter_map(|(k, want)| query_param(query, k).map(|v| (v, want)))
        .collect();
    if named.len() > 1 || named.iter().any(|(v, want)| v != want) {
        return invalid("Identity not found");
    }
    let token = issuer.issue("eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.", life);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let s = life.as_secs();
    json_answer(
        200,
        json!({"access_token": token, "refresh_token": "", "expires_in": s.to_string(),
               "expires_on": (now + s).to_string(), "not_before": now.to_string(),
               "resource": resource, "token_type": "Bearer"}),
    )
}
