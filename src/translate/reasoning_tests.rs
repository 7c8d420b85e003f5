//! Reasoning across APIs: efforts as budgets and back, what thinking refuses, and the reasoning
//! text of answers and streams in every caller's shape.

use serde_json::json as sj;
use serde_json::Value;

use super::stream::StreamTranslator;
use super::*;

fn tr(from: Api, to: Api, body: Value) -> (Value, Vec<String>) {
    let t = request(from, to, body.to_string().as_bytes(), "up", false).unwrap_or_else(|r| panic!("{r:?}"));
    (serde_json::from_slice(&t.body).unwrap(), t.dropped)
}

fn responses_body(effort: &str, max: Option<u64>) -> Value {
    let mut b = sj!({"model": "x", "input": "hi", "reasoning": {"effort": effort, "summary": "auto"}});
    if let Some(m) = max {
        b["max_output_tokens"] = sj!(m);
    }
    b
}

#[test]
fn efforts_become_anthropic_budgets_by_openrouters_ratios() {
    for (effort, budget) in [("xhigh", 9500), ("high", 8000), ("medium", 5000), ("low", 2000), ("minimal", 1024)] {
        let (v, dropped) = tr(Api::Responses, Api::Anthropic, responses_body(effort, Some(10_000)));
        assert_eq!(v["thinking"], sj!({"type": "enabled", "budget_tokens": budget}), "{effort}");
        assert_eq!(v["max_tokens"], 10_000, "{effort}: the caller's cap is never raised");
        assert!(dropped.is_empty(), "{effort}: {dropped:?}");
    }
    // Capped at 32000.
    let (v, _) = tr(Api::Responses, Api::Anthropic, responses_body("high", Some(100_000)));
    assert_eq!(v["thinking"]["budget_tokens"], 32_000);
    // No cap from the caller: the ratio of 4096, the budget added to the answer's default room.
    let (v, _) = tr(Api::Responses, Api::Anthropic, responses_body("high", None));
    assert_eq!((&v["thinking"]["budget_tokens"], &v["max_tokens"]), (&sj!(3276), &sj!(4096 + 3276)));
    // `none`: no thinking, and nothing dropped (no thinking is Anthropic's default).
    let (v, dropped) = tr(Api::Responses, Api::Anthropic, responses_body("none", Some(2000)));
    assert!(v.get("thinking").is_none() && dropped.is_empty(), "{v} {dropped:?}");
    // A cap of 1024 or less leaves no room for Anthropic's smallest budget: no thinking, named.
    let (v, dropped) = tr(Api::Responses, Api::Anthropic, responses_body("high", Some(1024)));
    assert!(v.get("thinking").is_none(), "{v}");
    assert_eq!((v["max_tokens"].as_u64(), dropped), (Some(1024), vec!["reasoning.effort".to_string()]));
    // Just above: the 1024 floor, below the cap.
    let (v, _) = tr(Api::Responses, Api::Anthropic, responses_body("low", Some(1100)));
    assert_eq!(v["thinking"]["budget_tokens"], 1024);
    // An explicit budget at or above the cap is lowered under it.
    let body =
        sj!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "reasoning": {"max_tokens": 5000}});
    let (v, _) = tr(Api::OpenAi, Api::Anthropic, body);
    assert_eq!(v["thinking"]["budget_tokens"], 2999);
    // An absurd budget without a cap still fits under the max_tokens it gets.
    let body = sj!({"messages": [{"role": "user", "content": "hi"}], "reasoning": {"max_tokens": u64::MAX}});
    let (v, _) = tr(Api::OpenAi, Api::Anthropic, body);
    assert!(v["thinking"]["budget_tokens"].as_u64() < v["max_tokens"].as_u64(), "{v}");
    // Chat's `reasoning_effort` and an unknown effort.
    let chat = sj!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "reasoning_effort": "medium"});
    assert_eq!(tr(Api::OpenAi, Api::Anthropic, chat).0["thinking"]["budget_tokens"], 1024);
    let (v, dropped) = tr(Api::Responses, Api::Anthropic, responses_body("galaxy", Some(9000)));
    assert!(v.get("thinking").is_none() && dropped == vec!["reasoning.effort".to_string()], "{v} {dropped:?}");
}

