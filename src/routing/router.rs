//! Provider routing: from a parsed request to the ranked list of endpoints to attempt.
//!
//! Order of evaluation (SPEC section 4): candidates = endpoints of each model -> hard filters ->
//! ordering (`order`, else `sort`/suffix, else the default policy) -> soft preferences move
//! misses to the end -> BYOK endpoints first -> `allow_fallbacks` truncation.

use std::cmp::Ordering;

use crate::answer::errors::ApiError;
use crate::api::Api;
use crate::config::{Catalog, Endpoint};
use crate::config::{DefaultPolicy, TaskType};
use crate::routing::auto::{self, AutoChoice};
use crate::routing::health::{EndpointHealth, HealthView, Percentiles, PERCENTILES};
use crate::routing::outage::outage_flags;
use crate::routing::policy::Policy;
use crate::routing::request::{split_variant, ChatRequest, Cutoffs, Partition, ProviderPrefs, Sort, SortBy, Variant};
use crate::routing::routing_cost::{costs, draw_order, token_estimate, CostTerms, EndpointInput};
use crate::routing::sorting::{sort_by, sort_by_key};

/// One planned attempt: an endpoint and the score that ranked it (meaning depends on strategy).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub endpoint: usize,
    pub score: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Endpoints in the order they are tried; model fallbacks follow the primary model's.
    pub attempts: Vec<Attempt>,
    /// How the order was decided, for the `x-switchyard-strategy` header.
    pub strategy: Strategy,
    /// The auto router's classification and ranking when the request asked for `auto`.
    pub auto: Option<AutoChoice>,
    /// routing_cost terms of the endpoints it ordered (debug header).
    pub cost_terms: Vec<(usize, CostTerms)>,
    /// The conversation this request continues or starts, when it is routed by routing_cost
    /// (the host remembers which endpoint served it, so later turns stay there).
    pub conversation: Option<u64>,
    /// Problems with the request that did not stop it (`x-switchyard-warning`), e.g. a slug in
    /// `provider.ignore` that names no configured provider.
    pub warnings: Vec<String>,
}

/// Printable ASCII only, at most 64 characters: caller text echoed into a response header.
fn header_safe(s: &str) -> String {
    let mut out: String = s.chars().take(64).map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if s.chars().count() > 64 {
        out.push_str("...");
    }
    out.replace('"', "'")
}

/// At most this many unknown slugs are named in `x-switchyard-warning`.
const MAX_SLUG_WARNINGS: usize = 4;

/// Slugs in `order`, `only` and `ignore` that name no configured provider. A typo in `ignore`
/// would otherwise silently let traffic through to the provider the caller meant to exclude.
/// With `routing.strict_provider_slugs` the first one is a 400 naming the field.
fn slug_warnings(catalog: &Catalog, req: &ChatRequest) -> Result<Vec<String>, ApiError> {
    let p = &req.provider;
    let lists: [(&str, &[String]); 3] =
        [("order", &p.order), ("only", p.only.as_deref().unwrap_or(&[])), ("ignore", &p.ignore)];
    let mut out = Vec::new();
    let mut unlisted = 0usize;
    for (field, slugs) in lists {
        for (i, slug) in slugs.iter().enumerate() {
            if catalog.knows_slug(slug) {
                continue;
            }
            // The header stays small whatever the request holds: the first few are named.
            if out.len() >= MAX_SLUG_WARNINGS && !catalog.routing.strict_provider_slugs {
                unlisted += 1;
                continue;
            }
            let param = format!("provider.{field}[{i}]");
            if catalog.routing.strict_provider_slugs {
                return Err(ApiError::invalid(
                    &param,
                    format!("`{param}`: \"{slug}\" matches no provider configured on this router"),
                ));
            }
            out.push(format!("{param} \"{}\" matches no provider", header_safe(slug)));
        }
    }
    if unlisted > 0 {
        out.push(format!("{unlisted} more slugs match no provider"));
    }
    Ok(out)
}

/// Cuts the ranked list to `budget` attempts without starving a fallback model: every later
/// model keeps (at least) its first attempt, so earlier models may use the budget minus one per
/// model still to come (SPEC section 3). With more models than the budget, the first ones win.
pub fn cut_to_budget(attempts: Vec<Attempt>, budget: usize, model_of: &dyn Fn(usize) -> usize) -> Vec<Attempt> {
    let budget = budget.max(1);
    if attempts.len() <= budget {
        return attempts;
    }
    // The first attempt of each of the first `budget` distinct models is reserved.
    let mut seen: Vec<usize> = Vec::new();
    let mut reserved = vec![false; attempts.len()];
    for (i, a) in attempts.iter().enumerate() {
        let m = model_of(a.endpoint);
        if !seen.contains(&m) && seen.len() < budget {
            seen.push(m);
            if let Some(r) = reserved.get_mut(i) {
                *r = true;
            }
        }
    }
    let mut reserved_ahead = seen.len();
    let mut out = Vec::with_capacity(budget);
    for (a, is_reserved) in attempts.into_iter().zip(reserved) {
        if is_reserved {
            reserved_ahead -= 1;
            out.push(a);
        } else if out.len() + reserved_ahead < budget {
            out.push(a);
        }
    }
    out
}

/// Everything the orderings need about one request.
struct Ctx<'a> {
    catalog: &'a Catalog,
    req: &'a ChatRequest<'a>,
    /// The `provider` object routing uses: the request's, narrowed by the policy.
    prefs: &'a ProviderPrefs,
    policy: Option<&'a Policy>,
    health: &'a dyn HealthView,
    completion_tokens: u64,
}

