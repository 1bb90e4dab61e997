//! The rate limit configuration: envoyproxy/ratelimit's YAML, read unchanged,
//! plus an optional `algorithm:` and `burst:` in each `rate_limit` block.
//!
//! A configuration is one or more files, each with one `domain` and a tree of
//! descriptors. [`Config::get_limit`] finds the rule for one request
//! descriptor the way envoyproxy/ratelimit does: level by level, `key_value`
//! first, then a wildcard value (`foo*`, `/api/*/x`), then the key alone; a
//! rule applies only when the descriptor's last entry lands on it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

/// A configuration error: the file and what is wrong, as envoy words it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

fn error(file: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_string(),
        message: message.into(),
    }
}

/// The time unit of a rule, as in `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Parses envoy's unit names, case-insensitive (`second` … `year`).
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit's length in seconds, as envoy divides time (a month is 30
    /// days, a year 365).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The module's calendar window keyword for this unit (`DAY`, `WEEK`,
    /// `MONTH`, `YEAR`); `None` for units shorter than a day.
    pub fn calendar_keyword(self) -> Option<&'static str> {
        match self {
            Unit::Day => Some("DAY"),
            Unit::Week => Some("WEEK"),
            Unit::Month => Some("MONTH"),
            Unit::Year => Some("YEAR"),
            Unit::Second | Unit::Minute | Unit::Hour => None,
        }
    }

    /// The protobuf enum value of `RateLimitResponse.RateLimit.Unit`.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// From the protobuf value (of `RateLimitResponse.RateLimit.Unit` or
    /// `envoy.type.v3.RateLimitUnit`, which agree); `None` for UNKNOWN.
    pub fn from_proto(value: i32) -> Option<Unit> {
        Some(match value {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }
}

/// The algorithm a rule runs in the module (`algorithm:`; envoy's fixed
/// window by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    #[default]
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    TokenBucket,
    Gcra,
}

impl Algorithm {
    /// The short name used in keys and logs.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fw",
            Algorithm::SlidingWindow => "sw",
            Algorithm::SlidingLog => "sl",
            Algorithm::TokenBucket => "tb",
            Algorithm::Gcra => "gcra",
        }
    }
}

/// When a rule's hits are recorded (`charge:` in its `rate_limit` block; the
/// service's `--charge` / `RLS_CHARGE` when absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Charge {
    /// Only when the request is admitted: a refused request takes nothing
    /// (all or nothing with the request's other `admitted` limits).
    #[default]
    Admitted,
    /// Every hit, with `FORCE`: past the limit too, as a debt that later
    /// requests wait for (a cost known after the response: LLM tokens,
    /// bytes), as envoyproxy/ratelimit counts every hit.
    Always,
}

/// The most requests per unit of a `sliding_log` rule (the module's bound).
pub const SLIDING_LOG_MAX: u64 = 100_000;

/// One rate limit rule (a `rate_limit` block, or a request's override).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The stat key: `domain.key_value.key…` (envoy's `FullKey`).
    pub full_key: String,
    pub requests_per_unit: u32,
    /// `None` only for `unlimited` rules.
    pub unit: Option<Unit>,
    pub unlimited: bool,
    pub shadow_mode: bool,
    pub name: String,
    pub replaces: Vec<String>,
    pub detailed_metric: bool,
    pub algorithm: Algorithm,
    /// The most requests admitted at once (token bucket capacity, GCRA
    /// burst); `None`: `requests_per_unit`.
    pub burst: Option<u32>,
    /// `calendar: true`: the time zone of the rule's calendar windows
    /// (`FIXEDWINDOW n DAY|WEEK|MONTH|YEAR TZ zone`); `None`: envoy's fixed
    /// lengths (a month is 30 days).
    pub calendar: Option<String>,
    /// `charge:`; `None`: the service's default (`--charge`).
    pub charge: Option<Charge>,
    /// [`Rule::module_limit`], computed once when the rule is built
    /// ([`Rule::with_module_args`]) rather than on every request.
    pub module_args: Option<Arc<[String]>>,
    /// [`Rule::module_args`] and `FORCE`: the limit of a charge recorded
    /// whatever it says.
    pub force_args: Option<Arc<[String]>>,
    /// The rule's place in [`Config::rules`] ([`Rule::OVERRIDE`] for a
    /// request's override): where its statistics are kept.
    pub id: usize,
    /// `full_key` split: the domain, then one part per level.
    pub stat_parts: Vec<String>,
}

