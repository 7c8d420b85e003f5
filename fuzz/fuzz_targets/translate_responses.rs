//! The Responses API's translators (`switchyard::translate::responses`, `responses_stream`): any
//! body as a Responses request becomes each other API's body (valid JSON) or a refusal naming a
//! field; any answer or error of another API becomes a Responses answer or OpenAI error (valid
//! JSON); any stream of another API becomes Responses events whatever its split, never a panic.
//! A budget translated for Anthropic fits its limits. Reasoning text (thinking blocks, thought
//! parts, `reasoning` deltas) takes the reasoning item paths (seeds `responses-4` to `-8`).
//! The first byte picks the other API and whether it streams, the second the split size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::api::Api;
use switchyard::translate;
use switchyard::translate::stream::StreamTranslator;

fuzz_target!(|data: &[u8]| {
    let [pick, split, body @ ..] = data else { return };
    let other = [Api::OpenAi, Api::Anthropic, Api::Google][usize::from(pick % 3)];
    let stream = pick & 0x80 != 0;
    match translate::request(Api::Responses, other, body, "up-model", stream) {
        Ok(t) => match serde_json::from_slice::<serde_json::Value>(&t.body) {
            Ok(v) => thinking_fits(&v, other),
            Err(e) => panic!("translated request is not JSON: {e}"),
        },
        Err(r) => assert!(!r.param.is_empty(), "a refusal names its field"),
    }
    if let Some(out) = translate::answer(other, Api::Responses, body, 1) {
        let v: serde_json::Value = serde_json::from_slice(&out).expect("translated answer is JSON");
        assert_eq!(v["object"], "response");
    }
    let (_, out) = translate::error(other, Api::Responses, 400 + u16::from(*pick), body);
    assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok(), "translated error is not JSON");
    let mut whole = StreamTranslator::new(other, Api::Responses, 1, false);
    let out = whole.feed(body);
    let mut pieces = StreamTranslator::new(other, Api::Responses, 1, false);
    let mut split_out = Vec::new();
    for chunk in body.chunks(usize::from(*split).max(1)) {
        split_out.extend(pieces.feed(chunk));
    }
    assert_eq!(out, split_out, "the output depends on how the input was split");
    assert_eq!(whole.ended(), pieces.ended());
});

/// Anthropic takes a thinking budget of at least 1024 below `max_tokens`: a translated request
/// never asks for another.
fn thinking_fits(v: &serde_json::Value, to: Api) {
    let budget = v.pointer("/thinking/budget_tokens").and_then(serde_json::Value::as_u64);
    if let (Api::Anthropic, Some(b)) = (to, budget) {
        assert!(b >= 1024, "thinking budget {b} under 1024");
        if let Some(max) = v.get("max_tokens").and_then(serde_json::Value::as_u64) {
            assert!(b < max, "thinking budget {b} not below max_tokens {max}");
        }
    }
}
