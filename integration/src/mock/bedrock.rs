//! The mock's Amazon Bedrock runtime, as strict as AWS where a lenient mock would hide a defect:
//! SigV4 recomputed for the test credentials ([`verify`]), Bedrock's error shapes
//! ([`error`]: `{"message"}` with `x-amzn-ErrorType`), and streamed answers framed as AWS event
//! streams with valid CRCs ([`stream_body`]). botocore is the reference for the signature:
//! `testdata/sigv4.json` holds requests it signed (`testdata/make_sigv4.py`), which must pass, and
//! each one changed in one place must not.

use sha2::{Digest, Sha256};

/// The mock's AWS credentials (the test signer's, never real ones).
pub const ACCESS_KEY: &str = "AKIDMOCKBEDROCK00001";
pub const SECRET_KEY: &str = "mock/bedrock/secret/key/0123456789abcdefgh";
/// A second pair the mock also accepts: what credentials are rotated to.
pub const ROTATED_ACCESS_KEY: &str = "AKIDMOCKBEDROCK00002";
pub const ROTATED_SECRET_KEY: &str = "mock/bedrock/rotated/secret/9876543210zyxwv";

/// The secret of a key id the mock knows.
fn secret_of(key_id: &str) -> Option<&'static str> {
    match key_id {
        ACCESS_KEY => Some(SECRET_KEY),
        ROTATED_ACCESS_KEY => Some(ROTATED_SECRET_KEY),
        _ => None,
    }
}

/// How far a request's `x-amz-date` may be from the mock's clock (AWS: 5 minutes).
pub const MAX_SKEW_S: i64 = 300;

/// A refusal: status, the exception (`x-amzn-ErrorType`) and its message.
pub type Refusal = (u16, &'static str, String);

/// Bedrock's error body.
pub fn error(message: &str) -> String {
    serde_json::json!({ "message": message }).to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// HMAC-SHA256 (RFC 2104), on sha2.
pub fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let inner = Sha256::new().chain_update(k.map(|b| b ^ 0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(k.map(|b| b ^ 0x5c)).chain_update(inner).finalize().into()
}

/// SigV4's URI encoding: unreserved bytes kept, `/` kept when `keep_slash`, the rest `%XX`.
fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The canonical query string: each pair URI-encoded, sorted.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (uri_encode(&percent_decode(k), false), uri_encode(&percent_decode(v), false))
        })
        .collect();
    pairs.sort();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(Ok(v)) = s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Days since the Unix epoch of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch of an `x-amz-date` (`20261206T231500Z`).
pub fn amz_date_seconds(v: &str) -> Option<i64> {
    let b = v.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| v.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(4..6)?, n(6..8)?);
    Some(days * 86_400 + n(9..11)? * 3600 + n(11..13)? * 60 + n(13..15)?)
}

/// The request a signature is checked over.
pub struct Signed<'a> {
    pub method: &'a str,
    /// The path as sent (percent-encoded), without the query.
    pub path: &'a str,
    pub query: &'a str,
    /// Lower-case names.
    pub headers: &'a [(String, String)],
    pub body: &'a [u8],
}

