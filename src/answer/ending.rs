//! How a routed request ends, decided from what the downstream filter sees in the response
//! headers: the attempts Envoy made (filter state), the final status and Envoy's response
//! flags. Pure, so the all-attempts-failed decision has native tests.

use crate::answer::errors::ApiError;
use crate::config::Catalog;
use crate::protocol::outcome::{final_error, is_retryable_status, AttemptRecord, CutShort, StopReason};

#[cfg(test)]
use crate::protocol::outcome::FLAG_UPSTREAM_OVERFLOW;

#[derive(Debug, PartialEq)]
pub enum Ending {
    /// Every attempt Envoy made failed retryably (or Envoy answered itself after attempts): the
    /// caller gets this error instead; `cut_short` when fewer attempts ran than were planned.
    Failed { error: ApiError, cut_short: Option<CutShort> },
    /// A provider's answer (success, or a non-retryable error it sent) goes back as it is.
    Answered,
}

/// `status` is the response status the downstream filter sees, `records` one per attempt made,
/// `planned` the attempts handed to Envoy, `response_flags` reads Envoy's `response.flags` (only
/// when a failover was cut short).
pub fn ending(
    catalog: &Catalog,
    status: u16,
    records: &[AttemptRecord],
    planned: usize,
    response_flags: impl FnOnce() -> u64,
) -> Ending {
    // No attempt recorded: Envoy answered before any provider was tried (its own error, shaped
    // by local_reply_config); nothing to aggregate.
    if records.is_empty() || !is_retryable_status(status) {
        return Ending::Answered;
    }
    let cut_short = (records.len() < planned)
        .then(|| CutShort { planned, reason: StopReason::from_response_flags(response_flags()) });
    Ending::Failed { error: final_error(catalog, records, cut_short), cut_short }
}

/// Most attempts a request can record (`routing.max_attempts` is at most 16); a higher attempt
/// number from the host is ignored rather than grown into.
pub const MAX_RECORDED_ATTEMPTS: usize = 32;

/// The attempt records in order, from one slot per attempt (attempt k's record, if its filter
/// wrote one). Slots after the last written one are dropped; a slot left empty before a written
/// one (an attempt whose filter never wrote) becomes a "no response" record of the next written
/// attempt's endpoint. At most `MAX_RECORDED_ATTEMPTS`.
pub fn collect_records(slots: &[Option<AttemptRecord>]) -> Vec<AttemptRecord> {
    let slots = slots.get(..slots.len().min(MAX_RECORDED_ATTEMPTS)).unwrap_or(&[]);
    let last = slots.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
    let mut out: Vec<AttemptRecord> = Vec::with_capacity(last);
    let mut next: Option<AttemptRecord> = None;
    for slot in slots.iter().take(last).rev() {
        let r = match slot {
            Some(r) => {
                next = Some(*r);
                *r
            }
            None => AttemptRecord { endpoint: next.map_or(0, |n| n.endpoint), status: 0, retry_after_s: None },
        };
        out.push(r);
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let json = r#"{"providers": {"a": {"cluster": "c_a", "authority": "a.example"}, "b": {"cluster": "c_b", "authority": "b.example"}},
            "models": {"m": {"endpoints": [{"provider": "a", "pricing": {"prompt": 1, "completion": 1}},
                                           {"provider": "b", "pricing": {"prompt": 2, "completion": 2}}]}}}"#;
        match Catalog::from_json(json.as_bytes(), &|_| None) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    fn rec(endpoint: u16, status: u16, retry_after_s: Option<u32>) -> AttemptRecord {
        AttemptRecord { endpoint, status, retry_after_s }
    }

    fn failed(e: Ending) -> (ApiError, Option<CutShort>) {
        match e {
            Ending::Failed { error, cut_short } => (error, cut_short),
            Ending::Answered => panic!("expected a failed ending"),
        }
    }

    #[test]
    fn attempt_records_are_collected_in_order_and_bounded() {
        assert_eq!(collect_records(&[]), vec![]);
        assert_eq!(collect_records(&[None, None]), vec![], "no attempt wrote");
        assert_eq!(collect_records(&[Some(rec(0, 503, None)), None]), vec![rec(0, 503, None)]);
        // A skipped attempt is filled with a no-response record of the next one's endpoint.
        assert_eq!(
            collect_records(&[Some(rec(0, 503, None)), None, Some(rec(1, 200, None)), None]),
            vec![rec(0, 503, None), rec(1, 0, None), rec(1, 200, None)]
        );
        let many = vec![Some(rec(0, 0, None)); MAX_RECORDED_ATTEMPTS + 5];
        assert_eq!(collect_records(&many).len(), MAX_RECORDED_ATTEMPTS);
    }

    #[test]
    fn answers_pass_through() {
        let c = catalog();
        assert_eq!(ending(&c, 200, &[rec(0, 200, None)], 2, || 0), Ending::Answered);
        // A fallback served after a failure.
        assert_eq!(ending(&c, 200, &[rec(0, 503, None), rec(1, 200, None)], 2, || 0), Ending::Answered);
        // A provider's own 4xx goes back unchanged.
        assert_eq!(ending(&c, 400, &[rec(0, 400, None)], 2, || 0), Ending::Answered);
        // Envoy's own error before any attempt.
        assert_eq!(ending(&c, 503, &[], 2, || 0), Ending::Answered);
    }

    #[test]
    fn every_attempt_failing_is_one_aggregated_error() {
        let c = catalog();
        let (e, cut) = failed(ending(&c, 429, &[rec(0, 429, Some(9)), rec(1, 429, Some(4))], 2, || 0));
        assert_eq!((e.status, e.code, cut), (429, "capacity_exhausted", None));
        assert_eq!(e.headers, vec![("retry-after".to_string(), "4".to_string())]);
        let (e, _) = failed(ending(&c, 503, &[rec(0, 0, None), rec(1, 503, None)], 2, || 0));
        assert_eq!((e.status, e.code), (503, "no_endpoint_available"));
        let (e, _) = failed(ending(&c, 502, &[rec(0, 500, None), rec(1, 502, None)], 2, || 0));
        assert_eq!(e.status, 502);
        assert_eq!(e.metadata["attempts"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn fewer_attempts_than_planned_say_why() {
        let c = catalog();
        let (_, cut) = failed(ending(&c, 503, &[rec(0, 503, None)], 2, || 0));
        assert_eq!(cut, Some(CutShort { planned: 2, reason: StopReason::Other }));
        let (_, cut) = failed(ending(&c, 503, &[rec(0, 503, None)], 2, || FLAG_UPSTREAM_OVERFLOW));
        assert_eq!(cut.map(|c| c.reason), Some(StopReason::RetryLimit));
    }
}
