//! The auto router on realistic prompts and a realistic catalog: classification, hard needs,
//! ranking within cost tiers and allowed-model patterns, health, and the resulting plan.

use serde_json::{json, Value};

use super::*;
use crate::config::{Catalog, CostTier};
use crate::routing::health::{EndpointHealth, NoHealthData};
use crate::routing::router::{plan, Plan};
use crate::test_support::{mutate, Lcg};

const PROVIDERS: &str = r#"{
  "anthropic": {"cluster": "c_anthropic", "authority": "api.anthropic.example"},
  "openai": {"cluster": "c_openai", "authority": "api.openai.example"},
  "google": {"cluster": "c_google", "authority": "vertex.example"},
  "together": {"cluster": "c_together", "authority": "together.example"},
  "deepinfra": {"cluster": "c_deepinfra", "authority": "deepinfra.example",
                "data_policy": {"retains_data": false, "trains_on_data": false, "zdr": true}}
}"#;

fn model(tier: Option<&str>, modalities: &[&str], endpoints: &[(&str, f64, Option<u64>, bool)]) -> Value {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(p, price, ctx, tools)| {
            let mut e = json!({"provider": p, "pricing": {"prompt": price, "completion": price * 4.0}});
            if let Some(c) = ctx {
                e["context_length"] = json!(c);
            }
            if *tools {
                e["supported_parameters"] = json!(["tools", "tool_choice", "max_tokens"]);
            }
            e
        })
        .collect();
    let mut m = json!({"input_modalities": modalities, "endpoints": eps});
    if let Some(t) = tier {
        m["cost_tier"] = json!(t);
    }
    m
}

fn catalog_value() -> Value {
    json!({
        "providers": serde_json::from_str::<Value>(PROVIDERS).unwrap(),
        "models": {
            "anthropic/claude-opus-4-6": model(Some("xhigh"), &["text", "image"], &[("anthropic", 15.0, Some(200_000), true)]),
            "anthropic/claude-sonnet-4-6": model(Some("high"), &["text", "image"], &[("anthropic", 3.0, Some(200_000), true)]),
            "openai/gpt-5-mini": model(Some("medium"), &["text", "image"], &[("openai", 0.25, Some(400_000), true)]),
            "qwen/qwen3-coder": model(Some("low"), &["text"], &[("together", 0.3, Some(262_144), true), ("deepinfra", 0.4, Some(262_144), true)]),
            "deepseek/deepseek-r1": model(Some("low"), &["text"], &[("together", 0.5, Some(128_000), false), ("deepinfra", 0.7, Some(128_000), false)]),
            "google/gemini-2.5-pro": model(Some("high"), &["text", "image", "audio", "video", "file"], &[("google", 1.25, Some(1_048_576), true)]),
            "google/gemini-2.5-flash": model(Some("low"), &["text", "image"], &[("google", 0.3, Some(1_048_576), true)]),
            "meta-llama/llama-4-maverick": model(Some("low"), &["text"], &[("together", 0.27, None, false), ("deepinfra", 0.2, Some(131_072), false)]),
            "mystery/unpriced": model(None, &["text"], &[("together", 1.0, None, false)])
        },
        "auto": {
            "default_cost_tier": "medium",
            "tasks": {
                "code": {"anthropic/claude-opus-4-6": 1.0, "anthropic/claude-sonnet-4-6": 0.95,
                         "openai/gpt-5-mini": 0.85, "qwen/qwen3-coder": 0.8},
                "reasoning": {"anthropic/claude-opus-4-6": 1.0, "google/gemini-2.5-pro": 0.95,
                              "openai/gpt-5-mini": 0.8, "deepseek/deepseek-r1": 0.75},
                "long_context": {"google/gemini-2.5-pro": 1.0, "google/gemini-2.5-flash": 0.8,
                                 "meta-llama/llama-4-maverick": 0.6},
                "tool_use": {"anthropic/claude-sonnet-4-6": 1.0, "openai/gpt-5-mini": 0.9, "qwen/qwen3-coder": 0.7},
                "structured_output": {"openai/gpt-5-mini": 1.0, "google/gemini-2.5-flash": 0.8},
                "chat": {"mystery/unpriced": 1.0, "anthropic/claude-sonnet-4-6": 0.95, "openai/gpt-5-mini": 0.9,
                         "google/gemini-2.5-flash": 0.85, "meta-llama/llama-4-maverick": 0.8}
            }
        }
    })
}

fn catalog_of(v: &Value) -> Catalog {
    Catalog::from_json(v.to_string().as_bytes(), &|_| None).unwrap_or_else(|e| panic!("catalog rejected: {e}"))
}

fn catalog() -> Catalog {
    catalog_of(&catalog_value())
}

fn parse(body: &Value) -> (String, ChatRequest<'static>) {
    let text = body.to_string();
    let leaked: &'static str = Box::leak(text.clone().into_boxed_str());
    (text, ChatRequest::parse(leaked.as_bytes()).unwrap_or_else(|e| panic!("{}", e.body())))
}

