//! A request body through everything the downstream filter runs on it: the body and `provider`
//! parser, the auto router, planning, the upstream body rewrite, the debug candidates, every
//! attempt's rewrite, and the unrouted-request decision. Any panic is a bug; so is a unit that
//! takes longer than libFuzzer's `-timeout`.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use switchyard::api::{Api, GoogleMethod, Surface};
use switchyard::config::Catalog;
use switchyard::protocol::plan::AttemptPlan;
use switchyard::protocol::rewrite::attempt_rewrite;
use switchyard::routing::decision::{candidates_json, decide, decide_for, hand_off};
use switchyard::routing::health::NoHealthData;
use switchyard::routing::request::{TopLevel, ROUTING_FIELDS};
use switchyard::surface::{disposition, Disposition};

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| match Catalog::from_json(include_bytes!("../catalog.json"), &|_| Some("k".into())) {
        Ok(c) => c,
        Err(e) => panic!("fuzz catalog: {e}"),
    })
}

fuzz_target!(|body: &[u8]| {
    let c = catalog();
    let mut seed = body.len() as u64;
    let mut rand = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    if let Ok(d) = decide(c, body, &NoHealthData, &mut rand) {
        let _ = candidates_json(c, &d.plan, &NoHealthData);
        let h = hand_off(c, 1, &d, "/v1/chat/completions?x=1");
        let plan = h.plan;
        let decoded = AttemptPlan::decode(&plan.encode());
        assert_eq!(decoded.as_ref(), Some(&plan), "a plan must survive its own encoding");
        assert!(!h.clusters.is_empty() && h.clusters.len() <= c.routing.max_attempts);
        for (k, cluster) in h.clusters.iter().enumerate() {
            assert!(attempt_rewrite(c, 1, &plan, k + 1, cluster).is_ok(), "the planned cluster must be accepted");
        }
        // The body a provider receives parses as the caller's did (values are spliced byte for
        // byte), starts with `model`, and carries no routing field.
        match TopLevel::parse(&d.body) {
            Ok(t) => {
                assert_eq!(t.0.first().map(|(k, _)| k.as_ref()), Some("model"));
                for f in ROUTING_FIELDS.iter().skip(1) {
                    assert!(t.get(f).is_none(), "routing field {f} reached the provider");
                }
            }
            Err(e) => panic!("upstream body does not parse: {e}"),
        }
    }
    // The same bytes as an Anthropic and a Google body (the routing header from the body's
    // first line when it is text): plans on those surfaces only use endpoints speaking the API,
    // each attempt's rewrite is accepted, errors come in the caller's shape.
    let header = std::str::from_utf8(body).ok().and_then(|t| t.lines().next());
    let google = Surface {
        path_model: Some("google/gemini-2.5-flash".into()),
        method: Some(GoogleMethod::StreamGenerate),
        ..Surface::of(Api::Google)
    };
    for (surface, path) in [
        (Surface::of(Api::Anthropic), "/v1/messages"),
        (google, "/v1beta/models/google%2Fgemini-2.5-flash:streamGenerateContent?alt=sse&key=caller"),
    ] {
        for h in [None, header] {
            match decide_for(
                c,
                None,
                &switchyard::routing::presets::NO_PRESETS,
                &surface,
                h,
                body,
                &NoHealthData,
                &mut rand,
            ) {
                Ok(d) => {
                    for a in &d.plan.attempts {
                        let e = c.endpoint(a.endpoint).unwrap_or_else(|| panic!("planned endpoint missing"));
                        // Any API's endpoint may serve, translated: the plan then carries a body
                        // in an API the endpoint speaks.
                        let has_body = e.apis.has(surface.api)
                            || e.apis.has(d.body_api)
                            || d.bodies.iter().any(|(api, _)| e.apis.has(*api));
                        assert!(has_body, "an endpoint was planned without a body in an API it speaks");
                    }
                    let h = hand_off(c, 1, &d, path);
                    assert!(!h.plan.path.contains("key="), "the caller's key reached the plan");
                    for (k, cluster) in h.clusters.iter().enumerate() {
                        let rw = attempt_rewrite(c, 1, &h.plan, k + 1, cluster);
                        assert!(rw.is_ok(), "the planned cluster must be accepted");
                    }
                }
                Err(e) => assert_eq!(e.api, surface.api, "errors come in the caller's shape"),
            }
        }
    }
    // Method and path come from the caller too.
    if let Ok(text) = std::str::from_utf8(body) {
        let (method, path) = text.split_once(' ').unwrap_or(("GET", text));
        if let Disposition::Route(surface) = disposition(method, path, c) {
            let _ = decide_for(
                c,
                None,
                &switchyard::routing::presets::NO_PRESETS,
                &surface,
                None,
                body,
                &NoHealthData,
                &mut rand,
            );
        }
    }
});
