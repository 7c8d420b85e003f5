//! Native cost of `model: "auto"`: parse, classify, rank, plan and body rewrite (`decide`) for
//! bodies from 1 KB to 1 MB, next to the same body with a fixed model, to show the auto router
//! adds time linear in the body size. Run with `cargo run --release --example auto_cost`.

use std::time::Instant;

use switchyard::config::Catalog;
use switchyard::routing::decision::decide;
use switchyard::routing::health::NoHealthData;

fn main() {
    let cfg = r#"{"providers": {"a": {"cluster": "c_a", "authority": "a.example"}, "b": {"cluster": "c_b", "authority": "b.example"}},
      "models": {
        "vendor/coder": {"cost_tier": "medium", "endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 4}, "context_length": 400000}]},
        "vendor/chat": {"cost_tier": "low", "input_modalities": ["text", "image"], "endpoints": [{"provider": "b", "pricing": {"prompt": 0.2, "completion": 0.8}}]},
        "vendor/long": {"cost_tier": "medium", "endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 2}, "context_length": 1048576},
                                                             {"provider": "b", "pricing": {"prompt": 1.5, "completion": 2}}]}},
      "routing": {"max_body_bytes": 4194304},
      "auto": {"tasks": {"code": {"vendor/coder": 1}, "long_context": {"vendor/long": 1}, "chat": {"vendor/chat": 1, "vendor/coder": 0.5}}}}"#;
    let c = Catalog::from_json(cfg.as_bytes(), &|_| None).unwrap();
    let line = "    let total: u64 = items.iter().map(|x| x.price * x.count).sum(); // accumulate\\n";
    let cases: Vec<(&str, String)> = vec![
        ("1 KB small talk", "Hey! How was your weekend? ".repeat(38)),
        ("1 KB code", format!("Fix this:\\n```rust\\n{}```", line.repeat(12))),
        ("64 KB code", format!("Review:\\n```rust\\n{}```", line.repeat(64 * 1024 / line.len()))),
        ("1 MB document", "The committee reviewed the quarterly figures. ".repeat(1024 * 1024 / 46)),
    ];
    for (name, text) in cases {
        let body = |model: &str| {
            format!(r#"{{"model":"{model}","max_tokens":256,"messages":[{{"role":"user","content":"{text}"}}]}}"#)
        };
        let auto = body("auto");
        let fixed = body("vendor/long");
        let n = (20_000_000 / auto.len()).clamp(20, 100_000);
        let time = |b: &str| {
            let t = Instant::now();
            let mut x = 0usize;
            for _ in 0..n {
                x += decide(&c, b.as_bytes(), &NoHealthData, &mut || 0.3).map(|d| d.body.len()).unwrap_or(0);
            }
            (t.elapsed().as_secs_f64() * 1e6 / n as f64, x)
        };
        let (ta, _) = time(&auto);
        let (tf, _) = time(&fixed);
        let d = decide(&c, auto.as_bytes(), &NoHealthData, &mut || 0.3).unwrap();
        println!(
            "{name:>16} ({:>8} B): auto {ta:>9.2} us/req, fixed model {tf:>9.2} us/req, auto adds {:>6.2} ns/byte -> {}",
            auto.len(),
            (ta - tf) * 1e3 / auto.len() as f64,
            d.plan.strategy
        );
    }
}
