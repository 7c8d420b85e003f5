//! The Responses API translators' tests: its requests into each API, answers, errors and
//! streams out of each.

use serde_json::Value;

use super::stream::StreamTranslator;
use super::tests::{answers, streams};
use super::*;

fn tr(to: Api, body: Value, stream: bool) -> (Value, Vec<String>) {
    let t = request(Api::Responses, to, body.to_string().as_bytes(), "up-model", stream)
        .unwrap_or_else(|r| panic!("{r:?}"));
    (serde_json::from_slice(&t.body).unwrap(), t.dropped)
}

fn refused(to: Api, body: Value) -> Refused {
    request(Api::Responses, to, body.to_string().as_bytes(), "m", false).expect_err("refused")
}

/// A two-turn Responses conversation: instructions, a user message with an image, the model's
/// call and its output, a reasoning item, function tools, structured output.
fn conversation() -> Value {
    serde_json::json!({
        "model": "x", "instructions": "Be brief.", "max_output_tokens": 100, "temperature": 0.5, "top_p": 0.9,
        "metadata": {"k": "v"}, "user": "u1", "store": true,
        "reasoning": {"effort": "low", "summary": "auto"},
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": true}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": false,
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}},
    })
}

#[test]
fn a_responses_request_becomes_a_chat_completions_request() {
    let (v, dropped) = tr(Api::OpenAi, conversation(), true);
    assert_eq!(
        v["messages"],
        serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ])
    );
    assert_eq!(v["max_tokens"].as_u64().or(v["max_completion_tokens"].as_u64()), Some(100));
    assert_eq!((v["temperature"].clone(), v["top_p"].clone()), (serde_json::json!(0.5), serde_json::json!(0.9)));
    assert_eq!(v["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(v["tool_choice"], serde_json::json!({"type": "function", "function": {"name": "get_weather"}}));
    assert_eq!(v["parallel_tool_calls"], false);
    assert_eq!(v["response_format"]["type"], "json_schema");
    assert_eq!(v["response_format"]["json_schema"]["name"], "w");
    assert_eq!(v["reasoning_effort"], "low");
    assert_eq!(v["user"], "u1");
    assert_eq!(v["stream_options"], serde_json::json!({"include_usage": true}));
    assert_eq!(v["model"], "up-model");
    for d in ["metadata", "store", "input[].reasoning"] {
        assert!(dropped.contains(&d.to_string()), "{d}: {dropped:?}");
    }
    // The reasoning text comes back as the summary: not dropped.
    assert!(!dropped.iter().any(|d| d.starts_with("reasoning.")), "{dropped:?}");
}

#[test]
fn a_responses_request_reaches_anthropic_and_google() {
    let (a, dropped) = tr(Api::Anthropic, conversation(), false);
    assert_eq!(a["system"], "Be brief.");
    assert_eq!(a["max_tokens"], 100);
    let roles: Vec<&str> = a["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(a["messages"][1]["content"][1]["type"], "tool_use");
    assert_eq!(a["messages"][2]["content"][0]["tool_use_id"], "call_1");
    assert_eq!(
        a["tool_choice"],
        serde_json::json!({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true})
    );
    assert_eq!(a["output_config"]["format"]["type"], "json_schema");
    assert!(dropped.contains(&"reasoning.effort".to_string()), "{dropped:?}");
    let (g, _) = tr(Api::Google, conversation(), false);
    assert_eq!(g["systemInstruction"]["parts"][0]["text"], "Be brief.");
    assert_eq!(g["contents"][1]["parts"][1]["functionCall"]["name"], "get_weather");
    assert_eq!(g["contents"][2]["parts"][0]["functionResponse"]["name"], "get_weather");
    assert_eq!(g["generationConfig"]["maxOutputTokens"], 100);
    assert_eq!(g["generationConfig"]["responseMimeType"], "application/json");
    // A plain string input is one user message.
    let (v, dropped) = tr(Api::OpenAi, serde_json::json!({"model": "x", "input": "hi"}), false);
    assert_eq!(v["messages"], serde_json::json!([{"role": "user", "content": "hi"}]));
    assert!(dropped.is_empty(), "{dropped:?}");
    // OpenRouter's reasoning budget becomes Anthropic's thinking budget.
    let (a, _) =
        tr(Api::Anthropic, serde_json::json!({"model": "x", "input": "hi", "reasoning": {"max_tokens": 2048}}), false);
    assert_eq!(a["thinking"], serde_json::json!({"type": "enabled", "budget_tokens": 2048}));
}

#[test]
fn what_cannot_be_translated_is_refused_naming_the_field() {
    for (body, param) in [
        (serde_json::json!({"model": "x", "input": "hi", "tools": [{"type": "web_search"}]}), "tools[0].type"),
        (
            serde_json::json!({"model": "x", "input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "file_search"}]}),
            "tools[1].type",
        ),
        (serde_json::json!({"model": "x", "input": "hi", "tool_choice": {"type": "code_interpreter"}}), "tool_choice"),
        (serde_json::json!({"model": "x", "input": "hi", "previous_response_id": "resp_1"}), "previous_response_id"),
        (serde_json::json!({"model": "x", "input": "hi", "conversation": "conv_1"}), "conversation"),
        (serde_json::json!({"model": "x", "input": "hi", "background": true}), "background"),
        (serde_json::json!({"model": "x", "input": [{"type": "item_reference", "id": "x"}]}), "input[0].type"),
        (
            serde_json::json!({"model": "x", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].type",
        ),
        (
            serde_json::json!({"model": "x", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}),
            "input[0].content[0].file_id",
        ),
        (serde_json::json!({"model": "x", "input": "hi", "text": {"format": {"type": "grammar"}}}), "text.format.type"),
        (serde_json::json!({"model": "x"}), "input"),
    ] {
        for to in [Api::OpenAi, Api::Anthropic, Api::Google] {
            assert_eq!(refused(to, body.clone()).param, param, "{to:?} {body}");
        }
    }
    assert!(refused(Api::OpenAi, serde_json::json!({"model": "x", "tools": [{"type": "web_search"}], "input": "hi"}))
        .message
        .contains("web_search"));
    // Codex's sub-agent tools, grouped in a namespace.
    let codex = serde_json::json!({"model": "x", "input": "hi", "tools": [{"type": "namespace", "name": "multi_agent_v1",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}]}]});
    let e = refused(Api::Anthropic, codex);
    assert_eq!(e.param, "tools[0].type");
    assert!(e.message.contains("namespace tools"), "{}", e.message);
}

#[test]
fn answers_of_every_api_become_a_response_object() {
    for (from, body) in answers() {
        let out = answer(from, Api::Responses, body.to_string().as_bytes(), 5).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let what = format!("{from:?}");
        assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")), "{what}");
        assert!(v["id"].as_str().unwrap().starts_with("resp_"), "{what}");
        assert_eq!((v["created_at"].as_u64(), v["model"].as_str()), (Some(5), Some("m")), "{what}");
        assert_eq!(v["output"][0]["type"], "message", "{what}");
        assert_eq!(
            v["output"][0]["content"][0],
            serde_json::json!({"type": "output_text", "text": "ok", "annotations": [], "logprobs": []})
        );
        assert_eq!(v["output"][1]["type"], "function_call", "{what}");
        assert_eq!(
            (&v["output"][1]["call_id"], &v["output"][1]["name"], &v["output"][1]["arguments"]),
            (&serde_json::json!("call_9"), &serde_json::json!("f"), &serde_json::json!("{\"a\":1}")),
            "{what}"
        );
        assert_eq!(
            v["usage"],
            serde_json::json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}),
            "{what}"
        );
        assert_eq!(v["incomplete_details"], Value::Null);
    }
    // Cut at the token limit: incomplete, with the reason.
    let cut = serde_json::json!({"id": "1", "model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": "par"},
        "finish_reason": "length"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}});
    let v: Value =
        serde_json::from_slice(&answer(Api::OpenAi, Api::Responses, cut.to_string().as_bytes(), 0).unwrap()).unwrap();
    assert_eq!(
        (v["status"].as_str(), &v["incomplete_details"]),
        (Some("incomplete"), &serde_json::json!({"reason": "max_output_tokens"}))
    );
}

