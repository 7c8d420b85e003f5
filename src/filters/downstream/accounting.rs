//! What a routed request leaves behind: the mesh-wide limits' settlement, usage metrics, span
//! and access-log attributes, attempt records and the request's result counter.

use super::*;

impl<H: Host> Stream<H> {
    /// Settles the request's token and spend limits once, when its answer ends (`used`: its
    /// priced usage): a served answer is charged what it used less what admission reserved,
    /// anything else (every attempt failed, a provider's error, no answer) releases its
    /// reservation.
    pub(super) fn settle_limits(&mut self, used: Option<Used>) {
        let Some(adm) = &self.admission else { return };
        if self.settled || !adm.admitted() {
            return;
        }
        self.settled = true;
        let served = match (&self.served, self.result) {
            (Some((model, slug)), Some(RequestResult::Served)) => {
                let pricing = self.config.catalog.endpoint_of(model, slug).map(|e| e.pricing).unwrap_or_default();
                Some(match used {
                    Some(u) => (u.input_tokens + u.output_tokens, u.cost_usd),
                    // An answer that reported no usage (a stream cut before its usage event):
                    // its prompt, estimated from the request, at the prompt price.
                    None => {
                        let estimate = self.decision.as_ref().map_or(0, |d| d.prompt_tokens);
                        (estimate, pricing.cost_usd(estimate, 0, 0))
                    }
                })
            }
            _ => None,
        };
        mesh::settle(&self.host, &self.config.limits, adm, served, self.host.now_ms());
    }

    /// What the served answer reported, priced as its `usage.cost` (None: no answer served, or
    /// it reported no complete usage).
    pub(super) fn served_usage(&self) -> Option<Used> {
        let (model, slug) = self.served.as_ref()?;
        let pricing = self.config.catalog.endpoint_of(model, slug)?.pricing;
        let usage = match self.first.as_ref().filter(|f| f.answered) {
            Some(f) => f.watch.usage,
            None => self.usage_watch.as_ref()?.usage,
        };
        let priced = usage.priced(&pricing)?;
        Some(Used {
            input_tokens: priced.prompt_tokens,
            output_tokens: priced.completion_tokens,
            cache_read_tokens: usage.cached_tokens.unwrap_or(0).min(priced.prompt_tokens),
            cost_usd: priced.cost_usd,
        })
    }

    /// The served request's usage and duration in the metrics (served attempt only; a
    /// provider's error or a failed failover used nothing billable here).
    pub(super) fn record_usage(&self, used: Option<Used>) {
        if !matches!(self.result, Some(RequestResult::Served)) {
            return;
        }
        let Some(endpoint) = self.served.as_ref().and_then(|(m, s)| self.config.catalog.find_endpoint(m, s)) else {
            return;
        };
        let key = UsageKey { request_model: self.request_model, endpoint, policy: self.policy, caller: self.caller };
        let duration = self.host.now_ms().saturating_sub(self.decided_ms);
        usage::record(&self.host, &self.config, key, used, duration);
    }

    /// The request's span and access-log attributes, once, when its answer ends (Envoy
    /// finishes the span and writes the log before the filter's own log callback).
    pub(super) fn write_attributes(&mut self, error: Option<&str>) {
        if !self.config.telemetry.request_attributes || self.attributes_written {
            return;
        }
        self.attributes_written = true;
        let config = Rc::clone(&self.config);
        let served = self.served.as_ref().and_then(|(m, s)| config.catalog.endpoint_of(m, s));
        let used = self.served_usage();
        let path = self.path.split('?').next().filter(|p| !p.is_empty());
        let caller = self.caller.zip(config.telemetry.caller.as_ref()).map(|(i, c)| c.name(i));
        usage::write_attributes(
            &self.host,
            &Attributes {
                request_model: self.decision.as_ref().map(|_| usage::request_model_name(&config, self.request_model)),
                provider: served.map(|e| config.catalog.provider_name(e)),
                used,
                caller,
                path,
                error,
                request_id: self.request_id.as_deref(),
                operation: path.and_then(crate::telemetry::operation_name),
            },
        );
    }

    /// The attempts' records, in order, as far as they are known when the answer's headers
    /// arrive; completes a prepared first attempt whose outcome is known by now.
    pub(super) fn attempt_records(
        &mut self,
        headers: &[(String, String)],
        status: u16,
        made: Option<usize>,
        first_answered: bool,
        end_of_stream: bool,
        now: u64,
    ) -> Vec<AttemptRecord> {
        let read_up_to = made.map_or(self.planned, |n| n.min(self.planned));
        if first_answered {
            if let Some(f) = self.first.as_mut() {
                f.answered = true;
                let cap = self.config.catalog.routing.max_retry_after_s;
                let retry_after = crate::protocol::outcome::retry_after_of(
                    find(headers, "retry-after"),
                    find(headers, "retry-after-ms"),
                );
                f.watch.headers(status, retry_after.as_deref(), find(headers, "content-type"), cap);
            }
            if status >= 400 || end_of_stream {
                // A refusal, or an answer without a body: complete here.
                self.finish_first(now);
            }
            if self.first.as_ref().is_some_and(|f| f.watch.reads_error_body()) && !end_of_stream {
                self.first_error_body = true;
            }
            let record =
                |f: &PreparedFirst| AttemptRecord { endpoint: f.planned, status, retry_after_s: f.watch.retry_after_s };
            self.first.as_ref().map(record).into_iter().collect()
        } else if let Some(planned) = self.first.as_ref().map(|f| f.planned) {
            // Envoy answered itself, or a later attempt did. Without a retry's record of the
            // first attempt, it got no answer and nothing came after it.
            let retried = read_record(&self.host, 1);
            if retried.is_none() {
                self.finish_first(now);
            }
            let unanswered = AttemptRecord { endpoint: planned, status: 0, retry_after_s: None };
            read_records(&self.host, read_up_to, Some(retried.unwrap_or(unanswered)))
        } else {
            read_records(&self.host, read_up_to, None)
        }
    }

    /// How the routed request ended, counted once (`switchyard_requests_total{result}`).
    pub(super) fn count_result(&mut self) {
        let name = match self.result {
            Some(RequestResult::Served) => {
                // A complete answer can only have been marked interrupted if it was an event
                // stream (ended without its final event); its end already read the mark.
                let first = self.first.as_ref().filter(|f| f.answered);
                let interrupted = !self.response_complete
                    || first.is_some_and(|f| f.watch.interrupted)
                    || (first.is_none()
                        && self.interrupted.unwrap_or_else(|| {
                            self.sse_response && self.host.property(&[INTERRUPTED_PROPERTY]).is_some()
                        }));
                if interrupted {
                    INTERRUPTED_METRIC
                } else {
                    SERVED_METRIC
                }
            }
            Some(RequestResult::ProviderError) => PROVIDER_ERROR_METRIC,
            Some(RequestResult::Failed) => FAILED_METRIC,
            None => return,
        };
        count(&self.host, name);
    }
}
