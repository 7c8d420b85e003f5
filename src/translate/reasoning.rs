//! Reasoning asked one way, sent another: an effort (`reasoning_effort`, `reasoning.effort`,
//! `output_config.effort`, `thinkingLevel`) becomes a token budget for the APIs that take one
//! (Anthropic `thinking.budget_tokens`, Google `thinkingBudget`) by OpenRouter's ratios of the
//! answer's token cap, and a budget becomes an effort for chat completions by the inverse ratio.
//! `docs/translation.md` ("Reasoning") has the rules and why.

use serde_json::Value;

use super::chat::{Chat, Choice, Knob};

/// Anthropic's smallest thinking budget.
pub const MIN_BUDGET: u64 = 1024;
/// The largest budget an effort asks for (OpenRouter's cap).
pub const MAX_BUDGET: u64 = 32_000;
/// The token cap an effort's ratio applies to when the caller set none (Anthropic's default
/// `max_tokens` for a translated request).
pub const BASE_MAX_TOKENS: u64 = 4096;

/// The share of the token cap an effort gives to thinking (OpenRouter's ratios); `Some(0.0)`
/// for `none`, None for an effort no API names.
pub fn ratio(effort: &str) -> Option<f64> {
    Some(match effort.to_ascii_lowercase().as_str() {
        "xhigh" | "max" => 0.95,
        "high" => 0.8,
        "medium" => 0.5,
        "low" => 0.2,
        "minimal" => 0.1,
        "none" => 0.0,
        _ => return None,
    })
}

/// The budget an effort's ratio gives out of `cap` tokens: within [`MIN_BUDGET`, `MAX_BUDGET`].
pub fn effort_budget(ratio: f64, cap: u64) -> u64 {
    let b = (cap as f64 * ratio).floor();
    let b = if b.is_finite() && b > 0.0 { b.min(MAX_BUDGET as f64) as u64 } else { 0 };
    b.clamp(MIN_BUDGET, MAX_BUDGET)
}

/// The effort a budget stands for out of `cap` tokens: the nearest of `low` / `medium` / `high`
/// (each API of chat completions takes these three; `minimal`, `xhigh` and `none` only some).
pub fn budget_effort(budget: u64, cap: u64) -> &'static str {
    let r = budget as f64 / cap.max(1) as f64;
    if r >= 0.65 {
        "high"
    } else if r >= 0.35 {
        "medium"
    } else {
        "low"
    }
}

/// The thinking a request asks for, in tokens.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// Nothing asked (or an effort no API names: dropped).
    Unset,
    /// Explicitly none: an effort `none`, a budget of 0.
    Off,
    /// A budget: explicit (`from_effort` false) or from an effort's ratio.
    Budget { tokens: u64, from_effort: bool },
}

/// The budget the request asks for: its explicit budget first, else its effort's share of its
/// token cap (or of [`BASE_MAX_TOKENS`]). An unusable knob is dropped, naming it.
pub fn ask(c: &mut Chat) -> Ask {
    if let Some(b) = c.reasoning_budget.as_ref() {
        return match b.value.as_u64() {
            Some(0) => Ask::Off,
            Some(tokens) => Ask::Budget { tokens, from_effort: false },
            None => {
                let b = c.reasoning_budget.take();
                c.drop_knob(b);
                Ask::Unset
            }
        };
    }
    let Some(e) = c.reasoning_effort.as_ref() else { return Ask::Unset };
    match e.value.as_str().and_then(ratio) {
        Some(0.0) => Ask::Off,
        Some(r) => {
            let cap = c.max_tokens.as_ref().and_then(Value::as_u64).unwrap_or(BASE_MAX_TOKENS);
            Ask::Budget { tokens: effort_budget(r, cap), from_effort: true }
        }
        None => {
            let e = c.reasoning_effort.take();
            c.drop_knob(e);
            Ask::Unset
        }
    }
}

/// The reasoning knobs, taken (for a writer that has used them or drops them).
fn take_knobs(c: &mut Chat) -> Vec<Knob> {
    [c.reasoning_budget.take(), c.reasoning_effort.take()].into_iter().flatten().collect()
}

/// Drops the reasoning knobs, naming them.
pub fn drop_all(c: &mut Chat) {
    for k in take_knobs(c) {
        c.drop_field(k.name);
    }
}

