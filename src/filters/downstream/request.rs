//! The decision filter's request side: the operator policy, refusals, listings, the routing
//! decision and its hand-off to Envoy, the first attempt it prepares itself.

use super::*;
use crate::filters::tokens;
use crate::routing::request::ChatRequest;
use crate::wiring::ESTIMATE_HEADER;

impl<H: Host> Stream<H> {
    /// The operator policy for this caller, if policies are configured.
    pub(super) fn select_policy(&mut self, headers: &[(String, String)]) {
        let policies = &self.config.policies;
        if policies.is_empty() {
            return;
        }
        if let Some(sel) = policies.select(&mut HostFacts { host: &self.host, headers }) {
            self.policy = policies.list.iter().position(|p| std::ptr::eq(p, sel.policy));
            self.selected_by = Some(sel.by);
            count(&self.host, &format!("switchyard.policy_requests_total.policy.{}", tag(&sel.policy.name)));
        }
        // Trusted selection headers are for Switchyard only: no provider sees them.
        for h in &policies.trusted_headers {
            if headers.iter().any(|(k, _)| k == h) {
                self.host.set_req_header(h, None);
            }
        }
    }

    /// The audit record in filter state, for Envoy's access log (one JSON line per routed or
    /// rejected request, with the request path filled in).
    pub(super) fn audit<'a>(&'a self, mut audit: Audit<'a>) {
        let path = self.path.split('?').next().unwrap_or("");
        if !path.is_empty() {
            audit.path = Some(path);
        }
        self.host.set_property(&[AUDIT_PROPERTY], audit.to_json().as_bytes());
    }

    pub(super) fn reject(&mut self, e: &ApiError) -> Action {
        let shaped;
        let e = if e.api == self.api {
            e
        } else {
            shaped = e.clone().for_api(self.api);
            &shaped
        };
        // Natively the reply never comes back through this filter: sent as the 400 it is.
        let carried = e.status == 400 && self.request_complete && self.host.reply_reaches_filter();
        if carried {
            self.carried_400 = true;
        }
        count(&self.host, &format!("switchyard.requests_total.result.rejected.code.{}", e.code));
        let constraint = e.metadata.get("constraint").and_then(|v| v.as_str());
        let policy = self.policy_name();
        if let Some(name) = policy {
            // Denials by the policy itself (403, or a 404 whose emptying constraint is the policy's).
            if e.code == "policy_denied" || constraint.is_some_and(|c| c.starts_with("policy:")) {
                count(&self.host, &format!("switchyard.policy_denials_total.policy.{}.code.{}", tag(name), e.code));
            }
        }
        self.audit(Audit {
            policy,
            selected_by: self.selected_by,
            status: e.status,
            error: Some(e.code),
            constraint,
            ..Audit::default()
        });
        let body = e.body();
        let code = e.code;
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        if let Some(name) = policy {
            headers.push((POLICY_HEADER, name));
        }
        for (k, v) in &e.headers {
            headers.push((k.as_str(), v.as_str()));
        }
        let status = if carried { LOCAL_400_CARRIER } else { e.status };
        if status == 503 {
            // Marked so the listener's local_reply_config (which shapes Envoy's own 503s)
            // leaves this JSON alone.
            self.host.set_req_header(OWN_REPLY_HEADER, Some("1"));
        }
        self.host.reply(status, &headers, body.as_bytes());
        self.write_attributes(Some(code));
        Action::Pause
    }

    /// Answers `GET /v1/models[/{id}[/endpoints]]` from the catalog, showing only what the
    /// caller's operator policy lets it reach; in Anthropic's shape for an Anthropic client.
    pub(super) fn listing(&mut self, which: &listing::Listing, anthropic: bool) -> Action {
        let config = Rc::clone(&self.config);
        let health = SharedHealth::new(
            &self.host,
            self.host.now_ms(),
            config.catalog.routing.outage_window_s.saturating_mul(1000),
        );
        let policy = self.policy.and_then(|i| config.policies.list.get(i));
        let allowed = |e: &crate::config::Endpoint| {
            !config.catalog.shadowed_by_byok(e) && policy.is_none_or(|p| policy_allows(p, &config.catalog, e))
        };
        let answer = if anthropic { listing::anthropic } else { listing::answer };
        match answer(&config.catalog, &config.presets, which, &health, &allowed) {
            Ok(body) => {
                let mut headers = vec![("content-type", "application/json")];
                if let Some(p) = policy {
                    headers.push((POLICY_HEADER, p.name.as_str()));
                }
                self.host.reply(200, &headers, body.as_bytes());
                Action::Pause
            }
            Err(e) => self.reject(&e),
        }
    }

    /// Routes the complete buffered body: applies the plan, or answers with the error.
    pub(super) fn route(&mut self, body_size: usize) -> Action {
        self.request_complete = true;
        let body = self.host.request_body(0, body_size).unwrap_or_default();
        let config = Rc::clone(&self.config);
        let mut health = SharedHealth::new(
            &self.host,
            self.host.now_ms(),
            config.catalog.routing.outage_window_s.saturating_mul(1000),
        );
        health.session = self.session.clone();
        health.caller_scope = self.caller_scope;
        if !config.limits.capacity.is_empty() {
            health.capped = mesh::capped(&self.host, &config.limits, self.host.now_ms());
        }
        if !config.catalog.token_sources.is_empty() {
            health.tokenless = tokens::tokenless(&self.host, &config.catalog, self.host.now_ms());
        }
        let policy = self.policy.and_then(|i| config.policies.list.get(i));
        let surface = self.surface.take().unwrap_or(Surface::OPENAI);
        let header = self.routing_header.take();
        if surface.count_tokens {
            return self.count_tokens(&body, &surface, header.as_deref());
        }
        let decided = span("decide", || {
            decide_for(
                &config.catalog,
                policy,
                &config.presets,
                &surface,
                header.as_deref(),
                &body,
                &health,
                &mut || self.host.random_unit(),
            )
        });
        // Providers skipped for want of an access token: each such request is counted.
        for provider in health.skipped_tokenless.borrow().iter() {
            count(&self.host, &tokens::missing_metric(provider));
        }
        match decided {
            Ok(d) => {
                if self.debug {
                    self.candidates = Some(candidates_json(&config.catalog, &d.plan, &health));
                    self.auto_explain = d.plan.auto.as_ref().map(|c| c.explain_json(&config.catalog));
                }
                span("hand_off", || self.apply(d));
                Action::Continue
            }
            Err(e) => self.reject(&e),
        }
    }

    /// Answers Anthropic's `/v1/messages/count_tokens` with the filter's own estimate, in
    /// Anthropic's shape (`{"input_tokens": N}`) and marked `x-switchyard-estimate: true`: the
    /// bytes of `system`, `messages` and `tools` / 4, as routing estimates a prompt (linear in
    /// the body). The body is validated as a Messages request and its model must be one of the
    /// catalog's (or `auto`); nothing reaches a provider.
    fn count_tokens(&mut self, body: &[u8], surface: &Surface, header: Option<&str>) -> Action {
        let req = match ChatRequest::parse_for(body, surface, header) {
            Ok(r) => r,
            Err(e) => return self.reject(&e),
        };
        let catalog = &self.config.catalog;
        for (i, m) in req.model.iter().chain(req.models.iter()).enumerate() {
            let param = if i == 0 && req.model.is_some() { "model" } else { req.models_field };
            if !crate::routing::auto::is_auto(m) {
                if let Err(e) = crate::routing::router::known_model(catalog, m, param) {
                    return self.reject(&e);
                }
            }
        }
        let tools = req.fields.get("tools").map_or(0, |t| t.get().len() as u64);
        let tokens = req.prompt_tokens.saturating_add(tools.div_ceil(4));
        let headers = [("content-type", "application/json"), (ESTIMATE_HEADER, "true")];
        self.host.reply(200, &headers, format!("{{\"input_tokens\":{tokens}}}").as_bytes());
        Action::Pause
    }

    /// Hands the ranked list to Envoy: the first attempt's cluster token where the route's
    /// matcher reads it (filter state, or `x-switchyard-next` on istio-proxy; each attempt's
    /// filter names the next from the slots in filter state, see `slots`), the retry count, and
    /// the plan the upstream filter reads.
    pub(super) fn apply(&mut self, mut d: Decision) {
        // One clock reading for the hand-off: when it was decided, and the prepared first
        // attempt's start (each reading is a host call).
        let now = self.host.now_ms();
        let HandOff { mut plan, mut clusters } = hand_off(&self.config.catalog, self.config.id, &d, &self.path);
        // Neither the caller's key nor any provider key is on the request before an attempt.
        for h in &self.caller_credentials {
            self.host.set_req_header(h, None);
        }
        if plan.first_prepared && !self.prepare_first(&plan, d.stream, now) {
            // Not preparable (cannot happen with a plan of this configuration): the regular
            // cluster's per-attempt filter takes the first attempt as it takes the others.
            plan.first_prepared = false;
            let regular = plan.endpoints.first().and_then(|&i| self.config.catalog.endpoint(usize::from(i)));
            if let (Some(slot), Some(p)) =
                (clusters.first_mut(), regular.and_then(|e| self.config.catalog.provider_of(e)))
            {
                *slot = p.cluster.clone();
            }
        }
        let clusters: Vec<&str> = clusters.iter().map(String::as_str).collect();
        // Attempts in another API than the written body's take theirs from here.
        for (api, body) in std::mem::take(&mut d.bodies) {
            self.host.set_property(&[&body_property(api)], &body);
        }
        if let Some(body) = d.converse_body.take() {
            self.host.set_property(&[CONVERSE_BODY_PROPERTY], &body);
        }
        self.host.set_property(&[PLAN_PROPERTY], &plan.encode());
        // The order for Envoy's retries: the first cluster now, each attempt's filter the next.
        let routing = &self.config.catalog.routing;
        let key = routing.handoff_key.as_ref().filter(|_| routing.handoff == Handoff::Header);
        let slots = encode_slots(&clusters, key);
        if let Some(first) = next_token(slots.as_bytes(), 0) {
            match routing.handoff {
                Handoff::FilterState => self.host.set_property(&[&next_state_property(1)], first.as_bytes()),
                Handoff::Header => self.host.set_req_header(NEXT_CLUSTER_HEADER, Some(first)),
            }
        }
        self.host.set_property(&[SLOTS_PROPERTY], slots.as_bytes());
        self.host.set_req_header("x-envoy-max-retries", Some(&clusters.len().saturating_sub(1).to_string()));
        // The answer is rewritten (model id, provider, cost): ask providers for it unencoded.
        // A compressor filter before this one still compresses for callers that accept it.
        self.host.set_req_header("accept-encoding", Some("identity"));
        self.host.set_req_header("content-length", Some(&d.body.len().to_string()));
        self.host.set_request_body(0, usize::MAX, &d.body);
        // Envoy holds the body now. A copy kept for the request's lifetime would hold one body
        // per request in flight in the VM's memory, which never shrinks again.
        d.body = Vec::new();
        self.planned = clusters.len();
        self.decided_ms = now;
        // The first planned endpoint's model (`d.model`), or `auto`.
        let catalog = &self.config.catalog;
        let first_model = d.plan.attempts.first().and_then(|a| catalog.endpoint(a.endpoint)).map(|e| e.model);
        self.request_model = match (&d.plan.auto, first_model) {
            (None, Some(m)) => m,
            _ => catalog.models.len(),
        };
        count(&self.host, &strategy_metric_name(&tag(&d.plan.strategy.to_string())));
        self.decision = Some(d);
    }

    /// Prepares the first attempt as the per-attempt filter would (its provider's first-attempt
    /// cluster has none): removes the caller headers providers must not see, sets the path, and
    /// counts the attempt as started. The provider's key is never written here: this is the
    /// downstream request, which any route could send anywhere; the first-attempt cluster's own
    /// upstream filter (`credential_injector`) adds it on the way to that provider only.
    /// `:authority` is named in `x-switchyard-authority`, which the routed route's
    /// `host_rewrite_header` applies once the route is chosen: changing `:authority` here would
    /// change the virtual host the route is resolved in.
    pub(super) fn prepare_first(&mut self, plan: &AttemptPlan, stream: bool, now_ms: u64) -> bool {
        let config = Rc::clone(&self.config);
        let catalog = &config.catalog;
        let Some(ep) = plan.endpoints.first().and_then(|&i| catalog.endpoint(usize::from(i))) else { return false };
        let Some(provider) = catalog.provider_of(ep) else { return false };
        let Ok(rw) = attempt_rewrite(catalog, config.id, plan, 1, &provider.cluster) else { return false };
        for h in &self.swept {
            self.host.set_req_header(h, None);
        }
        if rw.path != self.path {
            self.host.set_req_header(":path", Some(&rw.path));
        }
        let has_version = self.host.req_header(ANTHROPIC_VERSION).is_some();
        for (h, v) in api_headers(rw.api, has_version) {
            self.host.set_req_header(h, v);
        }
        self.host.set_req_header(AUTHORITY_HEADER, Some(&rw.authority));
        let of = AttemptOf { model: &rw.model, slug: &rw.slug, in_catalog: rw.endpoint.is_some() };
        started(&self.host, &of);
        self.first = Some(PreparedFirst {
            in_catalog: of.in_catalog,
            model: rw.model,
            slug: rw.slug,
            planned: rw.planned,
            watch: AttemptWatch::new(rw.api, stream, now_ms),
            answered: false,
            recorded: false,
            verdict: None,
        });
        true
    }

    /// Records the prepared first attempt once: on its endpoint's statistics and the metrics.
    /// `now_ms`: this callback's clock reading.
    pub(super) fn finish_first(&mut self, now_ms: u64) {
        let Some(f) = self.first.as_mut() else { return };
        if f.recorded {
            return;
        }
        f.recorded = true;
        let s = f.watch.summary(now_ms);
        let of = AttemptOf { model: &f.model, slug: &f.slug, in_catalog: f.in_catalog };
        finished(&self.host, &self.config, &of, &s, &f.watch.usage, true, f.verdict, now_ms);
    }

    /// The end of a Gemini 429 the prepared first attempt got: the delay it names is that
    /// attempt's (see `cooled_down_late`), before the final error reads the records.
    pub(super) fn first_delay_from_body(&mut self, body: &[u8]) {
        let cap = self.config.catalog.routing.max_retry_after_s;
        let Some(f) = self.first.as_mut() else { return };
        f.watch.error_body(body, cap);
        let Some(delay) = f.watch.retry_after_s else { return };
        let record = AttemptRecord { endpoint: f.planned, status: 429, retry_after_s: Some(delay) };
        let of = AttemptOf { model: &f.model, slug: &f.slug, in_catalog: f.in_catalog };
        cooled_down_late(&self.host, &self.config, 1, record, &of, self.host.now_ms());
    }

    /// Routes a complete request unless its admission refused it; held (paused) while the
    /// admission has not answered yet. Token and spend limits reserve the routed request's
    /// estimate here, once its body is known.
    pub(super) fn route_admitted(&mut self, body_size: usize) -> Action {
        match self.admission.as_ref().map(|a| &a.state) {
            Some(AdmissionState::Refused(e)) => {
                let e = e.clone();
                self.routed = false;
                self.reject(&e)
            }
            Some(AdmissionState::Waiting) => {
                let action = self.route(body_size);
                if action != Action::Continue || self.decision.is_none() {
                    return action;
                }
                let estimate = self.estimate();
                let now = self.host.now_ms();
                let config = Rc::clone(&self.config);
                let Some(adm) = self.admission.as_mut() else { return action };
                mesh::reserve(&self.host, &config.limits, adm, estimate, now);
                match adm.state.clone() {
                    AdmissionState::Waiting => {
                        self.held = true;
                        Action::Pause
                    }
                    AdmissionState::Refused(e) => {
                        self.refuse_admission(&e);
                        Action::Pause
                    }
                    _ => action,
                }
            }
            _ => self.route(body_size),
        }
    }

    /// What the routed request is admitted for on token and spend limits: its prompt estimate
    /// plus the completion it caps (`rate_limits.default_completion_tokens` when it names
    /// none), priced at the dearest endpoint of its plan (a failover never costs more than it
    /// reserved; settlement prices what the serving endpoint reported).
    pub(super) fn estimate(&self) -> mesh::Estimate {
        let catalog = &self.config.catalog;
        let Some(d) = &self.decision else { return mesh::Estimate { tokens: 0, cost_usd: 0.0 } };
        let completion = d.max_tokens.unwrap_or(self.config.limits.default_completion_tokens);
        let cost_usd = d
            .plan
            .attempts
            .iter()
            .filter_map(|a| catalog.endpoint(a.endpoint))
            .map(|e| e.pricing.cost_usd(d.prompt_tokens, 0, completion))
            .fold(0.0, f64::max);
        mesh::Estimate { tokens: d.prompt_tokens.saturating_add(completion), cost_usd }
    }

    /// The admission refused the request after it was routed: nothing was sent; the prepared
    /// first attempt never started.
    pub(super) fn refuse_admission(&mut self, e: &ApiError) {
        if let Some(f) = self.first.take() {
            if f.in_catalog {
                step_in_flight(&self.host, &stats_key(&f.model, &f.slug), false);
            }
        }
        self.decision = None;
        self.routed = false;
        self.held = false;
        self.reject(e);
    }
}