/// Checks a request's SigV4 signature for the mock's credentials, `region` and `service`, at
/// `now_s` (seconds since the epoch), as AWS does: the canonical URI is the sent path encoded
/// once more (non-S3 services), the payload hash is the body's (`x-amz-content-sha256`, when
/// sent, must equal it), every signed header must be present. Err: AWS's refusal.
pub fn verify(r: &Signed<'_>, region: &str, service: &str, now_s: i64) -> Result<(), Refusal> {
    let header = |n: &str| r.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let missing = || (403, "MissingAuthenticationTokenException", "Missing Authentication Token".to_string());
    let invalid = |m: &str| (403, "InvalidSignatureException", m.to_string());
    let Some(auth) = header("authorization") else { return Err(missing()) };
    let Some(fields) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err((
            403,
            "IncompleteSignatureException",
            format!("Authorization header requires 'Credential' parameter. Authorization={auth}"),
        ));
    };
    let field = |name: &str| {
        fields.split(',').map(str::trim).find_map(|f| f.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
    };
    let (Some(credential), Some(signed_headers), Some(signature)) =
        (field("Credential"), field("SignedHeaders"), field("Signature"))
    else {
        return Err((403, "IncompleteSignatureException", "Authorization header is incomplete".to_string()));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, cred_region, cred_service, "aws4_request"] = scope[..] else {
        return Err((
            403,
            "IncompleteSignatureException",
            format!("Credential should be scoped correctly: {credential}"),
        ));
    };
    let Some(secret) = secret_of(key_id) else {
        return Err((
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.".into(),
        ));
    };
    if cred_region != region || cred_service != service {
        return Err(invalid(&format!(
            "Credential should be scoped to a valid region and service: {cred_region}/{cred_service}"
        )));
    }
    let Some(amz_date) = header("x-amz-date") else { return Err(missing()) };
    let Some(at) = amz_date_seconds(amz_date) else { return Err(invalid("Invalid X-Amz-Date")) };
    if !amz_date.starts_with(date) {
        return Err(invalid(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP",
        ));
    }
    if (now_s - at).abs() > MAX_SKEW_S {
        return Err(invalid(&format!("Signature expired: {amz_date} is now earlier than the allowed window")));
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    for must in ["host", "x-amz-date"] {
        if !names.contains(&must) {
            return Err(invalid(&format!("'{must}' must be a 'SignedHeader' in the AWS Authorization.")));
        }
    }
    if header("x-amz-security-token").is_some() && !names.contains(&"x-amz-security-token") {
        return Err(invalid("'x-amz-security-token' must be a 'SignedHeader' in the AWS Authorization."));
    }
    let payload = sha256_hex(r.body);
    if let Some(claimed) = header("x-amz-content-sha256") {
        if claimed != payload {
            return Err(invalid("The provided 'x-amz-content-sha256' header does not match what was computed."));
        }
    }
    let mut canonical_headers = String::new();
    for n in &names {
        // `host`: HTTP/2 carries it as :authority.
        let v = header(n).or_else(|| (*n == "host").then(|| header(":authority")).flatten());
        let Some(v) = v else { return Err(invalid(&format!("signed header {n} is missing"))) };
        let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
        canonical_headers.push_str(&format!("{n}:{v}\n"));
    }
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{payload}",
        r.method,
        uri_encode(r.path, true),
        canonical_query(r.query)
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/{service}/aws4_request\n{}",
        sha256_hex(canonical.as_bytes())
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let expected = hex(&hmac(&key, string_to_sign.as_bytes()));
    if expected != signature {
        // AWS quotes the canonical request it computed: the filter must never pass that on.
        return Err(invalid(&format!(
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret \
             Access Key and signing method. Consult the service documentation for details.\n\nThe Canonical String \
             for this request should have been\n'{canonical}'\n\nThe String-to-Sign should have been\n'{string_to_sign}'\n"
        )));
    }
    Ok(())
}

/// The model id of a Bedrock path and whether it streams (`/model/{id}/invoke[-with-response-stream]`).
pub fn model_of(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/model/")?;
    let (id, method) = rest.rsplit_once('/')?;
    let stream = match method {
        "invoke" => false,
        "invoke-with-response-stream" => true,
        _ => return None,
    };
    Some((percent_decode(id), stream))
}

/// Checks the body as Bedrock's Anthropic models do: `anthropic_version: bedrock-2023-05-31`, no
/// `model`, no `stream` (ValidationException: "extraneous key [...] is not permitted").
pub fn invalid_body(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Some("Malformed input request, please reformat your input and try again.".into()),
    };
    for k in ["model", "stream"] {
        if v.get(k).is_some() {
            return Some(format!("Malformed input request: #: extraneous key [{k}] is not permitted, please reformat your input and try again."));
        }
    }
    if v.get("anthropic_version").and_then(|x| x.as_str()) != Some("bedrock-2023-05-31") {
        return Some("Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again.".into());
    }
    None
}

fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= c.len() { char::from(A[(n >> (18 - 6 * i) & 63) as usize]) } else { '=' });
        }
    }
    out
}

/// The Anthropic answer `InvokeModel` returns for `model`.
pub fn message(model: &str, text: &str) -> serde_json::Value {
    serde_json::json!({"id": "msg_bdrk_01mock", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 3}})
}

/// The tool call an Anthropic model on Bedrock answers a request offering tools with (its last
/// turn not a tool result): the first tool, its required string arguments `"Paris"`.
pub fn tool_call(request: &serde_json::Value) -> Option<(String, serde_json::Value)> {
    let tool = request.pointer("/tools/0")?;
    let last = request["messages"].as_array()?.last()?;
    let results = last["content"].as_array().is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    if results {
        return None;
    }
    let schema = &tool["input_schema"];
    let mut input = serde_json::Map::new();
    for r in schema["required"].as_array().into_iter().flatten().filter_map(|r| r.as_str()) {
        if schema["properties"][r]["type"] == "string" {
            input.insert(r.to_string(), serde_json::json!("Paris"));
        }
    }
    Some((tool["name"].as_str()?.to_string(), serde_json::Value::Object(input)))
}

/// The `InvokeModel` answer calling `name` with `input`.
pub fn tool_message(model: &str, name: &str, input: &serde_json::Value) -> serde_json::Value {
    let mut m = message(model, "");
    m["content"] = serde_json::json!([{"type": "tool_use", "id": "toolu_bdrk_01mock", "name": name, "input": input}]);
    m["stop_reason"] = serde_json::json!("tool_use");
    m
}

/// `InvokeModelWithResponseStream`'s body: one `chunk` event frame per Anthropic stream event,
/// then `exception` (a stream exception's type and message) if given, else a message_stop with
/// Bedrock's invocation metrics.
pub fn stream_body(model: &str, text: &str, exception: Option<(&str, &str)>) -> Vec<u8> {
    stream_events(model, text, None, exception)
}

/// As [`stream_body`], calling `tool` (name, input) instead of saying `text` when given.
pub fn stream_events(
    model: &str,
    text: &str,
    tool: Option<&(String, serde_json::Value)>,
    exception: Option<(&str, &str)>,
) -> Vec<u8> {
    use serde_json::json;
    use switchyard::providers::bedrock::eventstream;
    let (block, delta, stop) = match tool {
        Some((name, input)) => (
            json!({"type": "tool_use", "id": "toolu_bdrk_01mock", "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            "tool_use",
        ),
        None => (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": text}), "end_turn"),
    };
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_bdrk_01mock", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
    ];
    if exception.is_none() {
        events.extend([
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 12, "outputTokenCount": 3,
                "invocationLatency": 80, "firstByteLatency": 20}}),
        ]);
    }
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let payload =
            json!({"bytes": b64(e.to_string().as_bytes()), "p": "abcdefghijklmnopqrstuvwxyz"[..i % 26].to_string()});
        out.extend(eventstream::event("chunk", payload.to_string().as_bytes()));
    }
    if let Some((kind, message)) = exception {
        out.extend(eventstream::exception(kind, json!({"message": message}).to_string().as_bytes()));
    }
    out
}

/// The only Bedrock API key (`authorization: Bearer`) the mock accepts.
pub const API_KEY: &str = "bedrock-mock-api-key-0123456789";

/// The region the mock's Bedrock serves (the signature's scope must name it).
pub const REGION: &str = "us-east-1";

/// The exception Bedrock answers a failure status with.
fn exception_for(status: u16) -> (&'static str, &'static str) {
    match status {
        429 => ("ThrottlingException", "Too many requests, please wait before trying again."),
        503 => ("ServiceUnavailableException", "Bedrock is unable to process your request."),
        400 => ("ValidationException", "Malformed input request, please reformat your input and try again."),
        403 => ("AccessDeniedException", "You don't have access to the model with the specified model ID."),
        404 => ("ResourceNotFoundException", "The requested resource could not be found."),
        408 => ("ModelTimeoutException", "Model has timed out in processing the request."),
        424 => ("ModelErrorException", "The model failed to process the request."),
        _ => ("InternalServerException", "The server encountered an internal error."),
    }
}

