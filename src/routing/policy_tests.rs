//! Native tests for operator policies: configuration errors, selection (first match wins, every
//! selector kind, wildcards, the default), the field-by-field intersection, and plans under a
//! policy (what survives, which constraint is named when nothing does).

use std::collections::HashMap;

use super::*;
use crate::answer::errors::ApiError;
use crate::routing::decision::decide_under;
use crate::routing::health::NoHealthData;
use crate::routing::request::{ChatRequest, Sort, SortBy};
use crate::routing::router::plan_under;

/// alpha: ZDR, no retention, tags eu+hipaa, fp8, $1, swedencentral on m/a. beta: no retention,
/// not ZDR, tag eu, fp16, $2, eastus on m/a. gamma: undeclared data policy, tag us, bf16, $3. delta/fast: variant of delta
/// (retains data), int4, $0.5 (+ $0.01 per request). Model `m/b` is served by beta and gamma.
const CATALOG: &str = r#"{
  "providers": {
    "alpha": {"cluster": "c_alpha", "authority": "a", "tags": ["eu", "hipaa"],
              "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
    "beta": {"cluster": "c_beta", "authority": "b", "tags": ["eu"],
             "data_policy": {"retains_data": false, "trains_on_data": false}},
    "gamma": {"cluster": "c_gamma", "authority": "g", "tags": ["us"]},
    "delta": {"cluster": "c_delta", "authority": "d", "data_policy": {"retains_data": true, "trains_on_data": false}}
  },
  "models": {
    "m/a": {"endpoints": [
      {"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}, "quantization": "fp8", "region": "swedencentral"},
      {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}, "quantization": "fp16", "region": "eastus"},
      {"provider": "gamma", "pricing": {"prompt": 3, "completion": 3}, "quantization": "bf16"},
      {"provider": "delta/fast", "pricing": {"prompt": 0.5, "completion": 0.5, "request": 0.01}, "quantization": "int4"}
    ]},
    "m/b": {"endpoints": [
      {"provider": "beta", "pricing": {"prompt": 2, "completion": 2}},
      {"provider": "gamma", "pricing": {"prompt": 3, "completion": 3}}
    ]},
    "other/c": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}
  },
  "routing": {"max_attempts": 6}
}"#;

fn with(extra: &str) -> String {
    format!("{}, {extra}}}", CATALOG.trim_end().trim_end_matches('}'))
}

fn load(extra: &str) -> (Catalog, Policies) {
    let json = with(extra);
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("catalog: {e}"));
    let p = Policies::from_json(json.as_bytes(), &c).unwrap_or_else(|e| panic!("policies: {e}"));
    (c, p)
}