impl Ctx<'_> {
    fn ep(&self, idx: usize) -> Option<&Endpoint> {
        self.catalog.endpoint(idx)
    }

    fn model_id(&self, ep: &Endpoint) -> &str {
        self.catalog.models.get(ep.model).map(|m| m.id.as_str()).unwrap_or("")
    }

    fn health(&self, idx: usize) -> EndpointHealth {
        match self.ep(idx) {
            Some(ep) => self.health.endpoint(self.model_id(ep), &ep.slug),
            None => EndpointHealth::default(),
        }
    }

    /// Estimated USD cost of this request at the endpoint's list price.
    fn cost(&self, idx: usize) -> f64 {
        match self.ep(idx) {
            Some(ep) => {
                let p = ep.pricing;
                self.req.prompt_tokens as f64 * p.prompt / 1e6
                    + self.completion_tokens as f64 * p.completion / 1e6
                    + p.request
            }
            None => f64::INFINITY,
        }
    }

    fn slug(&self, idx: usize) -> &str {
        self.ep(idx).map(|e| e.slug.as_str()).unwrap_or("")
    }

    fn is_byok(&self, idx: usize) -> bool {
        self.ep(idx).and_then(|e| self.catalog.provider_of(e)).map(|p| p.byok).unwrap_or(false)
    }
}

/// The hard filter that removes endpoints of providers over their mesh-wide capacity.
const CAPACITY_CONSTRAINT: &str = "capacity";
/// The constraint of providers whose access token is not there yet (`HealthView::lacks_credential`).
const CREDENTIAL_CONSTRAINT: &str = "credential";

/// How one model's endpoints are ordered: by its suffix or the request's `sort`, else by the
/// default policy.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PoolOrder {
    Sort(SortBy),
    Exacto,
    Default,
}

/// How a plan's order was decided; its text is the `x-switchyard-strategy` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// `model: "auto"`, by the task it classified.
    Auto(TaskType),
    /// A `provider-slug/model` id chose the provider.
    Pinned,
    /// `provider.order` decided the first attempt.
    Order,
    /// An explicit `provider.sort` or a `:nitro` / `:floor` suffix.
    Sort(SortBy),
    /// The `:exacto` suffix.
    Exacto,
    /// The default policy, with what shaped it.
    Default { policy: DefaultPolicy, sticky: bool, tool_tiers: bool },
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Strategy::Auto(task) => write!(f, "auto:{}", task.name()),
            Strategy::Pinned => f.write_str("pinned"),
            Strategy::Order => f.write_str("order"),
            Strategy::Sort(by) => write!(f, "sort:{}", by.name()),
            Strategy::Exacto => f.write_str("exacto"),
            Strategy::Default { policy, sticky, tool_tiers } => {
                f.write_str(match policy {
                    DefaultPolicy::RoutingCost => "routing_cost",
                    DefaultPolicy::PriceWeighted => "price_weighted",
                })?;
                if sticky {
                    f.write_str("+sticky")?;
                }
                if tool_tiers {
                    f.write_str("+tool_tiers")?;
                }
                Ok(())
            }
        }
    }
}

/// A model of the request resolved against the catalog.
struct ResolvedModel {
    model: usize,
    variant: Option<Variant>,
    /// Provider pinned by a `provider-slug/vendor/model` id.
    pin: Option<String>,
}

/// Whether `written` names a model of the catalog (a variant or a provider pin allowed), or the
/// 404 saying it does not.
pub fn known_model(catalog: &Catalog, written: &str, param: &str) -> Result<(), ApiError> {
    resolve_model(catalog, written, param).map(|_| ())
}

fn resolve_model(catalog: &Catalog, written: &str, param: &str) -> Result<ResolvedModel, ApiError> {
    // A catalog id (even one with a colon), or `provider/<catalog id>`.
    let lookup = |id: &str| -> Option<(usize, Option<String>)> {
        if let Some(i) = catalog.models.iter().position(|m| m.id == id) {
            return Some((i, None));
        }
        // BitRouter's migration form: `anthropic-direct/anthropic/claude-sonnet-4-6`.
        let (first, rest) = id.split_once('/')?;
        if !catalog.is_provider_base(first) {
            return None;
        }
        catalog.models.iter().position(|m| m.id == rest).map(|i| (i, Some(first.to_string())))
    };
    if let Some((model, pin)) = lookup(written) {
        return Ok(ResolvedModel { model, variant: None, pin });
    }
    let (base, variant) = split_variant(written, &|_| false, param)?;
    match lookup(base) {
        Some((model, pin)) => Ok(ResolvedModel { model, variant, pin }),
        None => Err(ApiError::model_not_found(param, written)),
    }
}

/// One filter of the `provider` object. The same predicate judges the request's value and a
/// policy's ceiling (`Policy::limits` has the request's shape).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field {
    Only,
    Ignore,
    Quantizations,
    DataCollection,
    Zdr,
    MaxPrice,
}

