//! The model price table (`policies/prices.yaml`) and what a response cost. The operator
//! keeps the table current; a run whose model has no price cannot have its spend budget
//! enforced, so it does not start.
//!
//! Amounts are integers: prices in micro-USD per million tokens, costs in micro-USD, so the
//! ledger (which refuses floats that may not round-trip) records them exactly and sums never
//! drift.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use super::store::{as_map, Obj};
use crate::diag::Problem;

/// One model's prices, in micro-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelPrice {
    pub input: u64,
    pub output: u64,
    /// Tokens written to the prompt cache (Anthropic's cache creation); the input price when
    /// the table gives none.
    pub cache_write: u64,
    /// Tokens read from the prompt cache; the input price when the table gives none.
    pub cache_read: u64,
    /// The most output tokens one response of the model may have (the provider's own
    /// limit): what a request that names no output limit of its own is reserved at.
    pub max_output: u64,
    /// The fee of one web search the provider runs (server-side tool use), in micro-USD:
    /// the provider's `web_search_per_request_usd`, set when a run's route is planned
    /// (0 in the table's per-model prices).
    pub web_search: u64,
}

/// Tokens one model response used, as the provider reported them. `input` excludes the
/// cached tokens counted in `cache_write` and `cache_read`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_write: u64,
    pub cache_read: u64,
    /// Web searches the provider ran (Anthropic `server_tool_use.web_search_requests`,
    /// OpenAI Responses' `web_search_call` output items), each charged a fee.
    pub web_search: u64,
}

impl ModelPrice {
    /// What `u` cost, in micro-USD, rounded up (a budget is never under-counted).
    pub fn cost(&self, u: &Usage) -> u64 {
        let part = |tokens: u64, rate: u64| u128::from(tokens) * u128::from(rate);
        let total = part(u.input, self.input)
            + part(u.output, self.output)
            + part(u.cache_write, self.cache_write)
            + part(u.cache_read, self.cache_read);
        let tokens = u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX);
        tokens.saturating_add(self.searches(u.web_search))
    }

    /// What `n` web searches cost, in micro-USD.
    pub fn searches(&self, n: u64) -> u64 {
        n.saturating_mul(self.web_search)
    }

    /// The most `input` input tokens and `output` output tokens can cost, in micro-USD:
    /// each input token at the highest of the input rates (a request may ask for all of
    /// its input to be written to the cache), rounded up.
    pub fn worst(&self, input: u64, output: u64) -> u64 {
        let in_rate = self.input.max(self.cache_write).max(self.cache_read);
        let total =
            u128::from(input) * u128::from(in_rate) + u128::from(output) * u128::from(self.output);
        u64::try_from(total.div_ceil(1_000_000)).unwrap_or(u64::MAX)
    }
}

/// Input tokens reserved for each whole file (a PDF) a request carries: a file is read as
/// pages, each both text and an image, so its tokens are not bounded by its bytes; this is
/// the providers' limit of 100 pages a request at 3000 tokens a page.
pub const FILE_TOKENS: u64 = 300_000;

/// Input tokens reserved for each request for what the provider adds of its own: the
/// system prompt of tool use is a few hundred tokens.
pub const PROMPT_TOKENS: u64 = 1024;

/// The input tokens a request may use at most, estimated before it is sent: one token per
/// byte of its body (a tokenizer never makes more tokens of text than it has bytes), plus
/// [`PROMPT_TOKENS`], plus [`FILE_TOKENS`] for each whole file in it (or fetched for it).
pub fn input_estimate(body_bytes: usize, files: usize) -> u64 {
    let bytes = u64::try_from(body_bytes).unwrap_or(u64::MAX);
    let files = u64::try_from(files).unwrap_or(u64::MAX);
    bytes
        .saturating_add(PROMPT_TOKENS)
        .saturating_add(files.saturating_mul(FILE_TOKENS))
}

/// The price table: model name -> prices; provider -> the fee of one web search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PriceTable {
    pub models: BTreeMap<String, ModelPrice>,
    /// `providers.NAME.web_search_per_request_usd`, in micro-USD, by `run.provider` name.
    pub web_search: BTreeMap<String, u64>,
}