fn policy(body: &str) -> (Catalog, Policy) {
    let (c, ps) = load(&format!(r#""policies": {{"p": {body}}}"#));
    let p = ps.get("p").cloned().unwrap_or_else(|| panic!("no policy"));
    (c, p)
}

fn config_err(extra: &str) -> ConfigError {
    let json = with(extra);
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("catalog: {e}"));
    match Policies::from_json(json.as_bytes(), &c) {
        Ok(_) => panic!("should be rejected: {extra}"),
        Err(e) => e,
    }
}

/// Slugs the plan attempts, in order (deterministic: `rand` always 0).
fn slugs(c: &Catalog, p: Option<&Policy>, body: &str) -> Result<Vec<String>, ApiError> {
    let req = ChatRequest::parse(body.as_bytes())?;
    let plan = plan_under(c, &req, p, &NoHealthData, &mut || 0.0)?;
    Ok(plan
        .attempts
        .iter()
        .filter_map(|a| c.endpoint(a.endpoint))
        .map(|e| format!("{}@{}", e.slug, c.models.get(e.model).map(|m| m.id.as_str()).unwrap_or("")))
        .collect())
}

fn ok(c: &Catalog, p: &Policy, body: &str) -> Vec<String> {
    slugs(c, Some(p), body).unwrap_or_else(|e| panic!("{body}: {}", e.body()))
}

/// The constraint a 404 names (or the code of another error).
fn refused(c: &Catalog, p: &Policy, body: &str) -> (u32, String) {
    match slugs(c, Some(p), body) {
        Ok(s) => panic!("{body} should be refused, planned {s:?}"),
        Err(e) => {
            let what = e.metadata.get("constraint").and_then(|v| v.as_str()).unwrap_or(e.code).to_string();
            (e.status, what)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

#[test]
fn compiles_every_field() {
    let (c, p) = policy(
        r#"{"only": ["alpha", "delta/fast"], "ignore": ["gamma"], "allowed_models": ["m/*"],
            "allow_fallbacks": false, "data_collection": "deny", "zdr": true, "quantizations": ["fp8"],
            "max_price": {"prompt": 2, "completion": 3, "request": 0.1, "image": 0}, "max_attempts": 9,
            "require_tags": ["eu"], "request_provider": "narrow_only"}"#,
    );
    let l = &p.limits;
    assert_eq!(l.only, Some(vec!["alpha".to_string(), "delta/fast".to_string()]));
    assert_eq!(l.ignore, vec!["gamma"]);
    assert!(!l.allow_fallbacks && l.data_collection_deny && l.zdr);
    assert_eq!(l.quantizations, Some(vec![Quantization::Fp8]));
    assert_eq!(
        l.max_price,
        MaxPrice { prompt: Some(2.0), completion: Some(3.0), request: Some(0.1), image: Some(0.0) }
    );
    assert_eq!(p.allowed_models, Some(vec!["m/*".to_string()]));
    assert_eq!(p.require_tags, vec!["eu"]);
    assert_eq!(p.max_attempts, Some(6), "capped at routing.max_attempts");
    assert_eq!(p.request_provider, RequestProvider::NarrowOnly);
    assert_eq!(
        c.providers.iter().find(|x| x.slug == "alpha").map(|x| x.tags.clone()),
        Some(vec!["eu".into(), "hipaa".into()])
    );
    // Defaults: nothing constrained, the request honoured.
    let (_, p) = policy("{}");
    assert_eq!(p.limits, ProviderPrefs::default());
    assert_eq!(p.request_provider, RequestProvider::Honor);
    assert!(p.allowed_models.is_none() && p.max_attempts.is_none());
}

#[test]
fn config_errors_name_the_field() {
    let cases = [
        (r#""policies": {"p": {"only": ["alhpa"]}}"#, r#"policies["p"].only[0]"#),
        (r#""policies": {"p": {"ignore": ["nobody"]}}"#, r#"policies["p"].ignore[0]"#),
        (r#""policies": {"p": {"only": ["delta/slow"]}}"#, r#"policies["p"].only[0]"#),
        (r#""policies": {"p": {"data_collection": "maybe"}}"#, r#"policies["p"].data_collection"#),
        (r#""policies": {"p": {"quantizations": ["fp9"]}}"#, r#"policies["p"].quantizations[0]"#),
        (r#""policies": {"p": {"max_price": {"prompt": -1}}}"#, r#"policies["p"].max_price.prompt"#),
        (r#""policies": {"p": {"max_attempts": 0}}"#, r#"policies["p"].max_attempts"#),
        (r#""policies": {"p": {"require_tags": [""]}}"#, r#"policies["p"].require_tags[0]"#),
        (r#""policies": {"p": {"request_provider": "sometimes"}}"#, r#"policies["p"].request_provider"#),
        (r#""policies": {"p": {"allowed_models": [""]}}"#, r#"policies["p"].allowed_models[0]"#),
        (r#""policies": {"a b": {}}"#, r#"policies["a b"]"#),
        (r#""policies": {"p": {}}, "policy_selection": {"default": "q"}"#, "policy_selection.default"),
        (
            r#""policies": {"p": {}}, "policy_selection": {"rules": [{"policy": "q", "route": "x"}]}"#,
            "policy_selection.rules[0].policy",
        ),
        (r#""policies": {"p": {}}, "policy_selection": {"rules": [{"policy": "p"}]}"#, "policy_selection.rules[0]"),
        (
            r#""policies": {"p": {}}, "policy_selection": {"rules": [{"policy": "p", "route": "x", "peer_uri_san": "y"}]}"#,
            "policy_selection.rules[0]",
        ),
        (
            r#""policies": {"p": {}}, "policy_selection": {"rules": [{"policy": "p", "header": {"name": "x-tenant", "value": "a"}}]}"#,
            "policy_selection.rules[0].header.name",
        ),
        (
            r#""policies": {"p": {}}, "policy_selection": {"rules": [{"policy": "p", "route": ""}]}"#,
            "policy_selection.rules[0].route",
        ),
    ];
    for (extra, field) in cases {
        let e = config_err(extra);
        assert_eq!(e.field, field, "{extra}: {e}");
    }
    let e = config_err(r#""policies": {"p": {"zdr": true, "colour": 1}}"#);
    assert!(e.reason.contains("unknown field `colour`"), "{e}");
    // The catalog parser accepts the policy members (and still rejects other unknown ones).
    assert!(Catalog::from_json(with(r#""policies": {}, "policy_selection": {}"#).as_bytes(), &|_| None).is_ok());
    assert!(Catalog::from_json(with(r#""policy": {}"#).as_bytes(), &|_| None).is_err());
    // A provider tag must be a word.
    let bad_tag = CATALOG.replace(r#""tags": ["us"]"#, r#""tags": ["u s"]"#);
    let e = Catalog::from_json(bad_tag.as_bytes(), &|_| None).err().unwrap_or_else(|| panic!("accepted"));
    assert_eq!(e.field, r#"providers["gamma"].tags[0]"#);
}

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Facts {
    route: Option<String>,
    san: Option<String>,
    metadata: HashMap<String, String>,
    headers: HashMap<String, String>,
    /// What selection asked for, in order (laziness and rule order are observable).
    asked: Vec<String>,
}

impl CallerFacts for Facts {
    fn route_policy(&mut self) -> Option<String> {
        self.asked.push("route".into());
        self.route.clone()
    }
    fn peer_uri_san(&mut self) -> Option<String> {
        self.asked.push("san".into());
        self.san.clone()
    }
    fn dynamic_metadata(&mut self, namespace: &str, path: &[String]) -> Option<String> {
        let key = format!("{namespace}/{}", path.join("/"));
        self.asked.push(key.clone());
        self.metadata.get(&key).cloned()
    }
    fn header(&mut self, name: &str) -> Option<String> {
        self.asked.push(format!("header:{name}"));
        self.headers.get(name).cloned()
    }
}

const SELECTION: &str = r#""policies": {"finance": {"zdr": true}, "reports": {"only": ["beta"]}, "partner": {},
    "tenant": {}, "open": {}, "locked": {"allowed_models": []}},
  "policy_selection": {
    "trusted_headers": ["X-Tenant"],
    "rules": [
      {"policy": "finance", "route": "finance"},
      {"policy": "reports", "peer_uri_san": "spiffe://cluster.local/ns/finance/sa/reports"},
      {"policy": "finance", "peer_uri_san": "spiffe://cluster.local/ns/finance/*"},
      {"policy": "partner", "jwt_claim": {"claim": ["org", "id"], "value": "partner-*"}},
      {"policy": "tenant", "header": {"name": "x-tenant", "value": "acme"}},
      {"policy": "open", "route": "*"}
    ],
    "default": "locked"
  }"#;

fn selected(ps: &Policies, facts: &mut Facts) -> (String, &'static str) {
    let s = ps.select(facts).unwrap_or_else(|| panic!("nothing selected"));
    (s.policy.name.clone(), s.by)
}

#[test]
fn selection_first_match_wins_in_configured_order() {
    let (_, ps) = load(SELECTION);
    // Route metadata beats an identity listed later.
    let mut f = Facts {
        route: Some("finance".into()),
        san: Some("spiffe://cluster.local/ns/finance/sa/reports".into()),
        ..Facts::default()
    };
    assert_eq!(selected(&ps, &mut f), ("finance".into(), "route"));
    assert_eq!(f.asked, vec!["route"], "later selectors are not even read");
    // Exact SAN before the wildcard SAN of the same namespace.
    let mut f = Facts { san: Some("spiffe://cluster.local/ns/finance/sa/reports".into()), ..Facts::default() };
    assert_eq!(selected(&ps, &mut f), ("reports".into(), "peer_uri_san"));
    let mut f = Facts { san: Some("spiffe://cluster.local/ns/finance/sa/batch".into()), ..Facts::default() };
    assert_eq!(selected(&ps, &mut f), ("finance".into(), "peer_uri_san"));
    // Another namespace does not match the finance wildcard.
    let mut f = Facts { san: Some("spiffe://cluster.local/ns/marketing/sa/web".into()), ..Facts::default() };
    assert_eq!(selected(&ps, &mut f), ("locked".into(), "default"));
    // A nested JWT claim in jwt_authn's dynamic metadata.
    let mut f = Facts::default();
    f.metadata.insert("envoy.filters.http.jwt_authn/jwt_payload/org/id".into(), "partner-42".into());
    assert_eq!(selected(&ps, &mut f), ("partner".into(), "jwt_claim"));
    // The trusted header (names are matched lower-case).
    let mut f = Facts::default();
    f.headers.insert("x-tenant".into(), "acme".into());
    assert_eq!(selected(&ps, &mut f), ("tenant".into(), "header"));
    let mut f = Facts::default();
    f.headers.insert("x-tenant".into(), "acme-evil".into());
    assert_eq!(selected(&ps, &mut f), ("locked".into(), "default"));
    // Any route label falls to the catch-all rule; nothing at all falls to the default.
    let mut f = Facts { route: Some("misc".into()), ..Facts::default() };
    assert_eq!(selected(&ps, &mut f), ("open".into(), "route"));
    let mut f = Facts::default();
    assert_eq!(selected(&ps, &mut f), ("locked".into(), "default"));
    assert_eq!(
        f.asked,
        vec!["route", "san", "san", "envoy.filters.http.jwt_authn/jwt_payload/org/id", "header:x-tenant", "route"]
    );
}

#[test]
fn without_selection_no_policy_applies() {
    let (_, ps) = load(r#""policies": {"p": {"zdr": true}}"#);
    assert!(!ps.is_empty());
    assert!(ps.select(&mut Facts { route: Some("p".into()), ..Facts::default() }).is_none());
    let (_, ps) = load(r#""policies": {}"#);
    assert!(ps.is_empty());
}

#[test]
fn glob_patterns() {
    assert!(glob("spiffe://cluster.local/ns/finance/*", "spiffe://cluster.local/ns/finance/sa/x"));
    assert!(!glob("spiffe://cluster.local/ns/finance/*", "spiffe://cluster.local/ns/finance"));
    assert!(!glob("spiffe://cluster.local/ns/finance/*", "spiffe://cluster.local/ns/financex/sa/x"));
    assert!(glob("*", ""));
    assert!(glob("a*b*c", "aXXbYYbc"));
    assert!(!glob("a*b*c", "aXXbYYb"));
    assert!(glob("anthropic/*", "anthropic/claude"));
    assert!(!glob("anthropic/*", "openai/gpt"));
    assert!(glob("exact", "exact") && !glob("exact", "exact2") && !glob("exact2", "exact"));
    assert!(glob("**a", "a") && glob("a**", "a"));
    // Linear in the value: a long hostile value against a many-star pattern ends.
    let long = "a".repeat(20_000);
    assert!(!glob("*a*a*a*b", &long));
}

// ---------------------------------------------------------------------------------------------
// Intersection, field by field (the pure function)
// ---------------------------------------------------------------------------------------------

fn prefs(provider: &str) -> ProviderPrefs {
    let body = format!(r#"{{"model": "m/a", "provider": {provider}}}"#);
    ChatRequest::parse(body.as_bytes()).map(|r| r.provider).unwrap_or_else(|e| panic!("{}", e.body()))
}

#[test]
fn narrow_only_is_the_intersection() {
    let (_, p) = policy(r#"{"only": ["alpha", "delta"]}"#);
    assert_eq!(p.narrow(&prefs("{}")).only, Some(vec!["alpha".into(), "delta".into()]), "unset: the ceiling");
    assert_eq!(p.narrow(&prefs(r#"{"only": ["alpha", "beta"]}"#)).only, Some(vec!["alpha".into()]));
    assert_eq!(p.narrow(&prefs(r#"{"only": ["beta"]}"#)).only, Some(vec![]), "outside the ceiling: nothing");
    assert_eq!(p.narrow(&prefs(r#"{"only": ["delta/fast"]}"#)).only, Some(vec!["delta/fast".into()]));
    let (_, p) = policy(r#"{"only": ["delta/fast"]}"#);
    assert_eq!(p.narrow(&prefs(r#"{"only": ["delta"]}"#)).only, Some(vec!["delta/fast".into()]));
    assert_eq!(intersect_slugs(&["d/x".into()], &["d/y".into()]), Vec::<String>::new());
    let (_, p) = policy("{}");
    assert_eq!(p.narrow(&prefs(r#"{"only": ["beta"]}"#)).only, Some(vec!["beta".into()]), "no ceiling: the request");
}

#[test]
fn narrow_cuts_a_preferred_order_to_the_policy() {
    let (_, p) = policy(r#"{"only": ["alpha", "delta/fast"], "ignore": ["alpha"]}"#);
    assert_eq!(
        p.narrow(&prefs(r#"{"order": ["beta", "delta", "alpha", "delta/fast"]}"#)).order,
        vec!["delta", "delta/fast"],
        "slug level: `delta` may still reach delta/fast (the hard filters decide per endpoint)"
    );
    let (_, p) = policy(r#"{"only": ["alpha", "delta"]}"#);
    assert_eq!(p.narrow(&prefs(r#"{"order": ["delta/fast", "beta"]}"#)).order, vec!["delta/fast"]);
    // A restriction (the caller's own allow_fallbacks: false) is kept whole.
    assert_eq!(p.narrow(&prefs(r#"{"order": ["beta"], "allow_fallbacks": false}"#)).order, vec!["beta"]);
    assert!(p.permits_slug("delta/fast") && p.permits_slug("alpha") && !p.permits_slug("beta"));
}

#[test]
fn narrow_ignore_is_the_union() {
    let (_, p) = policy(r#"{"ignore": ["gamma"]}"#);
    assert_eq!(p.narrow(&prefs("{}")).ignore, vec!["gamma"]);
    assert_eq!(p.narrow(&prefs(r#"{"ignore": ["beta"]}"#)).ignore, vec!["beta", "gamma"]);
}

#[test]
fn narrow_forced_flags_stay_forced() {
    let (_, p) = policy(r#"{"allow_fallbacks": false, "data_collection": "deny", "zdr": true}"#);
    let n = p.narrow(&prefs(r#"{"allow_fallbacks": true, "data_collection": "allow", "zdr": false}"#));
    assert!(!n.allow_fallbacks && n.data_collection_deny && n.zdr);
    // A policy that forces nothing keeps the request's own choice.
    let (_, p) = policy("{}");
    let n = p.narrow(&prefs(r#"{"allow_fallbacks": false, "data_collection": "deny", "zdr": true}"#));
    assert!(!n.allow_fallbacks && n.data_collection_deny && n.zdr);
    let n = p.narrow(&prefs("{}"));
    assert!(n.allow_fallbacks && !n.data_collection_deny && !n.zdr);
}

#[test]
fn narrow_quantizations_and_max_price() {
    let (_, p) = policy(r#"{"quantizations": ["fp8", "fp16"], "max_price": {"prompt": 2, "request": 0.5}}"#);
    let n = p.narrow(&prefs(
        r#"{"quantizations": ["fp16", "int4"], "max_price": {"prompt": 5, "completion": 1, "request": 0.1}}"#,
    ));
    assert_eq!(n.quantizations, Some(vec![Quantization::Fp16]));
    assert_eq!(n.max_price, MaxPrice { prompt: Some(2.0), completion: Some(1.0), request: Some(0.1), image: None });
    let n = p.narrow(&prefs("{}"));
    assert_eq!(n.quantizations, Some(vec![Quantization::Fp8, Quantization::Fp16]));
    assert_eq!(n.max_price, MaxPrice { prompt: Some(2.0), request: Some(0.5), ..MaxPrice::default() });
}

#[test]
fn narrow_request_provider_modes() {
    let asked = prefs(
        r#"{"order": ["beta"], "sort": "latency", "only": ["alpha", "beta"], "preferred_max_latency": 1,
            "preferred_min_throughput": 10, "require_parameters": true, "enforce_distillable_text": true}"#,
    );
    let (_, honor) = policy(r#"{"only": ["alpha", "beta", "gamma"]}"#);
    let n = honor.narrow(&asked);
    assert_eq!(n.order, vec!["beta"]);
    assert_eq!(n.sort, Some(Sort { by: SortBy::Latency, partition: crate::routing::request::Partition::Model }));
    assert_eq!(n.only, Some(vec!["alpha".into(), "beta".into()]));
    let (_, narrow) = policy(r#"{"only": ["alpha", "beta", "gamma"], "request_provider": "narrow_only"}"#);
    let n = narrow.narrow(&asked);
    assert!(n.order.is_empty() && n.sort.is_none(), "steering is dropped");
    assert!(n.preferred_max_latency.is_none() && n.preferred_min_throughput.is_none());
    assert_eq!(n.only, Some(vec!["alpha".into(), "beta".into()]), "narrowing is kept");
    assert!(n.require_parameters && n.enforce_distillable_text);
    let (_, ignore) = policy(r#"{"only": ["alpha", "beta", "gamma"], "request_provider": "ignore"}"#);
    let n = ignore.narrow(&asked);
    assert_eq!(
        n,
        ProviderPrefs { only: Some(vec!["alpha".into(), "beta".into(), "gamma".into()]), ..ProviderPrefs::default() }
    );
    assert!(!ignore.honors_pins() && narrow.honors_pins() && honor.honors_pins());
}

#[test]
fn allowed_models_patterns() {
    let (_, p) = policy(r#"{"allowed_models": ["m/*", "other/c"]}"#);
    assert!(p.allows_model("m/a") && p.allows_model("m/b") && p.allows_model("other/c"));
    assert!(!p.allows_model("other/d") && !p.allows_model("auto"));
    let (_, p) = policy(r#"{"allowed_models": []}"#);
    assert!(!p.allows_model("m/a"), "an empty list allows nothing");
    let (_, p) = policy("{}");
    assert!(p.allows_model("anything"));
}

// ---------------------------------------------------------------------------------------------
// Plans under a policy: every field narrows, nothing widens, the 404/403 names the policy
// ---------------------------------------------------------------------------------------------

const A: &str = r#"{"model": "m/a""#;

fn body(rest: &str) -> String {
    format!("{A}{rest}}}")
}

#[test]
fn only_ceiling_cuts_request_only_and_order() {
    let (c, p) = policy(r#"{"only": ["alpha", "beta"]}"#);
    assert_eq!(ok(&c, &p, &body("")), vec!["alpha@m/a", "beta@m/a"]);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"only": ["beta", "gamma"]}"#)), vec!["beta@m/a"]);
    assert_eq!(refused(&c, &p, &body(r#", "provider": {"only": ["gamma"]}"#)), (404, "policy:p.only".into()));
    // `order` outside the ceiling is skipped; the rest stays inside it.
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"order": ["gamma", "beta"]}"#)), vec!["beta@m/a", "alpha@m/a"]);
    assert_eq!(
        refused(&c, &p, &body(r#", "provider": {"order": ["gamma"], "allow_fallbacks": false}"#)),
        (404, "policy:p.only".into())
    );
    // A request's own narrowing that empties the set is the request's.
    assert_eq!(
        refused(&c, &p, &body(r#", "provider": {"only": ["alpha"], "ignore": ["alpha"]}"#)),
        (404, "ignore".into())
    );
}

#[test]
fn ignore_floor_cannot_be_lifted() {
    let (c, p) = policy(r#"{"ignore": ["alpha", "delta"]}"#);
    assert_eq!(ok(&c, &p, &body("")), vec!["beta@m/a", "gamma@m/a"]);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"order": ["alpha", "delta"]}"#)), vec!["beta@m/a", "gamma@m/a"]);
    assert_eq!(refused(&c, &p, &body(r#", "provider": {"only": ["alpha"]}"#)), (404, "policy:p.ignore".into()));
    let (c, p) = policy(r#"{"ignore": ["alpha", "beta", "gamma", "delta"]}"#);
    assert_eq!(refused(&c, &p, &body("")), (404, "policy:p.ignore".into()));
}

#[test]
fn forced_allow_fallbacks_false_keeps_one_endpoint() {
    let (c, p) = policy(r#"{"allow_fallbacks": false, "only": ["alpha", "beta", "gamma"]}"#);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"allow_fallbacks": true, "sort": "price"}"#)), vec!["alpha@m/a"]);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"order": ["gamma", "beta"]}"#)), vec!["gamma@m/a", "beta@m/a"]);
    // An order outside the ceiling is cut; nothing left of it: the first endpoint only.
    let (c, p) = policy(r#"{"allow_fallbacks": false, "only": ["alpha", "beta"]}"#);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"order": ["gamma", "delta"]}"#)), vec!["alpha@m/a"]);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"order": ["gamma", "beta"]}"#)), vec!["beta@m/a"]);
    // The caller's own allow_fallbacks: false makes its order a restriction: held, then refused.
    assert_eq!(
        refused(&c, &p, &body(r#", "provider": {"order": ["gamma"], "allow_fallbacks": false}"#)),
        (404, "policy:p.only".into())
    );
    // Model fallbacks stay on (each model keeps its first endpoint), inside the policy.
    assert_eq!(
        ok(&c, &p, &body(r#", "models": ["m/b"], "provider": {"sort": "price"}"#)),
        vec!["alpha@m/a", "beta@m/b"]
    );
}

#[test]
fn forced_data_collection_and_zdr() {
    let (c, p) = policy(r#"{"data_collection": "deny"}"#);
    assert_eq!(
        ok(&c, &p, &body(r#", "provider": {"data_collection": "allow", "sort": "price"}"#)),
        vec!["alpha@m/a", "beta@m/a"]
    );
    let (c, p) = policy(r#"{"zdr": true}"#);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"zdr": false}"#)), vec!["alpha@m/a"]);
    assert_eq!(refused(&c, &p, r#"{"model": "m/b"}"#), (404, "policy:p.zdr".into()));
    assert_eq!(
        refused(&c, &p, &body(r#", "provider": {"order": ["beta"], "allow_fallbacks": false}"#)),
        (404, "policy:p.zdr".into())
    );
}

#[test]
fn quantizations_max_price_and_tags() {
    let (c, p) = policy(r#"{"quantizations": ["fp8", "fp16", "int4"]}"#);
    assert_eq!(
        ok(&c, &p, &body(r#", "provider": {"sort": "price"}"#)),
        vec!["alpha@m/a", "beta@m/a", "delta/fast@m/a"]
    );
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"quantizations": ["fp16", "bf16"]}"#)), vec!["beta@m/a"]);
    assert_eq!(
        refused(&c, &p, &body(r#", "provider": {"quantizations": ["bf16"]}"#)),
        (404, "policy:p.quantizations".into())
    );
    let (c, p) = policy(r#"{"max_price": {"prompt": 2.5, "request": 0.001}}"#);
    assert_eq!(
        ok(&c, &p, &body(r#", "provider": {"sort": "price", "max_price": {"prompt": 100}}"#)),
        vec!["alpha@m/a", "beta@m/a"]
    );
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"max_price": {"prompt": 1.5}}"#)), vec!["alpha@m/a"]);
    assert_eq!(refused(&c, &p, &body(r#", "provider": {"only": ["gamma"]}"#)), (404, "policy:p.max_price".into()));
    let (c, p) = policy(r#"{"require_tags": ["eu"]}"#);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"sort": "price"}"#)), vec!["alpha@m/a", "beta@m/a"]);
    let (c, p) = policy(r#"{"require_tags": ["eu", "hipaa"]}"#);
    assert_eq!(ok(&c, &p, &body("")), vec!["alpha@m/a"]);
    assert_eq!(refused(&c, &p, r#"{"model": "m/b"}"#), (404, "policy:p.require_tags".into()));
}

#[test]
fn models_and_pins_stay_inside_allowed_models_and_the_ceiling() {
    let (c, p) = policy(r#"{"allowed_models": ["m/*"], "only": ["alpha", "beta"]}"#);
    assert_eq!(refused(&c, &p, r#"{"model": "other/c"}"#), (403, "policy:p.allowed_models".into()));
    let req = ChatRequest::parse(br#"{"model": "m/a", "models": ["m/b", "other/c"]}"#)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    let e = plan_under(&c, &req, Some(&p), &NoHealthData, &mut || 0.0).err().unwrap_or_else(|| panic!("allowed"));
    assert_eq!((e.status, e.code, e.param.as_deref()), (403, "policy_denied", Some("models[1]")));
    assert_eq!(e.metadata.get("policy").and_then(|v| v.as_str()), Some("p"));
    // A pinned id names a catalog model: the pattern is checked on it, and the pin on the ceiling.
    assert_eq!(refused(&c, &p, r#"{"model": "alpha/other/c"}"#), (403, "policy:p.allowed_models".into()));
    assert_eq!(ok(&c, &p, r#"{"model": "beta/m/a"}"#), vec!["beta@m/a"]);
    assert_eq!(refused(&c, &p, r#"{"model": "gamma/m/a"}"#), (404, "policy:p.only".into()));
    // Suffixes are checked on the model they qualify.
    assert_eq!(ok(&c, &p, r#"{"model": "m/a:floor"}"#), vec!["alpha@m/a", "beta@m/a"]);
    // Under `request_provider: ignore` a pin is just the model.
    let (c, p) = policy(r#"{"only": ["alpha", "beta"], "request_provider": "ignore"}"#);
    assert_eq!(ok(&c, &p, r#"{"model": "gamma/m/a", "provider": {"sort": "price"}}"#), vec!["alpha@m/a", "beta@m/a"]);
}

#[test]
fn request_provider_modes_in_plans() {
    let ask = r#", "provider": {"order": ["beta", "alpha"], "only": ["alpha", "beta"]}"#;
    let (c, p) = policy(r#"{"only": ["alpha", "beta", "gamma"]}"#);
    assert_eq!(ok(&c, &p, &body(ask)), vec!["beta@m/a", "alpha@m/a"], "honor: order counts");
    let (c, p) = policy(r#"{"only": ["alpha", "beta", "gamma"], "request_provider": "narrow_only"}"#);
    assert_eq!(ok(&c, &p, &body(ask)), vec!["alpha@m/a", "beta@m/a"], "narrow_only: cheapest first, only kept");
    let (c, p) = policy(r#"{"only": ["alpha", "beta", "gamma"], "request_provider": "ignore"}"#);
    assert_eq!(ok(&c, &p, &body(ask)), vec!["alpha@m/a", "beta@m/a", "gamma@m/a"], "ignore: the policy alone");
}

#[test]
fn decisions_carry_the_policy_and_its_attempt_budget() {
    let (c, p) = policy(r#"{"max_attempts": 2}"#);
    let d = decide_under(&c, Some(&p), br#"{"model": "m/a"}"#, &NoHealthData, &mut || 0.0)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(d.policy.as_deref(), Some("p"));
    assert_eq!(d.max_attempts, 2);
    let d = decide_under(&c, None, br#"{"model": "m/a"}"#, &NoHealthData, &mut || 0.0)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!((d.policy, d.max_attempts), (None, 6));
    let e = decide_under(
        &c,
        Some(&p),
        br#"{"model": "m/a", "provider": {"only": ["nobody"]}}"#,
        &NoHealthData,
        &mut || 0.0,
    )
    .err()
    .unwrap_or_else(|| panic!("planned"));
    assert_eq!(e.metadata.get("policy").and_then(|v| v.as_str()), Some("p"), "404s name the policy too");
}

/// Every plan under every combination stays inside the policy: a brute-force check of the
/// guarantee over policies and requests built from the same small vocabulary.
#[test]
fn no_plan_ever_leaves_its_policy() {
    let provider_lists = ["[]", r#"["alpha"]"#, r#"["beta", "gamma"]"#, r#"["delta"]"#, r#"["delta/fast", "alpha"]"#];
    let policies = [
        r#"{"only": ["alpha", "beta"]}"#,
        r#"{"ignore": ["beta"], "zdr": true}"#,
        r#"{"data_collection": "deny", "allow_fallbacks": false}"#,
        r#"{"quantizations": ["fp16", "int4"], "max_price": {"prompt": 2}}"#,
        r#"{"require_tags": ["eu"], "request_provider": "narrow_only"}"#,
        r#"{"only": ["gamma", "delta"], "request_provider": "ignore", "allowed_models": ["m/a"]}"#,
    ];
    let mut checked = 0;
    for pol in policies {
        let (c, p) = policy(pol);
        for only in provider_lists {
            for order in provider_lists {
                for (fb, dc, zdr) in [(true, "allow", false), (false, "allow", false), (true, "deny", true)] {
                    for model in ["m/a", "m/b", "gamma/m/a", "alpha/m/b"] {
                        let b = format!(
                            r#"{{"model": "{model}", "models": ["m/b", "other/c"], "provider": {{"only": {only}, "order": {order},
                            "allow_fallbacks": {fb}, "data_collection": "{dc}", "zdr": {zdr}}}}}"#
                        );
                        if let Ok(planned) = slugs(&c, Some(&p), &b) {
                            for s in &planned {
                                let (slug, model_id) = s.split_once('@').unwrap_or((s, ""));
                                let ep = c.endpoints.iter().find(|e| e.slug == slug).unwrap_or_else(|| panic!("{s}"));
                                let pr = c.provider_of(ep).unwrap_or_else(|| panic!("{s}"));
                                let l = &p.limits;
                                assert!(
                                    l.only.as_ref().is_none_or(|o| o.iter().any(|x| ep.matches_slug(x))),
                                    "{pol} {b}: {s}"
                                );
                                assert!(!l.ignore.iter().any(|x| ep.matches_slug(x)), "{pol} {b}: {s}");
                                assert!(!l.zdr || pr.zdr, "{pol} {b}: {s}");
                                assert!(
                                    !l.data_collection_deny || (!pr.retains_data && !pr.trains_on_data),
                                    "{pol} {b}: {s}"
                                );
                                assert!(p.require_tags.iter().all(|t| pr.tags.contains(t)), "{pol} {b}: {s}");
                                assert!(p.allows_model(model_id), "{pol} {b}: {s}");
                            }
                            if !p.limits.allow_fallbacks {
                                let models: Vec<&str> =
                                    planned.iter().filter_map(|s| s.split_once('@')).map(|x| x.1).collect();
                                let mut dedup = models.clone();
                                dedup.dedup();
                                assert_eq!(models, dedup, "{pol} {b}: one endpoint per model");
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 100, "too few plans to mean anything: {checked}");
}

/// `model: auto` picks only models the policy allows (the auto router's own bound).
#[test]
fn auto_picks_stay_inside_allowed_models() {
    let tiered = CATALOG
        .replace(r#""m/a": {"endpoints""#, r#""m/a": {"cost_tier": "low", "endpoints""#)
        .replace(r#""other/c": {"endpoints""#, r#""other/c": {"cost_tier": "low", "endpoints""#);
    let json = format!(
        r#"{}, "auto": {{"tasks": {{"chat": {{"m/a": 1.0, "other/c": 0.9}}}}}},
           "policies": {{"p": {{"allowed_models": ["other/*"]}}, "none": {{"allowed_models": ["nothing/*"]}}}}}}"#,
        tiered.trim_end().trim_end_matches('}')
    );
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("catalog: {e}"));
    let ps = Policies::from_json(json.as_bytes(), &c).unwrap_or_else(|e| panic!("policies: {e}"));
    let body = r#"{"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}"#;
    let open = slugs(&c, None, body).unwrap_or_else(|e| panic!("{}", e.body()));
    assert!(open.first().is_some_and(|s| s.ends_with("@m/a")), "without a policy the top pick: {open:?}");
    let p = ps.get("p").unwrap_or_else(|| panic!("p"));
    let planned = ok(&c, p, body);
    assert!(!planned.is_empty() && planned.iter().all(|s| s.ends_with("@other/c")), "{planned:?}");
    let none = ps.get("none").unwrap_or_else(|| panic!("none"));
    assert_eq!(refused(&c, none, body), (404, "policy:none.allowed_models".into()));
}

// The model listings show a caller only what its policy lets it reach: every ceiling,
// require_tags and allowed_models, the same predicates routing applies.
#[test]
fn listings_show_only_what_the_policy_allows() {
    use crate::answer::listing::{answer, Listing};
    let (c, p) =
        policy(r#"{"zdr": true, "require_tags": ["eu"], "allowed_models": ["m/*"], "max_price": {"prompt": 2}}"#);
    let allowed = |e: &crate::config::Endpoint| crate::routing::router::policy_allows(&p, &c, e);
    let visible: Vec<String> = c.endpoints.iter().filter(|e| allowed(e)).map(|e| e.slug.clone()).collect();
    assert_eq!(visible, vec!["alpha".to_string()], "only alpha is ZDR, tagged eu and within the price");
    let models: serde_json::Value = serde_json::from_str(
        &answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Models, &NoHealthData, &allowed).unwrap(),
    )
    .unwrap();
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    // m/b has no allowed endpoint; other/c is outside allowed_models.
    assert_eq!(ids, vec!["m/a"]);
    let eps: serde_json::Value = serde_json::from_str(
        &answer(&c, &crate::routing::presets::NO_PRESETS, &Listing::Endpoints("m/a".into()), &NoHealthData, &allowed)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(eps["data"]["endpoints"].as_array().unwrap().len(), 1);
    let hidden = answer(
        &c,
        &crate::routing::presets::NO_PRESETS,
        &Listing::Endpoints("other/c".into()),
        &NoHealthData,
        &allowed,
    )
    .unwrap_err();
    assert_eq!(hidden.status, 404);
}

// Operator policies and the default policy apply the same on every surface and to endpoints
// serving a request translated; refusals come in the caller's shape.
#[test]
fn policies_and_routing_cost_apply_on_the_anthropic_and_google_surfaces() {
    use crate::api::{Api, GoogleMethod, Surface};
    use crate::routing::decision::decide_for;
    let json = r#"{
      "providers": {
        "alpha": {"cluster": "c_alpha", "authority": "a", "apis": {"anthropic": {}, "google": {}, "openai": {}},
                  "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}},
        "beta": {"cluster": "c_beta", "authority": "b", "apis": {"anthropic": {}, "google": {}}},
        "gamma": {"cluster": "c_gamma", "authority": "g",
                  "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}}
      },
      "models": {
        "m/a": {"endpoints": [
          {"provider": "gamma", "pricing": {"prompt": 0.1, "completion": 0.1}},
          {"provider": "beta", "pricing": {"prompt": 1, "completion": 1}},
          {"provider": "alpha", "pricing": {"prompt": 2, "completion": 2}}]},
        "m/secret": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}
      },
      "policies": {"p": {"zdr": true, "allowed_models": ["m/a"]}}
    }"#;
    let c = Catalog::from_json(json.as_bytes(), &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let ps = Policies::from_json(json.as_bytes(), &c).unwrap_or_else(|e| panic!("{e}"));
    let p = ps.get("p").cloned().unwrap_or_else(|| panic!("no policy"));
    let anthropic = Surface::of(Api::Anthropic);
    let google = |m: &str| Surface {
        path_model: Some(m.into()),
        method: Some(GoogleMethod::Generate),
        ..Surface::of(Api::Google)
    };
    let decide = |s: &Surface, pol: Option<&Policy>, body: &str| {
        decide_for(&c, pol, &crate::routing::presets::NO_PRESETS, s, None, body.as_bytes(), &NoHealthData, &mut || 0.0)
    };
    let slug = |d: &crate::routing::decision::Decision| {
        d.plan.attempts.iter().filter_map(|a| c.endpoint(a.endpoint)).map(|e| e.slug.clone()).collect::<Vec<_>>()
    };
    // Without a policy: the default policy (routing_cost) orders every endpoint (gamma, OpenAI
    // only, serves the Anthropic caller translated).
    let d = decide(&anthropic, None, r#"{"model": "m/a", "max_tokens": 1, "messages": []}"#)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(d.plan.strategy.to_string(), "routing_cost");
    let mut got = slug(&d);
    got.sort();
    assert_eq!(got, vec!["alpha", "beta", "gamma"]);
    // Under the ZDR policy beta is out, on both surfaces.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let d = decide(&anthropic, Some(&p), r#"{"model": "m/a", "max_tokens": 1, "messages": []}"#)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!((sorted(slug(&d)), d.policy.as_deref()), (vec!["alpha".to_string(), "gamma".to_string()], Some("p")));
    let d = decide(&google("m/a"), Some(&p), r#"{"contents": []}"#).unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(sorted(slug(&d)), vec!["alpha", "gamma"]);
    // A request `only` outside the ceiling: the policy is named, in Anthropic's shape.
    let e = decide(
        &anthropic,
        Some(&p),
        r#"{"model": "m/a", "max_tokens": 1, "messages": [], "provider": {"only": ["beta"]}}"#,
    )
    .err()
    .unwrap_or_else(|| panic!("planned"));
    assert_eq!((e.status, e.api), (404, Api::Anthropic));
    assert_eq!(e.metadata.get("constraint").and_then(|v| v.as_str()), Some("policy:p.zdr"));
    // allowed_models: 403 in Google's shape.
    let e = decide(&google("m/secret"), Some(&p), r#"{"contents": []}"#).err().unwrap_or_else(|| panic!("planned"));
    assert_eq!((e.status, e.code, e.api), (403, "policy_denied", Api::Google));
    let v: serde_json::Value = serde_json::from_str(&e.body()).unwrap_or_default();
    assert_eq!(v["error"]["status"], "PERMISSION_DENIED");
}

// `allowed_regions`: only endpoints that say they run in one of them (case-insensitive); one
// without a region is never planned once the policy names regions.
#[test]
fn allowed_regions_keep_only_endpoints_in_them() {
    let (c, p) = policy(r#"{"allowed_regions": ["SwedenCentral"]}"#);
    assert_eq!(ok(&c, &p, &body("")), vec!["alpha@m/a"]);
    assert_eq!(refused(&c, &p, r#"{"model": "m/b"}"#), (404, "policy:p.allowed_regions".into()));
    let (c, p) = policy(r#"{"allowed_regions": ["eastus", "swedencentral"]}"#);
    assert_eq!(ok(&c, &p, &body(r#", "provider": {"sort": "price"}"#)), vec!["alpha@m/a", "beta@m/a"]);
    let (c, p) = policy(r#"{"allowed_regions": []}"#);
    assert_eq!(refused(&c, &p, r#"{"model": "m/a"}"#), (404, "policy:p.allowed_regions".into()));
    let e = config_err(r#""policies": {"p": {"allowed_regions": ["east us"]}}"#);
    assert_eq!(e.field, r#"policies["p"].allowed_regions[0]"#);
    let bad = CATALOG.replace(r#""region": "eastus""#, r#""region": "east/us""#);
    let e = Catalog::from_json(bad.as_bytes(), &|_| None).unwrap_err();
    assert_eq!(e.field, r#"models["m/a"].endpoints[1].region"#, "{e}");
}
