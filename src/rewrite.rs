//! Request rewrites, done by splicing raw JSON rather than re-serializing the whole document
//! (the answer's rewrite is in `response`).

use crate::request::{TopLevel, ROUTING_FIELDS};

fn push_json_string(out: &mut Vec<u8>, s: &str) {
    // serde_json's string escaping cannot fail for a &str.
    match serde_json::to_vec(s) {
        Ok(v) => out.extend_from_slice(&v),
        Err(_) => out.extend_from_slice(b"\"\""),
    }
}

/// `{"<first_key>":"<first_value>"` followed by every member of `fields` except `skip`, each
/// copied byte-for-byte in its original order.
fn splice(fields: &TopLevel, first_key: &str, first_value: &str, skip: &[&str]) -> Vec<u8> {
    let size: usize = fields.0.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
    let mut out = Vec::with_capacity(size + first_key.len() + first_value.len() + 8);
    out.push(b'{');
    push_json_string(&mut out, first_key);
    out.push(b':');
    push_json_string(&mut out, first_value);
    for (k, v) in &fields.0 {
        if skip.contains(&k.as_ref()) {
            continue;
        }
        out.push(b',');
        push_json_string(&mut out, k);
        out.push(b':');
        out.extend_from_slice(v.get().as_bytes());
    }
    out.push(b'}');
    out
}

/// The body a provider receives: `model` first (the endpoint's upstream id), routing fields
/// removed, every other member copied byte-for-byte in its original order.
pub fn upstream_body(fields: &TopLevel, upstream_model: &str) -> Vec<u8> {
    splice(fields, "model", upstream_model, &ROUTING_FIELDS)
}

/// Path sent upstream: the request's `/v1` prefix replaced by the provider's `path_prefix`.
pub fn upstream_path(request_path: &str, path_prefix: &str) -> String {
    match request_path.strip_prefix("/v1") {
        Some(rest) if path_prefix != "/v1" => format!("{path_prefix}{rest}"),
        _ => request_path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn strips_routing_fields_and_replaces_model() {
        let body = br#"{"model":"a/b:nitro","messages":[{"role":"user","content":"h\u00e9 \"q\""}],"provider":{"sort":"price"},"models":["x"],"plugins":[],"route":"fallback","temperature":0.50,"stream":true}"#;
        let t = TopLevel::parse(body).unwrap();
        let out = upstream_body(&t, "up-id");
        let s = String::from_utf8(out.clone()).unwrap();
        assert!(s.starts_with(r#"{"model":"up-id","#), "{s}");
        // raw values are copied byte-for-byte (escapes and number formatting kept)
        assert!(s.contains(r#""content":"h\u00e9 \"q\"""#), "{s}");
        assert!(s.contains(r#""temperature":0.50"#), "{s}");
        let v: Value = serde_json::from_slice(&out).unwrap();
        let o = v.as_object().unwrap();
        for f in ROUTING_FIELDS.iter().filter(|f| **f != "model") {
            assert!(!o.contains_key(*f), "{f} leaked");
        }
        assert_eq!(o["stream"], true);
        assert_eq!(o.len(), 4);
    }

    #[test]
    fn path_prefix_rewrite() {
        assert_eq!(upstream_path("/v1/chat/completions", "/v1"), "/v1/chat/completions");
        assert_eq!(upstream_path("/v1/chat/completions", "/openai/v1"), "/openai/v1/chat/completions");
        assert_eq!(upstream_path("/v1/chat/completions", ""), "/chat/completions");
    }
}
