//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Each request's descriptors are matched against the configuration (as
//! envoyproxy/ratelimit matches them, [`decide`]), then decided by ONE
//! `RL.ALL … WITHLIMITS` over every matched limit: all-or-nothing, so a
//! refused request takes nothing from any limit. The call splits only where
//! one call cannot hold the limits (see [`calls`]): different Redis Cluster
//! slots, different `hits_addend`s, shadow-mode rules.
//!
//! When Redis fails, the request gets gRPC `UNAVAILABLE` (as from envoy's
//! service: Envoy's `failure_mode_deny` then decides, and Envoy counts it),
//! or, with `RLS_FAILURE_MODE=open|closed`, an answer of ours.

use std::borrow::Cow;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::backend::{BackendError, Limiter};
use crate::cache::LocalCache;
use crate::config::{Charge, Config, Match, Rule};
use crate::metrics::{Metrics, RuleStats};
use crate::settings::{FailureMode, Settings};

mod calls;
mod decide;
mod headers;
mod local;
#[cfg(test)]
mod tests;

pub use decide::{decide, Failure};

/// A loaded configuration and its rules' statistics, swapped whole on reload.
pub struct Loaded {
    pub config: Config,
    /// Per rule (by [`Rule::id`]): its counters, looked up on its first hit.
    stats: Vec<OnceLock<RuleStats>>,
}

impl Loaded {
    pub fn new(config: Config) -> Loaded {
        let stats = config.rules().iter().map(|_| OnceLock::new()).collect();
        Loaded { config, stats }
    }

    /// The counters a match counts in: its rule's (looked up once per
    /// load), or, for stat keys named after the request's values and for
    /// overrides, looked up now.
    fn stats<'a>(&'a self, metrics: &Metrics, m: &Match) -> Cow<'a, RuleStats> {
        match self.stats.get(m.rule.id) {
            Some(cell) if m.static_stats => {
                Cow::Borrowed(cell.get_or_init(|| metrics.rule_stats(&m.rule.stat_parts)))
            }
            _ => Cow::Owned(metrics.rule_stats(&m.stat_parts)),
        }
    }
}

/// What the service shares between requests.
pub struct Shared {
    /// The configuration in force (a reload swaps it whole; read without a lock).
    pub config: ArcSwap<Loaded>,
    pub backend: Arc<dyn Limiter>,
    pub metrics: Metrics,
    pub failure_mode: FailureMode,
    pub key_prefix: String,
    pub hash_tag_keys: Vec<String>,
    pub near_limit_ratio: f64,
    pub global_shadow_mode: bool,
    pub response_headers: bool,
    /// Shutting down: `/healthcheck` answers 503.
    pub draining: AtomicBool,
    /// The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`), when on.
    pub local_cache: Option<LocalCache>,
    /// The charge of the rules that do not say (`--charge`, `RLS_CHARGE`).
    pub charge: Charge,
}

impl Shared {
    /// The service's state for these settings, configuration and Redis.
    pub fn new(settings: &Settings, config: Config, backend: Arc<dyn Limiter>) -> Shared {
        Shared {
            config: ArcSwap::from_pointee(Loaded::new(config)),
            backend,
            metrics: Metrics::new(),
            failure_mode: settings.failure_mode,
            key_prefix: settings.key_prefix.clone(),
            hash_tag_keys: settings
                .hash_tag_keys
                .iter()
                .map(|k| k.trim().to_string())
                .filter(|k| !k.is_empty())
                .collect(),
            near_limit_ratio: settings.near_limit_ratio,
            global_shadow_mode: settings.global_shadow_mode,
            response_headers: settings.response_headers,
            draining: AtomicBool::new(false),
            local_cache: LocalCache::new(settings.local_cache_size_in_bytes),
            charge: settings.charge,
        }
    }

    /// The Prometheus text of [`Metrics`], with the engine in use as the
    /// backend knows it now.
    pub fn render_metrics(&self) -> String {
        self.metrics.set_engine(self.backend.engine());
        self.metrics.render()
    }

    /// Replaces the configuration (hot reload).
    pub fn set_config(&self, config: Config) {
        self.config.store(Arc::new(Loaded::new(config)));
        // A rule's limit may have changed under the same key.
        if let Some(cache) = &self.local_cache {
            cache.clear();
        }
    }

    /// Answers one request, counting it as envoy's service does.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Status> {
        let started = Instant::now();
        self.metrics.total_requests.increment(1);
        let result = match decide(self, request).await {
            Ok(response) => Ok(response),
            Err(Failure::Invalid(message)) => {
                self.metrics.service_error.increment(1);
                Err(Status::invalid_argument(message))
            }
            Err(Failure::Redis(e)) => self.redis_failed(request, &e),
        };
        self.metrics
            .response_time
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Redis failed or did not answer in time: gRPC `UNAVAILABLE`, or the
    /// answer of `RLS_FAILURE_MODE=open|closed`.
    fn redis_failed(
        &self,
        request: &RateLimitRequest,
        e: &BackendError,
    ) -> Result<RateLimitResponse, Status> {
        self.metrics.redis_error.increment(1);
        if e.is_timeout() {
            self.metrics.redis_timeout.increment(1);
        }
        let code = match self.failure_mode {
            FailureMode::Unavailable => {
                tracing::warn!(error = %e, domain = %request.domain, "redis failed; answering UNAVAILABLE");
                return Err(Status::unavailable(e.to_string()));
            }
            FailureMode::Open => Code::Ok,
            FailureMode::Closed => Code::OverLimit,
        };
        self.metrics.failure_mode_answers.increment(1);
        tracing::warn!(error = %e, domain = %request.domain, failure_mode = ?self.failure_mode, "redis failed; answering the failure mode");
        Ok(RateLimitResponse {
            overall_code: code as i32,
            statuses: request
                .descriptors
                .iter()
                .map(|_| DescriptorStatus {
                    code: code as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }
}

/// The gRPC service.
#[derive(Clone)]
pub struct Service {
    pub shared: Arc<Shared>,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        self.shared
            .should_rate_limit(&request)
            .await
            .map(Response::new)
    }
}

/// A request's `limit` override as a rule: a fixed window, as envoy applies it.
fn override_rule(parts: Vec<String>, requests_per_unit: u32, unit: crate::config::Unit) -> Rule {
    Rule {
        full_key: parts.join("."),
        requests_per_unit,
        unit: Some(unit),
        unlimited: false,
        shadow_mode: false,
        name: String::new(),
        replaces: Vec::new(),
        detailed_metric: false,
        algorithm: crate::config::Algorithm::FixedWindow,
        burst: None,
        calendar: None,
        charge: None,
        module_args: None,
        force_args: None,
        id: Rule::OVERRIDE,
        stat_parts: parts,
    }
    .with_module_args()
}