#[test]
fn errors_take_openais_shape() {
    let (s, b) = error(
        Api::Anthropic,
        Api::Responses,
        529,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    );
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(
        (s, &v["error"]["message"], &v["error"]["type"]),
        (503, &serde_json::json!("Overloaded"), &serde_json::json!("server_error"))
    );
    let (s, b) = error(
        Api::Google,
        Api::Responses,
        400,
        br#"{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}"#,
    );
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!((s, &v["error"]["type"]), (400, &serde_json::json!("invalid_request_error")));
}

/// The events of a Responses stream: (type, data).
fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (head, data) = e.split_once('\n').unwrap();
            let kind = head.strip_prefix("event: ").unwrap().to_string();
            let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(v["type"].as_str(), Some(kind.as_str()));
            (kind, v)
        })
        .collect()
}

#[test]
fn streams_of_every_api_become_responses_events_however_split() {
    for (from, body) in streams() {
        let mut whole = StreamTranslator::new(from, Api::Responses, 9, false);
        let out = whole.feed(body.as_bytes());
        assert!(whole.ended(), "{from:?}");
        let evs = events(&out);
        let kinds: Vec<&str> = evs.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds.get(..4),
            Some(
                &[
                    "response.created",
                    "response.in_progress",
                    "response.output_item.added",
                    "response.content_part.added"
                ][..]
            ),
            "{from:?}"
        );
        let at = |k: &str| evs.iter().position(|(kind, _)| kind == k).unwrap_or_else(|| panic!("{from:?}: no {k}"));
        // Every sequence number in order, from 0.
        for (i, (_, v)) in evs.iter().enumerate() {
            assert_eq!(v["sequence_number"].as_u64(), Some(i as u64), "{from:?}");
        }
        let text: String = evs
            .iter()
            .filter(|(k, _)| k == "response.output_text.delta")
            .map(|(_, v)| v["delta"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, "Hello é", "{from:?}");
        assert_eq!(evs[at("response.output_text.done")].1["text"], "Hello é");
        assert!(at("response.content_part.done") < at("response.function_call_arguments.delta"), "{from:?}");
        let args = &evs[at("response.function_call_arguments.done")].1;
        assert_eq!((&args["name"], &args["output_index"]), (&serde_json::json!("f"), &serde_json::json!(1)));
        assert_eq!(
            serde_json::from_str::<Value>(args["arguments"].as_str().unwrap()).unwrap(),
            serde_json::json!({"a": 1})
        );
        let (last, done) = evs.last().unwrap();
        assert_eq!(last, "response.completed", "{from:?}");
        let r = &done["response"];
        assert_eq!((r["status"].as_str(), r["model"].as_str()), (Some("completed"), Some("m")));
        assert_eq!(r["output"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["output"][1]["call_id"], "call_9");
        assert_eq!(r["usage"]["input_tokens"], 100);
        assert_eq!(r["usage"]["output_tokens"], 20);
        assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 40);
        // Byte by byte (a UTF-8 character split too): the same bytes come out.
        let mut split = StreamTranslator::new(from, Api::Responses, 9, false);
        let mut piecewise = Vec::new();
        for b in body.as_bytes() {
            piecewise.extend(split.feed(&[*b]));
        }
        assert_eq!(piecewise, out, "{from:?} split");
    }
}