#[test]
fn thinking_drops_the_sampling_knobs_anthropic_refuses_with_it_and_yields_to_a_forced_tool() {
    let mut b = responses_body("high", Some(10_000));
    b["temperature"] = sj!(0.3);
    b["top_p"] = sj!(0.5);
    b["top_k"] = sj!(40);
    let (v, dropped) = tr(Api::Responses, Api::Anthropic, b.clone());
    assert_eq!(v["thinking"]["budget_tokens"], 8000);
    assert!(v.get("temperature").is_none() && v.get("top_p").is_none() && v.get("top_k").is_none(), "{v}");
    assert_eq!(dropped, vec!["temperature", "top_k", "top_p"]);
    // What thinking takes is kept: temperature 1, top_p from 0.95.
    b["temperature"] = sj!(1.0);
    b["top_p"] = sj!(0.97);
    b.as_object_mut().unwrap().remove("top_k");
    let (v, dropped) = tr(Api::Responses, Api::Anthropic, b.clone());
    assert_eq!((v["temperature"].as_f64(), v["top_p"].as_f64()), (Some(1.0), Some(0.97)));
    assert!(dropped.is_empty(), "{dropped:?}");
    // Without thinking nothing is touched.
    b["reasoning"] = sj!({"effort": "none"});
    b["temperature"] = sj!(0.3);
    assert_eq!(tr(Api::Responses, Api::Anthropic, b.clone()).0["temperature"], 0.3);
    // A forced tool choice: the call is what the caller asked for, thinking goes.
    b["reasoning"] = sj!({"effort": "high"});
    b["tools"] = sj!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    for choice in [sj!("required"), sj!({"type": "function", "name": "f"})] {
        b["tool_choice"] = choice;
        let (v, dropped) = tr(Api::Responses, Api::Anthropic, b.clone());
        assert!(v.get("thinking").is_none(), "{v}");
        assert_eq!(v["temperature"], 0.3, "kept: no thinking");
        assert_eq!(dropped, vec!["reasoning.effort"]);
    }
    b["tool_choice"] = sj!("auto");
    assert_eq!(tr(Api::Responses, Api::Anthropic, b).0["thinking"]["budget_tokens"], 8000);
}

#[test]
fn efforts_and_adaptive_thinking_become_googles_thinking_config() {
    let (v, dropped) = tr(Api::Responses, Api::Google, responses_body("high", Some(10_000)));
    assert_eq!(v["generationConfig"]["thinkingConfig"], sj!({"thinkingBudget": 8000, "includeThoughts": true}));
    assert_eq!(v["generationConfig"]["maxOutputTokens"], 10_000);
    assert!(dropped.is_empty(), "{dropped:?}");
    let (v, _) = tr(Api::Responses, Api::Google, responses_body("none", None));
    assert_eq!(v["generationConfig"]["thinkingConfig"], sj!({"thinkingBudget": 0}));
    let (v, _) = tr(Api::Responses, Api::Google, responses_body("low", Some(500)));
    assert_eq!(v["generationConfig"]["thinkingConfig"]["thinkingBudget"], 499, "below the cap");
    // Anthropic's adaptive thinking is Google's dynamic budget; an effort beside it wins.
    let anthropic = sj!({"model": "x", "max_tokens": 2000, "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "adaptive"}});
    let (v, dropped) = tr(Api::Anthropic, Api::Google, anthropic.clone());
    assert_eq!(v["generationConfig"]["thinkingConfig"], sj!({"thinkingBudget": -1, "includeThoughts": true}));
    assert!(dropped.is_empty(), "{dropped:?}");
    let mut with_effort = anthropic.clone();
    with_effort["output_config"] = sj!({"effort": "medium"});
    let (v, _) = tr(Api::Anthropic, Api::Google, with_effort);
    assert_eq!(v["generationConfig"]["thinkingConfig"]["thinkingBudget"], 1024);
    // To chat completions adaptive is the reasoning model's default: nothing sent, nothing named.
    let (v, dropped) = tr(Api::Anthropic, Api::OpenAi, anthropic);
    assert!(v.get("reasoning_effort").is_none() && dropped.is_empty(), "{v} {dropped:?}");
    // Google's own dynamic budget has no Anthropic counterpart: dropped, named.
    let google = sj!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"thinkingConfig": {"thinkingBudget": -1}}});
    let (v, dropped) = tr(Api::Google, Api::Anthropic, google);
    assert!(v.get("thinking").is_none(), "{v}");
    assert_eq!(dropped, vec!["generationConfig.thinkingConfig.thinkingBudget"]);
}