impl Rule {
    /// The [`Rule::id`] of a request's `limit` override (not in the configuration).
    pub const OVERRIDE: usize = usize::MAX;

    /// This rule with its [`Rule::module_args`] filled in.
    pub fn with_module_args(mut self) -> Rule {
        let args = self.module_limit();
        self.force_args = args.clone().map(|mut a| {
            a.push("FORCE".into());
            Arc::from(a)
        });
        self.module_args = args.map(Arc::from);
        self
    }

    /// The module limit arguments (after the key) of this rule, e.g.
    /// `["FIXEDWINDOW", "10", "60"]`; `None` for a rule that admits nothing
    /// (`requests_per_unit: 0`, or `burst: 0`) or has no unit (unlimited).
    pub fn module_limit(&self) -> Option<Vec<String>> {
        let unit_kind = self.unit?;
        let unit = unit_kind.seconds().to_string();
        let per_unit = self.requests_per_unit;
        let burst = self.burst.unwrap_or(per_unit);
        if per_unit == 0 || burst == 0 {
            return None;
        }
        let n = per_unit.to_string();
        Some(match self.algorithm {
            Algorithm::FixedWindow => match (&self.calendar, unit_kind.calendar_keyword()) {
                (Some(zone), Some(word)) => {
                    vec![
                        "FIXEDWINDOW".into(),
                        n,
                        word.into(),
                        "TZ".into(),
                        zone.clone(),
                    ]
                }
                _ => vec!["FIXEDWINDOW".into(), n, unit],
            },
            Algorithm::SlidingWindow => vec!["SLIDINGWINDOW".into(), n, unit],
            Algorithm::SlidingLog => vec!["SLIDINGLOG".into(), n, unit],
            Algorithm::TokenBucket => vec!["TOKENBUCKET".into(), burst.to_string(), n, unit],
            // GCRA's max_burst is the requests admitted at once beyond the first.
            Algorithm::Gcra => vec!["GCRA".into(), (burst - 1).to_string(), n, unit],
        })
    }
}

impl Match {
    /// The stat key this hit counts under, joined: `domain.key_value…`.
    pub fn stat_key(&self) -> String {
        self.stat_parts.join(".")
    }
}

/// The result of a lookup: the rule, and what the request's key and stats
/// are named after.
#[derive(Debug, Clone)]
pub struct Match {
    pub rule: Arc<Rule>,
    /// The stat key this hit counts under (`rule.full_key`, or a detailed
    /// one), split: the domain, then one part per level.
    pub stat_parts: Vec<String>,
    /// Per entry, the wildcard pattern that replaces its value in the Redis
    /// key (`share_threshold`), else `None`.
    pub shared_values: Vec<Option<String>>,
    /// Whether `stat_parts` are the rule's own (`rule.stat_parts`), not
    /// named after the request's values (`detailed_metric`, `value_to_metric`).
    pub static_stats: bool,
}

// ---- The YAML, as envoyproxy/ratelimit reads it ----

#[derive(Debug, Default)]
struct Node {
    /// Children by `key_value` (or `key` alone).
    children: HashMap<String, Node>,
    /// The children whose `key_value` holds a `*`: (that key, its parts split on `*`).
    wildcards: Vec<(String, Vec<String>)>,
    rule: Option<Arc<Rule>>,
    value_to_metric: bool,
    share_threshold: bool,
}

