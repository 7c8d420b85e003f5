//! `auto`: the auto router's task lists and defaults (`model: "auto"`).

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::models::{CostTier, Endpoint, Model};
use super::{err, ConfigError, MAX_MODELS};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuto {
    #[serde(default = "default_cost_tier")]
    default_cost_tier: String,
    #[serde(default = "default_auto_max_models")]
    max_models: usize,
    #[serde(default = "default_long_context_tokens")]
    long_context_tokens: u64,
    /// Task type -> model id -> preference weight.
    tasks: BTreeMap<String, BTreeMap<String, f64>>,
}

fn default_cost_tier() -> String {
    "medium".to_string()
}
fn default_auto_max_models() -> usize {
    3
}
fn default_long_context_tokens() -> u64 {
    32_000
}

/// What a request is willing to spend: a tier ceiling, or `max` (best regardless of price).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierLimit {
    UpTo(CostTier),
    Max,
}

impl TierLimit {
    pub fn parse(s: &str) -> Option<TierLimit> {
        if s == "max" {
            Some(TierLimit::Max)
        } else {
            CostTier::parse(s).map(TierLimit::UpTo)
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TierLimit::UpTo(t) => t.name(),
            TierLimit::Max => "max",
        }
    }

    /// Whether a model of tier `t` (None = undeclared) is within this limit.
    pub fn admits(self, t: Option<CostTier>) -> bool {
        match (self, t) {
            (TierLimit::Max, _) => true,
            (TierLimit::UpTo(limit), Some(t)) => t <= limit,
            (TierLimit::UpTo(_), None) => false,
        }
    }
}

/// Task types the auto router classifies a request into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    Code,
    Reasoning,
    LongContext,
    ToolUse,
    StructuredOutput,
    Chat,
}

impl TaskType {
    pub const ALL: [TaskType; 6] = [
        TaskType::Code,
        TaskType::Reasoning,
        TaskType::LongContext,
        TaskType::ToolUse,
        TaskType::StructuredOutput,
        TaskType::Chat,
    ];

    pub fn parse(s: &str) -> Option<TaskType> {
        TaskType::ALL.into_iter().find(|t| t.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            TaskType::Code => "code",
            TaskType::Reasoning => "reasoning",
            TaskType::LongContext => "long_context",
            TaskType::ToolUse => "tool_use",
            TaskType::StructuredOutput => "structured_output",
            TaskType::Chat => "chat",
        }
    }

    fn index(self) -> usize {
        match self {
            TaskType::Code => 0,
            TaskType::Reasoning => 1,
            TaskType::LongContext => 2,
            TaskType::ToolUse => 3,
            TaskType::StructuredOutput => 4,
            TaskType::Chat => 5,
        }
    }
}

/// One ranked candidate of a task list.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoCandidate {
    /// Index into `Catalog::models`.
    pub model: usize,
    pub weight: f64,
}

/// The compiled `auto` section.
#[derive(Debug, Clone)]
pub struct AutoConfig {
    pub default_tier: TierLimit,
    /// Models planned per auto request (primary + fallbacks).
    pub max_models: usize,
    /// Prompt estimate (tokens) from which a request counts as `long_context`.
    pub long_context_tokens: u64,
    /// Per task type, candidates by descending weight (ties: cheaper tier, then id).
    tasks: [Vec<AutoCandidate>; 6],
    /// From the configuration's `auto` section (false: the default ranking).
    pub configured: bool,
}

impl AutoConfig {
    /// The configured candidates of a task (empty when the task has no list).
    pub fn candidates(&self, task: TaskType) -> &[AutoCandidate] {
        self.tasks.get(task.index()).map(Vec::as_slice).unwrap_or(&[])
    }
}