fn classify_body(body: Value) -> Classification {
    let cat = catalog();
    let (_, req) = parse(&body);
    classify(&req, cat.auto.as_ref().unwrap())
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

fn plan_for(cat: &Catalog, body: Value, health: &dyn HealthView) -> Result<Plan, ApiError> {
    let (_, req) = parse(&body);
    plan(cat, &req, health, &mut || 0.0)
}

/// Catalog model ids of the plan, in attempt order, each once.
fn planned_models(cat: &Catalog, p: &Plan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in &p.attempts {
        let id = cat.models[cat.endpoints[a.endpoint].model].id.clone();
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn auto_plan(body: Value) -> (Catalog, Plan) {
    let cat = catalog();
    let p = plan_for(&cat, body, &NoHealthData).unwrap_or_else(|e| panic!("{}", e.body()));
    (cat, p)
}

fn auto_err(body: Value) -> ApiError {
    let cat = catalog();
    match plan_for(&cat, body, &NoHealthData) {
        Ok(p) => panic!("expected an error, got {:?}", planned_models(&cat, &p)),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------------
// Realistic prompts
// ---------------------------------------------------------------------------------------------

const DIFF: &str = r#"Can you review this change? It fails with a borrow error.

diff --git a/src/router.rs b/src/router.rs
index 3f2a1c0..8b7e9d2 100644
--- a/src/router.rs
+++ b/src/router.rs
@@ -120,7 +120,9 @@ fn hard_filter(ctx: &Ctx, model: &ResolvedModel) -> Result<Vec<usize>, &'static str> {
     let cat = ctx.catalog;
-    let mut set: Vec<usize> = m.endpoints.clone();
+    let mut set: Vec<usize> = Vec::with_capacity(m.endpoints.len());
+    set.extend(m.endpoints.iter().copied());
     if let Some(pin) = &model.pin {
         step(&mut set, "model", &|e| e.matches_slug(pin))?;
     }
"#;

const PROOF: &str = r"Prove that there are infinitely many primes. Then show that for every integer $n \geq 2$ there is a prime $p$ with $n < p \leq n! + 1$. Give a rigorous proof, step by step.";

const SMALL_TALK: &str = "Hey! How was your weekend? I went hiking with friends and the weather was lovely.";

#[test]
fn a_code_diff_is_code() {
    let c = classify_body(json!({"model": "auto", "messages": user(DIFF)}));
    assert_eq!(c.task, TaskType::Code, "{:?}", c.signals);
    assert!(c.signals.iter().any(|s| s.starts_with("diff_hunks:")), "{:?}", c.signals);
    // A fenced snippet with a question is code too.
    let fenced =
        "Why does this panic?\n```rust\nfn main() {\n    let v: Vec<u8> = vec![];\n    println!(\"{}\", v[0]);\n}\n```";
    let c = classify_body(json!({"model": "auto", "messages": user(fenced)}));
    assert_eq!(c.task, TaskType::Code, "{:?}", c.signals);
    assert!(c.signals.iter().any(|s| s == "code_fences:1"), "{:?}", c.signals);
}

#[test]
fn a_proof_is_reasoning() {
    let c = classify_body(json!({"model": "auto", "messages": user(PROOF)}));
    assert_eq!(c.task, TaskType::Reasoning, "{:?}", c.signals);
    assert!(c.signals.iter().any(|s| s.starts_with("latex:")), "{:?}", c.signals);
    // A reasoning parameter alone makes a plain question a reasoning task.
    let c = classify_body(json!({"model": "auto", "messages": user("Which city should we pick for the offsite?"),
                                 "reasoning": {"effort": "high"}}));
    assert_eq!(c.task, TaskType::Reasoning, "{:?}", c.signals);
    assert!(c.signals.contains(&"param:reasoning".to_string()));
}

#[test]
fn a_200k_token_document_is_long_context_and_needs_the_room() {
    let paragraph = "The committee reviewed the quarterly figures and noted that revenue in the northern region grew steadily while costs stayed flat. ";
    let doc = paragraph.repeat(800_000 / paragraph.len() + 1); // ~800 KB = ~200k tokens
    let body = json!({"model": "auto", "max_tokens": 4000,
                      "messages": [{"role": "system", "content": "You summarise board documents."},
                                   {"role": "user", "content": format!("Summarise this report:\n\n{doc}")}]});
    let c = classify_body(body.clone());
    assert_eq!(c.task, TaskType::LongContext, "{:?}", c.signals);
    assert!(c.needs.context_tokens > 200_000 + 4000, "{:?}", c.needs);
    // Only models that hold ~204k tokens remain. gemini-2.5-pro is high tier, so the default
    // (medium) ceiling leaves flash first; gpt-5-mini (400k) comes from the chat list.
    let (cat, p) = auto_plan(body.clone());
    assert_eq!(p.strategy.to_string(), "auto:long_context");
    assert_eq!(
        planned_models(&cat, &p),
        vec!["google/gemini-2.5-flash", "meta-llama/llama-4-maverick", "openai/gpt-5-mini"]
    );
    // llama's 131k-token endpoint is dropped by provider routing's context filter.
    assert!(p.attempts.iter().all(|a| cat.endpoints[a.endpoint].slug != "deepinfra"));
    let why = |p: &Plan, id: &str| {
        p.auto.as_ref().unwrap().candidates.iter().find(|c| cat.models[c.model].id == id).unwrap().excluded.clone()
    };
    assert_eq!(why(&p, "google/gemini-2.5-pro"), Some("cost_tier".to_string()));
    let mut max = body;
    max["plugins"] = json!([{"id": "auto-router", "cost_tier": "max"}]);
    let (_, p) = auto_plan(max);
    assert_eq!(
        planned_models(&cat, &p),
        vec!["google/gemini-2.5-pro", "google/gemini-2.5-flash", "meta-llama/llama-4-maverick"]
    );
    assert_eq!(why(&p, "anthropic/claude-sonnet-4-6"), Some("context_length".to_string()));
}

#[test]
fn a_tool_calling_agent_turn_is_tool_use_and_needs_tools() {
    let body = json!({
        "model": "openrouter/auto",
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"}}}}}],
        "messages": [
            {"role": "user", "content": "What's the weather in Lisbon and should I bring an umbrella?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": "{\"city\":\"Lisbon\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\": 18, \"rain_mm\": 6}"}
        ]
    });
    let c = classify_body(body.clone());
    assert_eq!(c.task, TaskType::ToolUse, "{:?}", c.signals);
    assert!(c.needs.tools);
    assert!(c.signals.contains(&"tool_turns:2".to_string()), "{:?}", c.signals);
    let (cat, p) = auto_plan(body);
    assert_eq!(p.strategy.to_string(), "auto:tool_use");
    // sonnet (high) is above the default medium tier.
    assert_eq!(planned_models(&cat, &p), vec!["openai/gpt-5-mini", "qwen/qwen3-coder", "google/gemini-2.5-flash"]);
    let why = |id: &str| {
        p.auto.as_ref().unwrap().candidates.iter().find(|c| cat.models[c.model].id == id).unwrap().excluded.clone()
    };
    assert_eq!(why("meta-llama/llama-4-maverick"), Some("tools".to_string()));
}

#[test]
fn an_image_question_needs_an_image_model() {
    let body = json!({"model": "auto", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What breed is this dog?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    ]}]});
    let c = classify_body(body.clone());
    assert_eq!(c.needs.modalities, vec![Modality::Image]);
    assert_eq!(c.task, TaskType::Chat);
    let (cat, p) = auto_plan(body.clone());
    let models = planned_models(&cat, &p);
    assert_eq!(models, vec!["openai/gpt-5-mini", "google/gemini-2.5-flash"]);
    for m in &models {
        assert!(cat.model(m).unwrap().accepts(Modality::Image), "{m} is text-only");
    }
    // Restricted to text-only models: nothing left, and the error names the unmet need.
    let mut narrowed = body;
    narrowed["plugins"] = json!([{"id": "auto-router", "allowed_models": ["meta-llama/*", "qwen/*"]}]);
    let e = auto_err(narrowed);
    assert_eq!(e.status, 404);
    assert_eq!(e.code, "no_endpoints");
    assert_eq!(e.metadata["constraint"], "input_modalities:image", "{}", e.message);
    let mut text_only = json!({"model": "auto", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "And this one?"}, {"type": "input_image", "image_url": "https://x.example/d.png"}]}]});
    text_only["plugins"] = json!([{"id": "auto-router", "cost_tier": "low", "allowed_models": ["meta-llama/*"]}]);
    let e = auto_err(text_only);
    assert_eq!(e.metadata["constraint"], "input_modalities:image", "{}", e.message);
    // Patterns that allow nothing name allowed_models.
    let mut nothing = json!({"model": "auto", "messages": user("hi")});
    nothing["plugins"] = json!([{"id": "auto-router", "allowed_models": ["x-ai/*"]}]);
    assert_eq!(auto_err(nothing).metadata["constraint"], "allowed_models");
}

