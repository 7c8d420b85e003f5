//! What providers and the host hand back: the answer rewrite (JSON bodies and SSE events: catalog
//! model id, `provider`, `usage.cost`), the
//! usage scanner (JSON and SSE tails), the SSE end-of-stream detector, `Retry-After`, and the host-written records the filters
//! decode (attempt plan, attempt records, shared-data statistics, proxy-wasm header maps).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::answer::response::{rewrite_answer, rewrite_object, Served, SseRewriter};
use switchyard::answer::sse::StreamEnd;
use switchyard::answer::usage::{completion_tokens, ReportedUsage, USAGE_TAIL_BYTES};
use switchyard::api::Api;
use switchyard::config::Pricing;
use switchyard::protocol::outcome::{decode_records, encode_records, parse_retry_after};
use switchyard::protocol::plan::AttemptPlan;
use switchyard::protocol::wire::deserialize_map;
use switchyard::routing::stats::EndpointStats;

fuzz_target!(|data: &[u8]| {
    let served = Served {
        model: "m/x".into(),
        slug: "alpha/turbo".into(),
        pricing: Pricing { prompt: 1.0, completion: 2.0, request: 0.0, image: 0.0, cached_prompt: Some(0.5) },
        api: Api::OpenAi,
    };
    if let Some(out) = rewrite_object(data, &served) {
        let v: serde_json::Value = match serde_json::from_slice(&out) {
            Ok(v) => v,
            Err(e) => panic!("rewritten response is not JSON: {e}"),
        };
        assert_eq!(v["provider"], "alpha/turbo");
    }
    // The SSE rewrite gives the same bytes however the stream is cut into chunks.
    let cut = usize::from(data.last().copied().unwrap_or(0)) % (data.len() + 1);
    let mut one = SseRewriter::new(served.clone());
    let mut two = SseRewriter::new(served.clone());
    let whole = one.feed(data, true);
    let mut split = two.feed(&data[..cut], false);
    split.extend(two.feed(&data[cut..], true));
    assert_eq!(whole, split, "chunking changed the rewritten stream");
    // The same for Anthropic and Google answers and streams (their rewrites keep state across
    // events: message_start's usage for message_delta's cost).
    for api in [Api::Anthropic, Api::Google] {
        let served = Served { api, ..served.clone() };
        if let Some(out) = rewrite_answer(data, &served).map(|p| p.concat()) {
            if let Err(e) = serde_json::from_slice::<serde_json::Value>(&out) {
                panic!("rewritten {api:?} answer is not JSON: {e}");
            }
        }
        let mut one = SseRewriter::new(served.clone());
        let mut two = SseRewriter::new(served);
        let whole = one.feed(data, true);
        let mut split = two.feed(&data[..cut], false);
        split.extend(two.feed(&data[cut..], true));
        assert_eq!(whole, split, "chunking changed the rewritten {api:?} stream");
        let mut usage = ReportedUsage::default();
        usage.scan_for(api, data);
    }
    // SSE: a terminator split across chunks is seen exactly as in one piece.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let (mut whole, mut parts) = (StreamEnd::default(), StreamEnd::default());
    whole.feed(data);
    for chunk in data.chunks(step) {
        parts.feed(chunk);
    }
    assert_eq!(whole.complete(), parts.complete(), "chunking changed the stream's end");
    let (mut whole, mut parts) = (StreamEnd::for_api(Api::Google), StreamEnd::for_api(Api::Google));
    whole.feed(data);
    for chunk in data.chunks(step) {
        parts.feed(chunk);
    }
    assert_eq!(whole.complete(), parts.complete(), "chunking changed a Google stream's end");
    let _ = completion_tokens(data);
    let _ = completion_tokens(&data[data.len().saturating_sub(USAGE_TAIL_BYTES)..]);
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(s) = parse_retry_after(text, 300) {
            assert!(s <= 300);
        }
    }
    let records = decode_records(data);
    assert_eq!(decode_records(&encode_records(&records)), records);
    let _ = AttemptPlan::decode(data);
    let _ = EndpointStats::decode(data).encode();
    let _ = deserialize_map(data);
});
