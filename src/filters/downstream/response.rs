//! The decision filter's response side: which API served, the answer rewritten (model id,
//! `provider`, `usage.cost`) or translated back, streams, failed answers.

use super::*;

impl<H: Host> Stream<H> {
    /// The API the serving endpoint speaks when it is not the caller's (its answer is
    /// translated back): the endpoint named by the serving attempt (or the prepared first).
    pub(super) fn serving_api(&self, headers: &[(String, String)], first_answered: bool) -> Option<Api> {
        let (model, slug) = match self.first.as_ref().filter(|_| first_answered) {
            Some(f) => (f.model.as_str(), Some(f.slug.as_str())),
            None => (find(headers, MODEL_HEADER).unwrap_or_default(), find(headers, PROVIDER_HEADER)),
        };
        let ep = self.config.catalog.endpoint_of(model, slug?)?;
        Some(ep.apis.serving(self.api)).filter(|a| *a != self.api)
    }

    /// Whether the serving endpoint was sent Bedrock's Converse body (`Kind::converse`): its
    /// warning is the Converse translation's, not the Anthropic body's it did not get.
    pub(super) fn served_converse(&self, headers: &[(String, String)], first_answered: bool) -> bool {
        let (model, slug) = match self.first.as_ref().filter(|_| first_answered) {
            Some(f) => (f.model.as_str(), Some(f.slug.as_str())),
            None => (find(headers, MODEL_HEADER).unwrap_or_default(), find(headers, PROVIDER_HEADER)),
        };
        let catalog = &self.config.catalog;
        let Some(ep) = slug.and_then(|slug| catalog.endpoint_of(model, slug)) else { return false };
        catalog.provider_of(ep).is_some_and(|p| p.kind.converse(ep.apis.serving(self.api), &ep.upstream_model))
    }

    /// What the Converse body dropped (`x-switchyard-warning`).
    pub(super) fn converse_warning(&self) -> Option<String> {
        self.decision.as_ref()?.converse_warning.clone()
    }

    /// What the translation into `api` dropped (`x-switchyard-warning`).
    pub(super) fn translation_warning(&self, api: Api) -> Option<String> {
        let d = self.decision.as_ref()?;
        d.translation_warnings.iter().find(|(a, _)| *a == api).map(|(_, w)| w.clone())
    }

    /// The prepared first attempt is still being answered to the caller.
    pub(super) fn watching_first(&self) -> bool {
        self.first.as_ref().is_some_and(|f| f.answered && !f.recorded)
    }

    pub(super) fn offered_tools(&self) -> &[String] {
        self.decision.as_ref().map(|d| d.offered_tools.as_slice()).unwrap_or(&[])
    }

    /// The end of a served stream: the interrupted-stream event when the serving attempt broke
    /// off (appended at `at`), otherwise the stream's quality verdict.
    pub(super) fn end_stream(&mut self, at: usize) {
        let event = match self.first.as_ref().filter(|f| f.answered) {
            // A prepared first attempt has no per-attempt filter to mark it: its watch knows.
            Some(f) => f.watch.interrupted.then(|| interrupted_event_for(self.api, &f.slug, &f.model).into_bytes()),
            None => self.host.property(&[INTERRUPTED_PROPERTY]),
        };
        self.interrupted = Some(event.is_some());
        if let Some(event) = event {
            self.host.set_response_body(at, 0, &event);
        } else if let Some(judge) = self.judge.take() {
            let verdict = judge.verdict(self.offered_tools());
            self.record_quality(verdict);
        }
    }

    /// Counts a served answer's quality on the endpoint that served it.
    pub(super) fn record_quality(&mut self, verdict: Option<Verdict>) {
        if let (Some(v), Some((model, slug))) = (verdict, &self.served) {
            if self.watching_first() {
                // Written with the prepared first attempt's outcome, in one update.
                if let Some(f) = self.first.as_mut() {
                    f.verdict = Some(v);
                }
            } else {
                let now = self.host.now_ms();
                update_stats(&self.host, &stats_key(model, slug), |s| s.judge(now, v.bad, v.tool));
            }
            if v.bad {
                count(
                    &self.host,
                    &format!("switchyard.bad_responses_total.model.{}.endpoint.{}", tag(model), tag(slug)),
                );
            }
        }
    }
}

/// Removes every response header but `:status`: a final error the filter built carries only
/// its own headers, none left over from the last attempt.
fn clear_response_headers(host: &dyn Host, headers: &[(String, String)]) {
    for (k, _) in headers {
        if k != ":status" {
            host.set_resp_header(k, None);
        }
    }
}