#[test]
fn small_talk_is_chat() {
    let c = classify_body(json!({"model": "auto", "messages": user(SMALL_TALK)}));
    assert_eq!(c.task, TaskType::Chat, "{:?}", c.signals);
    // Markdown bullet lists are not diffs; a shopping list is not code.
    let list = "Things to pack:\n- tent\n- stove\n- two jackets\n- snacks\n+ maybe a book";
    assert_eq!(classify_body(json!({"model": "auto", "messages": user(list)})).task, TaskType::Chat);
    let (cat, p) = auto_plan(json!({"model": "auto", "messages": user(SMALL_TALK)}));
    assert_eq!(p.strategy.to_string(), "auto:chat");
    // mystery/unpriced has the highest weight but no declared tier: only `max` may pick it.
    assert_eq!(
        planned_models(&cat, &p),
        vec!["openai/gpt-5-mini", "google/gemini-2.5-flash", "meta-llama/llama-4-maverick"]
    );
}

#[test]
fn structured_output_and_precedence() {
    let schema = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
    let c = classify_body(
        json!({"model": "auto", "messages": user("Extract the invoice fields."), "response_format": schema}),
    );
    assert_eq!(c.task, TaskType::StructuredOutput);
    // Tools win over everything; long context wins over code.
    let c = classify_body(json!({"model": "auto", "messages": user(DIFF), "tools": [{"type": "function"}]}));
    assert_eq!(c.task, TaskType::ToolUse);
    let big = format!("{}{}", DIFF, "x".repeat(140_000));
    let c = classify_body(json!({"model": "auto", "messages": user(&big)}));
    assert_eq!(c.task, TaskType::LongContext);
    // Responses API input and completions prompt are read too.
    let c = classify_body(
        json!({"model": "auto", "input": [{"role": "user", "content": [{"type": "input_text", "text": PROOF}]}]}),
    );
    assert_eq!(c.task, TaskType::Reasoning);
    let c = classify_body(
        json!({"model": "auto", "prompt": "def add(a, b):\n    return a + b\n# write unit tests for this python function"}),
    );
    assert_eq!(c.task, TaskType::Code, "{:?}", c.signals);
}

#[test]
fn chinese_prompts_are_classified_too() {
    let c = classify_body(json!({"model": "auto", "messages": user("请证明存在无穷多个素数，并给出完整的推导过程。")}));
    assert_eq!(c.task, TaskType::Reasoning, "{:?}", c.signals);
    let c = classify_body(json!({"model": "auto", "messages": user("这个函数一运行就报错，帮我调试一下代码。")}));
    assert_eq!(c.task, TaskType::Code, "{:?}", c.signals);
    let c = classify_body(json!({"model": "auto", "messages": user("周末去哪里玩比较好？天气怎么样？")}));
    assert_eq!(c.task, TaskType::Chat, "{:?}", c.signals);
}

#[test]
fn the_last_user_turn_decides_the_text_rules() {
    let c = classify_body(json!({"model": "auto", "messages": [
        {"role": "user", "content": DIFF},
        {"role": "assistant", "content": "Looks good to me."},
        {"role": "user", "content": SMALL_TALK}
    ]}));
    assert_eq!(c.task, TaskType::Chat, "{:?}", c.signals);
}