const POLICY_FIELDS: [Field; 6] =
    [Field::Only, Field::Ignore, Field::Quantizations, Field::DataCollection, Field::Zdr, Field::MaxPrice];

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::Only => "only",
            Field::Ignore => "ignore",
            Field::Quantizations => "quantizations",
            Field::DataCollection => "data_collection",
            Field::Zdr => "zdr",
            Field::MaxPrice => "max_price",
        }
    }

    /// Whether `p` constrains this field at all.
    fn is_set(self, p: &ProviderPrefs) -> bool {
        let mp = p.max_price;
        match self {
            Field::Only => p.only.is_some(),
            Field::Ignore => !p.ignore.is_empty(),
            Field::Quantizations => p.quantizations.is_some(),
            Field::DataCollection => p.data_collection_deny,
            Field::Zdr => p.zdr,
            Field::MaxPrice => {
                mp.prompt.is_some() || mp.completion.is_some() || mp.request.is_some() || mp.image.is_some()
            }
        }
    }

    fn keeps(self, p: &ProviderPrefs, cat: &Catalog, e: &Endpoint) -> bool {
        match self {
            Field::Only => p.only.as_ref().is_none_or(|only| only.iter().any(|s| e.matches_slug(s))),
            Field::Ignore => !p.ignore.iter().any(|s| e.matches_slug(s)),
            Field::Quantizations => p.quantizations.as_ref().is_none_or(|qs| qs.contains(&e.quantization)),
            Field::DataCollection => {
                !p.data_collection_deny
                    || cat.provider_of(e).map(|pr| !pr.retains_data && !pr.trains_on_data).unwrap_or(false)
            }
            Field::Zdr => !p.zdr || cat.provider_of(e).map(|pr| pr.zdr).unwrap_or(false),
            Field::MaxPrice => {
                let mp = p.max_price;
                let within = |limit: Option<f64>, price: f64| limit.is_none_or(|l| price <= l);
                within(mp.prompt, e.pricing.prompt)
                    && within(mp.completion, e.pricing.completion)
                    && within(mp.request, e.pricing.request)
                    && within(mp.image, e.pricing.image)
            }
        }
    }
}

/// Whether an operator policy lets a caller reach this endpoint at all (its `allowed_models`,
/// every ceiling of `limits` and `require_tags`): what the model listings show that caller.
pub fn policy_allows(policy: &Policy, catalog: &Catalog, e: &Endpoint) -> bool {
    let model_ok = catalog.models.get(e.model).is_some_and(|m| policy.allows_model(&m.id));
    let tags_ok = policy.require_tags.is_empty()
        || catalog.provider_of(e).is_some_and(|pr| policy.require_tags.iter().all(|t| pr.tags.contains(t)));
    model_ok
        && tags_ok
        && policy.allows_region(e)
        && POLICY_FIELDS.iter().all(|f| !f.is_set(&policy.limits) || f.keeps(&policy.limits, catalog, e))
}

/// The candidate set while the hard filters run, remembering which endpoints the operator's
/// policy removed: when a request filter then empties the set although its own value would
/// have kept one of those, the policy is what refused the request and is named
/// (`policy:<name>.<field>`), e.g. a request `only` outside the policy's ceiling.
struct Filtering<'a> {
    cat: &'a Catalog,
    set: Vec<usize>,
    removed_by_policy: Vec<(usize, String)>,
}

impl Filtering<'_> {
    fn policy_step(&mut self, constraint: String, keep: &dyn Fn(&Endpoint) -> bool) -> Result<(), String> {
        let cat = self.cat;
        let mut removed = Vec::new();
        self.set.retain(|&i| {
            let k = cat.endpoint(i).map(keep).unwrap_or(false);
            if !k {
                removed.push(i);
            }
            k
        });
        self.removed_by_policy.extend(removed.into_iter().map(|i| (i, constraint.clone())));
        if self.set.is_empty() {
            Err(constraint)
        } else {
            Ok(())
        }
    }

    /// A request filter: `keep` is the effective (narrowed) predicate, `asked` the request's
    /// own value, used only to decide whom to blame when the set empties.
    fn step(
        &mut self,
        name: &str,
        keep: &dyn Fn(&Endpoint) -> bool,
        asked: &dyn Fn(&Endpoint) -> bool,
    ) -> Result<(), String> {
        let cat = self.cat;
        self.set.retain(|&i| cat.endpoint(i).map(keep).unwrap_or(false));
        // Only endpoints the request's own values so far would have kept can be blamed on.
        self.removed_by_policy.retain(|(i, _)| cat.endpoint(*i).map(asked).unwrap_or(false));
        if !self.set.is_empty() {
            return Ok(());
        }
        Err(self.removed_by_policy.first().map_or_else(|| name.to_string(), |(_, c)| c.clone()))
    }
}

