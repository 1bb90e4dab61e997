//! The service's statistics, in the Prometheus text format (`metrics` and
//! `metrics-exporter-prometheus`), under the names envoyproxy/ratelimit's
//! statistics get from its default Prometheus mapping
//! (`src/stats/prom/default_mapper.yaml` there), so that a dashboard
//! written for envoy's service works unchanged:
//!
//! | envoy's statsd name | Prometheus |
//! |---|---|
//! | `ratelimit.service.rate_limit.<domain>.<key1>[.<key2>…].<stat>` | `ratelimit_service_rate_limit_<stat>{domain, key1[, key2]}` (stat: total_hits, over_limit, near_limit, within_limit, shadow_mode; levels past the second count under their `key2`) |
//! | `ratelimit.service.call.should_rate_limit.{redis_error,service_error}` | `ratelimit_service_should_rate_limit_error{err_type}` |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | `ratelimit_service_total_requests{grpc_method}` |
//! | `ratelimit_server.ShouldRateLimit.response_time` | `ratelimit_service_response_time_seconds{grpc_method}` (histogram, seconds) |
//! | `ratelimit.service.rate_limit.<domain>.domain_not_found` | `ratelimit_service_rate_limit_<domain>_domain_not_found` (unmapped: the name escaped) |
//! | `ratelimit.service.{config_load_success,config_load_error,global_shadow_mode}` | `ratelimit_service_…` |
//! | `ratelimit.service.rate_limit.<domain>.<key1>….over_limit_with_local_cache` | `ratelimit_service_rate_limit_over_limit_with_local_cache{domain, key1[, key2]}`, and every rule's together: `ratelimit_service_over_limit_with_local_cache` |
//!
//! Counters of our own are named `ratelimit_rls_…`, and so is the gauge
//! `ratelimit_rls_engine{engine}` (the engine in use). Every handle is looked
//! up once (a rule's on its first hit after a configuration load), then
//! updated with atomics: no lock on the request path.

use crate::backend::Engine;
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
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

/// One rule's counters (in hits: a request of `hits_addend` n counts n).
#[derive(Clone)]
pub struct RuleStats {
    pub total_hits: Counter,
    pub over_limit: Counter,
    pub near_limit: Counter,
    pub within_limit: Counter,
    pub shadow_mode: Counter,
    /// Hits refused from the local over-limit cache (also in `over_limit`).
    pub over_limit_with_local_cache: Counter,
}

/// A rule's counter values (tests, benchmarks).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RuleCounts {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
    pub over_limit_with_local_cache: u64,
}

/// Every statistic of the service.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`.
    pub total_requests: Counter,
    /// `ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}`.
    pub response_time: Histogram,
    /// `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`:
    /// requests whose decision Redis failed (an error or no answer in time).
    pub redis_error: Counter,
    /// `…{err_type="service_error"}`: requests refused as invalid.
    pub service_error: Counter,
    pub global_shadow_mode: Counter,
    pub config_load_success: Counter,
    pub config_load_error: Counter,
    /// Ours: `ratelimit_rls_redis_timeout`, the Redis failures that were no
    /// answer within `REDIS_TIMEOUT_MS` (also counted in `redis_error`).
    pub redis_timeout: Counter,
    /// Ours: `ratelimit_rls_failure_mode_answers`, requests answered by
    /// `RLS_FAILURE_MODE=open|closed` when Redis failed.
    pub failure_mode_answers: Counter,
    /// `ratelimit_service_over_limit_with_local_cache`: every rule's
    /// `over_limit_with_local_cache` together, in hits.
    pub over_limit_with_local_cache: Counter,
    /// Ours: `ratelimit_rls_engine{engine="module|functions|eval"}`, 1 for
    /// the engine in use, 0 for the others (all 0 until it is known).
    engines: [(Engine, Gauge); 3],
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
        let counter = |name: &'static str, labels: &[(&'static str, &'static str)]| {
            let labels: Vec<Label> = labels.iter().map(|&(k, v)| Label::new(k, v)).collect();
            recorder.register_counter(&Key::from_parts(name, labels), &METADATA)
        };
        let method = [("grpc_method", "ShouldRateLimit")];
        let error = "ratelimit_service_should_rate_limit_error";
        let m = Metrics {
            total_requests: counter("ratelimit_service_total_requests", &method),
            response_time: recorder.register_histogram(
                &Key::from_parts(RESPONSE_TIME, vec![Label::new(method[0].0, method[0].1)]),
                &METADATA,
            ),
            redis_error: counter(error, &[("err_type", "redis_error")]),
            service_error: counter(error, &[("err_type", "service_error")]),
            global_shadow_mode: counter("ratelimit_service_global_shadow_mode", &[]),
            config_load_success: counter("ratelimit_service_config_load_success", &[]),
            config_load_error: counter("ratelimit_service_config_load_error", &[]),
            redis_timeout: counter("ratelimit_rls_redis_timeout", &[]),
            failure_mode_answers: counter("ratelimit_rls_failure_mode_answers", &[]),
            over_limit_with_local_cache: counter(
                "ratelimit_service_over_limit_with_local_cache",
                &[],
            ),
            engines: Engine::ALL.map(|engine| {
                let key = Key::from_parts(
                    "ratelimit_rls_engine",
                    vec![Label::new("engine", engine.as_str())],
                );
                (engine, recorder.register_gauge(&key, &METADATA))
            }),
            recorder,
            handle,
        };
        // Shown at 0 from the start.
        for c in [&m.total_requests, &m.redis_error, &m.service_error] {
            c.increment(0);
        }
        m.set_engine(None);
        m
    }

    /// Sets `ratelimit_rls_engine`: 1 for `engine`, 0 for the others.
    pub fn set_engine(&self, engine: Option<Engine>) {
        for (e, gauge) in &self.engines {
            gauge.set(if Some(*e) == engine { 1.0 } else { 0.0 });
        }
    }

    /// The counters of a rule's stat key (`domain`, then one part per
    /// level): labels `domain`, `key1` and, from two levels, `key2`, as
    /// envoy's mapping gives them (`:` and `|` become `_`, as envoy
    /// sanitizes stat names).
    pub fn rule_stats(&self, parts: &[String]) -> RuleStats {
        let labels: Vec<Label> = ["domain", "key1", "key2"]
            .iter()
            .zip(parts)
            .map(|(&name, value)| Label::new(name, sanitize(value)))
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
            over_limit_with_local_cache: counter(
                "ratelimit_service_rate_limit_over_limit_with_local_cache",
            ),
        }
    }

    /// Counts a request's descriptor for a domain the configuration does
    /// not have: `ratelimit_service_rate_limit_<domain>_domain_not_found`.
    pub fn domain_not_found(&self, domain: &str) {
        let name = format!(
            "ratelimit_service_rate_limit_{}_domain_not_found",
            escape_name(domain)
        );
        self.recorder
            .register_counter(&Key::from_name(name), &METADATA)
            .increment(1);
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
                .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
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

    /// A rule's counters by its stat key (`domain.key_value…`; tests: parts
    /// must not hold a `.`).
    pub fn rule(&self, stat_key: &str) -> RuleCounts {
        let parts: Vec<&str> = stat_key.split('.').collect();
        let labels: Vec<(&str, String)> = ["domain", "key1", "key2"]
            .iter()
            .zip(&parts)
            .map(|(&k, v)| (k, sanitize(v)))
            .collect();
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let stat = |s: &str| self.value(&format!("ratelimit_service_rate_limit_{s}"), &labels);
        RuleCounts {
            total_hits: stat("total_hits"),
            over_limit: stat("over_limit"),
            near_limit: stat("near_limit"),
            within_limit: stat("within_limit"),
            shadow_mode: stat("shadow_mode"),
            over_limit_with_local_cache: stat("over_limit_with_local_cache"),
        }
    }
}

