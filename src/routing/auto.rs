//! The auto router (`model: "auto"` / `"openrouter/auto"`): classifies the request with cheap
//! deterministic rules and ranks the operator's candidate models for that task, within the
//! caller's cost tier and allowed-model patterns. Provider routing then runs for each pick as
//! for a `models` list.
//!
//! Classification reads only what the request carries (no model calls) in one pass over at most
//! `SCAN_LIMIT` bytes of the last user turn, plus one parse of the message list: linear in the
//! body size. The rules are documented in the README ("Auto router").

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::answer::errors::ApiError;
use crate::config::{AutoConfig, Catalog, Modality, TaskType, TierLimit};
use crate::routing::health::HealthView;
use crate::routing::request::ChatRequest;
use crate::routing::wildcard;

/// Model ids that ask for the auto router.
pub const AUTO_IDS: [&str; 2] = ["auto", "openrouter/auto"];
/// The plugin entry that steers it.
pub const PLUGIN_ID: &str = "auto-router";
/// Bytes of the last user turn the text rules look at.
pub const SCAN_LIMIT: usize = 16 * 1024;
/// Score from which the code or reasoning rules decide the task.
const TASK_THRESHOLD: u32 = 3;

pub fn is_auto(model: &str) -> bool {
    AUTO_IDS.contains(&model)
}

// ---------------------------------------------------------------------------------------------
// The request's steering: plugins: [{"id": "auto-router", "cost_tier", "allowed_models"}]
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AutoOptions {
    pub cost_tier: Option<TierLimit>,
    /// Wildcard patterns; empty = no restriction.
    pub allowed_models: Vec<String>,
    /// Wildcard patterns removed after `allowed_models` (an excluded pattern wins over an
    /// allowed one, as in OpenRouter's plugin).
    pub excluded_models: Vec<String>,
}

/// Reads the `auto-router` entry of `plugins`; other plugins are not Switchyard's and are ignored.
pub fn parse_plugins(raw: Option<&RawValue>) -> Result<AutoOptions, ApiError> {
    let mut out = AutoOptions::default();
    let Some(raw) = raw else { return Ok(out) };
    let v: Value = serde_json::from_str(raw.get())
        .map_err(|e| ApiError::invalid("plugins", format!("`plugins` is not valid JSON: {e}")))?;
    let items = match v {
        Value::Null => return Ok(out),
        Value::Array(items) => items,
        _ => return Err(ApiError::invalid("plugins", "`plugins` must be an array of objects")),
    };
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(ApiError::invalid(&format!("plugins[{i}]"), format!("`plugins[{i}]` must be an object")));
        };
        if map.get("id").and_then(Value::as_str) != Some(PLUGIN_ID) {
            continue;
        }
        if map.get("enabled") == Some(&Value::Bool(false)) {
            continue;
        }
        for (k, x) in map {
            let param = format!("plugins[{i}].{k}");
            match (k.as_str(), x) {
                ("id" | "enabled", _) | (_, Value::Null) => {}
                ("cost_tier", Value::String(s)) => {
                    out.cost_tier = Some(TierLimit::parse(s).ok_or_else(|| {
                        ApiError::invalid(
                            &param,
                            format!(
                                "`{param}` must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", got \"{s}\""
                            ),
                        )
                    })?)
                }
                ("allowed_models" | "excluded_models", Value::Array(list)) => {
                    let patterns = list
                        .iter()
                        .enumerate()
                        .map(|(j, p)| match p {
                            Value::String(s) if !s.is_empty() => Ok(s.clone()),
                            _ => Err(ApiError::invalid(&param, format!("`{param}[{j}]` must be a non-empty string"))),
                        })
                        .collect::<Result<_, _>>()?;
                    if k == "allowed_models" {
                        out.allowed_models = patterns;
                    } else {
                        out.excluded_models = patterns;
                    }
                }
                ("cost_tier", _) => return Err(ApiError::invalid(&param, format!("`{param}` must be a string"))),
                ("allowed_models" | "excluded_models", _) => {
                    return Err(ApiError::invalid(&param, format!("`{param}` must be an array of strings")))
                }
                _ => {
                    return Err(ApiError::invalid(
                        &param,
                        format!(
                            "unknown field `{}` in the auto-router plugin (cost_tier, allowed_models, excluded_models)",
                            crate::answer::errors::echo(k)
                        ),
                    ))
                }
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Classification
// ---------------------------------------------------------------------------------------------

/// What the chosen model must be able to do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Needs {
    /// Non-text inputs present in the conversation.
    pub modalities: Vec<Modality>,
    /// The request offers `tools`.
    pub tools: bool,
    /// Prompt estimate + `max_tokens`: the context the model must hold.
    pub context_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    pub task: TaskType,
    /// Why, as `name` or `name:value` strings (debug header).
    pub signals: Vec<String>,
    pub needs: Needs,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a RawValue>,
    /// Responses API items: `{"type": "function_call", ...}`.
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    /// Kept raw: only the last user turn's text is ever decoded.
    #[serde(default, borrow)]
    text: Option<&'a RawValue>,
}

/// What the message list holds, gathered in one pass without decoding any text.
#[derive(Default)]
struct Conversation<'a> {
    /// `content` (or a `prompt`/`input` string) of the last user turn, still raw JSON.
    last_user: Option<&'a RawValue>,
    images: u32,
    audio: u32,
    files: u32,
    video: u32,
    tool_turns: u32,
    unparsed: bool,
}