#[test]
fn a_stream_cut_at_the_limit_or_failing_ends_as_openai_ends_it() {
    let cut = "data: {\"id\":\"1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"pa\"}}]}\n\n\
        data: {\"id\":\"1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
        data: [DONE]\n\n";
    let evs = events(&StreamTranslator::new(Api::OpenAi, Api::Responses, 0, false).feed(cut.as_bytes()));
    let (last, v) = evs.last().unwrap();
    assert_eq!(
        (last.as_str(), &v["response"]["incomplete_details"]),
        ("response.incomplete", &serde_json::json!({"reason": "max_output_tokens"}))
    );
    let e = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let mut t = StreamTranslator::new(Api::Anthropic, Api::Responses, 0, false);
    let evs = events(&t.feed(e.as_bytes()));
    let kinds: Vec<&str> = evs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["error", "response.failed"]);
    assert_eq!(evs[1].1["response"]["error"]["message"], "Overloaded");
    assert!(t.ended());
    // A stream cut before its end does not pretend to be complete.
    let [openai, ..] = streams();
    let mut t = StreamTranslator::new(Api::OpenAi, Api::Responses, 0, false);
    let out = String::from_utf8(t.feed(&openai.1.as_bytes()[..openai.1.len() / 2])).unwrap();
    assert!(!t.ended() && !out.contains("response.completed"), "{out}");
}

// Never a panic, whatever the bytes (the fuzz target `translate_responses` does this guided):
// every truncation and many byte flips of a request, each API's answer and stream.
#[test]
fn mutated_inputs_never_panic() {
    let mut inputs: Vec<(Api, Vec<u8>)> = vec![(Api::OpenAi, conversation().to_string().into_bytes())];
    inputs.extend(answers().into_iter().map(|(a, v)| (a, v.to_string().into_bytes())));
    inputs.extend(streams().into_iter().map(|(a, s)| (a, s.into_bytes())));
    let mut seed = 7u64;
    for (other, base) in inputs {
        for cut in 0..base.len() {
            let mut b = base[..cut].to_vec();
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if let Some(x) = b.get_mut((seed >> 33) as usize % cut.max(1)) {
                *x ^= (seed >> 17) as u8;
            }
            for body in [&base[..cut], &b[..]] {
                let _ = request(Api::Responses, other, body, "m", true);
                let _ = answer(other, Api::Responses, body, 0);
                let _ = error(other, Api::Responses, 500, body);
                let _ = StreamTranslator::new(other, Api::Responses, 0, false).feed(body);
            }
        }
    }
}
