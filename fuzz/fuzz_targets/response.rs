//! What providers and the host hand back: the response `provider` splice (JSON bodies), the
//! usage scanner (JSON and SSE tails), the SSE end-of-stream detector, `Retry-After`, and the host-written records the filters
//! decode (attempt plan, attempt records, shared-data statistics, proxy-wasm header maps).
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::failover::{decode_records, encode_records, parse_retry_after, AttemptPlan};
use switchyard::rewrite::with_provider_field;
use switchyard::sse::StreamEnd;
use switchyard::stats::EndpointStats;
use switchyard::usage::{completion_tokens, USAGE_TAIL_BYTES};
use switchyard::wire::deserialize_map;

fuzz_target!(|data: &[u8]| {
    if let Some(out) = with_provider_field(data, "alpha/turbo") {
        let v: serde_json::Value = match serde_json::from_slice(&out) {
            Ok(v) => v,
            Err(e) => panic!("spliced response is not JSON: {e}"),
        };
        assert_eq!(v["provider"], "alpha/turbo");
    }
    // SSE: a terminator split across chunks is seen exactly as in one piece.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let (mut whole, mut parts) = (StreamEnd::default(), StreamEnd::default());
    whole.feed(data);
    for chunk in data.chunks(step) {
        parts.feed(chunk);
    }
    assert_eq!(whole.complete(), parts.complete(), "chunking changed the stream's end");
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