/// Anthropic's `thinking` and `max_tokens` for the request, adjusting what thinking refuses:
/// `(thinking, max_tokens)`; `thinking` None when the request gets none. Anthropic takes a
/// budget of at least 1024, below `max_tokens`. The caller's cap bounds thinking and answer
/// together (OpenAI's `max_completion_tokens` counts reasoning too): it is never raised, the
/// budget is lowered to fit, and when even 1024 does not fit there is no thinking (the knob is
/// named dropped). Without a caller's cap the answer keeps the default 4096 and the budget is
/// added to it. A forced tool choice refuses thinking: the tool call is kept, thinking dropped.
/// Thinking refuses a non-default `temperature`, `top_k` and a `top_p` below 0.95: those
/// sampling knobs are dropped, the thinking asked for kept.
pub fn anthropic(c: &mut Chat, default_max: u64) -> (Option<Value>, Value) {
    // Adaptive thinking (Google's dynamic budget) is only the newest Claude models': dropped.
    let adaptive = c.reasoning_adaptive.take();
    let asked = ask(c);
    if asked == Ask::Unset {
        c.drop_knob(adaptive);
    }
    let caller_max = c.max_tokens.take();
    let cap = caller_max.as_ref().and_then(Value::as_u64);
    let max_value = |extra: u64| match (&caller_max, cap) {
        (Some(v), _) if extra == 0 => v.clone(),
        (_, Some(m)) => json!(m),
        _ => json!(default_max.saturating_add(extra)),
    };
    let Ask::Budget { tokens, .. } = asked else {
        // `Off`: Anthropic's default is no thinking. The knobs are used up either way.
        take_knobs(c);
        return (None, max_value(0));
    };
    let forced = !c.tools.is_empty() && matches!(c.choice, Some(Choice::Required | Choice::Named(_)));
    let budget = match cap {
        Some(m) => tokens.max(MIN_BUDGET).min(m.saturating_sub(1)),
        // Bounded so the default room plus the budget stays a number.
        None => tokens.clamp(MIN_BUDGET, u64::from(u32::MAX)),
    };
    if forced || budget < MIN_BUDGET {
        drop_all(c);
        return (None, max_value(0));
    }
    take_knobs(c);
    if c.temperature.as_ref().is_some_and(|t| t.as_f64() != Some(1.0)) {
        c.temperature = None;
        c.drop_field("temperature");
    }
    let k = c.top_k.take();
    c.drop_knob(k);
    if c.top_p.as_ref().is_some_and(|p| p.as_f64().is_none_or(|p| p < 0.95)) {
        c.top_p = None;
        c.drop_field("top_p");
    }
    let max = if cap.is_some() { max_value(0) } else { max_value(budget) };
    (Some(json!({"type": "enabled", "budget_tokens": budget})), max)
}

/// Google's `thinkingConfig` for the request (None: none sent, the model's default). An effort
/// `none` or a budget of 0 is `thinkingBudget: 0`; an effort's budget stays below the caller's
/// `maxOutputTokens` (Gemini counts thoughts in it); Anthropic's `adaptive` is Google's dynamic
/// thinking (`-1`). Thoughts are asked for (`includeThoughts`) whenever the model thinks, so the
/// answer carries them as OpenRouter's do.
pub fn google(c: &mut Chat) -> Option<Value> {
    let cap = c.max_tokens.as_ref().and_then(Value::as_u64);
    let adaptive = c.reasoning_adaptive.take();
    let out = match ask(c) {
        Ask::Unset => adaptive.map(|_| json!({"thinkingBudget": Value::from(-1i64), "includeThoughts": true})),
        Ask::Off => Some(json!({"thinkingBudget": 0u64})),
        Ask::Budget { tokens, from_effort } => {
            let tokens = match cap {
                Some(m) if from_effort => tokens.min(m.saturating_sub(1)).max(1),
                _ => tokens,
            };
            Some(json!({"thinkingBudget": tokens, "includeThoughts": true}))
        }
    };
    take_knobs(c);
    out
}

/// Chat completions' `reasoning_effort`: the effort asked for (Anthropic's `max` as `high`), else
/// the effort a budget stands
/// for out of the caller's token cap (or [`BASE_MAX_TOKENS`]). A budget of 0 has no effort
/// every model takes (`none` is only the newest's): dropped, named. Anthropic's `adaptive`
/// alone is what a reasoning model does by default: nothing sent.
pub fn openai(c: &mut Chat) -> Option<Value> {
    c.reasoning_adaptive = None;
    if let Some(e) = c.reasoning_effort.take() {
        let b = c.reasoning_budget.take();
        c.drop_knob(b);
        // Anthropic's `max` is no chat completions effort; `high` is every reasoning model's.
        return Some(if e.value.as_str() == Some("max") { json!("high") } else { e.value });
    }
    let b = c.reasoning_budget.take()?;
    match b.value.as_u64() {
        Some(tokens) if tokens > 0 => {
            let cap = c.max_tokens.as_ref().and_then(Value::as_u64).unwrap_or(BASE_MAX_TOKENS);
            Some(json!(budget_effort(tokens, cap)))
        }
        _ => {
            c.drop_field(b.name);
            None
        }
    }
}