/// Applies the hard filters in SPEC order (operator policy first); on an empty set returns the
/// constraint that emptied it.
fn hard_filter(ctx: &Ctx, model: &ResolvedModel) -> Result<Vec<usize>, String> {
    let cat = ctx.catalog;
    let p = ctx.prefs;
    let asked = &ctx.req.provider;
    let Some(m) = cat.models.get(model.model) else { return Err("model".into()) };
    let mut f = Filtering { cat, set: m.endpoints.clone(), removed_by_policy: Vec::new() };
    // A chat request (OpenAI chat completions, Anthropic Messages, Google generateContent) is
    // translated for an endpoint of another API (`translate`), so every endpoint is a candidate.
    // Other requests only reach endpoints speaking their API; the 404 names it (`api:openai`).
    let api = ctx.req.api;
    let translatable = ctx.req.translatable;
    let speaks = |e: &Endpoint| translatable || e.apis.has(api);
    if !f.set.iter().all(|&i| cat.endpoint(i).is_some_and(speaks)) {
        f.step(&format!("api:{}", api.name()), &speaks, &speaks)?;
    }

    // A provider whose BYOK key is to be used always: its shared (non-BYOK) endpoints are out.
    if !cat.byok_always_bases.is_empty() {
        let keep = |e: &Endpoint| !cat.shadowed_by_byok(e);
        if !f.set.iter().all(|&i| cat.endpoint(i).is_some_and(keep)) {
            f.step("byok_always", &keep, &keep)?;
        }
    }
    if let Some(policy) = ctx.policy {
        for field in POLICY_FIELDS {
            if field.is_set(&policy.limits) {
                f.policy_step(policy.constraint(field.name()), &|e| field.keeps(&policy.limits, cat, e))?;
            }
        }
        if !policy.require_tags.is_empty() {
            f.policy_step(policy.constraint("require_tags"), &|e| {
                cat.provider_of(e).is_some_and(|pr| policy.require_tags.iter().all(|t| pr.tags.contains(t)))
            })?;
        }
        if policy.allowed_regions.is_some() {
            f.policy_step(policy.constraint("allowed_regions"), &|e| policy.allows_region(e))?;
        }
    }
    if let Some(pin) = &model.pin {
        let pinned = |e: &Endpoint| e.matches_slug(pin);
        f.step("model", &pinned, &pinned)?;
    }
    let request_field = |f: &mut Filtering, field: Field| -> Result<(), String> {
        if field.is_set(p) {
            f.step(field.name(), &|e| field.keeps(p, cat, e), &|e| field.keeps(asked, cat, e))?;
        }
        Ok(())
    };
    for field in [Field::Only, Field::Ignore, Field::Quantizations, Field::DataCollection, Field::Zdr] {
        request_field(&mut f, field)?;
    }
    if p.enforce_distillable_text {
        let keep = |_: &Endpoint| m.distillable;
        f.step("enforce_distillable_text", &keep, &keep)?;
    }
    if p.require_parameters {
        let keep = |e: &Endpoint| ctx.req.parameters.iter().all(|k| e.supports(k));
        f.step("require_parameters", &keep, &keep)?;
    }
    request_field(&mut f, Field::MaxPrice)?;
    // Saturating: a huge `max_tokens` must not wrap around and keep a small-context endpoint.
    let needed = ctx.req.prompt_tokens.saturating_add(ctx.req.max_tokens.unwrap_or(0));
    let fits = |e: &Endpoint| e.context_length.is_none_or(|c| c >= needed);
    f.step("context_length", &fits, &fits)?;
    // With fallbacks off, only the caller's `order` may be attempted.
    if !p.allow_fallbacks && !p.order.is_empty() {
        let listed = |e: &Endpoint| p.order.iter().any(|s| e.matches_slug(s));
        f.step("order", &listed, &listed)?;
    }
    // Last: a provider over its mesh-wide capacity serves nothing now (`capacity`, a 429).
    let uncapped = |e: &Endpoint| cat.provider_of(e).is_none_or(|pr| ctx.health.capped_for_s(&pr.slug).is_none());
    if !f.set.iter().all(|&i| cat.endpoint(i).is_some_and(uncapped)) {
        f.step(CAPACITY_CONSTRAINT, &uncapped, &uncapped)?;
    }
    // A provider whose access token is not there yet (startup, its metadata server down) is
    // skipped now: an attempt to it could not be sent (`credential.google_metadata`).
    let credentialed = |e: &Endpoint| cat.provider_of(e).is_none_or(|pr| !ctx.health.lacks_credential(&pr.slug));
    if !f.set.iter().all(|&i| cat.endpoint(i).is_some_and(credentialed)) {
        f.step(CREDENTIAL_CONSTRAINT, &credentialed, &credentialed)?;
    }
    Ok(f.set)
}

fn cmp_f64(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or(Ordering::Equal)
}

/// What the orderings compare, computed once per candidate before a sort: the health view and
/// the price are read n times per sort instead of twice per comparison.
struct SortKey<'a> {
    cost: f64,
    slug: &'a str,
    health: EndpointHealth,
}

impl SortKey<'_> {
    /// The last tie-breaks of the orderings: cheaper first, then the slug (deterministic).
    fn cheaper_first(&self, other: &SortKey) -> Ordering {
        cmp_f64(self.cost, other.cost).then_with(|| self.slug.cmp(other.slug))
    }
}

/// Sorts `set` (stable) by `cmp` over each candidate's precomputed key.
fn sort_keyed(ctx: &Ctx, set: &mut [Attempt], cmp: impl Fn(&SortKey, &SortKey) -> Ordering) {
    let key = |idx: usize| SortKey { cost: ctx.cost(idx), slug: ctx.slug(idx), health: ctx.health(idx) };
    let mut keyed: Vec<(Attempt, SortKey)> = set.iter().map(|a| (a.clone(), key(a.endpoint))).collect();
    sort_by(&mut keyed, |x, y| cmp(&x.1, &y.1));
    for (slot, (a, _)) in set.iter_mut().zip(keyed) {
        *slot = a;
    }
}