#[test]
fn malformed_messages_do_not_fail_classification() {
    for messages in [
        json!("just a string"),
        json!([1, 2, 3]),
        json!([{"role": 5}]),
        json!({"a": 1}),
        json!([{"content": {"x": 1}}]),
    ] {
        let c = classify_body(json!({"model": "auto", "messages": messages}));
        assert_eq!(c.task, TaskType::Chat);
    }
}

#[test]
fn only_a_bounded_prefix_of_the_text_is_scanned() {
    // Code far beyond SCAN_LIMIT does not count (the scan is bounded; the prompt size still is).
    let text = format!("{}\n```rust\nfn main() {{}}\n```", "hello there ".repeat(SCAN_LIMIT / 12 + 10));
    let c = classify_body(json!({"model": "auto", "messages": user(&text)}));
    assert_eq!(c.task, TaskType::Chat, "{:?}", c.signals);
    // Multi-byte text cut at the limit never splits a character.
    let c = classify_body(json!({"model": "auto", "messages": user(&"é∀".repeat(SCAN_LIMIT))}));
    assert!(c.signals.iter().any(|s| s.starts_with("math_symbols:")));
}

// ---------------------------------------------------------------------------------------------
// Tiers, patterns, health
// ---------------------------------------------------------------------------------------------

fn with_plugin(messages: Value, plugin: Value) -> Value {
    json!({"model": "auto", "messages": messages, "plugins": [{"id": "web"}, plugin]})
}

#[test]
fn cost_tier_is_a_ceiling_and_max_is_best_regardless_of_price() {
    let code = user(DIFF);
    let tier = |t: &str| {
        let (cat, p) = auto_plan(with_plugin(code.clone(), json!({"id": "auto-router", "cost_tier": t})));
        planned_models(&cat, &p)
    };
    assert_eq!(tier("low"), vec!["qwen/qwen3-coder", "google/gemini-2.5-flash", "meta-llama/llama-4-maverick"]);
    assert_eq!(tier("medium"), vec!["openai/gpt-5-mini", "qwen/qwen3-coder", "google/gemini-2.5-flash"]);
    assert_eq!(tier("high"), vec!["anthropic/claude-sonnet-4-6", "openai/gpt-5-mini", "qwen/qwen3-coder"]);
    assert_eq!(tier("xhigh"), vec!["anthropic/claude-opus-4-6", "anthropic/claude-sonnet-4-6", "openai/gpt-5-mini"]);
    assert_eq!(tier("max"), vec!["anthropic/claude-opus-4-6", "anthropic/claude-sonnet-4-6", "openai/gpt-5-mini"]);
    // `max` also admits models without a declared tier.
    let (cat, p) = auto_plan(with_plugin(user(SMALL_TALK), json!({"id": "auto-router", "cost_tier": "max"})));
    assert_eq!(planned_models(&cat, &p)[0], "mystery/unpriced");
    // The configured default applies without a plugin.
    let mut v = catalog_value();
    v["auto"]["default_cost_tier"] = json!("low");
    let cat = catalog_of(&v);
    let p = plan_for(&cat, json!({"model": "auto", "messages": code}), &NoHealthData).unwrap();
    assert_eq!(planned_models(&cat, &p)[0], "qwen/qwen3-coder");
    assert_eq!(p.auto.as_ref().unwrap().tier, TierLimit::UpTo(CostTier::Low));
}

#[test]
fn allowed_models_patterns_restrict_the_choice() {
    let (cat, p) = auto_plan(with_plugin(
        user(DIFF),
        json!({"id": "auto-router", "cost_tier": "max", "allowed_models": ["openai/*", "qwen/*"]}),
    ));
    assert_eq!(planned_models(&cat, &p), vec!["openai/gpt-5-mini", "qwen/qwen3-coder"]);
    let (cat, p) = auto_plan(with_plugin(
        user(DIFF),
        json!({"id": "auto-router", "cost_tier": "max", "allowed_models": ["anthropic/claude-sonnet-*"]}),
    ));
    assert_eq!(planned_models(&cat, &p), vec!["anthropic/claude-sonnet-4-6"]);
    // Patterns that match only models above the tier: the tier empties the set.
    let e = auto_err(with_plugin(
        user(DIFF),
        json!({"id": "auto-router", "cost_tier": "low", "allowed_models": ["anthropic/*"]}),
    ));
    assert_eq!(e.metadata["constraint"], "cost_tier", "{}", e.message);
    assert!(e.message.contains("anthropic/*"), "{}", e.message);
    // Patterns that match nothing.
    let e = auto_err(with_plugin(user(DIFF), json!({"id": "auto-router", "allowed_models": ["mistralai/*"]})));
    assert_eq!(e.metadata["constraint"], "allowed_models");
    assert_eq!(e.metadata["task"], "code");
}

#[test]
fn an_operator_bound_applies_before_the_request_patterns() {
    let cat = catalog();
    let (_, req) = parse(&with_plugin(user(DIFF), json!({"id": "auto-router", "cost_tier": "max"})));
    let policy = vec!["google/*".to_string(), "qwen/*".to_string()];
    let c =
        choose(&cat, &req, &NoHealthData, &[Bound { label: "policy:finance.allowed_models", allowed_models: &policy }])
            .unwrap();
    let picks: Vec<&str> = c.picks().map(|m| cat.models[m].id.as_str()).collect();
    assert_eq!(picks, vec!["qwen/qwen3-coder", "google/gemini-2.5-flash"]);
    let none = vec!["mistralai/*".to_string()];
    let e =
        choose(&cat, &req, &NoHealthData, &[Bound { label: "policy:finance.allowed_models", allowed_models: &none }])
            .unwrap_err();
    assert_eq!(e.metadata["constraint"], "policy:finance.allowed_models");
}