#[test]
fn budgets_become_the_nearest_effort_for_chat_completions() {
    let anthropic = |budget: u64| {
        sj!({"model": "x", "max_tokens": 10_000, "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": budget}})
    };
    for (budget, effort) in [(9500, "high"), (8000, "high"), (5000, "medium"), (2000, "low"), (1024, "low")] {
        let (v, dropped) = tr(Api::Anthropic, Api::OpenAi, anthropic(budget));
        assert_eq!(v["reasoning_effort"], effort, "{budget}");
        assert!(dropped.is_empty(), "{dropped:?}");
    }
    // Google without a cap: the share of 4096; a budget of 0 has no effort every model takes.
    let google = |budget: i64| {
        sj!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"thinkingConfig": {"thinkingBudget": budget}}})
    };
    assert_eq!(tr(Api::Google, Api::OpenAi, google(2048)).0["reasoning_effort"], "medium");
    let (v, dropped) = tr(Api::Google, Api::OpenAi, google(0));
    assert!(v.get("reasoning_effort").is_none(), "{v}");
    assert_eq!(dropped, vec!["generationConfig.thinkingConfig.thinkingBudget"]);
    // Anthropic's `max` is no chat completions effort.
    let max = sj!({"model": "x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"effort": "max"}});
    assert_eq!(tr(Api::Anthropic, Api::OpenAi, max).0["reasoning_effort"], "high");
    // Round trip: an effort to Anthropic and its budget back name the same effort.
    for effort in ["low", "medium", "high"] {
        let (v, _) = tr(Api::Responses, Api::Anthropic, responses_body(effort, Some(16_000)));
        let (back, _) = tr(Api::Anthropic, Api::OpenAi, v);
        assert_eq!(back["reasoning_effort"], effort);
    }
}

/// One answer with reasoning text in each API's shape.
fn answers_with_reasoning() -> [(Api, Value); 4] {
    [
        (
            Api::Anthropic,
            sj!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "thinking", "thinking": "Let me ", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xx"},
                    {"type": "thinking", "thinking": "think.", "signature": "sig"},
                    {"type": "text", "text": "Paris."}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 30}}),
        ),
        (
            Api::Google,
            sj!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me ", "thought": true},
                    {"text": "think.", "thought": true}, {"text": "Paris."}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 25},
                "modelVersion": "m", "responseId": "1"}),
        ),
        (
            Api::OpenAi,
            sj!({"id": "1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Paris.", "reasoning_content": "Let me think."}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 30,
                    "completion_tokens_details": {"reasoning_tokens": 25}}}),
        ),
        (
            Api::OpenAi,
            sj!({"id": "1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Paris.", "reasoning": "Let me think."}}]}),
        ),
    ]
}