/// Measured values sort before unmeasured ones; `desc` puts larger values first.
fn cmp_measured(a: Option<f64>, b: Option<f64>, desc: bool) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => {
            if desc {
                cmp_f64(y, x)
            } else {
                cmp_f64(x, y)
            }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Deterministic explicit sorts with BitRouter's tie-breaks. Unknown uptime counts as 1 and
/// unknown error rate as 0; endpoints without latency/throughput data go after measured ones,
/// cheaper first.
fn explicit_sort(ctx: &Ctx, set: &mut [Attempt], by: SortBy) {
    sort_keyed(ctx, set, |a, b| {
        let (ha, hb) = (&a.health, &b.health);
        let uptime = || cmp_f64(hb.uptime.unwrap_or(1.0), ha.uptime.unwrap_or(1.0));
        let errors = || cmp_f64(ha.error_rate.unwrap_or(0.0), hb.error_rate.unwrap_or(0.0));
        let slug = || a.slug.cmp(b.slug);
        // Without measurements the sort has nothing to go on: cheapest first.
        let cheaper_if_unmeasured = |x: Option<f64>, y: Option<f64>| {
            if x.is_none() && y.is_none() {
                cmp_f64(a.cost, b.cost)
            } else {
                Ordering::Equal
            }
        };
        match by {
            SortBy::Price => cmp_f64(a.cost, b.cost).then_with(uptime).then_with(errors).then_with(slug),
            SortBy::Latency => cmp_measured(ha.ttft_ms.p50, hb.ttft_ms.p50, false)
                .then_with(|| cheaper_if_unmeasured(ha.ttft_ms.p50, hb.ttft_ms.p50))
                .then_with(|| cmp_measured(ha.throughput_tps.p50, hb.throughput_tps.p50, true))
                .then_with(uptime)
                .then_with(slug),
            SortBy::Throughput => cmp_measured(ha.throughput_tps.p50, hb.throughput_tps.p50, true)
                .then_with(|| cheaper_if_unmeasured(ha.throughput_tps.p50, hb.throughput_tps.p50))
                .then_with(|| cmp_measured(ha.ttft_ms.p50, hb.ttft_ms.p50, false))
                .then_with(uptime)
                .then_with(slug),
        }
    });
    for a in set.iter_mut() {
        let h = ctx.health(a.endpoint);
        a.score = match by {
            SortBy::Price => ctx.cost(a.endpoint),
            SortBy::Latency => h.ttft_ms.p50.unwrap_or(f64::NAN),
            SortBy::Throughput => h.throughput_tps.p50.unwrap_or(f64::NAN),
        };
    }
}

/// `:exacto`: lowest measured malformed-tool-call rate first (unmeasured after), then price.
fn exacto_sort(ctx: &Ctx, set: &mut [Attempt]) {
    sort_keyed(ctx, set, |a, b| {
        cmp_measured(a.health.tool_error_rate, b.health.tool_error_rate, false).then_with(|| a.cheaper_first(b))
    });
    for a in set.iter_mut() {
        a.score = ctx.health(a.endpoint).tool_error_rate.unwrap_or(f64::NAN);
    }
}

/// Default policy B: routing cost per endpoint, then a weighted draw by traffic share (see
/// `routing_cost`). Score = the endpoint's share.
fn routing_cost_order(ctx: &Ctx, set: &mut Vec<Attempt>, rand: &mut dyn FnMut() -> f64) -> Vec<(usize, CostTerms)> {
    let indices: Vec<usize> = set.iter().map(|a| a.endpoint).collect();
    let outage = outage_flags(ctx.catalog, ctx.health, &indices);
    let inputs: Vec<EndpointInput> = indices
        .iter()
        .zip(outage)
        .map(|(&i, outage)| {
            let p = ctx.ep(i).map(|e| e.pricing).unwrap_or_default();
            EndpointInput {
                prompt_price: p.prompt,
                completion_price: p.completion,
                request_price: p.request,
                health: ctx.health(i),
                outage,
            }
        })
        .collect();
    let tokens = token_estimate(&inputs, ctx.req.prompt_tokens, ctx.completion_tokens);
    let terms = costs(&inputs, tokens, &ctx.catalog.routing.cost);
    let order = draw_order(&terms, rand);
    let picked: Vec<(usize, CostTerms)> =
        order.iter().filter_map(|&k| Some((*indices.get(k)?, *terms.get(k)?))).collect();
    *set = picked.iter().map(|(e, t)| Attempt { endpoint: *e, score: t.share }).collect();
    picked
}

/// The conversation a request belongs to: `x-session-id`, else the body's `session_id`, else a
/// hash of its first user message and the system prompt before it (the same in every later turn).
pub fn conversation_key(req: &ChatRequest, header: Option<&str>, scope: u64) -> Option<u64> {
    // Eight bytes per step (the messages can be long; this runs on every routed request), each
    // part closed by its length so ("ab", "c") and ("a", "bc") differ, then a final mix.
    let fnv = |parts: &[&[u8]]| -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ scope;
        let mut step = |w: u64| h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
        for p in parts {
            let mut chunks = p.chunks_exact(8);
            for c in &mut chunks {
                step(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
            }
            let mut tail = [0u8; 8];
            for (t, b) in tail.iter_mut().zip(chunks.remainder()) {
                *t = *b;
            }
            step(u64::from_le_bytes(tail));
            step(p.len() as u64);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^ (h >> 33)
    };
    if let Some(id) = header.filter(|h| !h.is_empty()) {
        return Some(fnv(&[b"session", id.as_bytes()]));
    }
    if let Some(id) = req.fields.get("session_id").and_then(|v| serde_json::from_str::<String>(v.get()).ok()) {
        return Some(fnv(&[b"session", id.as_bytes()]));
    }
    // Google's turns are `contents[].parts`; Anthropic's and Google's system prompts are
    // top-level (`system`, `systemInstruction`).
    let (turns, system_field) = match req.api {
        Api::OpenAi => ("messages", None),
        Api::Responses => ("input", Some("instructions")),
        Api::Anthropic => ("messages", Some("system")),
        Api::Google => ("contents", Some("systemInstruction")),
    };
    let (head_system, user) = conversation_head(req.fields.get(turns)?.get());
    let user = user?.as_bytes();
    let system = match system_field {
        Some(f) => req.fields.get(f).map(|v| v.get().as_bytes()),
        None => head_system.map(str::as_bytes),
    };
    Some(fnv(&[b"messages", system.unwrap_or(b""), user]))
}

/// The conversation's head in a turns array: the content of its first user message and of the
/// first system message before it. The array is read only up to that user message: a long
/// conversation is not parsed a second time to its end (at 100 KB that was about 30 us of the
/// decision filter's time in V8).
fn conversation_head(turns: &str) -> (Option<&str>, Option<&str>) {
    use serde::de::{SeqAccess, Visitor};
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Msg<'a> {
        #[serde(default)]
        role: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default, alias = "parts")]
        content: Option<&'a RawValue>,
    }
    #[derive(Default)]
    struct Head<'a> {
        system: Option<&'a RawValue>,
        user: Option<&'a RawValue>,
    }
    impl<'de> Visitor<'de> for &mut Head<'de> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of turns")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(m) = seq.next_element::<Msg<'de>>()? {
                match m.role.as_deref() {
                    Some("user") => {
                        self.user = m.content;
                        return Ok(());
                    }
                    Some("system") if self.system.is_none() => self.system = m.content,
                    _ => {}
                }
            }
            Ok(())
        }
    }
    let mut head = Head::default();
    let mut de = serde_json::Deserializer::from_str(turns);
    // Stopping at the user message leaves the rest of the array unread, which the deserializer
    // then reports as an error: what was read before it is what counts.
    let _ = serde::Deserializer::deserialize_seq(&mut de, &mut head);
    (head.system.map(RawValue::get), head.user.map(RawValue::get))
}

