//! Access tokens over the host (`crate::tokens` has the logic): the root context's tick keeps
//! each token source's shared record fresh ([`TokenFetcher`]), and an attempt reads its
//! provider's token from that record ([`attempt_token`]). No stream ever fetches or waits.
//! A token is never logged: only the source's cluster and the failure's kind are.

use std::sync::Arc;

use super::host::Host;
use super::shared::{count, tag};
use crate::config::Catalog;
use crate::tokens::{failed, fetched, take_lease, FetchError, TokenRecord, TokenSource};

/// Fetches by result: `switchyard.access_token.fetches_total.result.<ok|unreachable|http_error|malformed|signing_error>`.
pub fn fetch_metric(result: &str) -> String {
    format!("switchyard.access_token.fetches_total.result.{result}")
}

/// Attempts not sent for want of a usable token (failed over at once), by provider.
pub fn missing_metric(provider: &str) -> String {
    format!("switchyard.access_token.missing_total.provider.{}", tag(provider))
}

/// Writes at most this many times per answer when other workers keep writing the record.
const WRITE_TRIES: usize = 4;

fn read(host: &dyn Host, key: &str) -> (Option<TokenRecord>, u32) {
    let (bytes, cas) = host.shared_data(key);
    (bytes.as_deref().and_then(TokenRecord::decode), cas)
}

/// The root context's fetches in flight (one root per worker on proxy-wasm; one for all
/// workers natively): answer token -> the source and when its lease ends. The source itself,
/// not its index: an answer that arrives after a configuration reload is stored for the source
/// that asked.
#[derive(Debug, Default)]
pub struct TokenFetcher {
    in_flight: Vec<(u32, Arc<TokenSource>, u64)>,
}

impl TokenFetcher {
    /// One tick: for each source whose refresh is due and whose lease is free, take the lease
    /// (compare-and-swap: one worker wins) and fetch.
    pub fn tick(&mut self, host: &dyn Host, catalog: &Catalog, now_ms: u64) {
        // A fetch the host never answered is given up with its lease (another worker, or this
        // one, takes over).
        self.in_flight.retain(|(_, _, lease_until)| now_ms < *lease_until);
        for source in &catalog.token_sources {
            if self.in_flight.iter().any(|(_, s, _)| s.key() == source.key()) {
                continue;
            }
            let key = source.key();
            let (current, cas) = read(host, &key);
            if current.is_none() {
                // Created first, leased on a later tick: a write to an absent key cannot be
                // compared-and-swapped, so two workers could both lease a record that is not
                // there yet. Both creating it is harmless; only one CAS on it succeeds.
                host.set_shared_data(&key, &TokenRecord::default().encode(), 0);
                continue;
            }
            let Some(leased) = take_lease(current.as_ref(), now_ms, source.timeout_ms) else { continue };
            if host.set_shared_data(&key, &leased.encode(), cas) != 0 {
                continue; // another worker took it
            }
            // A key file's assertion is signed here, in the tick, never on a request's path.
            let body = match source.request_body(now_ms) {
                Ok(body) => body,
                Err(e) => {
                    store(host, source, Err(e), now_ms);
                    continue;
                }
            };
            if !body.is_empty() {
                // Measured in the host's clock (the signature costs milliseconds in Wasm).
                let took = host.now_ms().saturating_sub(now_ms);
                log::info!("switchyard: token request for {} signed in {took} ms", source.who());
            }
            let path = source.path();
            let length = body.len().to_string();
            let mut headers = source.request_headers(&path).to_vec();
            if !body.is_empty() {
                headers.push(("content-length", &length));
            }
            match host.http_call(&source.cluster, &headers, &body, source.timeout_ms) {
                Some(token) => self.in_flight.push((token, Arc::clone(source), leased.lease_until_ms)),
                None => store(host, source, Err(FetchError::Unreachable), now_ms),
            }
        }
    }

    /// Whether the answer with this token is one of this fetcher's.
    pub fn owns(&self, token: u32) -> bool {
        self.in_flight.iter().any(|(t, _, _)| *t == token)
    }

    /// A fetch's answer (`status` 0: none came): the record is written for every worker.
    /// False when the token is not this fetcher's.
    pub fn answered(&mut self, host: &dyn Host, token: u32, status: u16, body: &[u8], now_ms: u64) -> bool {
        let Some(pos) = self.in_flight.iter().position(|(t, _, _)| *t == token) else { return false };
        let (_, source, _) = self.in_flight.swap_remove(pos);
        store(host, &source, source.parse_answer(status, body), now_ms);
        true
    }
}

/// Writes a fetch's result into the source's record (re-read first: a newer token another
/// worker wrote is kept by a failure).
fn store(host: &dyn Host, source: &TokenSource, result: Result<(String, u64), FetchError>, now_ms: u64) {
    count(host, &fetch_metric(result.as_ref().map_or_else(|e| e.name(), |_| "ok")));
    if let Err(e) = &result {
        log::warn!(
            "switchyard: access token fetch from cluster {} ({}) failed: {}",
            source.cluster,
            source.who(),
            e.name()
        );
    }
    let key = source.key();
    for _ in 0..WRITE_TRIES {
        let (current, cas) = read(host, &key);
        let record = match &result {
            Ok((token, expires_in)) => fetched(token.clone(), *expires_in, now_ms),
            Err(_) => failed(current.as_ref(), now_ms),
        };
        if host.set_shared_data(&key, &record.encode(), cas) == 0 {
            return;
        }
    }
}

/// The `authorization` value of an attempt to a provider whose token comes from `source`: None
/// when no unexpired token is there (the decision filter skips a provider without a usable one,
/// so this happens only when a token lapsed between the decision and a later attempt).
pub fn attempt_token(host: &dyn Host, source: &TokenSource, now_ms: u64) -> Option<String> {
    let (record, _) = read(host, &source.key());
    record.as_ref().and_then(|r| r.unexpired(now_ms)).map(|t| format!("Bearer {t}"))
}

/// The providers whose access token is not usable for a request decided at `now` (none yet, or
/// within its margin of expiry): the router skips them. One shared-data read per token source.
pub fn tokenless(host: &dyn Host, catalog: &Catalog, now_ms: u64) -> Vec<String> {
    let usable: Vec<bool> = catalog
        .token_sources
        .iter()
        .map(|s| read(host, &s.key()).0.is_some_and(|r| r.usable(now_ms).is_some()))
        .collect();
    catalog
        .providers
        .iter()
        .filter(|p| {
            p.token_source().is_some_and(|s| {
                let i = catalog.token_sources.iter().position(|x| x.key() == s.key());
                !i.and_then(|i| usable.get(i).copied()).unwrap_or(false)
            })
        })
        .map(|p| p.slug.clone())
        .collect()
}