/// A loaded configuration: every domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Config {
    domains: HashMap<String, Node>,
    /// Every rule (their count is logged at load and reload).
    rules: Vec<Arc<Rule>>,
}

impl Config {
    /// Parses one or more YAML documents `(file name, contents)` into one
    /// configuration; a domain appears in one file only.
    pub fn from_yaml(files: &[(String, String)]) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (file, text) in files {
            let root: YamlRoot = serde_yaml_ng::from_str(text)
                .map_err(|e| error(file, format!("error loading config file: {e}")))?;
            if root.domain.is_empty() {
                return Err(error(file, "config file cannot have empty domain"));
            }
            if config.domains.contains_key(&root.domain) {
                return Err(error(
                    file,
                    format!("duplicate domain '{}' in config file", root.domain),
                ));
            }
            let mut node = Node::default();
            let prefix = format!("{}.", root.domain);
            load_descriptors(
                file,
                &mut node,
                &prefix,
                std::slice::from_ref(&root.domain),
                root.descriptors.as_deref().unwrap_or(&[]),
                &mut config.rules,
            )?;
            config.domains.insert(root.domain, node);
        }
        Ok(config)
    }

    /// Reads a file, or every `*.yaml`/`*.yml` file of a directory (sorted by name).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_yaml(&read_files(path)?)
    }

    /// Every rule of the configuration.
    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    /// Whether the configuration has this domain.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The rule for one descriptor (its `(key, value)` entries), as
    /// envoyproxy/ratelimit's `GetLimit` finds it; `None`: no limit applies.
    pub fn get_limit(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Match> {
        let root = self.domains.get(domain)?;
        let mut node = root;
        let mut found: Option<Arc<Rule>> = None;
        let mut detailed = vec![domain.to_string()];
        let mut valued = vec![domain.to_string()];
        let mut shared_values: Vec<Option<String>> = vec![None; entries.len()];
        let mut static_stats = true;
        for (i, (key, value)) in entries.iter().enumerate() {
            let key_value = format!("{key}_{value}");
            detailed.push(key_value.clone());
            let mut next = node.children.get(&key_value);
            let mut wildcard: Option<&str> = None;
            if next.is_none() {
                if let Some((pattern, _)) = node
                    .wildcards
                    .iter()
                    .find(|(_, parts)| wildcard_match(parts, &key_value))
                {
                    next = node.children.get(pattern);
                    wildcard = Some(pattern);
                }
            }
            let by_value = next.is_some();
            if next.is_none() {
                next = node.children.get(*key);
            }
            let mut part = key.to_string();
            if let Some(n) = next {
                let shown: Option<String> = if let Some(pattern) = wildcard {
                    let pattern_value = pattern
                        .strip_prefix(&format!("{key}_"))
                        .unwrap_or(pattern)
                        .to_string();
                    if n.share_threshold {
                        shared_values[i] = Some(pattern_value.clone());
                        Some(pattern_value)
                    } else if n.value_to_metric {
                        static_stats = false;
                        Some(value.to_string())
                    } else {
                        Some(pattern_value)
                    }
                } else if by_value || n.value_to_metric {
                    static_stats &= by_value;
                    Some(value.to_string())
                } else {
                    None
                };
                if let Some(v) = shown.filter(|v| !v.is_empty()) {
                    part.push('_');
                    part.push_str(&v);
                }
                valued.push(part);
                if let Some(rule) = &n.rule {
                    if i + 1 == entries.len() {
                        found = Some(rule.clone());
                    }
                }
                if n.children.is_empty() {
                    break;
                }
                node = n;
            } else {
                break;
            }
        }
        let rule = found?;
        let stat_parts = if rule.detailed_metric {
            detailed
        } else {
            valued
        };
        Some(Match {
            static_stats: static_stats && !rule.detailed_metric,
            rule,
            stat_parts,
            shared_values,
        })
    }
}

mod load;

pub use load::read_files;
use load::{load_descriptors, wildcard_match, YamlRoot};

#[cfg(test)]
mod tests;