impl<'a> Conversation<'a> {
    /// Counts the non-text parts of a `content` list.
    fn count_parts(&mut self, raw: &'a RawValue) {
        if !raw.get().starts_with('[') {
            return;
        }
        let Ok(parts) = serde_json::from_str::<Vec<Part<'a>>>(raw.get()) else {
            self.unparsed = true;
            return;
        };
        for p in parts {
            match p.kind.as_deref().unwrap_or("text") {
                "image_url" | "input_image" | "image" => self.images += 1,
                "input_audio" | "audio" => self.audio += 1,
                "file" | "input_file" => self.files += 1,
                "video_url" | "input_video" | "video" => self.video += 1,
                _ => {}
            }
        }
    }

    fn read_messages(&mut self, raw: &'a RawValue) {
        if raw.get().starts_with('"') {
            // `input` / `prompt` as a plain string.
            self.last_user = Some(raw);
            return;
        }
        let Ok(list) = serde_json::from_str::<Vec<&'a RawValue>>(raw.get()) else {
            self.unparsed = true;
            return;
        };
        for item in list {
            if item.get().starts_with('"') {
                // `prompt: ["...", "..."]`
                self.last_user = Some(item);
                continue;
            }
            let Ok(m) = serde_json::from_str::<Message<'a>>(item.get()) else {
                self.unparsed = true;
                continue;
            };
            let role = m.role.as_deref().unwrap_or("user");
            let tool_item = matches!(m.kind.as_deref(), Some("function_call" | "function_call_output"));
            let calls = m.tool_calls.is_some_and(|c| !matches!(c.get(), "null" | "[]"));
            if role == "tool" || calls || tool_item {
                self.tool_turns += 1;
            }
            if let Some(c) = m.content {
                self.count_parts(c);
                if role == "user" {
                    self.last_user = Some(c);
                }
            }
        }
    }

    /// The last user turn's text: a string, or its `text`/`input_text` parts joined.
    fn last_user_text(&self) -> Option<Cow<'a, str>> {
        let raw = self.last_user?.get();
        if raw.starts_with('"') {
            return serde_json::from_str::<Cow<'a, str>>(raw).ok();
        }
        let parts = serde_json::from_str::<Vec<Part<'a>>>(raw).ok()?;
        let mut text: Option<Cow<'a, str>> = None;
        for p in parts {
            if !matches!(p.kind.as_deref().unwrap_or("text"), "text" | "input_text") {
                continue;
            }
            let Some(t) = p.text.and_then(|t| serde_json::from_str::<Cow<'a, str>>(t.get()).ok()) else {
                continue;
            };
            text = Some(match text {
                None => t,
                Some(prev) => Cow::Owned(format!("{prev}\n{t}")),
            });
        }
        text
    }
}

/// Scores from the text rules over the last user turn.
#[derive(Default)]
struct TextScores {
    code: u32,
    math: u32,
    signals: Vec<String>,
}

