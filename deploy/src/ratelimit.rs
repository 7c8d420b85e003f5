//! The rate limit service that `rate_limits` counts with: its Envoy cluster (gRPC, so HTTP/2)
//! and its limits in envoyproxy/ratelimit's configuration format, rendered from the same
//! `rate_limits` the filter reads, so a limit is written down once. The descriptors are the
//! filter's own (`switchyard::limits`).

use serde_json::{json, Value};
use switchyard::limits::{
    Kind, Window, CAPACITY_KEY, COOLDOWN_KEY, COOLDOWN_MARK, KIND_KEY, LIMIT_KEY, SLOT_KEY, SUBJECT_KEY,
};

/// The cluster `rate_limits.service.cluster` names, at `address` (an IP: static; a name: DNS).
/// None without `rate_limits` or without an address.
pub fn service_cluster(plugin_config: &Value, address: Option<&(String, u16)>) -> Option<Value> {
    let name = plugin_config["rate_limits"]["service"]["cluster"].as_str()?;
    let (host, port) = address?;
    Some(grpc_cluster(name, host, *port))
}

/// A cluster for a gRPC service at `host:port` (HTTP/2; an IP is STATIC, a name STRICT_DNS):
/// the rate limit service's, the OTLP collector's.
pub fn grpc_cluster(name: &str, host: &str, port: u16) -> Value {
    let kind = if host.parse::<std::net::IpAddr>().is_ok() { "STATIC" } else { "STRICT_DNS" };
    json!({
        "name": name,
        "type": kind,
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}}}},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {"address":
            {"socket_address": {"address": host, "port_value": port}}}}]}]}
    })
}

/// The plugin configuration as the filter loads it (environment keys read as placeholders).
pub fn compile(plugin_config: &Value) -> Result<switchyard::filters::Configured, String> {
    switchyard::filters::configure(plugin_config.to_string().as_bytes(), &|_| Some("render-check".into()))
}

/// envoyproxy/ratelimit's configuration (as JSON, which is YAML) for `rate_limits`, from the
/// limits as the filter compiled them: one chain per limit (`switchyard_limit` = name, then any
/// `subject`), per provider capacity, and the shared cool-down slots. None without
/// `rate_limits` (or with a configuration the filter refuses).
pub fn service_config(plugin_config: &Value) -> Option<Value> {
    let limits = compile(plugin_config).ok()?.limits;
    let service = limits.service.as_ref()?;
    let mut descriptors: Vec<Value> = limits
        .limits
        .iter()
        .map(|l| {
            json!({"key": LIMIT_KEY, "value": l.name, "descriptors": [
                {"key": SUBJECT_KEY, "rate_limit": {"unit": l.window.name(), "requests_per_unit": l.amount}}]})
        })
        .collect();
    for c in &limits.capacity {
        let kinds: Vec<Value> = [(Kind::Requests, c.requests_per_minute), (Kind::Tokens, c.tokens_per_minute)]
            .into_iter()
            .filter_map(|(kind, n)| {
                let n = n?;
                Some(json!({"key": KIND_KEY, "value": kind.name(), "rate_limit": {"unit": Window::Minute.name(), "requests_per_unit": n}}))
            })
            .collect();
        descriptors.push(json!({"key": CAPACITY_KEY, "value": c.provider, "descriptors": kinds}));
    }
    if limits.share_cooldowns {
        descriptors.push(json!({"key": COOLDOWN_KEY, "descriptors": [
            {"key": SLOT_KEY, "rate_limit": {"unit": Window::Hour.name(), "requests_per_unit": COOLDOWN_MARK}}]}));
    }
    Some(json!({"domain": service.domain, "descriptors": descriptors}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_limit_capacity_and_the_cooldown_slots() {
        let plugin = json!({
            "providers": {"alpha": {"cluster": "c_alpha", "authority": "a"}},
            "models": {"m/x": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}},
            "rate_limits": {"service": {"cluster": "rls", "domain": "d"},
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