impl<H: Host> Stream<H> {
    /// Every attempt failed (or Envoy stopped the failover): the answer becomes the final error
    /// in the caller's API shape, with Switchyard's headers.
    pub(super) fn answer_failed(
        &mut self,
        error: ApiError,
        cut_short: Option<CutShort>,
        audit: Audit,
        own: Vec<(&str, &str)>,
        headers: &[(String, String)],
        end_of_stream: bool,
    ) -> Action {
        let e = error.for_api(self.api);
        if let Some(cut) = cut_short {
            log::warn!(
                "switchyard: failover stopped after {} of {} planned attempts ({})",
                audit.attempts,
                cut.planned,
                cut.reason.name()
            );
            count(&self.host, &failover_incomplete_metric(cut.reason));
        }
        self.result = Some(RequestResult::Failed);
        let audit_attempts = audit.attempts;
        let attempts = audit.attempts.to_string();
        self.audit(Audit { status: e.status, error: Some(e.code), ..audit });
        self.write_attributes(Some(e.code));
        // Rebound so it may also borrow what this function owns.
        let mut own: Vec<(&str, &str)> = own.into_iter().collect();
        own.push(("content-type", "application/json"));
        own.push((ATTEMPTS_HEADER, &attempts));
        for (k, v) in &e.headers {
            own.push((k.as_str(), v.as_str()));
        }
        if end_of_stream {
            // The failed answer had no body to replace: answer with a local reply, marked so
            // the listener's local_reply_config leaves our JSON alone.
            self.host.set_req_header(OWN_REPLY_HEADER, Some("1"));
            self.host.reply(e.status, &own, e.body().as_bytes());
            return Action::Pause;
        }
        clear_response_headers(&self.host, headers);
        self.host.set_resp_header(":status", Some(&e.status.to_string()));
        for (k, v) in own {
            self.host.set_resp_header(k, Some(v));
        }
        // Held until the failed answer's body is complete, then replaced with its length.
        let known = e.headers.iter().any(|(k, _)| k == "retry-after");
        let late_retry_after = (e.status == 429 && !known).then_some(audit_attempts);
        self.body_action = BodyAction::Replace { body: e.body(), late_retry_after };
        Action::Pause
    }

    /// An endpoint answered: decide what happens to its body (rewritten as a whole, rewritten
    /// event by event, a provider error wrapped, or only watched) and remember who served.
    pub(super) fn take_answer(
        &mut self,
        headers: &[(String, String)],
        status: u16,
        served_model: String,
        slug: String,
        end_of_stream: bool,
        now: u64,
    ) -> Action {
        let content_type = find(headers, "content-type").unwrap_or_default();
        let json = content_type.contains("application/json");
        let sse = content_type.contains("text/event-stream");
        self.sse_response = sse;
        // A provider that ignored `accept-encoding: identity`: its bytes cannot be rewritten.
        let encoded = find(headers, "content-encoding").is_some_and(|e| e != "identity");
        if status >= 400 {
            self.result = Some(RequestResult::ProviderError);
            if !end_of_stream && !encoded {
                // Held until the body is complete: a non-JSON body is replaced by a JSON error.
                self.body_action = BodyAction::ProviderError { status, slug, collected: Vec::new() };
                return Action::Pause;
            }
            return Action::Continue;
        }
        self.result = Some(RequestResult::Served);
        // A conversation sticks only to an endpoint whose cache reads are cheaper than its prompt
        // price (nothing to keep warm elsewhere, and no shared-data write).
        let caches = self.config.catalog.endpoint_of(&served_model, &slug).is_some_and(|e| e.pricing.caches_cheaper());
        if let Some(conv) = self.decision.as_ref().and_then(|d| d.plan.conversation).filter(|_| caches) {
            let ttl_ms = self.config.catalog.routing.sticky_ttl_s.saturating_mul(1000);
            stick(&self.host, conv, &served_model, &slug, now.saturating_add(ttl_ms));
        }
        self.served = Some((served_model.clone(), slug.clone()));
        let stream = self.decision.as_ref().is_some_and(|d| d.stream);
        // The served attempt's usage, for the metrics (and the limits): the prepared first
        // attempt's watch has it when it served.
        if !self.first.as_ref().is_some_and(|f| f.answered) {
            self.usage_watch = Some(AttemptWatch::new(self.translate_from.unwrap_or(self.api), stream, now));
        }
        if end_of_stream {
            return Action::Continue;
        }
        if stream && !encoded && status < 300 {
            // The served stream's quality (malformed tool calls, empty answers) is judged.
            self.judge = Some(StreamJudge::new(self.translate_from.unwrap_or(self.api)));
        }
        let ep = self.config.catalog.endpoint_of(&served_model, &slug);
        let Some(pricing) = ep.filter(|_| !encoded).map(|e| e.pricing) else {
            if status < 300 {
                self.body_action = BodyAction::WatchStream;
            }
            return Action::Continue;
        };
        let kind = self.config.catalog.provider_for_slug(&slug).map(|p| p.kind.clone());
        let served = Served { model: served_model, slug, pricing, api: self.api };
        if sse {
            // Rewritten event by event; the length changes, so the answer goes out chunked.
            self.host.set_resp_header("content-length", None);
            let hide = self.decision.as_ref().is_some_and(|d| d.hide_usage_chunk);
            let rewriter = SseRewriter::new(served).hiding_usage_chunk(hide);
            self.body_action = match self.translate_from {
                Some(from) => {
                    // A Google caller without `alt=sse` streams one JSON array (not rewritten).
                    let array = self.api == Api::Google && !self.path.contains("alt=sse");
                    if array {
                        self.host.set_resp_header("content-type", Some("application/json"));
                    }
                    let created = now / 1000;
                    let mut tr = StreamTranslator::new(from, self.api, created, array);
                    if let Some(kind) = kind {
                        tr = tr.hiding_events_of(kind);
                    }
                    BodyAction::Translate(Box::new(tr), (!array).then_some(rewriter))
                }
                None => BodyAction::Stream(match kind {
                    Some(kind) => rewriter.hiding_events_of(kind),
                    None => rewriter,
                }),
            };
            return Action::Continue;
        }
        if json && !stream {
            // Hold the headers until the body is complete so the rewritten body goes out with
            // its own content-length.
            // Sized from the announced length: no growth by doubling in a VM that never shrinks
            // (an answer too large to rewrite is passed on, nothing reserved for it).
            let length = find(headers, "content-length").and_then(|l| l.trim().parse::<usize>().ok());
            let collected = Collected::expecting(length.filter(|&l| l <= MAX_REWRITE_BYTES));
            self.body_action = BodyAction::Rewrite { served, collected, headers_sent: false };
            return Action::Pause;
        }
        if status < 300 {
            self.body_action = BodyAction::WatchStream;
        }
        Action::Continue
    }