/// The providers a role's `run.provider` may name, whose fees the table may set.
const PROVIDERS: &[&str] = &["claude", "codex"];
/// The highest fee of one server tool request taken, USD.
const MAX_USD_PER_REQUEST: f64 = 1_000.0;

const PRICE_KEYS: &[&str] = &["input", "output", "cache_write", "cache_read", "max_output"];
/// The highest price taken, USD per million tokens: far above any model's, low enough that
/// no product of tokens and price overflows.
const MAX_USD_PER_MTOK: f64 = 100_000.0;
/// The highest `max_output` taken: far above any model's.
const MAX_OUTPUT_TOKENS: u64 = 100_000_000;

impl PriceTable {
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.models.get(model)
    }

    /// `schema: 1` and `models: {NAME: {input, output, cache_write?, cache_read?,
    /// max_output}}`: prices in USD per million tokens, `max_output` in tokens.
    pub fn parse(file: &Path, doc: &Value) -> Result<PriceTable, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(top) = Obj::new(
            file,
            "",
            doc,
            &["schema", "models", "providers"],
            &mut problems,
        ) else {
            return Err(problems);
        };
        top.schema_one(&mut problems);
        let mut models = BTreeMap::new();
        if let Some(v) = top.required("models", &mut problems) {
            if let Some(m) = as_map(file, "models", v, &mut problems) {
                for (k, v) in m {
                    let Some(name) = k.as_str().filter(|n| model_name(n)) else {
                        problems.push(Problem::new(
                            file,
                            "models",
                            "model names are [A-Za-z0-9._:/-]{1,128}",
                        ));
                        continue;
                    };
                    let at = crate::diag::key("models", name);
                    if let Some(p) = parse_price(file, &at, v, &mut problems) {
                        models.insert(name.to_string(), p);
                    }
                }
            }
        }
        let mut web_search = BTreeMap::new();
        if let Some(v) = top.get("providers") {
            if let Some(m) = as_map(file, "providers", v, &mut problems) {
                for (k, v) in m {
                    let Some(name) = k.as_str().filter(|n| PROVIDERS.contains(n)) else {
                        problems.push(Problem::new(
                            file,
                            "providers",
                            format!("provider names are {}", PROVIDERS.join(", ")),
                        ));
                        continue;
                    };
                    let at = crate::diag::key("providers", name);
                    let Some(o) =
                        Obj::new(file, &at, v, &["web_search_per_request_usd"], &mut problems)
                    else {
                        continue;
                    };
                    match o.get("web_search_per_request_usd").map(Value::as_f64) {
                        None => {}
                        Some(Some(usd))
                            if usd.is_finite() && (0.0..=MAX_USD_PER_REQUEST).contains(&usd) =>
                        {
                            web_search.insert(name.to_string(), (usd * 1_000_000.0).round() as u64);
                        }
                        Some(_) => problems.push(Problem::new(
                            file,
                            o.key("web_search_per_request_usd"),
                            format!("must be a fee in USD per web search request, from 0 to {MAX_USD_PER_REQUEST}"),
                        )),
                    }
                }
            }
        }
        if problems.is_empty() {
            Ok(PriceTable { models, web_search })
        } else {
            Err(problems)
        }
    }
}

fn model_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b))
}

