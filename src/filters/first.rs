//! The first-attempt filter (`switchyard_first`), on each provider's first-attempt cluster in
//! place of the per-attempt filter. The decision filter prepared that attempt itself (path,
//! body, caller headers) and the cluster's `credential_injector` adds the provider's key, so
//! this filter needs no configuration and does three small things:
//!
//! - takes every `x-envoy-*` and `x-switchyard-*` header off the attempt before it is sent, and
//!   names the next attempt's cluster for the router's retry (`internals`);
//! - names the attempt on the answer (`x-switchyard-attempts`), which the decision filter reads;
//! - notes a failed answer's status and `Retry-After` in filter state, where the second attempt's
//!   filter reads them to record this attempt's failure (statistics, cool-down).

use super::host::{Action, Host};
use super::internals::{hand_on, set_scheme};
use super::Filter;
use crate::protocol::bytes::u64_at;
use crate::protocol::outcome::{key_refused, retry_after_of};
use crate::protocol::plan::FIRST_ATTEMPT_PROPERTY;
use crate::wiring::{ATTEMPTS_HEADER, MODEL_FAILURE_HEADER};

pub struct FirstAttempt<H: Host> {
    host: H,
    attempt: usize,
    /// The plan has an attempt after this one (its cluster was handed on).
    later_attempt: bool,
}

impl<H: Host> FirstAttempt<H> {
    pub fn new(host: H) -> FirstAttempt<H> {
        FirstAttempt { host, attempt: 1, later_attempt: false }
    }
}

impl<H: Host> Filter for FirstAttempt<H> {
    fn on_request_headers(&mut self, _end_of_stream: bool) -> Action {
        // The router's own count (the cluster is only ever a first attempt's; read, not assumed).
        self.attempt =
            self.host.property(&["upstream", "request_attempt_count"]).and_then(|b| u64_at(&b, 0)).unwrap_or(1)
                as usize;
        let internal = self.host.internal_req_header_names();
        self.later_attempt = hand_on(&self.host, internal.iter().map(String::as_str), self.attempt);
        set_scheme(&self.host);
        Action::Continue
    }

    fn on_response_headers(&mut self, _end_of_stream: bool) -> Action {
        let [status, retry_after, retry_after_ms]: [Option<String>; 3] =
            self.host.resp_headers_named(&[":status", "retry-after", "retry-after-ms"]).try_into().unwrap_or_default();
        let retry_after = retry_after_of(retry_after.as_deref(), retry_after_ms.as_deref());
        let status: u16 = status.and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        self.host.set_resp_header(ATTEMPTS_HEADER, Some(&self.attempt.to_string()));
        if !(200..300).contains(&status) {
            let note = format!("{status},{}", retry_after.unwrap_or_default());
            self.host.set_property(&[FIRST_ATTEMPT_PROPERTY], note.as_bytes());
        }
        // The provider refused the operator's key: the next planned attempt is made (Envoy
        // retries a 5xx; the note keeps the real status).
        if key_refused(status) && self.later_attempt {
            self.host.set_resp_header(":status", Some("503"));
            self.host.set_resp_header(MODEL_FAILURE_HEADER, Some(&status.to_string()));
        }
        Action::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::mock::MockHost;
    use crate::protocol::slots::{encode_slots, next_state_property, slot_token, SLOTS_PROPERTY};

    fn first() -> (MockHost, FirstAttempt<MockHost>) {
        let host = MockHost::new();
        host.with_request_headers(&[
            (":path", "/v1/chat/completions"),
            ("x-envoy-attempt-count", "1"),
            ("x-envoy-expected-rq-timeout-ms", "300000"),
            ("x-switchyard-authority", "alpha.example"),
            ("authorization", "Bearer injected"),
        ]);
        host.set_prop(&["upstream", "request_attempt_count"], &1u64.to_le_bytes());
        host.set_prop(&[SLOTS_PROPERTY], encode_slots(&["c_a-first", "c_b"], None).as_bytes());
        let f = FirstAttempt::new(host.clone());
        (host, f)
    }

    #[test]
    fn the_attempt_carries_no_internal_header_names_the_next_in_state_and_notes_a_failure() {
        let (host, mut f) = first();
        assert_eq!(f.on_request_headers(false), Action::Continue);
        let mut sent = host.req_headers();
        sent.sort();
        assert_eq!(host.prop(&[&next_state_property(2)]), Some(slot_token("c_b").into_bytes()));
        let expected: Vec<(String, String)> = [(":path", "/v1/chat/completions"), ("authorization", "Bearer injected")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(sent, expected);
        host.with_response_headers(&[(":status", "429"), ("retry-after", "7")]);
        f.on_response_headers(false);
        assert_eq!(host.prop(&[FIRST_ATTEMPT_PROPERTY]), Some(b"429,7".to_vec()));
        assert_eq!(host.response_header_value(ATTEMPTS_HEADER).as_deref(), Some("1"));
    }

    #[test]
    fn a_refused_key_is_retried_when_an_attempt_follows() {
        let (host, mut f) = first();
        f.on_request_headers(false);
        host.with_response_headers(&[(":status", "401")]);
        f.on_response_headers(false);
        assert_eq!(host.prop(&[FIRST_ATTEMPT_PROPERTY]), Some(b"401,".to_vec()));
        assert_eq!(host.response_header_value(":status").as_deref(), Some("503"), "Envoy retries it");
        // A caller error is not.
        let (host, mut f) = first();
        f.on_request_headers(false);
        host.with_response_headers(&[(":status", "400")]);
        f.on_response_headers(false);
        assert_eq!(host.response_header_value(":status").as_deref(), Some("400"));
    }

    #[test]
    fn azures_retry_after_ms_is_noted_as_seconds() {
        let (host, mut f) = first();
        f.on_request_headers(false);
        host.with_response_headers(&[(":status", "429"), ("retry-after-ms", "1500")]);
        f.on_response_headers(false);
        assert_eq!(host.prop(&[FIRST_ATTEMPT_PROPERTY]), Some(b"429,2".to_vec()));
    }

    #[test]
    fn a_served_first_attempt_notes_nothing() {
        let (host, mut f) = first();
        f.on_request_headers(false);
        host.with_response_headers(&[(":status", "200")]);
        f.on_response_headers(false);
        assert_eq!(host.prop(&[FIRST_ATTEMPT_PROPERTY]), None);
        assert_eq!(host.response_header_value(ATTEMPTS_HEADER).as_deref(), Some("1"));
    }
}