struct Down(Vec<(&'static str, &'static str)>);

impl HealthView for Down {
    fn endpoint(&self, model: &str, slug: &str) -> EndpointHealth {
        // Down: three failures in a row, every attempt of the window failed (an outage whatever
        // the peers do); up: healthy traffic.
        if self.0.iter().any(|(m, s)| *m == model && *s == slug) {
            EndpointHealth { recent_attempts: 3, recent_failures: 3, failure_run: 3, ..EndpointHealth::default() }
        } else {
            EndpointHealth { recent_attempts: 20, ..EndpointHealth::default() }
        }
    }
}

#[test]
fn models_with_every_endpoint_down_rank_after_healthy_ones() {
    let cat = catalog();
    let body = json!({"model": "auto", "messages": user(DIFF)});
    // gpt-5-mini's only endpoint is in outage: it ranks after every healthy candidate (and so
    // falls outside the three picks).
    let p = plan_for(&cat, body.clone(), &Down(vec![("openai/gpt-5-mini", "openai")])).unwrap();
    assert_eq!(
        planned_models(&cat, &p),
        vec!["qwen/qwen3-coder", "google/gemini-2.5-flash", "meta-llama/llama-4-maverick"]
    );
    let choice = p.auto.as_ref().unwrap();
    let order: Vec<&str> = choice.picks().map(|m| cat.models[m].id.as_str()).collect();
    assert_eq!(order.last(), Some(&"openai/gpt-5-mini"));
    assert!(choice.candidates.iter().any(|c| c.unhealthy && cat.models[c.model].id == "openai/gpt-5-mini"));
    // Cooling down after a Retry-After counts the same.
    struct Cooling;
    impl HealthView for Cooling {
        fn endpoint(&self, model: &str, _slug: &str) -> EndpointHealth {
            EndpointHealth { cooling_down: model == "openai/gpt-5-mini", ..EndpointHealth::default() }
        }
    }
    let p = plan_for(&cat, body.clone(), &Cooling).unwrap();
    assert_eq!(planned_models(&cat, &p)[0], "qwen/qwen3-coder");
    // One of qwen's two endpoints down: the model is still healthy.
    let p = plan_for(&cat, body, &Down(vec![("qwen/qwen3-coder", "together")])).unwrap();
    assert_eq!(planned_models(&cat, &p), vec!["openai/gpt-5-mini", "qwen/qwen3-coder", "google/gemini-2.5-flash"]);
}

// ---------------------------------------------------------------------------------------------
// The plan: provider routing per pick, the caller's models, explain
// ---------------------------------------------------------------------------------------------

#[test]
fn provider_routing_applies_to_each_pick() {
    // zdr: only deepinfra is ZDR; gpt-5-mini has no ZDR endpoint and is skipped, qwen's
    // deepinfra endpoint serves, and the next eligible models fill the picks.
    let (cat, p) = auto_plan(json!({"model": "auto", "messages": user(DIFF), "provider": {"zdr": true}}));
    assert_eq!(planned_models(&cat, &p), vec!["qwen/qwen3-coder", "meta-llama/llama-4-maverick"]);
    assert!(p.attempts.iter().all(|a| cat.endpoints[a.endpoint].slug == "deepinfra"));
    assert_eq!(p.auto.as_ref().unwrap().planned.len(), 2);
    // Nothing passes the provider filters: the usual 404 naming the provider constraint.
    let e = auto_err(json!({"model": "auto", "messages": user(DIFF), "provider": {"only": ["nobody"]}}));
    assert_eq!(e.metadata["constraint"], "only");
}

#[test]
fn max_models_caps_the_picks_and_caller_models_follow() {
    let mut v = catalog_value();
    v["auto"]["max_models"] = json!(1);
    let cat = catalog_of(&v);
    let p = plan_for(
        &cat,
        json!({"model": "auto", "models": ["deepseek/deepseek-r1"], "messages": user(DIFF)}),
        &NoHealthData,
    )
    .unwrap();
    assert_eq!(planned_models(&cat, &p), vec!["openai/gpt-5-mini", "deepseek/deepseek-r1"]);
    let explain: Value = serde_json::from_str(&p.auto.as_ref().unwrap().explain_json(&cat)).unwrap();
    assert_eq!(explain["candidates"][0]["status"], "planned");
    assert_eq!(explain["candidates"][1]["status"], "eligible");
}

#[test]
fn explain_shows_classification_signals_and_ranked_candidates() {
    let (cat, p) = auto_plan(with_plugin(
        user(DIFF),
        json!({"id": "auto-router", "allowed_models": ["openai/*", "qwen/*", "google/*"]}),
    ));
    let v: Value = serde_json::from_str(&p.auto.as_ref().unwrap().explain_json(&cat)).unwrap();
    assert_eq!(v["task"], "code");
    assert_eq!(v["cost_tier"], "medium");
    assert_eq!(v["allowed_models"], json!(["openai/*", "qwen/*", "google/*"]));
    assert!(v["signals"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().starts_with("diff_hunks:")), "{v}");
    let c = v["candidates"].as_array().unwrap();
    assert_eq!(
        c[0],
        json!({"model": "openai/gpt-5-mini", "weight": 0.85, "cost_tier": "medium", "list": "code",
                            "healthy": true, "status": "planned"})
    );
    assert_eq!(c[2]["model"], "google/gemini-2.5-flash");
    assert_eq!(c[2]["list"], "chat");
    let opus = c.iter().find(|x| x["model"] == "anthropic/claude-opus-4-6").unwrap();
    assert_eq!(opus["status"], "excluded:allowed_models");
    assert_eq!(v["needs"]["input_modalities"], json!([]));
    assert_eq!(v["needs"]["tools"], false);
    assert!(v["needs"]["context_tokens"].as_u64().unwrap() > DIFF.len() as u64 / 4);
}