fn refused(provider: &str, status: u16, kind: &str, message: &str) -> hyper::Response<super::ChannelBody> {
    let mut r = super::canned(provider, status, "application/json", error(message), None);
    let value = format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/");
    if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
        r.headers_mut().insert("x-amzn-errortype", v);
    }
    r
}

/// The mock's answer to a request on a Bedrock path (`model_of`, or Converse's
/// `converse::converse_of` when `converse`): the key (a Bedrock API key, or a SigV4 signature
/// checked for the mock's credentials), the body (InvokeModel's Anthropic body, or Converse's
/// checked against botocore's shapes), then `behavior` (a failure status as Bedrock's exception;
/// `sserror<n>`: a `throttlingException` after n events; `reset`; `garbage`: a frame with a bad
/// CRC); else the answer (a tool call when tools are offered), a stream in pieces that split
/// frames.
pub(super) fn answer(
    provider: &str,
    signed: &Signed<'_>,
    behavior: &super::Behavior,
    model: &str,
    stream: bool,
    converse: bool,
) -> Result<hyper::Response<super::ChannelBody>, super::BoxError> {
    let header = |n: &str| signed.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let bearer = header("authorization").and_then(|a| a.strip_prefix("Bearer "));
    if bearer != Some(API_KEY) {
        if bearer.is_some() {
            return Ok(refused(
                provider,
                403,
                "UnrecognizedClientException",
                "Invalid API Key format: Must start with pre-defined prefix",
            ));
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        if let Err((status, kind, message)) = verify(signed, REGION, "bedrock", now) {
            return Ok(refused(provider, status, kind, &message));
        }
    }
    let invalid = if converse { super::converse::invalid_body(signed.body, stream) } else { invalid_body(signed.body) };
    if let Some(message) = invalid {
        return Ok(refused(provider, 400, "ValidationException", &message));
    }
    let request: serde_json::Value = serde_json::from_slice(signed.body).unwrap_or_default();
    match behavior.mode {
        super::Mode::Reset => return Err("mock reset".into()),
        super::Mode::Status { status, .. } => {
            let (kind, message) = exception_for(status);
            return Ok(refused(provider, status, kind, message));
        }
        super::Mode::Ok | super::Mode::Garbage => {}
    }
    let tool = tool_call(&request);
    if !stream {
        let body = match (&tool, converse) {
            (_, true) => super::converse::answer_json(&request),
            (Some((name, input)), false) => tool_message(model, name, input),
            (None, false) => message(model, "Hello from Bedrock"),
        };
        return Ok(super::canned(provider, 200, "application/json", body.to_string(), None));
    }
    let cut = match behavior.cut_after {
        Some((_, super::CutKind::ErrorEvent)) => {
            Some(("throttlingException", "Too many tokens, please wait before trying again."))
        }
        _ => None,
    };
    let mut bytes = if converse {
        super::converse::stream_body(&request, cut)
    } else {
        stream_events(model, "Hello from Bedrock", tool.as_ref(), cut)
    };
    if matches!(behavior.mode, super::Mode::Garbage) {
        if let Some(b) = bytes.last_mut() {
            *b ^= 0xff;
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(8);
    let interval = behavior.chunk_interval;
    tokio::spawn(async move {
        // Pieces of 50 bytes: every frame arrives split.
        for piece in bytes.chunks(50) {
            if tx.send(Ok(bytes::Bytes::copy_from_slice(piece))).await.is_err() {
                return;
            }
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
        }
    });
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", "application/vnd.amazon.eventstream")
        .header("x-amzn-bedrock-content-type", "application/json")
        .header("x-mock-provider", provider)
        .body(super::ChannelBody(rx))?)
}

#[cfg(test)]
#[path = "bedrock_tests.rs"]
mod tests;