/// Words that mark code (syntax keywords and programming vocabulary), each counted once.
/// The position in the list is the word's bit.
const CODE_WORDS: [&str; 56] = [
    "api",
    "async",
    "await",
    "bash",
    "bug",
    "class",
    "code",
    "compile",
    "compiler",
    "const",
    "debug",
    "def",
    "diff",
    "dockerfile",
    "elif",
    "enum",
    "exception",
    "fn",
    "func",
    "function",
    "git",
    "golang",
    "impl",
    "import",
    "interface",
    "java",
    "javascript",
    "json",
    "kotlin",
    "lambda",
    "method",
    "mut",
    "namespace",
    "nullptr",
    "patch",
    "printf",
    "println",
    "pub",
    "pytest",
    "python",
    "refactor",
    "regex",
    "return",
    "rust",
    "segfault",
    "sql",
    "stacktrace",
    "struct",
    "traceback",
    "typedef",
    "typescript",
    "unittest",
    "usize",
    "variable",
    "void",
    "yaml",
];

/// Words that mark mathematics or multi-step reasoning (sorted, as above).
const MATH_WORDS: [&str; 32] = [
    "algebra",
    "calculus",
    "contradiction",
    "corollary",
    "deduce",
    "derivation",
    "derivative",
    "derive",
    "eigenvalue",
    "eigenvalues",
    "equation",
    "equations",
    "geometry",
    "induction",
    "infinitely",
    "integer",
    "integers",
    "integral",
    "irrational",
    "lemma",
    "logarithm",
    "matrix",
    "polynomial",
    "prime",
    "primes",
    "probability",
    "proof",
    "prove",
    "puzzle",
    "riddle",
    "solve",
    "theorem",
];

/// Math words that count double.
const STRONG_MATH_WORDS: [&str; 4] = ["lemma", "proof", "prove", "theorem"];

/// LaTeX commands (after a backslash) that mark mathematics (sorted).
const LATEX: [&str; 20] = [
    "begin", "binom", "cdot", "equiv", "exists", "forall", "frac", "geq", "infty", "int", "leq", "lim", "mathbb",
    "mathrm", "neq", "partial", "prod", "sqrt", "subseteq", "sum",
];

/// Chinese words that mark code (函数 function, 报错 error, 调试 debug, ...), each counted once.
const CJK_CODE_WORDS: [&str; 10] = ["代码", "函数", "编程", "报错", "调试", "重构", "编译", "接口", "脚本", "变量"];

/// Chinese words that mark mathematics (证明 prove, 定理 theorem, 方程 equation, ...).
const CJK_MATH_WORDS: [&str; 13] =
    ["证明", "定理", "引理", "方程", "积分", "导数", "求解", "概率", "矩阵", "素数", "质数", "推导", "多项式"];

/// 证明, 定理, 引理 count double, like prove/theorem/lemma.
const CJK_STRONG_MATH: u32 = 0b111;

/// Bits of the words in `list` that `rest` starts with.
fn cjk_bits(list: &[&str], rest: &str) -> u32 {
    list.iter().enumerate().filter(|(_, w)| rest.starts_with(*w)).fold(0, |acc, (i, _)| acc | (1 << (i % 32)))
}

/// Unicode mathematical symbols.
const MATH_SYMBOLS: [char; 14] = ['∀', '∃', '∑', '∫', '√', '≤', '≥', '≠', '∈', '⊆', '∞', '≡', '∂', '⇒'];

/// Longest word any list holds; longer words are skipped without a lookup.
const MAX_WORD: usize = 13;

/// A word of at most 16 ASCII bytes as one integer, so lookups compare integers, not strings.
// Indexing in a const fn is checked at compile time: an out-of-range index fails the build.
#[allow(clippy::indexing_slicing)]
const fn pack(s: &str) -> u128 {
    let b = s.as_bytes();
    let mut v = 0u128;
    let mut i = 0;
    while i < b.len() {
        v = (v << 8) | b[i] as u128;
        i += 1;
    }
    v
}

/// Which list a word belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WordKind {
    Code,
    Math,
    Latex,
}

/// Open-addressing table of every list's words, built at compile time: one multiply and
/// usually one comparison per word of the prompt. Slot = (packed word, kind, bit).
const SLOTS: usize = 256;