fn parse_price(
    file: &Path,
    at: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Option<ModelPrice> {
    let o = Obj::new(file, at, v, PRICE_KEYS, problems)?;
    let mut rate = |key: &str, required: bool| -> Option<u64> {
        let v = match o.get(key) {
            Some(v) => v,
            None if required => {
                problems.push(Problem::new(file, o.key(key), "is required"));
                return None;
            }
            None => return None,
        };
        match v.as_f64() {
            Some(usd) if usd.is_finite() && (0.0..=MAX_USD_PER_MTOK).contains(&usd) => {
                Some((usd * 1_000_000.0).round() as u64)
            }
            _ => {
                problems.push(Problem::new(
                    file,
                    o.key(key),
                    format!(
                        "must be a price in USD per million tokens, from 0 to {MAX_USD_PER_MTOK}"
                    ),
                ));
                None
            }
        }
    };
    let input = rate("input", true);
    let output = rate("output", true);
    let cache_write = rate("cache_write", false);
    let cache_read = rate("cache_read", false);
    let max_output = match o.get("max_output") {
        None => {
            problems.push(Problem::new(
                file,
                o.key("max_output"),
                "is required: the model's most output tokens per response, which a request that names no limit is charged at when cut short",
            ));
            None
        }
        Some(v) => match v.as_u64().filter(|n| (1..=MAX_OUTPUT_TOKENS).contains(n)) {
            Some(n) => Some(n),
            None => {
                problems.push(Problem::new(
                    file,
                    o.key("max_output"),
                    format!("must be a whole number of tokens, from 1 to {MAX_OUTPUT_TOKENS}"),
                ));
                None
            }
        },
    };
    let input = input?;
    Some(ModelPrice {
        input,
        output: output?,
        cache_write: cache_write.unwrap_or(input),
        cache_read: cache_read.unwrap_or(input),
        max_output: max_output?,
        web_search: 0,
    })
}

/// A micro-USD amount as dollars for people: `$1.234567` trimmed to cents when exact.
pub fn usd(micro: u64) -> String {
    let (d, m) = (micro / 1_000_000, micro % 1_000_000);
    if m % 10_000 == 0 {
        format!("${d}.{:02}", m / 10_000)
    } else {
        format!("${d}.{m:06}")
    }
}

/// `budget.spend_usd` as micro-USD. The budget is per run; absent is the schema's default of
/// 0, and 0 is a cap like any other (seed 004: a cap of 0 allows none): such a run may make
/// no model request at all.
pub fn budget_micro_usd(spend_usd: Option<f64>) -> u64 {
    match spend_usd {
        Some(v) if v.is_finite() && v > 0.0 => {
            let m = v * 1_000_000.0;
            if m >= u64::MAX as f64 {
                u64::MAX
            } else {
                m.round() as u64
            }
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Result<PriceTable, Vec<Problem>> {
        let doc: Value = serde_yaml::from_str(text).unwrap();
        PriceTable::parse(Path::new("prices.yaml"), &doc)
    }

    #[test]
    fn provider_fees_are_read_per_provider_and_bounded() {
        let t = table("schema: 1\nmodels: {}\nproviders:\n  claude: {web_search_per_request_usd: 0.01}\n  codex: {}\n").unwrap();
        assert_eq!(t.web_search.get("claude"), Some(&10_000));
        assert_eq!(t.web_search.get("codex"), None);
        for (text, at) in [
            (
                "schema: 1\nmodels: {}\nproviders: {other: {web_search_per_request_usd: 1}}\n",
                "providers",
            ),
            (
                "schema: 1\nmodels: {}\nproviders: {claude: {web_search_per_request_usd: -1}}\n",
                "providers.claude.web_search_per_request_usd",
            ),
            (
                "schema: 1\nmodels: {}\nproviders: {claude: {web_search_per_request_usd: x}}\n",
                "providers.claude.web_search_per_request_usd",
            ),
            (
                "schema: 1\nmodels: {}\nproviders: {claude: {web_fetch: 1}}\n",
                "providers.claude",
            ),
        ] {
            let p = table(text).unwrap_err();
            assert!(
                p.iter().any(|p| p.to_string().contains(at)),
                "{text}: {p:?}"
            );
        }
        // A search is charged its fee on top of the tokens.
        let price = ModelPrice {
            input: 1_000_000,
            output: 0,
            cache_write: 0,
            cache_read: 0,
            max_output: 1,
            web_search: 10_000,
        };
        let u = Usage {
            input: 1,
            web_search: 3,
            ..Usage::default()
        };
        assert_eq!(price.cost(&u), 1 + 30_000);
    }

    #[test]
    fn costs_count_each_kind_of_token_at_its_rate_and_round_up() {
        let t = table(
            "schema: 1\nmodels:\n  m: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3, max_output: 64000}\n",
        )
        .unwrap();
        let p = t.get("m").unwrap();
        let u = Usage {
            input: 1_000_000,
            output: 0,
            cache_write: 0,
            cache_read: 0,
            web_search: 0,
        };
        assert_eq!(p.cost(&u), 3_000_000);
        let u = Usage {
            input: 100,
            output: 10,
            cache_write: 1000,
            cache_read: 2000,
            web_search: 0,
        };
        // 100*3 + 10*15 + 1000*3.75 + 2000*0.3 = 300 + 150 + 3750 + 600 = 4800 micro-USD
        assert_eq!(p.cost(&u), 4800);
        let one = Usage {
            input: 1,
            ..Usage::default()
        };
        let cheap = ModelPrice {
            input: 1,
            output: 1,
            cache_write: 1,
            cache_read: 1,
            max_output: 1,
            web_search: 0,
        };
        assert_eq!(
            cheap.cost(&one),
            1,
            "a fraction of a micro-USD counts as one"
        );
        assert_eq!(cheap.cost(&Usage::default()), 0);
    }

    #[test]
    fn cache_rates_default_to_the_input_rate() {
        let t =
            table("schema: 1\nmodels:\n  gpt-5: {input: 1.25, output: 10, max_output: 128000}\n")
                .unwrap();
        let p = t.get("gpt-5").unwrap();
        assert_eq!(
            (p.input, p.cache_write, p.cache_read),
            (1_250_000, 1_250_000, 1_250_000)
        );
    }

    #[test]
    fn bad_tables_are_refused_by_key_path_without_values() {
        for (text, at) in [
            (
                "schema: 1\nmodels:\n  m: {input: 3, max_output: 1}\n",
                "models.m.output",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: -1, output: 1, max_output: 1}\n",
                "models.m.input",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: .inf, output: 1, max_output: 1}\n",
                "models.m.input",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: 1, output: 1, max_output: 1, extra: 2}\n",
                "models.m.extra",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: \"sk-ant-abc\", output: 1, max_output: 1}\n",
                "models.m.input",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: 1, output: 1}\n",
                "models.m.max_output",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: 1, output: 1, max_output: 64000.5}\n",
                "models.m.max_output",
            ),
            (
                "schema: 1\nmodels:\n  m: {input: 1, output: 1, max_output: 0}\n",
                "models.m.max_output",
            ),
            ("schema: 2\nmodels: {}\n", "schema"),
            ("models: {}\n", "schema"),
        ] {
            let e = table(text).unwrap_err();
            assert!(e.iter().any(|p| p.path == at), "{text}: {e:?}");
            assert!(!format!("{e:?}").contains("sk-ant"), "{e:?}");
        }
    }

    #[test]
    fn the_worst_case_prices_input_at_its_highest_rate_and_files_by_pages() {
        let t = table(
            "schema: 1\nmodels:\n  m: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.3, max_output: 64000}\n",
        )
        .unwrap();
        let p = t.get("m").unwrap();
        assert_eq!(p.max_output, 64000);
        // 64000 out at $15: the review's cut-short $0.96; the input at the cache write rate.
        assert_eq!(p.worst(0, 64000), 960_000);
        assert_eq!(p.worst(1000, 0), 3750);
        assert_eq!(p.worst(u64::MAX, u64::MAX), u64::MAX);
        assert_eq!(input_estimate(1234, 0), 1234 + PROMPT_TOKENS);
        assert_eq!(input_estimate(10, 2), 10 + PROMPT_TOKENS + 2 * FILE_TOKENS);
        assert_eq!(input_estimate(usize::MAX, usize::MAX), u64::MAX);
    }

    #[test]
    fn budgets_are_per_run_micro_usd_and_zero_or_absent_allows_nothing() {
        assert_eq!(budget_micro_usd(Some(15.0)), 15_000_000);
        assert_eq!(budget_micro_usd(Some(0.5)), 500_000);
        assert_eq!(budget_micro_usd(Some(0.0)), 0);
        assert_eq!(budget_micro_usd(None), 0);
        assert_eq!(budget_micro_usd(Some(f64::NAN)), 0);
        assert_eq!(budget_micro_usd(Some(1e300)), u64::MAX);
        assert_eq!(usd(15_000_000), "$15.00");
        assert_eq!(usd(4_800), "$0.004800");
    }
}
