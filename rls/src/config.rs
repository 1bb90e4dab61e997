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

    /// The lower-case name (`second` …).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
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
}

impl Rule {
    /// The module limit arguments (after the key) of this rule, e.g.
    /// `["FIXEDWINDOW", "10", "60"]`; `None` for a rule that admits nothing
    /// (`requests_per_unit: 0`, or `burst: 0`) or has no unit (unlimited).
    pub fn module_limit(&self) -> Option<Vec<String>> {
        let unit = self.unit?.seconds().to_string();
        let per_unit = self.requests_per_unit;
        let burst = self.burst.unwrap_or(per_unit);
        if per_unit == 0 || burst == 0 {
            return None;
        }
        let n = per_unit.to_string();
        Some(match self.algorithm {
            Algorithm::FixedWindow => vec!["FIXEDWINDOW".into(), n, unit],
            Algorithm::SlidingWindow => vec!["SLIDINGWINDOW".into(), n, unit],
            Algorithm::SlidingLog => vec!["SLIDINGLOG".into(), n, unit],
            Algorithm::TokenBucket => vec!["TOKENBUCKET".into(), burst.to_string(), n, unit],
            // GCRA's max_burst is the requests admitted at once beyond the first.
            Algorithm::Gcra => vec!["GCRA".into(), (burst - 1).to_string(), n, unit],
        })
    }
}

/// The result of a lookup: the rule, and what the request's key and stats
/// are named after.
#[derive(Debug, Clone)]
pub struct Match {
    pub rule: Arc<Rule>,
    /// The stat key this hit counts under (`rule.full_key`, or a detailed one).
    pub stat_key: String,
    /// The same, split: the domain, then one part per level.
    pub stat_parts: Vec<String>,
    /// Per entry, the wildcard pattern that replaces its value in the Redis
    /// key (`share_threshold`), else `None`.
    pub shared_values: Vec<Option<String>>,
}

// ---- The YAML, as envoyproxy/ratelimit reads it ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    #[serde(default, deserialize_with = "scalar")]
    domain: String,
    #[serde(default)]
    descriptors: Option<Vec<YamlDescriptor>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    #[serde(default, deserialize_with = "scalar")]
    key: String,
    #[serde(default, deserialize_with = "scalar")]
    value: String,
    #[serde(default)]
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Option<Vec<YamlDescriptor>>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    quota_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    /// Envoy returns it as dynamic metadata; accepted and not used here.
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default, deserialize_with = "scalar")]
    unit: String,
    #[serde(default)]
    unlimited: bool,
    #[serde(default, deserialize_with = "scalar")]
    name: String,
    #[serde(default)]
    replaces: Option<Vec<YamlReplaces>>,
    /// Ours: the module algorithm.
    #[serde(default)]
    algorithm: Option<Algorithm>,
    /// Ours: the burst (token bucket capacity, GCRA burst).
    #[serde(default)]
    burst: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    #[serde(default, deserialize_with = "scalar")]
    name: String,
}

/// A string field that also takes a YAML number or boolean (as Go's yaml
/// does for a string field: `value: 123`), and `~` as empty.
fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    match serde_yaml::Value::deserialize(d)? {
        serde_yaml::Value::Null => Ok(String::new()),
        serde_yaml::Value::String(s) => Ok(s),
        serde_yaml::Value::Number(n) => Ok(n.to_string()),
        serde_yaml::Value::Bool(b) => Ok(b.to_string()),
        other => Err(D::Error::custom(format!(
            "expected a string, found {other:?}"
        ))),
    }
}

// ---- The loaded tree ----

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
    /// Every rule, for metrics and `/config`.
    rules: Vec<Arc<Rule>>,
}

impl Config {
    /// Parses one or more YAML documents `(file name, contents)` into one
    /// configuration; a domain appears in one file only.
    pub fn from_yaml(files: &[(String, String)]) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for (file, text) in files {
            let root: YamlRoot = serde_yaml::from_str(text)
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

    /// Whether the domain is configured.
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
                        Some(value.to_string())
                    } else {
                        Some(pattern_value)
                    }
                } else if by_value || n.value_to_metric {
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
            rule,
            stat_key: stat_parts.join("."),
            stat_parts,
            shared_values,
        })
    }
}

