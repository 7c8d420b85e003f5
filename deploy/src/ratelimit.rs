//! The rate limit service that `rate_limits` counts with: its Envoy cluster (gRPC, so HTTP/2)
//! and its limits in envoyproxy/ratelimit's configuration format, rendered from the same
//! `rate_limits` the filter reads, so a limit is written down once. The descriptors are the
//! filter's own (`switchyard::limits`).

use serde_json::{json, Value};
use switchyard::limits::{
    Window, CAPACITY_KEY, COOLDOWN_KEY, COOLDOWN_MARK, KIND_KEY, LIMIT_KEY, SLOT_KEY, SPEND_UNITS_PER_USD, SUBJECT_KEY,
};

/// The cluster `rate_limits.service.cluster` names, at `address` (an IP: static; a name: DNS).
/// None without `rate_limits` or without an address.
pub fn service_cluster(plugin_config: &Value, address: Option<&(String, u16)>) -> Option<Value> {
    let name = plugin_config["rate_limits"]["service"]["cluster"].as_str()?;
    let (host, port) = address?;
    let kind = if host.parse::<std::net::IpAddr>().is_ok() { "STATIC" } else { "STRICT_DNS" };
    Some(json!({
        "name": name,
        "type": kind,
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
            {"socket_address": {"address": host, "port_value": port}}}}]}]}
    }))
}

fn window(v: &Value) -> &'static str {
    // The filter validated the name; "month" is 30 days in Switchyard's counting.
    match v.as_str() {
        Some("second") => "second",
        Some("minute") => "minute",
        Some("hour") => "hour",
        Some("day") => "day",
        _ => "month",
    }
}

/// envoyproxy/ratelimit's configuration (as JSON, which is YAML) for `rate_limits`: one chain
/// per limit (`switchyard_limit` = name, then any `subject`), per provider capacity, and the
/// shared cool-down slots. None without `rate_limits`.
pub fn service_config(plugin_config: &Value) -> Option<Value> {
    let rl = plugin_config.get("rate_limits")?;
    let domain = rl["service"]["domain"].as_str().unwrap_or("switchyard");
    let mut descriptors = Vec::new();
    for (name, l) in rl["limits"].as_object().into_iter().flatten() {
        let amount = if let Some(n) = l["requests"].as_u64() {
            n
        } else if let Some(n) = l["tokens"].as_u64() {
            n
        } else {
            (l["spend_usd"].as_f64().unwrap_or(0.0) * SPEND_UNITS_PER_USD).round() as u64
        };
        descriptors.push(json!({"key": LIMIT_KEY, "value": name, "descriptors": [
            {"key": SUBJECT_KEY, "rate_limit": {"unit": window(&l["window"]), "requests_per_unit": amount}}]}));
    }
    for (slug, c) in rl["capacity"].as_object().into_iter().flatten() {
        let mut kinds = Vec::new();
        for (kind, field) in [("requests", "requests_per_minute"), ("tokens", "tokens_per_minute")] {
            if let Some(n) = c[field].as_u64() {
                kinds.push(
                    json!({"key": KIND_KEY, "value": kind, "rate_limit": {"unit": "minute", "requests_per_unit": n}}),
                );
            }
        }
        descriptors.push(json!({"key": CAPACITY_KEY, "value": slug, "descriptors": kinds}));
    }
    if rl["share_cooldowns"].as_bool() == Some(true) {
        descriptors.push(json!({"key": COOLDOWN_KEY, "descriptors": [
            {"key": SLOT_KEY, "rate_limit": {"unit": Window::Hour.name(), "requests_per_unit": COOLDOWN_MARK}}]}));
    }
    Some(json!({"domain": domain, "descriptors": descriptors}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_limit_capacity_and_the_cooldown_slots() {
        let plugin = json!({"rate_limits": {"service": {"cluster": "rls", "domain": "d"},
            "limits": {"spend": {"spend_usd": 1.5, "window": "day"}, "rpm": {"requests": 10, "window": "minute"}},
            "capacity": {"alpha": {"requests_per_minute": 60, "tokens_per_minute": 1000}},
            "share_cooldowns": true}});
        let c = service_config(&plugin).unwrap();
        assert_eq!(c["domain"], "d");
        let d = c["descriptors"].as_array().unwrap();
        assert_eq!(
            d[0],
            json!({"key": "switchyard_limit", "value": "rpm", "descriptors": [
            {"key": "subject", "rate_limit": {"unit": "minute", "requests_per_unit": 10}}]})
        );
        assert_eq!(d[1]["descriptors"][0]["rate_limit"]["requests_per_unit"], 15_000);
        assert_eq!(
            d[2]["descriptors"][1],
            json!({"key": "kind", "value": "tokens", "rate_limit": {"unit": "minute", "requests_per_unit": 1000}})
        );
        assert_eq!(d[3]["descriptors"][0]["rate_limit"], json!({"unit": "hour", "requests_per_unit": 1_000_000}));
        assert!(service_config(&json!({})).is_none());
        let cluster = service_cluster(&plugin, Some(&("127.0.0.1".to_string(), 9))).unwrap();
        assert_eq!((cluster["name"].as_str(), cluster["type"].as_str()), (Some("rls"), Some("STATIC")));
        assert_eq!(service_cluster(&plugin, Some(&("rls.svc".to_string(), 9))).unwrap()["type"], "STRICT_DNS");
        assert!(service_cluster(&plugin, None).is_none());
    }
}
