//! Mesh-wide limits through the decision filter (mock host): a worker leases budget in chunks
//! and admits the next requests from its lease without a call or a pause; a refused chunk is
//! asked again for exactly the request's reservation. And the root's cool-down poll.

use std::rc::Rc;

use super::downstream::Stream;
use super::host::Action;
use super::mock::MockHost;
use super::tests::configured;
use super::{Configured, Filter};
use crate::limits::rls::{decode_request, encode_response, Code, Response, Status};
use crate::protocol::scope::route_mark_path;

/// One model; a token limit of 1,000,000 per minute on every routed request.
const CONFIG: &str = r#"{
  "providers": {"alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "k"}}},
  "models": {"m": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}},
  "routing": {"default_policy": "price_weighted"},
  "rate_limits": {"service": {"cluster": "rls"},
    "limits": {"tpm": {"tokens": 1000000, "window": "minute"}}}
}"#;

const BODY: &str = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
/// BODY's reservation: its messages' 36 bytes / 4, plus the default completion (256).
const RESERVATION: u32 = 9 + 256;

/// The service's answer: counted, `remaining` left, the window resetting in 60 s.
fn answer(host: &MockHost, code: Code, remaining: u32) -> usize {
    let b = encode_response(&Response { overall: code, statuses: vec![Status { code, remaining, reset_s: Some(60) }] });
    host.state().grpc_answer = b.clone();
    b.len()
}

/// A routed request's headers and body through the decision filter at `now_ms`: the stream
/// and what its body returned (Continue: admitted at once; Pause: held for a call).
fn request(host: &MockHost, config: &Rc<Configured>, now_ms: u64) -> (Stream<MockHost>, Action) {
    host.state().now_ms = now_ms;
    host.set_prop(&route_mark_path(), b"llm");
    host.with_request_headers(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
    ]);
    host.state().request_body = BODY.as_bytes().to_vec();
    let mut stream = Stream::new(host.clone(), Rc::clone(config));
    assert_eq!(stream.on_request_headers(false), Action::Pause, "waits for the body");
    let action = stream.on_request_body(BODY.len(), true);
    (stream, action)
}

fn calls(host: &MockHost) -> usize {
    host.state().grpc_calls.len()
}

/// The hits the `i`th call asked for.
fn hits(host: &MockHost, i: usize) -> u32 {
    let (_, _, message) = host.state().grpc_calls[i].clone();
    decode_request(&message).expect("a RateLimitRequest").2
}

#[test]
fn a_chunk_lease_admits_the_next_requests_with_no_call_and_no_pause() {
    let host = MockHost::default();
    let config = configured(CONFIG);
    // The first request knows nothing of the counter: its exact reservation, held for the answer.
    let (mut first, action) = request(&host, &config, 1_000);
    assert_eq!((action, calls(&host), hits(&host, 0)), (Action::Pause, 1, RESERVATION));
    let n = answer(&host, Code::Ok, 1_000_000 - RESERVATION);
    first.on_grpc_response(1, 0, n);
    assert_eq!(host.state().resumed, 1);
    // The second, 1 ms later, leases a second of that use, capped at the limit's 1/64.
    let (mut second, action) = request(&host, &config, 1_001);
    assert_eq!((action, calls(&host), hits(&host, 1)), (Action::Pause, 2, 15_625));
    let n = answer(&host, Code::Ok, 1_000_000 - RESERVATION - 15_625);
    second.on_grpc_response(2, 0, n);
    assert_eq!(host.state().resumed, 2);
    // The chunk's other 15,360 units admit the next 57 requests (265 each) on the spot.
    for k in 0..57 {
        let (_, action) = request(&host, &config, 1_002);
        assert_eq!(action, Action::Continue, "request {k} admitted from the lease");
    }
    assert_eq!((calls(&host), host.state().resumed), (2, 2), "no call, nothing held");
    // Used up: the next leases again.
    let (_, action) = request(&host, &config, 1_003);
    assert_eq!((action, calls(&host)), (Action::Pause, 3));
    assert!(hits(&host, 2) > RESERVATION, "a chunk again: {}", hits(&host, 2));
}

#[test]
fn a_refused_chunk_is_asked_again_for_the_exact_reservation_once() {
    let host = MockHost::default();
    let config = configured(CONFIG);
    let (mut first, _) = request(&host, &config, 1_000);
    let n = answer(&host, Code::Ok, 100_000);
    first.on_grpc_response(1, 0, n);
    // A chunk (its size from 265 units in 1 ms, capped at 1/8 of the 100,000 left)...
    let (mut second, action) = request(&host, &config, 1_001);
    assert_eq!((action, hits(&host, 1)), (Action::Pause, 12_500));
    // ...refused: asked again for exactly its reservation, still held.
    let n = answer(&host, Code::OverLimit, 0);
    second.on_grpc_response(2, 0, n);
    assert_eq!((calls(&host), hits(&host, 2)), (3, RESERVATION));
    assert!(host.state().reply.is_none() && host.state().resumed == 1);
    // That fits: admitted. With 10 units left, the next reservation is exact too.
    let n = answer(&host, Code::Ok, 10);
    second.on_grpc_response(3, 0, n);
    assert_eq!(host.state().resumed, 2);
    let (mut third, _) = request(&host, &config, 1_002);
    assert_eq!(hits(&host, 3), RESERVATION);
    // An exact reservation refused is the caller's 429 at once.
    let n = answer(&host, Code::OverLimit, 0);
    third.on_grpc_response(4, 0, n);
    assert_eq!(calls(&host), 4);
    assert_eq!(host.state().reply.as_ref().map(|r| r.status), Some(429));
}

/// The same model with shared cool-downs on.
const SHARED_COOLDOWNS: &str = r#"{
  "providers": {"alpha": {"cluster": "c_alpha", "authority": "alpha.example", "credential": {"value": "k"}}},
  "models": {"m": {"endpoints": [{"provider": "alpha", "pricing": {"prompt": 1, "completion": 1}}]}},
  "routing": {"default_policy": "price_weighted"},
  "rate_limits": {"service": {"cluster": "rls"}, "share_cooldowns": true}
}"#;

#[test]
fn a_polled_cool_down_holds_past_its_slot_until_the_next_poll_can_answer() {
    use super::mesh::Ticker;
    use super::shared::{read_stats, stats_key};
    use crate::limits::{COOLDOWN_GRACE_MS, COOLDOWN_SLOT_S};
    let host = MockHost::default();
    let config = configured(SHARED_COOLDOWNS);
    let mut ticker = Ticker::default();
    // 12.9 s: slot 2 (10-15 s); another pod marked alpha cooling in it.
    let now_ms = 12_900;
    ticker.tick(&host, &config, now_ms);
    assert_eq!(calls(&host), 1, "one poll");
    let n = answer(&host, Code::OverLimit, 0);
    ticker.answered(&host, &config, 1, 0, n, now_ms);
    let slot_end_ms = 3 * COOLDOWN_SLOT_S * 1000;
    let stats = read_stats(&host, &stats_key("m", "alpha"));
    // Cooling at the slot's turn and through the next poll's answer, then no longer.
    assert!(stats.view(slot_end_ms + COOLDOWN_GRACE_MS - 1, 30_000).cooling_down);
    assert!(!stats.view(slot_end_ms + COOLDOWN_GRACE_MS, 30_000).cooling_down);
}