const fn slot_of(word: u128) -> usize {
    let folded = (word as u64) ^ ((word >> 64) as u64);
    (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
}

#[allow(clippy::indexing_slicing)]
const fn insert_all(
    mut table: [(u128, Option<WordKind>, u8); SLOTS],
    words: &[&str],
    kind: WordKind,
) -> [(u128, Option<WordKind>, u8); SLOTS] {
    let mut i = 0;
    while i < words.len() {
        let key = pack(words[i]);
        let mut s = slot_of(key);
        while table[s].1.is_some() {
            s = (s + 1) % SLOTS;
        }
        table[s] = (key, Some(kind), i as u8);
        i += 1;
    }
    table
}

const WORD_TABLE: [(u128, Option<WordKind>, u8); SLOTS] = insert_all(
    insert_all(insert_all([(0, None, 0); SLOTS], &CODE_WORDS, WordKind::Code), &MATH_WORDS, WordKind::Math),
    &LATEX,
    WordKind::Latex,
);

/// The word's list and its bit there (its position; lists are shorter than 64).
fn lookup(word: u128) -> Option<(WordKind, u64)> {
    let mut s = slot_of(word);
    for _ in 0..SLOTS {
        match WORD_TABLE.get(s) {
            Some(&(key, Some(kind), bit)) => {
                if key == word {
                    return Some((kind, 1u64 << (bit % 64)));
                }
            }
            _ => return None,
        }
        s = (s + 1) % SLOTS;
    }
    None
}

/// The bit of `word` in `kind`'s list (0 when it is not there).
fn bit_of(kind: WordKind, word: &str) -> u64 {
    lookup(pack(word)).filter(|(k, _)| *k == kind).map_or(0, |(_, b)| b)
}

/// One pass over the bytes: words (ASCII, lower-cased), LaTeX commands, code fences, diff
/// hunks, code-like line endings and (for non-ASCII characters only) math symbols.
fn score_text(text: &str) -> TextScores {
    let mut cut = text.len().min(SCAN_LIMIT);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let bytes = text.as_bytes().get(..cut).unwrap_or(&[]);
    let (mut code_words, mut math_words, mut latex) = (0u64, 0u64, 0u64);
    let (mut fences, mut diff_lines, mut hunks, mut code_lines, mut dollars, mut symbols) = (0u32, 0, 0, 0, 0, 0);
    let mut word = 0u128; // the current word, packed (see `pack`), lower-cased
    let mut len = 0usize; // bytes in the current word (may exceed MAX_WORD: then skipped)
    let mut after_backslash = false;
    let mut backticks = 0u32;
    let mut col = 0usize;
    let mut first = 0u8;
    let mut last_non_space = 0u8;
    let mut prev_dollar = false;
    let (mut cjk_code, mut cjk_math) = (0u32, 0u32);

    for (i, &b) in bytes.iter().chain(std::iter::once(&b'\n')).enumerate() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            // Fast path (most bytes): extend the word; only the per-line state moves.
            if len < MAX_WORD {
                word = (word << 8) | u128::from(b | 0x20); // lower-case letters; digits and _ unchanged
            }
            len += 1;
            if backticks >= 3 {
                fences += 1;
            }
            backticks = 0;
            prev_dollar = false;
            if col == 0 {
                first = b;
            }
            col += 1;
            last_non_space = b;
            continue;
        }
        {
            if (2..=MAX_WORD).contains(&len) {
                match (lookup(word), after_backslash) {
                    (Some((WordKind::Latex, bit)), true) => latex |= bit,
                    (Some((WordKind::Code, bit)), false) => code_words |= bit,
                    (Some((WordKind::Math, bit)), false) => math_words |= bit,
                    _ => {}
                }
            }
            after_backslash = b == b'\\';
            len = 0;
            word = 0;
        }
        if b == b'`' {
            backticks += 1;
        } else {
            if backticks >= 3 {
                fences += 1;
            }
            backticks = 0;
        }
        if b == b'$' {
            if prev_dollar {
                dollars += 1;
            }
            prev_dollar = !prev_dollar;
        } else {
            prev_dollar = false;
        }
        // Non-ASCII: decode the character only at its first byte.
        if b >= 0xC0 {
            let rest = text.get(i..).unwrap_or("");
            if rest.chars().next().is_some_and(|c| MATH_SYMBOLS.contains(&c)) {
                symbols += 1;
            }
            // CJK (three-byte) characters: Chinese words have no spaces, so match at each one.
            if b >= 0xE0 {
                cjk_code |= cjk_bits(&CJK_CODE_WORDS, rest);
                cjk_math |= cjk_bits(&CJK_MATH_WORDS, rest);
            }
        }
        // Unified diffs: `@@` hunk headers and `+`/`-` lines.
        if col == 0 {
            first = b;
            if b == b'+' || b == b'-' {
                diff_lines += 1;
            }
        } else if col == 1 && first == b'@' && b == b'@' {
            hunks += 1;
        }
        col += 1;
        if b == b'\n' {
            if matches!(last_non_space, b';' | b'{' | b'}') {
                code_lines += 1;
            }
            last_non_space = 0;
            col = 0;
        } else if !b.is_ascii_whitespace() {
            last_non_space = b;
        }
    }

    let mut s = TextScores::default();
    let code_hits = code_words.count_ones() + cjk_code.count_ones();
    let math_hits = math_words.count_ones() + cjk_math.count_ones();
    let strong_math = STRONG_MATH_WORDS.iter().filter(|w| math_words & bit_of(WordKind::Math, w) != 0).count() as u32
        + (cjk_math & CJK_STRONG_MATH).count_ones();
    if fences > 0 {
        s.code += 3;
        s.signals.push(format!("code_fences:{}", fences.div_ceil(2)));
    }
    if hunks > 0 && diff_lines >= 2 {
        s.code += 3;
        s.signals.push(format!("diff_hunks:{hunks}"));
    }
    if code_lines >= 3 {
        s.code += 2;
        s.signals.push(format!("code_line_endings:{code_lines}"));
    }
    if code_hits > 0 {
        s.code += code_hits;
        s.signals.push(format!("code_words:{code_hits}"));
    }
    if math_hits > 0 {
        s.math += math_hits + strong_math;
        s.signals.push(format!("math_words:{math_hits}"));
    }
    let latex_hits = latex.count_ones();
    if latex_hits > 0 || dollars > 0 {
        s.math += 2 * latex_hits + 2 * dollars.min(1);
        s.signals.push(format!("latex:{}", latex_hits + dollars));
    }
    if symbols > 0 {
        s.math += symbols.min(3);
        s.signals.push(format!("math_symbols:{symbols}"));
    }
    s
}