#[test]
fn reasoning_text_of_every_api_reaches_each_caller_in_its_shape() {
    for (from, body) in answers_with_reasoning() {
        let out = |to| -> Value {
            serde_json::from_slice(&answer(from, to, body.to_string().as_bytes(), 5).unwrap()).unwrap()
        };
        let r = out(Api::Responses);
        assert_eq!(r["output"][0]["type"], "reasoning", "{from:?}: before the message");
        assert!(r["output"][0]["id"].as_str().unwrap().starts_with("rs_"));
        assert_eq!(r["output"][0]["summary"], sj!([{"type": "summary_text", "text": "Let me think."}]));
        assert_eq!((&r["output"][1]["type"], &r["output"][1]["content"][0]["text"]), (&sj!("message"), &sj!("Paris.")));
        if from != Api::Anthropic && body.pointer("/choices/0/message/reasoning").is_none() {
            assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 25, "{from:?}");
        }
        if from != Api::OpenAi {
            let c = out(Api::OpenAi);
            assert_eq!(c["choices"][0]["message"]["reasoning"], "Let me think.", "{from:?}");
            assert_eq!(c["choices"][0]["message"]["content"], "Paris.");
        }
        if from != Api::Google {
            let g = out(Api::Google);
            let parts = &g["candidates"][0]["content"]["parts"];
            assert_eq!(parts[0], sj!({"text": "Let me think.", "thought": true}), "{from:?}");
            assert_eq!(parts[1], sj!({"text": "Paris."}));
        }
        if from != Api::Anthropic {
            // An unsigned thinking block would be refused when sent back to Anthropic: none.
            let a = out(Api::Anthropic);
            assert_eq!(a["content"], sj!([{"type": "text", "text": "Paris."}]), "{from:?}");
        }
    }
    // No reasoning: no reasoning item, no field.
    let plain = sj!({"id": "1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "Paris."}}]});
    let r: Value =
        serde_json::from_slice(&answer(Api::OpenAi, Api::Responses, plain.to_string().as_bytes(), 5).unwrap()).unwrap();
    assert_eq!(r["output"].as_array().map(Vec::len), Some(1));
}

/// One stream with reasoning text before the answer's text, in each API's shape.
fn streams_with_reasoning() -> [(Api, String); 3] {
    let openai = [
        sj!({"id": "1", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
        sj!({"id": "1", "model": "m", "choices": [{"index": 0, "delta": {"reasoning": null, "reasoning_content": "Let me "}}]}),
        sj!({"id": "1", "model": "m", "choices": [{"index": 0, "delta": {"reasoning": "thinké."}}]}),
        sj!({"id": "1", "model": "m", "choices": [{"index": 0, "delta": {"content": "Paris."}}]}),
        sj!({"id": "1", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        sj!({"id": "1", "model": "m", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 30,
            "completion_tokens_details": {"reasoning_tokens": 25}}}),
    ]
    .iter()
    .map(|v| format!("data: {v}\n\n"))
    .collect::<String>()
        + "data: [DONE]\n\n";
    let anthropic = [
        (
            "message_start",
            sj!({"type": "message_start", "message": {"id": "msg_1", "model": "m",
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            sj!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        (
            "content_block_delta",
            sj!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
        ),
        (
            "content_block_delta",
            sj!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "thinké."}}),
        ),
        (
            "content_block_delta",
            sj!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "EqQBCgIYAh"}}),
        ),
        ("content_block_stop", sj!({"type": "content_block_stop", "index": 0})),
        (
            "content_block_start",
            sj!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            sj!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Paris."}}),
        ),
        ("content_block_stop", sj!({"type": "content_block_stop", "index": 1})),
        (
            "message_delta",
            sj!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", sj!({"type": "message_stop"})),
    ]
    .iter()
    .map(|(e, v)| format!("event: {e}\ndata: {v}\n\n"))
    .collect::<String>();
    let google = [
        sj!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me ", "thought": true}]}}],
            "modelVersion": "m", "responseId": "1"}),
        sj!({"candidates": [{"content": {"role": "model", "parts": [{"text": "thinké.", "thought": true}]}}],
            "modelVersion": "m", "responseId": "1"}),
        sj!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Paris."}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 25},
            "modelVersion": "m", "responseId": "1"}),
    ]
    .iter()
    .map(|v| format!("data: {v}\r\n\r\n"))
    .collect::<String>();
    [(Api::OpenAi, openai), (Api::Anthropic, anthropic), (Api::Google, google)]
}

/// Feeds `body` whole and byte by byte (UTF-8 characters and CRLFs split): the same bytes.
fn translate(from: Api, to: Api, body: &str) -> Vec<u8> {
    let mut whole = StreamTranslator::new(from, to, 9, false);
    let out = whole.feed(body.as_bytes());
    assert!(whole.ended(), "{from:?} -> {to:?}");
    let mut split = StreamTranslator::new(from, to, 9, false);
    let piecewise: Vec<u8> = body.as_bytes().iter().flat_map(|b| split.feed(&[*b])).collect();
    assert_eq!(piecewise, out, "{from:?} -> {to:?} split");
    out
}