// (Without an `auto` section the auto router runs on the default ranking: see the tests at the
// end.)
#[test]
fn plugin_errors_name_the_field() {
    let cases = [
        (json!([{"id": "auto-router", "cost_tier": "cheap"}]), "plugins[0].cost_tier"),
        (json!([{"id": "web"}, {"id": "auto-router", "cost_tier": 3}]), "plugins[1].cost_tier"),
        (json!([{"id": "auto-router", "allowed_models": "openai/*"}]), "plugins[0].allowed_models"),
        (json!([{"id": "auto-router", "allowed_models": [""]}]), "plugins[0].allowed_models"),
        (json!([{"id": "auto-router", "colour": 1}]), "plugins[0].colour"),
        (json!([{"id": "auto-router", "excluded_models": [3]}]), "plugins[0].excluded_models"),
        (json!([7]), "plugins[0]"),
        (json!({"id": "auto-router"}), "plugins"),
    ];
    for (plugins, param) in cases {
        let e = auto_err(json!({"model": "auto", "messages": user("hi"), "plugins": plugins}));
        assert_eq!(e.status, 400, "{param}");
        assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
    }
    // Disabled entries and nulls are ignored; both ids are accepted.
    let (cat, p) = auto_plan(json!({"model": "openrouter/auto", "messages": user("hi"),
        "plugins": [{"id": "auto-router", "enabled": false, "cost_tier": "nope"}, {"id": "auto-router", "cost_tier": null}]}));
    assert_eq!(planned_models(&cat, &p)[0], "openai/gpt-5-mini");
}

#[test]
fn config_errors_name_the_field() {
    let cases: Vec<(Box<dyn Fn(&mut Value)>, &str)> = vec![
        (Box::new(|v| v["auto"]["tasks"]["poetry"] = json!({"openai/gpt-5-mini": 1})), "auto.tasks.poetry"),
        (Box::new(|v| v["auto"]["tasks"]["code"]["openai/gpt-9"] = json!(1)), "auto.tasks.code[\"openai/gpt-9\"]"),
        (
            Box::new(|v| v["auto"]["tasks"]["code"]["openai/gpt-5-mini"] = json!(0)),
            "auto.tasks.code[\"openai/gpt-5-mini\"]",
        ),
        (
            Box::new(|v| v["auto"]["tasks"]["code"]["openai/gpt-5-mini"] = json!(-1.5)),
            "auto.tasks.code[\"openai/gpt-5-mini\"]",
        ),
        (
            Box::new(|v| {
                v["auto"]["tasks"].as_object_mut().unwrap().remove("chat");
            }),
            "auto.tasks.chat",
        ),
        (Box::new(|v| v["auto"]["default_cost_tier"] = json!("cheap")), "auto.default_cost_tier"),
        (Box::new(|v| v["auto"]["max_models"] = json!(0)), "auto.max_models"),
        (Box::new(|v| v["auto"]["max_models"] = json!(9)), "auto.max_models"),
        (Box::new(|v| v["auto"]["long_context_tokens"] = json!(0)), "auto.long_context_tokens"),
        (
            Box::new(|v| v["models"]["openai/gpt-5-mini"]["cost_tier"] = json!("max")),
            "models[\"openai/gpt-5-mini\"].cost_tier",
        ),
        (
            Box::new(|v| v["models"]["openai/gpt-5-mini"]["input_modalities"] = json!(["text", "smell"])),
            "models[\"openai/gpt-5-mini\"].input_modalities[1]",
        ),
    ];
    for (edit, field) in cases {
        let mut v = catalog_value();
        edit(&mut v);
        match Catalog::from_json(v.to_string().as_bytes(), &|_| None) {
            Ok(_) => panic!("accepted a bad {field}"),
            Err(e) => assert_eq!(e.field, field, "{e}"),
        }
    }
    // Unknown fields in the section are rejected by name.
    let mut v = catalog_value();
    v["auto"]["colour"] = json!(1);
    let e = Catalog::from_json(v.to_string().as_bytes(), &|_| None).unwrap_err();
    assert!(e.reason.contains("colour"), "{e}");
}

#[test]
fn compiled_capabilities_and_defaults() {
    let cat = catalog();
    let llama = cat.model("meta-llama/llama-4-maverick").unwrap();
    assert_eq!(llama.max_context, None, "one endpoint without a limit");
    assert!(!llama.supports_tools);
    let qwen = cat.model("qwen/qwen3-coder").unwrap();
    assert_eq!(qwen.max_context, Some(262_144));
    assert!(qwen.supports_tools && !qwen.accepts(Modality::Image) && qwen.accepts(Modality::Text));
    let auto = cat.auto.as_ref().unwrap();
    assert_eq!(auto.max_models, 3);
    assert_eq!(auto.long_context_tokens, 32_000);
    let code: Vec<&str> = auto.candidates(TaskType::Code).iter().map(|c| cat.models[c.model].id.as_str()).collect();
    assert_eq!(
        code,
        vec!["anthropic/claude-opus-4-6", "anthropic/claude-sonnet-4-6", "openai/gpt-5-mini", "qwen/qwen3-coder"]
    );
    // Without input_modalities a model is text-only.
    let mut v = catalog_value();
    v["models"]["openai/gpt-5-mini"].as_object_mut().unwrap().remove("input_modalities");
    assert_eq!(catalog_of(&v).model("openai/gpt-5-mini").unwrap().input_modalities, vec![Modality::Text]);
}