/// Whether `response_format` asks for JSON output.
fn structured_output(req: &ChatRequest) -> Option<&'static str> {
    let raw = req.fields.get("response_format")?.get();
    if raw.contains("\"json_schema\"") {
        Some("json_schema")
    } else if raw.contains("\"json_object\"") {
        Some("json_object")
    } else {
        None
    }
}

/// Classifies a request (see the README's "Auto router" for the rules and their precedence).
pub fn classify(req: &ChatRequest, auto: &AutoConfig) -> Classification {
    let mut conv = Conversation::default();
    for key in ["messages", "input", "prompt"] {
        if let Some(raw) = req.fields.get(key) {
            conv.read_messages(raw);
        }
    }
    let mut signals = Vec::new();
    let mut needs = Needs {
        modalities: Vec::new(),
        tools: req.has_tools,
        context_tokens: req.prompt_tokens + req.max_tokens.unwrap_or(0),
    };
    for (n, m) in [
        (conv.images, Modality::Image),
        (conv.audio, Modality::Audio),
        (conv.files, Modality::File),
        (conv.video, Modality::Video),
    ] {
        if n > 0 {
            needs.modalities.push(m);
            signals.push(format!("{}s:{n}", m.name()));
        }
    }
    if conv.unparsed {
        signals.push("messages:unparsed".to_string());
    }
    signals.push(format!("prompt_tokens:{}", req.prompt_tokens));
    if req.has_tools {
        signals.push("tools".to_string());
    }
    if conv.tool_turns > 0 {
        signals.push(format!("tool_turns:{}", conv.tool_turns));
    }
    let format = structured_output(req);
    if let Some(f) = format {
        signals.push(format!("response_format:{f}"));
    }
    let reasoning = ["reasoning", "reasoning_effort", "include_reasoning"]
        .into_iter()
        .find(|k| req.fields.get(k).is_some_and(|v| !matches!(v.get(), "null" | "false")));
    if let Some(k) = reasoning {
        signals.push(format!("param:{k}"));
    }
    let last_user_text = conv.last_user_text();
    let mut text = score_text(last_user_text.as_deref().unwrap_or(""));
    signals.append(&mut text.signals);
    if reasoning.is_some() {
        text.math += TASK_THRESHOLD;
    }

    let task = if req.has_tools || conv.tool_turns > 0 {
        TaskType::ToolUse
    } else if req.prompt_tokens >= auto.long_context_tokens {
        TaskType::LongContext
    } else if format.is_some() {
        TaskType::StructuredOutput
    } else if text.code >= TASK_THRESHOLD && text.code >= text.math {
        TaskType::Code
    } else if text.math >= TASK_THRESHOLD {
        TaskType::Reasoning
    } else {
        TaskType::Chat
    };
    signals.push(format!("scores:code={},reasoning={}", text.code, text.math));
    Classification { task, signals, needs }
}

