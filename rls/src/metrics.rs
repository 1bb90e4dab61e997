//! Counters, rendered in the Prometheus text format by `metrics` and
//! `metrics-exporter-prometheus`, with envoyproxy/ratelimit's names:
//! `ratelimit_service_rate_limit_<stat>{domain, key1, key2, …}` with
//! `<stat>` one of total_hits, over_limit, near_limit, within_limit,
//! shadow_mode (envoy's default statsd → Prometheus mapping); and the
//! histogram `ratelimit_service_response_time_seconds{grpc_method}` that
//! envoy's dashboards read.

use std::collections::BTreeMap;
use std::sync::Mutex;

use metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// `ratelimit_service_response_time_seconds`'s buckets: the Prometheus
/// client's defaults, as envoy's exporter uses them.
const RESPONSE_TIME_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

static METADATA: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// One rule's counter values (in hits: a request of `hits_addend` n counts n).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RuleCounts {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
}

/// One rule's counters.
struct RuleStats {
    total_hits: Counter,
    over_limit: Counter,
    near_limit: Counter,
    within_limit: Counter,
    shadow_mode: Counter,
}

/// Every counter of the service.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// By stat key parts (domain, then one part per descriptor entry): the
    /// rule's counters, registered on its first hit.
    rules: Mutex<BTreeMap<Vec<String>, RuleStats>>,
    /// `ratelimit_service_should_rate_limit_total`.
    pub requests: Counter,
    /// `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`:
    /// each request's time in the service, in seconds.
    pub response_time: Histogram,
    /// `ratelimit_service_should_rate_limit_redis_error`.
    pub redis_errors: Counter,
    /// `ratelimit_service_should_rate_limit_redis_timeout`.
    pub redis_timeouts: Counter,
    /// `ratelimit_service_should_rate_limit_service_error`.
    pub service_errors: Counter,
    /// `ratelimit_service_global_shadow_mode`.
    pub global_shadow_mode: Counter,
    /// `ratelimit_service_config_load_success`.
    pub config_load_success: Counter,
    /// `ratelimit_service_config_load_error`.
    pub config_load_error: Counter,
    /// `ratelimit_service_failure_mode_answers`.
    pub failure_mode_answers: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(RESPONSE_TIME.into()), &RESPONSE_TIME_BUCKETS)
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        let counter =
            |name: &'static str| recorder.register_counter(&Key::from_static_name(name), &METADATA);
        let m = Metrics {
            requests: counter("ratelimit_service_should_rate_limit_total"),
            response_time: recorder.register_histogram(
                &Key::from_parts(
                    RESPONSE_TIME,
                    vec![Label::new("grpc_method", "ShouldRateLimit")],
                ),
                &METADATA,
            ),
            redis_errors: counter("ratelimit_service_should_rate_limit_redis_error"),
            redis_timeouts: counter("ratelimit_service_should_rate_limit_redis_timeout"),
            service_errors: counter("ratelimit_service_should_rate_limit_service_error"),
            failure_mode_answers: counter("ratelimit_service_failure_mode_answers"),
            global_shadow_mode: counter("ratelimit_service_global_shadow_mode"),
            config_load_success: counter("ratelimit_service_config_load_success"),
            config_load_error: counter("ratelimit_service_config_load_error"),
            rules: Mutex::new(BTreeMap::new()),
            recorder,
            handle,
        };
        // Shown at 0 from the start.
        for c in [
            &m.requests,
            &m.redis_errors,
            &m.redis_timeouts,
            &m.service_errors,
            &m.failure_mode_answers,
            &m.global_shadow_mode,
            &m.config_load_success,
            &m.config_load_error,
        ] {
            c.increment(0);
        }
        m
    }

    /// Adds to a rule's counters.
    pub fn add(&self, stat_parts: &[String], counts: RuleCounts) {
        let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
        let stats = match rules.get(stat_parts) {
            Some(stats) => stats,
            None => rules
                .entry(stat_parts.to_vec())
                .or_insert_with(|| self.rule_stats(stat_parts)),
        };
        stats.total_hits.increment(counts.total_hits);
        stats.over_limit.increment(counts.over_limit);
        stats.near_limit.increment(counts.near_limit);
        stats.within_limit.increment(counts.within_limit);
        stats.shadow_mode.increment(counts.shadow_mode);
    }

    /// Registers a rule's counters: labels `domain`, then `key1`, `key2`, …
    /// one per level.
    fn rule_stats(&self, parts: &[String]) -> RuleStats {
        let labels: Vec<Label> = labels(parts)
            .into_iter()
            .map(|(k, v)| Label::new(k, v))
            .collect();
        let counter = |stat: &'static str| {
            self.recorder
                .register_counter(&Key::from_parts(stat, labels.clone()), &METADATA)
        };
        RuleStats {
            total_hits: counter("ratelimit_service_rate_limit_total_hits"),
            over_limit: counter("ratelimit_service_rate_limit_over_limit"),
            near_limit: counter("ratelimit_service_rate_limit_near_limit"),
            within_limit: counter("ratelimit_service_rate_limit_within_limit"),
            shadow_mode: counter("ratelimit_service_rate_limit_shadow_mode"),
        }
    }

    /// Drains the response times recorded since the last call into the
    /// histogram (call it every few seconds: unscraped samples are kept
    /// until then).
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// A counter's value by name and labels, read from [`Metrics::render`]
    /// (tests and benchmarks); 0 when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let mut series = name.to_string();
        if !labels.is_empty() {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            series = format!("{series}{{{}}}", inner.join(","));
        }
        self.render()
            .lines()
            .find_map(|l| l.strip_prefix(&series)?.strip_prefix(' '))
            .and_then(|v| {
                let v = v.trim();
                v.parse::<u64>()
                    .ok()
                    .or_else(|| v.parse::<f64>().ok().map(|f| f as u64))
            })
            .unwrap_or(0)
    }

    /// A rule's counters by its stat key (`domain.key_value…`).
    pub fn rule(&self, stat_key: &str) -> RuleCounts {
        let parts = {
            let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
            rules
                .keys()
                .find(|parts| parts.join(".") == stat_key)
                .cloned()
        };
        let Some(parts) = parts else {
            return RuleCounts::default();
        };
        let labels = labels(&parts);
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let stat = |s: &str| self.value(&format!("ratelimit_service_rate_limit_{s}"), &labels);
        RuleCounts {
            total_hits: stat("total_hits"),
            over_limit: stat("over_limit"),
            near_limit: stat("near_limit"),
            within_limit: stat("within_limit"),
            shadow_mode: stat("shadow_mode"),
        }
    }
}

/// A rule's labels: `domain`, then `key1`, `key2`, … one per level.
fn labels(parts: &[String]) -> Vec<(String, String)> {
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let name = if i == 0 {
                "domain".to_string()
            } else {
                format!("key{i}")
            };
            (name, part.clone())
        })
        .collect()
}

/// A Prometheus label value as the exporter writes it: `\`, `"` and
/// newlines escaped.
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

    #[test]
    fn renders_the_response_time_histogram_in_seconds() {
        let m = Metrics::default();
        m.response_time.record(0.003);
        m.response_time.record(0.2);
        let text = m.render();
        for line in [
            "# TYPE ratelimit_service_response_time_seconds histogram",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.25\"} 2",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}