/// The configuration's files, `(name, contents)`: the file, or every
/// `*.yaml`/`*.yml` file of the directory, sorted by name.
pub fn read_files(path: &Path) -> Result<Vec<(String, String)>, ConfigError> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map(|text| (p.display().to_string(), text))
            .map_err(|e| error(&p.display().to_string(), format!("cannot read: {e}")))
    };
    if !path.is_dir() {
        return Ok(vec![read(&path.to_path_buf())?]);
    }
    let mut paths: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| error(&path.display().to_string(), format!("cannot read: {e}")))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml") | Some("yml")
                )
        })
        .collect();
    paths.sort();
    paths.iter().map(read).collect()
}

fn load_descriptors(
    file: &str,
    parent: &mut Node,
    parent_key: &str,
    descriptors: &[YamlDescriptor],
    rules: &mut Vec<Arc<Rule>>,
) -> Result<(), ConfigError> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err(error(file, "descriptor has empty key"));
        }
        let final_key = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let full_key = format!("{parent_key}{final_key}");
        if parent.children.contains_key(&final_key) {
            return Err(error(
                file,
                format!("duplicate descriptor composite key '{full_key}'"),
            ));
        }
        if d.quota_mode {
            return Err(error(
                file,
                format!("'{full_key}': quota_mode is not supported by this service"),
            ));
        }
        let mut rule = None;
        if let Some(rl) = &d.rate_limit {
            let unit = if rl.unit.is_empty() {
                None
            } else {
                Unit::parse(&rl.unit)
            };
            if rl.unlimited {
                if unit.is_some() {
                    return Err(error(
                        file,
                        "should not specify rate limit unit when unlimited",
                    ));
                }
            } else if unit.is_none() {
                return Err(error(
                    file,
                    format!("invalid rate limit unit '{}'", rl.unit),
                ));
            }
            let replaces: Vec<String> = rl
                .replaces
                .iter()
                .flatten()
                .map(|r| r.name.clone())
                .collect();
            for r in &replaces {
                if r.is_empty() {
                    return Err(error(file, "should not have an empty replaces entry"));
                }
                if *r == rl.name {
                    return Err(error(
                        file,
                        "replaces should not contain name of same descriptor",
                    ));
                }
            }
            let algorithm = rl.algorithm.unwrap_or_default();
            if rl.burst.is_some() && !matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra)
            {
                return Err(error(
                    file,
                    format!("'{full_key}': burst applies to token_bucket and gcra only"),
                ));
            }
            // The module's own bounds, checked here so that a rule it would
            // refuse fails the load instead of every request.
            if let Some(unit) = unit {
                let per_unit = u64::from(rl.requests_per_unit);
                let burst = u64::from(rl.burst.unwrap_or(rl.requests_per_unit));
                match algorithm {
                    Algorithm::Gcra | Algorithm::TokenBucket
                        if per_unit > unit.seconds() * 1_000_000 =>
                    {
                        return Err(error(
                            file,
                            format!(
                                "'{full_key}': {} takes at most one request per microsecond",
                                algorithm.name()
                            ),
                        ));
                    }
                    Algorithm::SlidingLog if per_unit > SLIDING_LOG_MAX => {
                        return Err(error(
                            file,
                            format!("'{full_key}': sliding_log takes at most {SLIDING_LOG_MAX} requests per unit"),
                        ));
                    }
                    _ if rl.burst.is_some() && burst == 0 => {
                        return Err(error(file, format!("'{full_key}': burst must be >= 1")));
                    }
                    _ => {}
                }
            }
            let r = Arc::new(Rule {
                full_key: full_key.clone(),
                requests_per_unit: rl.requests_per_unit,
                unit,
                unlimited: rl.unlimited,
                shadow_mode: d.shadow_mode,
                name: rl.name.clone(),
                replaces,
                detailed_metric: d.detailed_metric,
                algorithm,
                burst: rl.burst,
            });
            rules.push(r.clone());
            rule = Some(r);
        }
        if d.share_threshold && !final_key.contains('*') {
            return Err(error(
                file,
                format!("share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"),
            ));
        }
        if final_key.contains('*') {
            parent.wildcards.push((
                final_key.clone(),
                final_key.split('*').map(str::to_string).collect(),
            ));
        }
        let mut node = Node {
            rule,
            value_to_metric: d.value_to_metric,
            share_threshold: d.share_threshold,
            ..Node::default()
        };
        load_descriptors(
            file,
            &mut node,
            &format!("{full_key}."),
            d.descriptors.as_deref().unwrap_or(&[]),
            rules,
        )?;
        parent.children.insert(final_key, node);
    }
    Ok(())
}

/// Whether `value` matches a pattern split on `*` (each `*` matches zero or
/// more characters), as envoyproxy/ratelimit's `wildcardMatch`.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests;
