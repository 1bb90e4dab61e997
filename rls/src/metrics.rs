//! Counters, rendered in the Prometheus text format with envoyproxy/ratelimit's
//! names: `ratelimit_service_rate_limit_<stat>{domain, key1, key2, …}` with
//! `<stat>` one of total_hits, over_limit, near_limit, within_limit,
//! shadow_mode (envoy's default statsd → Prometheus mapping).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One rule's counters (in hits: a request of `hits_addend` n counts n).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RuleCounts {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
}

/// Every counter of the service.
#[derive(Debug, Default)]
pub struct Metrics {
    /// By stat key parts: domain, then one part per descriptor entry.
    rules: Mutex<BTreeMap<Vec<String>, RuleCounts>>,
    pub requests: AtomicU64,
    pub redis_errors: AtomicU64,
    pub redis_timeouts: AtomicU64,
    pub service_errors: AtomicU64,
    pub global_shadow_mode: AtomicU64,
    pub config_load_success: AtomicU64,
    pub config_load_error: AtomicU64,
    pub failure_mode_answers: AtomicU64,
}

impl Metrics {
    /// Adds to a rule's counters.
    pub fn add(&self, stat_parts: &[String], counts: RuleCounts) {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match rules.get_mut(stat_parts) {
            Some(entry) => entry,
            None => rules.entry(stat_parts.to_vec()).or_default(),
        };
        entry.total_hits += counts.total_hits;
        entry.over_limit += counts.over_limit;
        entry.near_limit += counts.near_limit;
        entry.within_limit += counts.within_limit;
        entry.shadow_mode += counts.shadow_mode;
    }

    /// A rule's counters by its stat key (`domain.key_value…`).
    pub fn rule(&self, stat_key: &str) -> RuleCounts {
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules
            .iter()
            .find(|(parts, _)| parts.join(".") == stat_key)
            .map(|(_, c)| *c)
            .unwrap_or_default()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        type Field = fn(&RuleCounts) -> u64;
        let stats: [(&str, Field); 5] = [
            ("total_hits", |c| c.total_hits),
            ("over_limit", |c| c.over_limit),
            ("near_limit", |c| c.near_limit),
            ("within_limit", |c| c.within_limit),
            ("shadow_mode", |c| c.shadow_mode),
        ];
        for (stat, field) in stats {
            let _ = writeln!(out, "# TYPE ratelimit_service_rate_limit_{stat} counter");
            for (parts, counts) in rules.iter() {
                let _ = write!(out, "ratelimit_service_rate_limit_{stat}{{");
                for (i, part) in parts.iter().enumerate() {
                    let name = if i == 0 {
                        "domain".to_string()
                    } else {
                        format!("key{i}")
                    };
                    let sep = if i == 0 { "" } else { "," };
                    let _ = write!(out, "{sep}{name}=\"{}\"", escape(part));
                }
                let _ = writeln!(out, "}} {}", field(counts));
            }
        }
        drop(rules);
        let plain = [
            ("ratelimit_service_should_rate_limit_total", &self.requests),
            (
                "ratelimit_service_should_rate_limit_redis_error",
                &self.redis_errors,
            ),
            (
                "ratelimit_service_should_rate_limit_redis_timeout",
                &self.redis_timeouts,
            ),
            (
                "ratelimit_service_should_rate_limit_service_error",
                &self.service_errors,
            ),
            (
                "ratelimit_service_failure_mode_answers",
                &self.failure_mode_answers,
            ),
            (
                "ratelimit_service_global_shadow_mode",
                &self.global_shadow_mode,
            ),
            (
                "ratelimit_service_config_load_success",
                &self.config_load_success,
            ),
            (
                "ratelimit_service_config_load_error",
                &self.config_load_error,
            ),
        ];
        for (name, value) in plain {
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_envoys_names_with_one_label_per_level() {
        let m = Metrics::default();
        let parts = vec![
            "messaging".into(),
            "message_type_marketing".into(),
            "to_number".into(),
        ];
        m.add(
            &parts,
            RuleCounts {
                total_hits: 3,
                over_limit: 1,
                ..Default::default()
            },
        );
        m.add(
            &parts,
            RuleCounts {
                total_hits: 2,
                within_limit: 2,
                ..Default::default()
            },
        );
        let text = m.render();
        assert!(text.contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"messaging\",key1=\"message_type_marketing\",key2=\"to_number\"} 5"
        ), "{text}");
        assert!(text.contains("ratelimit_service_rate_limit_over_limit{domain=\"messaging\",key1=\"message_type_marketing\",key2=\"to_number\"} 1"));
        assert_eq!(
            m.rule("messaging.message_type_marketing.to_number")
                .within_limit,
            2
        );
    }
}