#[test]
fn word_lists_are_disjoint_and_all_found() {
    for (list, kind) in
        [(&CODE_WORDS[..], WordKind::Code), (&MATH_WORDS[..], WordKind::Math), (&LATEX[..], WordKind::Latex)]
    {
        assert!(list.len() < 64);
        for (i, w) in list.iter().enumerate() {
            assert!(w.len() <= MAX_WORD && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()), "{w}");
            assert_eq!(bit_of(kind, w), 1u64 << i, "{w}");
        }
    }
    let all: Vec<&str> = CODE_WORDS.iter().chain(MATH_WORDS.iter()).chain(LATEX.iter()).copied().collect();
    let mut dedup = all.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), all.len(), "a word in two lists would be found in only one");
    assert_eq!(bit_of(WordKind::Code, "weekend"), 0);
    assert_eq!(bit_of(WordKind::Math, "fn"), 0);
}

#[test]
fn an_operator_policy_bounds_the_auto_router() {
    let mut v = catalog_value();
    v["policies"] = json!({
        "vendors": {"allowed_models": ["qwen/*", "google/*"]},
        "nothing": {"allowed_models": ["mistralai/*"]},
        "zdr-only": {"zdr": true}
    });
    let cat = catalog_of(&v);
    let policies = crate::routing::policy::Policies::from_json(v.to_string().as_bytes(), &cat).unwrap();
    let under = |name: &str, body: Value| {
        let (_, req) = parse(&body);
        crate::routing::router::plan_under(&cat, &req, policies.get(name), &NoHealthData, &mut || 0.0)
    };
    // The caller asks for Anthropic or Qwen at any price: the policy leaves only Qwen.
    let body = with_plugin(
        user(DIFF),
        json!({"id": "auto-router", "cost_tier": "max", "allowed_models": ["anthropic/*", "qwen/*"]}),
    );
    let p = under("vendors", body.clone()).unwrap();
    assert_eq!(planned_models(&cat, &p), vec!["qwen/qwen3-coder"]);
    let excluded = |p: &Plan, id: &str| {
        p.auto.as_ref().unwrap().candidates.iter().find(|c| cat.models[c.model].id == id).unwrap().excluded.clone()
    };
    assert_eq!(excluded(&p, "anthropic/claude-opus-4-6"), Some("policy:vendors.allowed_models".to_string()));
    // Without a policy the caller's patterns alone apply.
    assert_eq!(
        planned_models(&cat, &plan_for(&cat, body.clone(), &NoHealthData).unwrap())[0],
        "anthropic/claude-opus-4-6"
    );
    // A policy that allows none of the candidates: 404 naming the policy's field.
    let e = under("nothing", body).unwrap_err();
    assert_eq!((e.status, e.metadata["constraint"].as_str()), (404, Some("policy:nothing.allowed_models")));
    // A policy's provider filters hold for every pick: only the ZDR endpoints (deepinfra) remain.
    let p = under("zdr-only", json!({"model": "auto", "messages": user(DIFF)})).unwrap();
    assert_eq!(planned_models(&cat, &p), vec!["qwen/qwen3-coder", "meta-llama/llama-4-maverick"]);
    assert!(p.attempts.iter().all(|a| cat.endpoints[a.endpoint].slug == "deepinfra"));
}

// Nothing in the request path may panic: mutated auto requests (byte flips, truncations, spliced
// fragments) end in a plan on a catalog model or an OpenAI-style error.
#[test]
fn mutated_auto_bodies_never_panic() {
    let cat = catalog();
    let seeds: Vec<String> = vec![
        json!({"model": "auto", "messages": [{"role": "user", "content": [{"type": "text", "text": "```rust\nfn a() {}\n``` \\frac ∀ 证明"},
              {"type": "image_url", "image_url": {"url": "data:x"}}]}],
              "plugins": [{"id": "auto-router", "cost_tier": "high", "allowed_models": ["openai/*", "*-flash"]}]})
        .to_string(),
        json!({"model": "openrouter/auto", "tools": [{"type": "function"}], "max_tokens": 100,
               "messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}, {"role": "tool", "content": "{}"}],
               "response_format": {"type": "json_schema"}, "reasoning": {"effort": "high"}, "provider": {"zdr": true}})
        .to_string(),
        json!({"model": "auto", "models": ["qwen/qwen3-coder"], "input": [{"role": "user", "content": "@@ -1 +1 @@\n-a\n+b"}],
               "plugins": [{"id": "auto-router", "cost_tier": "max"}]})
        .to_string(),
    ];
    let fragments =
        ["{", "}", "[", "]", "\"", ":", ",", "null", "\"\\u0000\"", "\"image_url\"", "\"auto-router\"", "é", "∑"];
    let mut rng = Lcg(0xa070);
    let mut outcomes = (0usize, 0usize);
    for i in 0..20_000 {
        let mut b = seeds[i % seeds.len()].clone().into_bytes();
        mutate(&mut b, &fragments, &mut rng);
        match crate::routing::decision::decide(&cat, &b, &NoHealthData, &mut || 0.5) {
            Ok(d) => {
                assert!(!d.plan.attempts.is_empty());
                assert!(cat.model(&d.model).is_some());
                outcomes.0 += 1;
            }
            Err(e) => {
                assert!(matches!(e.status, 400 | 404), "{}", e.body());
                outcomes.1 += 1;
            }
        }
    }
    assert!(outcomes.0 > 100 && outcomes.1 > 100, "{outcomes:?}");
}