/// envoy's `SanitizeStatName`: `:` and `|` become `_`.
fn sanitize(value: &str) -> String {
    value.replace([':', '|'], "_")
}

/// A metric name part as statsd_exporter escapes an unmapped name: every
/// character but `[A-Za-z0-9_]` becomes `_`.
fn escape_name(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_envoys_names_and_labels() {
        let m = Metrics::new();
        let parts: Vec<String> = vec![
            "messaging".into(),
            "message_type_marketing".into(),
            "to_number".into(),
        ];
        let s = m.rule_stats(&parts);
        s.total_hits.increment(3);
        s.over_limit.increment(1);
        // Looked up again (a reload): the same series.
        m.rule_stats(&parts).total_hits.increment(2);
        // A third level counts under its key2, as envoy's mapping has it.
        let mut deeper = parts.clone();
        deeper.push("x".into());
        m.rule_stats(&deeper).within_limit.increment(2);
        m.redis_error.increment(1);
        m.total_requests.increment(4);
        m.response_time.record(0.003);
        m.domain_not_found("foo-domain");
        let text = m.render();
        for line in [
            "ratelimit_service_rate_limit_total_hits{domain=\"messaging\",key1=\"message_type_marketing\",key2=\"to_number\"} 5",
            "ratelimit_service_rate_limit_over_limit{domain=\"messaging\",key1=\"message_type_marketing\",key2=\"to_number\"} 1",
            "ratelimit_service_rate_limit_within_limit{domain=\"messaging\",key1=\"message_type_marketing\",key2=\"to_number\"} 2",
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
            "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 0",
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 4",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1",
            "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_rate_limit_foo_domain_domain_not_found 1",
            "# TYPE ratelimit_service_response_time_seconds histogram",
            "# TYPE ratelimit_service_rate_limit_total_hits counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        assert_eq!(
            m.rule("messaging.message_type_marketing.to_number"),
            RuleCounts {
                total_hits: 5,
                over_limit: 1,
                within_limit: 2,
                ..Default::default()
            }
        );
    }

    #[test]
    fn the_engine_in_use_is_the_one_at_1() {
        let m = Metrics::new();
        let at = |text: &str, engine: &str| {
            let prefix = format!("ratelimit_rls_engine{{engine=\"{engine}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        };
        let text = m.render();
        for engine in ["module", "functions", "eval"] {
            assert_eq!(at(&text, engine).as_deref(), Some("0"), "{text}");
        }
        m.set_engine(Some(Engine::Functions));
        m.set_engine(Some(Engine::Eval));
        let text = m.render();
        assert!(text.contains("# TYPE ratelimit_rls_engine gauge"), "{text}");
        assert_eq!(at(&text, "eval").as_deref(), Some("1"));
        assert_eq!(at(&text, "functions").as_deref(), Some("0"));
        assert_eq!(at(&text, "module").as_deref(), Some("0"));
    }

    #[test]
    fn label_values_are_sanitized_as_envoy_does() {
        let m = Metrics::new();
        let parts: Vec<String> = vec!["d".into(), "ip_2001:db8::1".into()];
        m.rule_stats(&parts).total_hits.increment(1);
        assert!(m.render().contains(
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"ip_2001_db8__1\"} 1"
        ));
    }
}
