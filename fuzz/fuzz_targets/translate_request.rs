//! Request and answer translation between the three APIs (`switchyard::translate`): any body in
//! any direction is a translated body (valid JSON) or a refusal naming a field, never a panic;
//! answers and errors likewise; a thinking budget translated for Anthropic fits its limits. The
//! first byte picks the direction.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::api::Api;
use switchyard::translate;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let from = Api::ALL[usize::from(pick % 3)];
    let to = Api::ALL[usize::from(pick / 3 % 3)];
    let stream = pick & 0x80 != 0;
    match translate::request(from, to, body, "up-model", stream) {
        Ok(t) => match serde_json::from_slice::<serde_json::Value>(&t.body) {
            Ok(v) => thinking_fits(&v, to),
            Err(e) => panic!("translated request is not JSON: {e}"),
        },
        Err(r) => assert!(!r.param.is_empty(), "a refusal names its field"),
    }
    if let Some(out) = translate::answer(from, to, body, 1) {
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&out) {
            panic!("translated answer is not JSON: {e}");
        }
    }
    let (status, out) = translate::error(from, to, 400 + u16::from(pick), body);
    assert!((400..=655).contains(&status));
    assert!(serde_json::from_slice::<serde_json::Value>(&out).is_ok(), "translated error is not JSON");
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