// ---------------------------------------------------------------------------------------------
// Choice
// ---------------------------------------------------------------------------------------------

/// Why a candidate was not eligible (the filter that removed it), or None when it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub model: usize,
    pub weight: f64,
    /// Came from the `chat` list because the task's own list did not name it.
    pub from_chat: bool,
    pub excluded: Option<String>,
    /// Every endpoint is in outage or cool-down: ranked after the healthy candidates.
    pub unhealthy: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AutoChoice {
    pub classification: Classification,
    pub tier: TierLimit,
    pub allowed_models: Vec<String>,
    pub excluded_models: Vec<String>,
    /// The candidates come from the default ranking (the catalog has no `auto` section).
    pub default_ranking: bool,
    /// Every candidate in rank order: eligible ones first (healthy, then unhealthy), then the
    /// excluded ones with the reason.
    pub candidates: Vec<Ranked>,
    pub max_models: usize,
    /// The picks the plan kept (provider filters may drop some; at most `max_models`).
    pub planned: Vec<usize>,
}

impl AutoChoice {
    /// Eligible models in the order they should be planned.
    pub fn picks(&self) -> impl Iterator<Item = usize> + '_ {
        self.candidates.iter().filter(|c| c.excluded.is_none()).map(|c| c.model)
    }

    /// The debug header: classification, signals, needs, the tier and the ranked candidates.
    pub fn explain_json(&self, catalog: &Catalog) -> String {
        let planned = &self.planned;
        let needs = &self.classification.needs;
        let candidates: Vec<Value> = self
            .candidates
            .iter()
            .filter_map(|c| {
                let m = catalog.models.get(c.model)?;
                let status = match (&c.excluded, planned.contains(&c.model)) {
                    (Some(why), _) => format!("excluded:{why}"),
                    (None, true) => "planned".to_string(),
                    (None, false) => "eligible".to_string(),
                };
                Some(json!({
                    "model": m.id,
                    "weight": c.weight,
                    "cost_tier": m.cost_tier.map(|t| t.name()),
                    "list": if c.from_chat { "chat" } else { self.classification.task.name() },
                    "healthy": !c.unhealthy,
                    "status": status,
                }))
            })
            .collect();
        crate::json::to_text(&json!({
            "task": self.classification.task.name(),
            "signals": self.classification.signals,
            "needs": {
                "input_modalities": needs.modalities.iter().map(|m| m.name()).collect::<Vec<_>>(),
                "tools": needs.tools,
                "context_tokens": needs.context_tokens,
            },
            "cost_tier": self.tier.name(),
            "allowed_models": self.allowed_models,
            "excluded_models": self.excluded_models,
            "ranking": if self.default_ranking { "default" } else { "configured" },
            "candidates": candidates,
        }))
    }
}

/// An extra bound on the choice from outside the request (an operator policy's
/// `allowed_models`): its label names it in errors (`policy:finance.allowed_models`).
pub struct Bound<'a> {
    pub label: &'a str,
    pub allowed_models: &'a [String],
}

