//! Reading the configuration: the files of a directory, envoy's YAML
//! schema, and the descriptor tree built from it.

#[allow(clippy::wildcard_imports)]
use super::*;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlRoot {
    #[serde(default, deserialize_with = "scalar")]
    pub(super) domain: String,
    #[serde(default)]
    pub(super) descriptors: Option<Vec<YamlDescriptor>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlDescriptor {
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
    metadata: Option<serde_yaml_ng::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlRateLimit {
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
    /// Ours: a `fixed_window` rule of unit day, week, month or year whose
    /// windows run from one local calendar boundary to the next.
    #[serde(default)]
    calendar: bool,
    /// Ours: the calendar window's time zone (IANA name, `UTC` or `±hh:mm`).
    #[serde(default)]
    time_zone: Option<String>,
    /// Ours: `admitted` (a refused request takes nothing) or `always` (every
    /// hit is recorded, with `FORCE`); the service's `--charge` when absent.
    #[serde(default)]
    charge: Option<Charge>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct YamlReplaces {
    #[serde(default, deserialize_with = "scalar")]
    name: String,
}

/// A string field that also takes a YAML number or boolean (as Go's yaml
/// does for a string field: `value: 123`), and `~` as empty.
pub(super) fn scalar<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    match serde_yaml_ng::Value::deserialize(d)? {
        serde_yaml_ng::Value::Null => Ok(String::new()),
        serde_yaml_ng::Value::String(s) => Ok(s),
        serde_yaml_ng::Value::Number(n) => Ok(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Ok(b.to_string()),
        other => Err(D::Error::custom(format!(
            "expected a string, found {other:?}"
        ))),
    }
}

// ---- The loaded tree ----

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

pub(super) fn load_descriptors(
    file: &str,
    parent: &mut Node,
    parent_key: &str,
    parent_parts: &[String],
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
        let mut stat_parts = parent_parts.to_vec();
        stat_parts.push(final_key.clone());
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
            let calendar = calendar_zone(file, &full_key, rl, unit, algorithm)?;
            let r = Arc::new(
                Rule {
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
                    calendar,
                    charge: rl.charge,
                    module_args: None,
                    force_args: None,
                    id: rules.len(),
                    stat_parts: stat_parts.clone(),
                }
                .with_module_args(),
            );
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
            &stat_parts,
            d.descriptors.as_deref().unwrap_or(&[]),
            rules,
        )?;
        parent.children.insert(final_key, node);
    }
    Ok(())
}

/// The time zone of a `calendar: true` rule (`UTC` when `time_zone` is
/// absent); `None` for a rule without `calendar`. Errors: `time_zone` without
/// `calendar: true`, `calendar` on a unit shorter than a day or an algorithm
/// other than `fixed_window`, and a zone that is neither `UTC`, a fixed offset
/// `±hh:mm` nor a name of the tz database (jiff's bundled copy, as the module's).
fn calendar_zone(
    file: &str,
    full_key: &str,
    rl: &YamlRateLimit,
    unit: Option<Unit>,
    algorithm: Algorithm,
) -> Result<Option<String>, ConfigError> {
    if !rl.calendar {
        return match rl.time_zone {
            Some(_) => Err(error(
                file,
                format!("'{full_key}': time_zone applies to calendar: true rules only"),
            )),
            None => Ok(None),
        };
    }
    if !matches!(
        unit,
        Some(Unit::Day | Unit::Week | Unit::Month | Unit::Year)
    ) {
        return Err(error(
            file,
            format!("'{full_key}': calendar takes unit day, week, month or year"),
        ));
    }
    if algorithm != Algorithm::FixedWindow {
        return Err(error(
            file,
            format!("'{full_key}': calendar applies to fixed_window rules only"),
        ));
    }
    let zone = rl.time_zone.clone().unwrap_or_else(|| "UTC".to_string());
    if !valid_zone(&zone) {
        return Err(error(
            file,
            format!("'{full_key}': unknown time zone '{zone}'"),
        ));
    }
    Ok(Some(zone))
}

/// Whether the module takes `zone` after `TZ`: `UTC`, `±hh:mm` (hours 00–23,
/// minutes 00–59), or a name of the tz database.
pub(super) fn valid_zone(zone: &str) -> bool {
    let b = zone.as_bytes();
    if b.len() == 6 && (b[0] == b'+' || b[0] == b'-') && b[3] == b':' {
        let digits = |i: usize| b[i].is_ascii_digit() && b[i + 1].is_ascii_digit();
        let num = |i: usize| u32::from(b[i] - b'0') * 10 + u32::from(b[i + 1] - b'0');
        return digits(1) && digits(4) && num(1) <= 23 && num(4) <= 59;
    }
    zone.eq_ignore_ascii_case("UTC") || jiff::tz::TimeZone::get(zone).is_ok()
}

/// Whether `value` matches a pattern split on `*` (each `*` matches zero or
/// more characters), as envoyproxy/ratelimit's `wildcardMatch`.
pub(super) fn wildcard_match(parts: &[String], value: &str) -> bool {
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