/// Default policy A: endpoints with a significant outage go to the back; among the stable ones
/// the first is drawn with weight 1/price^2, the rest follow by ascending price. Score = the
/// probability of being drawn first (0 for endpoints that cannot be).
fn price_weighted(ctx: &Ctx, set: &mut Vec<Attempt>, rand: &mut dyn FnMut() -> f64) {
    sort_keyed(ctx, set, |a, b| a.cheaper_first(b));
    let indices: Vec<usize> = set.iter().map(|a| a.endpoint).collect();
    let outage = outage_flags(ctx.catalog, ctx.health, &indices);
    let (mut stable, mut unstable) = (Vec::new(), Vec::new());
    for (a, out) in set.drain(..).zip(outage) {
        if out {
            unstable.push(a);
        } else {
            stable.push(a);
        }
    }
    // Free endpoints have infinite weight: they share the draw among themselves.
    let free = stable.iter().filter(|a| ctx.cost(a.endpoint) <= 0.0).count();
    let weight = |a: &Attempt| {
        let c = ctx.cost(a.endpoint);
        if free > 0 {
            if c <= 0.0 {
                1.0
            } else {
                0.0
            }
        } else {
            1.0 / (c * c)
        }
    };
    let total: f64 = stable.iter().map(weight).sum();
    for a in stable.iter_mut() {
        a.score = if total > 0.0 { weight(a) / total } else { 0.0 };
    }
    if total > 0.0 && total.is_finite() {
        let mut target = rand() * total;
        let mut pick = stable.len().saturating_sub(1);
        for (i, a) in stable.iter().enumerate() {
            let w = weight(a);
            if target < w {
                pick = i;
                break;
            }
            target -= w;
        }
        if pick < stable.len() {
            let chosen = stable.remove(pick);
            stable.insert(0, chosen);
        }
    }
    for a in unstable.iter_mut() {
        a.score = 0.0;
    }
    stable.append(&mut unstable);
    *set = stable;
}

/// Tool-call quality tier: unmeasured endpoints get the benefit of the doubt.
fn tool_tier(h: &EndpointHealth) -> u8 {
    match h.tool_error_rate {
        None => 0,
        Some(r) if r < 0.05 => 0,
        Some(r) if r < 0.20 => 1,
        Some(_) => 2,
    }
}

fn misses(cutoffs: &Cutoffs, measured: &Percentiles, higher_is_better: bool, scale: f64) -> bool {
    PERCENTILES.iter().any(|&p| match (cutoffs.at(p), measured.at(p)) {
        (Some(c), Some(v)) => {
            let v = v * scale;
            if higher_is_better {
                v < c
            } else {
                v > c
            }
        }
        _ => false,
    })
}

/// Moves entries failing `keep` to the end, preserving order on both sides.
fn stable_partition(set: &mut Vec<Attempt>, keep: impl Fn(&Attempt) -> bool) {
    let (front, back): (Vec<Attempt>, Vec<Attempt>) = set.drain(..).partition(|a| keep(a));
    set.extend(front);
    set.extend(back);
}

fn order_rank(ctx: &Ctx, set: &mut Vec<Attempt>, then: &mut dyn FnMut(&mut Vec<Attempt>)) {
    let order = &ctx.prefs.order;
    let mut head: Vec<Attempt> = Vec::new();
    for (pos, slug) in order.iter().enumerate() {
        let mut group: Vec<Attempt> = Vec::new();
        set.retain(|a| {
            let hit = ctx.ep(a.endpoint).map(|e| e.matches_slug(slug)).unwrap_or(false);
            if hit {
                group.push(Attempt { endpoint: a.endpoint, score: pos as f64 });
            }
            !hit
        });
        // A base slug may match several variants: cheapest first.
        sort_keyed(ctx, &mut group, |a, b| a.cheaper_first(b));
        head.extend(group);
    }
    then(set);
    head.append(set);
    *set = head;
}