/// Ranks the candidate models for this request. Err: `model: auto` is not configured, the
/// plugin entry is invalid, or no candidate is left (404 naming the filter that emptied it).
pub fn choose(
    catalog: &Catalog,
    req: &ChatRequest,
    health: &dyn HealthView,
    bounds: &[Bound],
) -> Result<AutoChoice, ApiError> {
    // Every compiled catalog has one (the default ranking without an `auto` section).
    let Some(auto) = &catalog.auto else {
        let written = req.model.as_deref().unwrap_or("auto");
        let mut e = ApiError::model_not_found("model", written);
        e.message = format!("`model`: \"{written}\" is not offered: this router has no `auto` configuration");
        return Err(e);
    };
    let opts = parse_plugins(req.fields.get("plugins"))?;
    let classification = classify(req, auto);
    let tier = opts.cost_tier.unwrap_or(auto.default_tier);
    let task = classification.task;

    // The task's list, then the general list for what it does not name.
    let mut candidates: Vec<Ranked> = auto
        .candidates(task)
        .iter()
        .map(|c| Ranked { model: c.model, weight: c.weight, from_chat: false, excluded: None, unhealthy: false })
        .collect();
    if task != TaskType::Chat {
        for c in auto.candidates(TaskType::Chat) {
            if !candidates.iter().any(|x| x.model == c.model) {
                candidates.push(Ranked {
                    model: c.model,
                    weight: c.weight,
                    from_chat: true,
                    excluded: None,
                    unhealthy: false,
                });
            }
        }
    }

    // Filters in order: what the operator and the caller allow first, then what the request
    // needs, so an empty result names the unmet need among the allowed models.
    let needs = &classification.needs;
    type Keep<'k> = Box<dyn Fn(&crate::config::Model) -> bool + 'k>;
    let mut filters: Vec<(String, Keep)> = Vec::new();
    for b in bounds {
        if !b.allowed_models.is_empty() {
            let list = b.allowed_models;
            filters.push((b.label.to_string(), Box::new(move |model| wildcard::any_matches(list, &model.id))));
        }
    }
    if !opts.allowed_models.is_empty() {
        let list = &opts.allowed_models;
        filters.push(("allowed_models".to_string(), Box::new(move |model| wildcard::any_matches(list, &model.id))));
    }
    if !opts.excluded_models.is_empty() {
        let list = &opts.excluded_models;
        filters.push(("excluded_models".to_string(), Box::new(move |model| !wildcard::any_matches(list, &model.id))));
    }
    filters.push(("cost_tier".to_string(), Box::new(move |model| tier.admits(model.cost_tier))));
    for &m in &needs.modalities {
        filters.push((format!("input_modalities:{}", m.name()), Box::new(move |model| model.accepts(m))));
    }
    if needs.tools {
        filters.push(("tools".to_string(), Box::new(|model| model.supports_tools)));
    }
    let ctx = needs.context_tokens;
    filters.push(("context_length".to_string(), Box::new(move |model| model.max_context.is_none_or(|c| c >= ctx))));

    let mut emptied_by: Option<String> = None;
    for (name, keep) in &filters {
        let mut left = 0;
        for c in candidates.iter_mut().filter(|c| c.excluded.is_none()) {
            if catalog.models.get(c.model).is_some_and(keep) {
                left += 1;
            } else {
                c.excluded = Some(name.clone());
            }
        }
        if left == 0 && emptied_by.is_none() {
            emptied_by = Some(name.clone());
        }
    }
    if let Some(constraint) = emptied_by {
        let mut e = ApiError::no_endpoints("auto", &constraint);
        e.message = format!(
            "auto router: no candidate model for task `{}` satisfies `{constraint}` (cost_tier {}{})",
            task.name(),
            tier.name(),
            if opts.allowed_models.is_empty() {
                String::new()
            } else {
                format!(", allowed_models {:?}", opts.allowed_models)
            }
        );
        e.metadata.insert("task".to_string(), Value::String(task.name().to_string()));
        e.metadata.insert("cost_tier".to_string(), Value::String(tier.name().to_string()));
        return Err(e);
    }

    // A model whose every endpoint is in a significant outage (judged against the model's other
    // endpoints, as provider routing does) or cooling down goes after the healthy ones.
    for c in candidates.iter_mut().filter(|c| c.excluded.is_none()) {
        if let Some(m) = catalog.models.get(c.model) {
            let outage = crate::routing::outage::outage_flags(catalog, health, &m.endpoints);
            c.unhealthy = !m.endpoints.is_empty()
                && m.endpoints.iter().zip(&outage).all(|(&i, &down)| {
                    down || catalog.endpoint(i).is_some_and(|e| health.endpoint(&m.id, &e.slug).cooling_down)
                });
        }
    }
    let rank = |c: &Ranked| match (&c.excluded, c.unhealthy) {
        (None, false) => 0u8,
        (None, true) => 1,
        (Some(_), _) => 2,
    };
    crate::routing::sorting::sort_by_key(&mut candidates, rank); // stable: weight order kept inside each group

    Ok(AutoChoice {
        classification,
        tier,
        allowed_models: opts.allowed_models.clone(),
        excluded_models: opts.excluded_models.clone(),
        default_ranking: !auto.configured,
        candidates,
        max_models: auto.max_models,
        planned: Vec::new(),
    })
}

#[cfg(test)]
#[path = "auto_tests.rs"]
mod tests;