#[test]
fn every_pick_keeps_an_attempt_of_the_budget() {
    // Low tier code: qwen (2 endpoints), gemini-2.5-flash, llama-4-maverick (2 endpoints). A
    // budget of 3 attempts hands one to each pick, never qwen's second at a later pick's expense.
    let mut v = catalog_value();
    v["routing"] = json!({"max_attempts": 3});
    let cat = catalog_of(&v);
    let body = with_plugin(user(DIFF), json!({"id": "auto-router", "cost_tier": "low"}));
    let d = crate::routing::decision::decide(&cat, body.to_string().as_bytes(), &NoHealthData, &mut || 0.0)
        .unwrap_or_else(|e| panic!("{}", e.body()));
    assert_eq!(d.model, "qwen/qwen3-coder");
    let handed = crate::routing::decision::hand_off(&cat, 1, &d, "/v1/chat/completions");
    let models: Vec<&str> =
        handed.plan.endpoints.iter().map(|&i| cat.models[cat.endpoints[usize::from(i)].model].id.as_str()).collect();
    assert_eq!(models, vec!["qwen/qwen3-coder", "google/gemini-2.5-flash", "meta-llama/llama-4-maverick"]);
}

// ---------------------------------------------------------------------------------------------
// Without an `auto` section: the default ranking
// ---------------------------------------------------------------------------------------------

fn unconfigured() -> Catalog {
    let mut v = catalog_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("auto");
    }
    catalog_of(&v)
}

#[test]
fn without_an_auto_section_every_model_is_ranked_by_the_default_rules() {
    let cat = unconfigured();
    let auto = cat.auto.as_ref().unwrap();
    assert!(!auto.configured);
    assert_eq!((auto.default_tier, auto.max_models), (TierLimit::Max, 3));
    let ids = |task: TaskType| -> Vec<&str> {
        auto.candidates(task).iter().map(|c| cat.models[c.model].id.as_str()).collect()
    };
    // Chat (and tools, structured output): the cheapest first, by the cheapest endpoint's
    // prompt + completion price (maverick 0.2 + 0.8 at deepinfra).
    assert_eq!(
        ids(TaskType::Chat),
        vec![
            "meta-llama/llama-4-maverick",
            "openai/gpt-5-mini",
            "google/gemini-2.5-flash",
            "qwen/qwen3-coder",
            "deepseek/deepseek-r1",
            "mystery/unpriced",
            "google/gemini-2.5-pro",
            "anthropic/claude-sonnet-4-6",
            "anthropic/claude-opus-4-6"
        ]
    );
    assert_eq!(ids(TaskType::ToolUse), ids(TaskType::Chat));
    // Code and reasoning: the dearest first.
    assert_eq!(ids(TaskType::Code).first(), Some(&"anthropic/claude-opus-4-6"));
    assert_eq!(ids(TaskType::Reasoning)[..2], ["anthropic/claude-opus-4-6", "anthropic/claude-sonnet-4-6"]);
    // Long context: no declared limit counts as the largest, then the largest, then the cheapest.
    assert_eq!(
        ids(TaskType::LongContext)[..4],
        ["meta-llama/llama-4-maverick", "mystery/unpriced", "google/gemini-2.5-flash", "google/gemini-2.5-pro"]
    );
}

#[test]
fn auto_works_without_configuration_and_the_plugin_still_narrows_it() {
    let cat = unconfigured();
    let p = plan_for(&cat, json!({"model": "openrouter/auto", "messages": user(SMALL_TALK)}), &NoHealthData).unwrap();
    assert_eq!(
        planned_models(&cat, &p),
        vec!["meta-llama/llama-4-maverick", "openai/gpt-5-mini", "google/gemini-2.5-flash"]
    );
    let explain: Value = serde_json::from_str(&p.auto.as_ref().unwrap().explain_json(&cat)).unwrap();
    assert_eq!(explain["ranking"], "default");
    let fenced =
        "Why does this panic?\n```rust\nfn main() {\n    let v: Vec<u8> = vec![];\n    println!(\"{}\", v[0]);\n}\n```";
    let p = plan_for(&cat, json!({"model": "auto", "messages": user(fenced)}), &NoHealthData).unwrap();
    assert_eq!(planned_models(&cat, &p)[0], "anthropic/claude-opus-4-6");
    // The request's cost tier and allowed models narrow the default list as they narrow a
    // configured one.
    let body = json!({"model": "auto", "messages": user(fenced),
                      "plugins": [{"id": "auto-router", "cost_tier": "medium", "allowed_models": ["openai/*", "qwen/*"]}]});
    let p = plan_for(&cat, body, &NoHealthData).unwrap();
    // Dearest first among what is left: qwen (0.3 + 1.2) before gpt-5-mini (0.25 + 1.0).
    assert_eq!(planned_models(&cat, &p), vec!["qwen/qwen3-coder", "openai/gpt-5-mini"]);
}

#[test]
fn excluded_models_win_over_allowed_models() {
    let cat = catalog();
    let body = |plugin: Value| json!({"model": "auto", "messages": user(SMALL_TALK), "plugins": [plugin]});
    let p = plan_for(
        &cat,
        body(json!({"id": "auto-router", "cost_tier": "max", "allowed_models": ["openai/*", "google/*"],
                    "excluded_models": ["google/*"]})),
        &NoHealthData,
    )
    .unwrap();
    assert_eq!(planned_models(&cat, &p), vec!["openai/gpt-5-mini"]);
    let explain: Value = serde_json::from_str(&p.auto.as_ref().unwrap().explain_json(&cat)).unwrap();
    assert_eq!(explain["excluded_models"], json!(["google/*"]));
    assert_eq!(explain["ranking"], "configured");
    let e = plan_for(
        &cat,
        body(json!({"id": "auto-router", "allowed_models": ["openai/*"], "excluded_models": ["openai/gpt-5-mini"]})),
        &NoHealthData,
    )
    .unwrap_err();
    assert_eq!(e.status, 404);
    assert_eq!(e.metadata.get("constraint").and_then(Value::as_str), Some("excluded_models"), "{}", e.body());
    let e =
        plan_for(&cat, body(json!({"id": "auto-router", "excluded_models": "google/*"})), &NoHealthData).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("plugins[0].excluded_models"));
}
