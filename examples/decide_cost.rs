//! Native cost of the pure routing logic for the benchmark's 1 KB request: parse, plan and
//! body rewrite (`decide`), and the response `provider` splice. Run with
//! `cargo run --release --example decide_cost`.

use std::time::Instant;
use switchyard::answer::response::{rewrite_object, Served, SseRewriter};
use switchyard::api::Api;
use switchyard::config::Catalog;
use switchyard::routing::decision::{decide, decide_under};
use switchyard::routing::health::NoHealthData;
fn main() {
    let cfg = r#"{"providers": {"fast": {"cluster": "p_fast", "authority": "fast.example", "credential": {"value": "k1"}},
      "cheap": {"cluster": "p_cheap", "authority": "cheap.example", "credential": {"value": "k2"}}},
      "models": {"bench/model": {"endpoints": [
        {"provider": "fast", "upstream_model": "fast-model", "pricing": {"prompt": 2, "completion": 2}},
        {"provider": "cheap", "upstream_model": "cheap-model", "pricing": {"prompt": 1, "completion": 1}}]}}}"#;
    let c = Catalog::from_json(cfg.as_bytes(), &|_| None).unwrap();
    let body = format!(
        r#"{{"model":"bench/model","max_tokens":16,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(950)
    );
    let n = 200_000;
    let t = Instant::now();
    let mut x = 0usize;
    for _ in 0..n {
        let d = decide(&c, body.as_bytes(), &NoHealthData, &mut || 0.3).unwrap();
        x += d.body.len();
    }
    println!("decide: {:.2} us/req ({x})", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    // The same request under an operator policy (selection is host property reads, not timed here).
    let mut with_policy: serde_json::Value = serde_json::from_str(cfg).unwrap();
    with_policy["policies"] = serde_json::json!({"finance": {"only": ["cheap", "fast"], "data_collection": "allow",
        "max_price": {"prompt": 5}, "allowed_models": ["bench/*"], "max_attempts": 2}});
    let with_policy = with_policy.to_string();
    let pc = Catalog::from_json(with_policy.as_bytes(), &|_| None).unwrap();
    let policies = switchyard::routing::policy::Policies::from_json(with_policy.as_bytes(), &pc).unwrap();
    let policy = policies.get("finance");
    let t = Instant::now();
    for _ in 0..n {
        let d = decide_under(&pc, policy, body.as_bytes(), &NoHealthData, &mut || 0.3).unwrap();
        x += d.body.len();
    }
    println!("decide under a policy: {:.2} us/req ({x})", t.elapsed().as_secs_f64() * 1e6 / n as f64);
    let resp = br#"{"id":"chatcmpl-bench-1","object":"chat.completion","created":1700000000,"model":"fast-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from bench"},"finish_reason":"stop"}],"usage":{"prompt_tokens":256,"completion_tokens":4,"total_tokens":260}}"#;
    let ep = c.endpoints.first().unwrap();
    let served = Served { model: "bench/model".into(), slug: ep.slug.clone(), pricing: ep.pricing, api: Api::OpenAi };
    let t = Instant::now();
    for _ in 0..n {
        x += rewrite_object(resp, &served).unwrap().len();
    }
    println!(
        "answer rewrite (model, provider, usage.cost): {:.2} us/req ({x})",
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    let chunk = br#"data: {"id":"chatcmpl-bench-1","object":"chat.completion.chunk","created":1700000000,"model":"fast-model","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}

"#;
    let mut sse = SseRewriter::new(served);
    let t = Instant::now();
    for _ in 0..n {
        x += sse.feed(chunk, false).len();
    }
    println!("SSE rewrite: {:.2} us/chunk ({x})", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