pub(super) fn compile_auto(
    a: &RawAuto,
    models: &[Model],
    index: &HashMap<String, usize>,
) -> Result<AutoConfig, ConfigError> {
    let default_tier = TierLimit::parse(&a.default_cost_tier).ok_or_else(|| {
        err(
            "auto.default_cost_tier",
            format!("unknown cost tier \"{}\" (low, medium, high, xhigh, max)", a.default_cost_tier),
        )
    })?;
    if !(1..=MAX_MODELS).contains(&a.max_models) {
        return Err(err("auto.max_models", format!("must be between 1 and {}", MAX_MODELS)));
    }
    if a.long_context_tokens == 0 {
        return Err(err("auto.long_context_tokens", "must be > 0"));
    }
    let mut tasks: [Vec<AutoCandidate>; 6] = Default::default();
    for (name, list) in &a.tasks {
        let field = format!("auto.tasks.{name}");
        let task = TaskType::parse(name).ok_or_else(|| {
            err(&field, "unknown task type (code, reasoning, long_context, tool_use, structured_output, chat)")
        })?;
        let mut ranked = Vec::with_capacity(list.len());
        for (id, &weight) in list {
            let mf = format!("{field}[\"{id}\"]");
            let model =
                index.get(id).copied().ok_or_else(|| err(&mf, format!("unknown model \"{id}\" (not in models)")))?;
            if !weight.is_finite() || weight <= 0.0 {
                return Err(err(&mf, "weight must be a finite number > 0"));
            }
            ranked.push(AutoCandidate { model, weight });
        }
        let tier = |c: &AutoCandidate| models.get(c.model).and_then(|m| m.cost_tier);
        let id = |c: &AutoCandidate| models.get(c.model).map(|m| m.id.as_str()).unwrap_or("");
        // Best first; equal weights: the cheaper tier (undeclared last), then the id.
        crate::routing::sorting::sort_by(&mut ranked, |x, y| {
            y.weight
                .partial_cmp(&x.weight)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| tier(x).map_or(u8::MAX, |t| t as u8).cmp(&tier(y).map_or(u8::MAX, |t| t as u8)))
                .then_with(|| id(x).cmp(id(y)))
        });
        if let Some(slot) = tasks.get_mut(task.index()) {
            *slot = ranked;
        }
    }
    if tasks.get(TaskType::Chat.index()).is_none_or(Vec::is_empty) {
        return Err(err("auto.tasks.chat", "required and non-empty: the general list every task falls back to"));
    }
    Ok(AutoConfig {
        default_tier,
        max_models: a.max_models,
        long_context_tokens: a.long_context_tokens,
        tasks,
        configured: true,
    })
}

/// The auto router of a catalog without an `auto` section: every catalog model is a candidate
/// of every task, ranked by what the catalog says of it (documented in docs/configuration.md,
/// "Auto router"): code and reasoning the dearest model first (its price as the proxy of its
/// ability), long context the largest context first (then the cheapest), every other task the
/// cheapest first. A model's price is its cheapest endpoint's prompt + completion price; ties go
/// by id. No cost-tier ceiling (`max`), three models planned, long context from 32,000 tokens.
pub(super) fn default_auto(models: &[Model], endpoints: &[Endpoint]) -> AutoConfig {
    let price = |m: &Model| {
        m.endpoints
            .iter()
            .filter_map(|&i| endpoints.get(i))
            .map(|e| e.pricing.prompt + e.pricing.completion)
            .fold(f64::INFINITY, f64::min)
    };
    let by = |order: &dyn Fn(&Model, &Model) -> std::cmp::Ordering| -> Vec<AutoCandidate> {
        let mut ranked: Vec<usize> = (0..models.len()).collect();
        crate::routing::sorting::sort_by(&mut ranked, |&a, &b| match (models.get(a), models.get(b)) {
            (Some(x), Some(y)) => order(x, y).then_with(|| x.id.cmp(&y.id)),
            _ => std::cmp::Ordering::Equal,
        });
        // Weights only order the list: the first gets the most.
        let n = ranked.len();
        ranked.iter().enumerate().map(|(rank, &model)| AutoCandidate { model, weight: (n - rank) as f64 }).collect()
    };
    let cheapest = |x: &Model, y: &Model| price(x).total_cmp(&price(y));
    let dearest = |x: &Model, y: &Model| price(y).total_cmp(&price(x));
    // No declared limit counts as the largest.
    let context = |m: &Model| m.max_context.unwrap_or(u64::MAX);
    let largest = |x: &Model, y: &Model| context(y).cmp(&context(x)).then_with(|| cheapest(x, y));
    let mut tasks: [Vec<AutoCandidate>; 6] = Default::default();
    for task in TaskType::ALL {
        let list = match task {
            TaskType::Code | TaskType::Reasoning => by(&dearest),
            TaskType::LongContext => by(&largest),
            TaskType::ToolUse | TaskType::StructuredOutput | TaskType::Chat => by(&cheapest),
        };
        if let Some(slot) = tasks.get_mut(task.index()) {
            *slot = list;
        }
    }
    AutoConfig {
        default_tier: TierLimit::Max,
        max_models: default_auto_max_models(),
        long_context_tokens: default_long_context_tokens(),
        tasks,
        configured: false,
    }
}