fn data_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn streamed_reasoning_becomes_a_responses_reasoning_item_with_its_summary_events() {
    for (from, body) in streams_with_reasoning() {
        let out = translate(from, Api::Responses, &body);
        let evs: Vec<Value> = data_lines(&out);
        let kinds: Vec<&str> = evs.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ],
            "{from:?}"
        );
        for (i, v) in evs.iter().enumerate() {
            assert_eq!(v["sequence_number"].as_u64(), Some(i as u64), "{from:?}");
        }
        let rs = evs[2]["item"]["id"].as_str().unwrap().to_string();
        assert!(rs.starts_with("rs_"), "{rs}");
        assert_eq!(evs[2]["item"], sj!({"type": "reasoning", "id": rs, "summary": []}));
        for v in &evs[3..9] {
            assert_eq!((&v["output_index"], v["item_id"].as_str().unwrap_or(&rs)), (&sj!(0), rs.as_str()), "{v}");
        }
        for v in &evs[3..8] {
            assert_eq!(v["summary_index"], 0, "{v}");
        }
        assert_eq!(evs[3]["part"], sj!({"type": "summary_text", "text": ""}));
        assert_eq!((&evs[4]["delta"], &evs[5]["delta"]), (&sj!("Let me "), &sj!("thinké.")));
        assert_eq!(evs[6]["text"], "Let me thinké.");
        assert_eq!(evs[7]["part"], sj!({"type": "summary_text", "text": "Let me thinké."}));
        let item =
            sj!({"type": "reasoning", "id": rs, "summary": [{"type": "summary_text", "text": "Let me thinké."}]});
        assert_eq!(evs[8]["item"], item);
        assert_eq!((&evs[9]["output_index"], &evs[11]["output_index"]), (&sj!(1), &sj!(1)));
        let r = &evs[15]["response"];
        assert_eq!(r["output"][0], item, "{from:?}");
        assert_eq!(r["output"][1]["content"][0]["text"], "Paris.");
        if from != Api::Anthropic {
            assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 25, "{from:?}");
        }
    }
}

#[test]
fn streamed_reasoning_reaches_chat_and_google_callers_but_never_anthropic_ones() {
    for (from, body) in streams_with_reasoning() {
        if from != Api::OpenAi {
            let chunks = data_lines(&translate(from, Api::OpenAi, &body));
            let reasoning: String =
                chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/reasoning")?.as_str()).collect();
            assert_eq!(reasoning, "Let me thinké.", "{from:?}");
            let text: String = chunks.iter().filter_map(|c| c.pointer("/choices/0/delta/content")?.as_str()).collect();
            assert_eq!(text, "Paris.");
        }
        if from != Api::Google {
            let chunks = data_lines(&translate(from, Api::Google, &body));
            let parts: Vec<&Value> = chunks.iter().filter_map(|c| c.pointer("/candidates/0/content/parts/0")).collect();
            let thoughts: String =
                parts.iter().filter(|p| p["thought"] == true).filter_map(|p| p["text"].as_str()).collect();
            assert_eq!(thoughts, "Let me thinké.", "{from:?}");
            let text: String =
                parts.iter().filter(|p| p.get("thought").is_none()).filter_map(|p| p["text"].as_str()).collect();
            assert_eq!(text, "Paris.");
        }
        if from != Api::Anthropic {
            let out = translate(from, Api::Anthropic, &body);
            let text = String::from_utf8(out).unwrap();
            assert!(!text.contains("thinking") && !text.contains("Let me"), "{from:?}: {text}");
            let deltas: String = data_lines(text.as_bytes())
                .iter()
                .filter_map(|v| v.pointer("/delta/text")?.as_str().map(str::to_string))
                .collect();
            assert_eq!(deltas, "Paris.");
        }
    }
}