    /// What the caller gets of the answer's body (see `BodyAction`); `chunk` is this body
    /// chunk's bytes when something needed them.
    pub(super) fn shape_response_body(
        &mut self,
        body_size: usize,
        end_of_stream: bool,
        chunk: Option<Vec<u8>>,
    ) -> Action {
        if let (Some(judge), Some(c)) = (self.judge.as_mut(), chunk.as_ref()) {
            judge.feed(c);
        }
        let translate_from = self.translate_from;
        match &mut self.body_action {
            BodyAction::None => Action::Continue,
            BodyAction::WatchStream => {
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(body_size);
                }
                Action::Continue
            }
            BodyAction::Translate(tr, rewriter) => {
                let translated = tr.feed(chunk.as_deref().unwrap_or(&[]));
                let out = match rewriter {
                    Some(r) => r.feed(&translated, end_of_stream),
                    None => translated,
                };
                self.host.set_response_body(0, body_size, &out);
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(out.len());
                }
                Action::Continue
            }
            BodyAction::Stream(rewriter) => {
                let out = rewriter.feed(chunk.as_deref().unwrap_or(&[]), end_of_stream);
                self.host.set_response_body(0, body_size, &out);
                if end_of_stream {
                    self.body_action = BodyAction::None;
                    self.end_stream(out.len());
                }
                Action::Continue
            }
            BodyAction::Rewrite { served, collected, headers_sent } => {
                // Move each chunk into the filter and leave Envoy's buffer empty: the answer is
                // never counted against Envoy's buffer limit.
                if let Some(chunk) = chunk {
                    collected.push(chunk);
                    self.host.set_response_body(0, body_size, &[]);
                }
                if collected.len() > MAX_REWRITE_BYTES && *headers_sent {
                    // Too large to rewrite: pass on as received.
                    let chunks = collected.take_chunks();
                    append_response_body(&self.host, chunks.iter().map(Vec::as_slice));
                    self.body_action = BodyAction::None;
                    return Action::Continue;
                }
                if end_of_stream {
                    let mut collected = std::mem::take(collected);
                    let served = served.clone();
                    let headers_sent = *headers_sent;
                    self.body_action = BodyAction::None;
                    let collected = if headers_sent && collected.is_split() {
                        // A large answer of unknown length, held as the chunks it came in:
                        // joined in Envoy's buffer (the chunks freed first) and read back in
                        // one piece, so the VM never holds the chunks and the joined copy at
                        // once. The headers are gone, so the buffer limit does not apply.
                        let size = collected.len();
                        let chunks = collected.take_chunks();
                        append_response_body(&self.host, chunks.iter().map(Vec::as_slice));
                        drop(chunks);
                        match self.host.response_body(0, size).filter(|whole| whole.len() == size) {
                            Some(whole) => {
                                self.host.set_response_body(0, size, &[]);
                                whole
                            }
                            // Not readable: it goes on as received.
                            None => return Action::Continue,
                        }
                    } else {
                        collected.into_whole()
                    };
                    let collected = match translate_from {
                        Some(from) => {
                            let created = self.host.now_ms() / 1000;
                            crate::translate::answer(from, served.api, &collected, created).unwrap_or(collected)
                        }
                        None => collected,
                    };
                    let verdict = span("answer_judge", || judge_body(served.api, &collected, self.offered_tools()));
                    self.record_quality(verdict);
                    // Handed to Envoy as pieces (the replaced members and the unchanged runs
                    // of the collected answer): no second copy of the answer in the VM.
                    match span("answer_rewrite", || rewrite_answer(&collected, &served)) {
                        Some(out) => {
                            if !headers_sent {
                                self.host.set_resp_header("content-length", Some(&out.len().to_string()));
                            }
                            append_response_body(&self.host, out.iter());
                        }
                        None => {
                            if !headers_sent {
                                self.host.set_resp_header("content-length", Some(&collected.len().to_string()));
                            }
                            self.host.set_response_body(0, 0, &collected);
                        }
                    }
                    return Action::Continue;
                }
                if !*headers_sent && collected.len() > HOLD_HEADERS_BYTES {
                    // Release the headers (chunked); the body follows when complete.
                    self.host.set_resp_header("content-length", None);
                    *headers_sent = true;
                }
                if *headers_sent {
                    Action::Continue
                } else {
                    Action::Pause
                }
            }
            BodyAction::ProviderError { status, slug, collected } => {
                if let Some(chunk) = &chunk {
                    collected.extend_from_slice(chunk);
                    self.host.set_response_body(0, body_size, &[]);
                }
                let too_large = collected.len() > MAX_ERROR_BYTES;
                if !end_of_stream && !too_large {
                    return Action::Pause;
                }
                let out = if let (Some(from), false) = (translate_from, too_large) {
                    // In the caller's shape, with the caller's API's status for it.
                    let (to_status, body) = crate::translate::error(from, self.api, *status, collected);
                    self.host.set_resp_header("content-type", Some("application/json"));
                    if to_status != *status {
                        self.host.set_resp_header(":status", Some(&to_status.to_string()));
                    }
                    body
                } else if too_large || is_json_object(collected) {
                    std::mem::take(collected)
                } else {
                    self.host.set_resp_header("content-type", Some("application/json"));
                    wrap_provider_error(*status, collected, slug).for_api(self.api).body().into_bytes()
                };
                if end_of_stream {
                    self.host.set_resp_header("content-length", Some(&out.len().to_string()));
                }
                self.host.set_response_body(0, 0, &out);
                self.body_action = BodyAction::None;
                Action::Continue
            }
            BodyAction::Replace { .. } => {
                if !end_of_stream {
                    return Action::Pause;
                }
                if let BodyAction::Replace { body, late_retry_after } =
                    std::mem::replace(&mut self.body_action, BodyAction::None)
                {
                    // The last attempt's filter has read its body by now.
                    let min = late_retry_after
                        .and_then(|n| read_records(&self.host, n, None).iter().filter_map(|r| r.retry_after_s).min());
                    if let Some(s) = min {
                        self.host.set_resp_header("retry-after", Some(&s.to_string()));
                    }
                    self.host.set_response_body(0, usize::MAX, body.as_bytes());
                    self.host.set_resp_header("content-length", Some(&body.len().to_string()));
                }
                Action::Continue
            }
        }
    }
}

/// Writes `pieces` in order into this callback's response body, which the caller emptied:
/// the first at the start, each further one appended (proxy-wasm `set_buffer_bytes` with a
/// start at or past the end appends, one at 0 with length 0 prepends).
fn append_response_body<'p>(host: &dyn Host, pieces: impl Iterator<Item = &'p [u8]>) {
    let mut at = 0usize;
    for piece in pieces {
        host.set_response_body(at, 0, piece);
        at = at.saturating_add(piece.len());
    }
}