/// Computes the ranked attempt list for a request (no operator policy).
pub fn plan(
    catalog: &Catalog,
    req: &ChatRequest,
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Plan, ApiError> {
    plan_under(catalog, req, None, health, rand)
}

/// Computes the ranked attempt list for a request under an operator policy: the policy's
/// `allowed_models` first (403), then its filters before the request's (404 naming
/// `policy:<name>.<field>`), and every ordering runs inside what is left.
pub fn plan_under(
    catalog: &Catalog,
    req: &ChatRequest,
    policy: Option<&Policy>,
    health: &dyn HealthView,
    rand: &mut dyn FnMut() -> f64,
) -> Result<Plan, ApiError> {
    let narrowed = policy.map(|p| p.narrow(&req.provider));
    let prefs = narrowed.as_ref().unwrap_or(&req.provider);
    let warnings = slug_warnings(catalog, req)?;
    let ctx = Ctx {
        catalog,
        req,
        prefs,
        policy,
        health,
        completion_tokens: req.max_tokens.unwrap_or(catalog.routing.expected_completion_tokens),
    };

    // `model: auto`: the auto router ranks the models; provider routing then runs for each
    // pick as for a `models` list, followed by the caller's own `models`.
    let auto = match req.model.as_deref() {
        Some(m) if auto::is_auto(m) && catalog.model(m).is_none() => {
            // An operator policy's `allowed_models` bounds what the auto router may pick.
            let label = policy.map(|p| p.constraint("allowed_models")).unwrap_or_default();
            let bounds: Vec<auto::Bound> = policy
                .and_then(|p| p.allowed_models.as_deref())
                .map(|allowed_models| auto::Bound { label: &label, allowed_models })
                .into_iter()
                .collect();
            Some(auto::choose(catalog, req, health, &bounds)?)
        }
        _ => None,
    };
    let mut resolved: Vec<(ResolvedModel, String)> = Vec::new();
    if let Some(choice) = &auto {
        for m in choice.picks() {
            let id = catalog.models.get(m).map(|x| x.id.clone()).unwrap_or_default();
            resolved.push((ResolvedModel { model: m, variant: None, pin: None }, id));
        }
    }
    let auto_models = resolved.len();
    for (written, param) in req.model_sequence() {
        if auto.is_some() && param == "model" {
            continue;
        }
        let mut r = resolve_model(catalog, &written, &param)?;
        if let Some(policy) = policy {
            let id = catalog.models.get(r.model).map(|m| m.id.as_str()).unwrap_or("");
            if !policy.allows_model(id) {
                return Err(ApiError::policy_denied(&policy.name, &param, id));
            }
            if !policy.honors_pins() {
                r.pin = None;
            }
        }
        // `m` and `m:floor` are one model: planning it twice would retry failed endpoints.
        if !resolved.iter().any(|(x, _)| x.model == r.model) {
            resolved.push((r, written));
        }
    }
    let primary_variant = resolved.first().and_then(|(r, _)| r.variant);
    let pinned = resolved.first().is_some_and(|(r, _)| r.pin.is_some());

    let effective = |variant: Option<Variant>| -> PoolOrder {
        match (prefs.sort, variant) {
            (Some(s), _) => PoolOrder::Sort(s.by),
            (None, Some(Variant::Nitro)) => PoolOrder::Sort(SortBy::Throughput),
            (None, Some(Variant::Floor)) => PoolOrder::Sort(SortBy::Price),
            (None, Some(Variant::Exacto)) => PoolOrder::Exacto,
            (None, None) => PoolOrder::Default,
        }
    };

    // Hard filters per model; the 404 names the constraint that emptied the primary model.
    let mut pools: Vec<(Vec<Attempt>, PoolOrder)> = Vec::new();
    let mut first_failure: Option<(String, String)> = None;
    // Auto picks that survive the provider filters; at most `auto.max_models` are planned.
    let mut auto_planned: Vec<usize> = Vec::new();
    let auto_limit = auto.as_ref().map_or(0, |c| c.max_models);
    for (i, (r, written)) in resolved.iter().enumerate() {
        let is_auto_pick = i < auto_models;
        if is_auto_pick && auto_planned.len() >= auto_limit {
            continue;
        }
        match hard_filter(&ctx, r) {
            Ok(set) => {
                if is_auto_pick {
                    auto_planned.push(r.model);
                }
                pools.push((
                    set.into_iter().map(|endpoint| Attempt { endpoint, score: 0.0 }).collect(),
                    effective(r.variant),
                ))
            }
            Err(constraint) => {
                if first_failure.is_none() {
                    first_failure = Some((written.clone(), constraint));
                }
            }
        }
    }
    if pools.is_empty() {
        let (model, constraint) = first_failure.unwrap_or_else(|| (String::new(), "model".to_string()));
        let mut e = if constraint == CAPACITY_CONSTRAINT {
            let wait = catalog.providers.iter().filter_map(|p| health.capped_for_s(&p.slug)).min().unwrap_or(60);
            ApiError::capacity_exhausted(&model, wait)
        } else if constraint == CREDENTIAL_CONSTRAINT {
            ApiError::credential_unavailable(&model)
        } else {
            ApiError::no_endpoints(&model, &constraint)
        };
        if let Some(policy) = policy {
            e.metadata.insert("policy".into(), serde_json::Value::String(policy.name.clone()));
        }
        return Err(e);
    }

    let merge_all = matches!(prefs.sort, Some(Sort { partition: Partition::None, .. }));
    if merge_all && pools.len() > 1 {
        let ord = pools.first().map(|p| p.1).unwrap_or(PoolOrder::Default);
        let all: Vec<Attempt> = pools.drain(..).flat_map(|p| p.0).collect();
        pools.push((all, ord));
    }

    // routing_cost orders the default case; `order` keeps price_weighted for its remainder
    // (the caller chose the order), explicit sorts and suffixes bypass it.
    let by_cost = catalog.routing.default_policy == DefaultPolicy::RoutingCost && prefs.order.is_empty();
    let conversation = if by_cost && auto.is_none() && !pinned && catalog.routing.sticky_ttl_s > 0 {
        conversation_key(req, health.session_header(), health.caller_scope())
    } else {
        None
    };
    let mut cost_terms: Vec<(usize, CostTerms)> = Vec::new();
    let mut sticky = false;
    let mut attempts: Vec<Attempt> = Vec::new();
    for (mut set, ord) in pools {
        let first_pool = attempts.is_empty();
        let mut order_within = |set: &mut Vec<Attempt>| match ord {
            PoolOrder::Sort(by) => explicit_sort(&ctx, set, by),
            PoolOrder::Exacto => exacto_sort(&ctx, set),
            PoolOrder::Default => {
                if by_cost {
                    cost_terms.extend(routing_cost_order(&ctx, set, rand));
                    // Sticky conversations: a later turn stays on the endpoint that served the
                    // conversation (its prompt cache is warm) while that endpoint is fine.
                    if let Some(conv) = conversation.filter(|_| first_pool) {
                        if let Some((model, slug)) = health.sticky(conv) {
                            // Only where cache reads are cheaper than the prompt price (as on
                            // OpenRouter): elsewhere a warm cache saves nothing.
                            let fine = |a: &Attempt| {
                                ctx.ep(a.endpoint).is_some_and(|e| {
                                    e.slug == slug && ctx.model_id(e) == model && e.pricing.caches_cheaper()
                                }) && cost_terms.iter().any(|(i, t)| *i == a.endpoint && !t.paused && !t.capped)
                                    && !ctx.health(a.endpoint).cooling_down
                            };
                            if let Some(pos) = set.iter().position(fine) {
                                let chosen = set.remove(pos);
                                set.insert(0, chosen);
                                sticky = true;
                            }
                        }
                    }
                } else {
                    price_weighted(&ctx, set, rand);
                }
                // Requests with tools: tier by tool-call quality, default order kept inside
                // (not when the caller set `order`).
                if req.has_tools && prefs.order.is_empty() {
                    sort_by_key(set, |a| tool_tier(&ctx.health(a.endpoint)));
                }
            }
        };
        if prefs.order.is_empty() {
            order_within(&mut set);
            // Even without require_parameters, tool requests prefer endpoints that support tools.
            if req.has_tools && !prefs.require_parameters {
                stable_partition(&mut set, |a| ctx.ep(a.endpoint).map(|e| e.supports("tools")).unwrap_or(false));
            }
        } else {
            order_rank(&ctx, &mut set, &mut order_within);
        }
        // Soft preferences: endpoints missing a listed cutoff move to the end.
        if let Some(c) = &prefs.preferred_max_latency {
            stable_partition(&mut set, |a| !misses(c, &ctx.health(a.endpoint).ttft_ms, false, 1e-3));
        }
        if let Some(c) = &prefs.preferred_min_throughput {
            stable_partition(&mut set, |a| !misses(c, &ctx.health(a.endpoint).throughput_tps, true, 1.0));
        }
        stable_partition(&mut set, |a| ctx.is_byok(a.endpoint));
        // A later model is only reached once every planned endpoint of the earlier models has
        // failed: its endpoints at providers that just failed this request go after the others
        // (unless the caller fixed the order).
        if prefs.order.is_empty() && !attempts.is_empty() {
            let failed: Vec<&str> = attempts.iter().filter_map(|a| ctx.ep(a.endpoint)).map(|e| e.base_slug()).collect();
            stable_partition(&mut set, |a| ctx.ep(a.endpoint).is_some_and(|e| !failed.contains(&e.base_slug())));
        }
        // Endpoints cooling down after a Retry-After are tried only after all others.
        stable_partition(&mut set, |a| !ctx.health(a.endpoint).cooling_down);
        attempts.extend(set);
    }

    // allow_fallbacks: false — only the `order` list (already filtered) or each model's first.
    if !prefs.allow_fallbacks && prefs.order.is_empty() {
        let mut seen_models: Vec<usize> = Vec::new();
        attempts.retain(|a| {
            let m = ctx.ep(a.endpoint).map(|e| e.model).unwrap_or(usize::MAX);
            if seen_models.contains(&m) {
                false
            } else {
                seen_models.push(m);
                true
            }
        });
    }

    // `order` is reported only when it decided the first attempt: slugs that serve nothing
    // leave the order to the policy below.
    let order_decided = attempts
        .first()
        .and_then(|a| ctx.ep(a.endpoint))
        .is_some_and(|e| prefs.order.iter().any(|s| e.matches_slug(s)));
    let strategy = if let Some(choice) = &auto {
        Strategy::Auto(choice.classification.task)
    } else if pinned {
        Strategy::Pinned
    } else if order_decided {
        Strategy::Order
    } else {
        match effective(primary_variant) {
            PoolOrder::Sort(by) => Strategy::Sort(by),
            PoolOrder::Exacto => Strategy::Exacto,
            PoolOrder::Default => Strategy::Default {
                policy: if by_cost { DefaultPolicy::RoutingCost } else { DefaultPolicy::PriceWeighted },
                sticky,
                tool_tiers: req.has_tools,
            },
        }
    };
    let auto = auto.map(|mut c| {
        c.planned = auto_planned;
        c
    });
    Ok(Plan { attempts, strategy, auto, cost_terms, conversation, warnings })
}

#[cfg(test)]
#[path = "router_tests/mod.rs"]
mod tests;
