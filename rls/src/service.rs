//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Each request's descriptors are matched against the configuration (as
//! envoyproxy/ratelimit matches them), then decided by ONE `RL.ALL … WITHLIMITS`
//! over every matched limit: all-or-nothing, so a refused request takes
//! nothing from any limit. The call splits only where one call cannot hold
//! the limits (see [`plan`]): different Redis Cluster slots, different
//! `hits_addend`s, shadow-mode rules.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::backend::{Backend, BackendError, LimitReply, Op};
use crate::config::{Algorithm, Config, Match, Rule, Unit};
use crate::keys;
use crate::metrics::{Metrics, RuleCounts};
use crate::settings::FailureMode;

mod groups;
mod headers;

use groups::plan;
use headers::{duration_ms, ietf_headers, op_for};

/// What the service shares between requests.
pub struct Shared {
    pub config: RwLock<Arc<Config>>,
    pub backend: Backend,
    pub metrics: Metrics,
    pub failure_mode: FailureMode,
    pub key_prefix: String,
    pub hash_tag_keys: Vec<String>,
    pub near_limit_ratio: f64,
    pub global_shadow_mode: bool,
    pub response_headers: bool,
}

impl Shared {
    /// The configuration now (a reload swaps it whole).
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The gRPC service.
#[derive(Clone)]
pub struct Service {
    pub shared: Arc<Shared>,
}

/// One descriptor's matched, enforced or shadow limit.
struct Active {
    /// The descriptor's index in the request.
    index: usize,
    m: Match,
    key: String,
    hits: u64,
    slot: u16,
}

/// Per descriptor: its outcome, once known.
#[derive(Clone, Copy)]
struct Outcome {
    reply: LimitReply,
    /// The tokens the reply counts as taken that are not (a `PEEK`, a
    /// refused or refunded call): added back to `remaining` when allowed.
    untaken: u64,
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let shared = &self.shared;
        let started = Instant::now();
        shared.metrics.requests.increment(1);
        let result = answer(shared, request.into_inner()).await;
        shared
            .metrics
            .response_time
            .record(started.elapsed().as_secs_f64());
        result
    }
}

/// One request's answer: refused as invalid, or decided.
async fn answer(
    shared: &Shared,
    request: RateLimitRequest,
) -> Result<Response<RateLimitResponse>, Status> {
    if request.domain.is_empty() {
        shared.metrics.service_errors.increment(1);
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if request.descriptors.is_empty() {
        shared.metrics.service_errors.increment(1);
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    let response = decide(shared, &request).await;
    Ok(Response::new(response))
}

/// The hits each descriptor adds: its own `hits_addend` when set (0: check
/// only), else the request's (at least 1).
fn hits_addends(request: &RateLimitRequest) -> Vec<u64> {
    request
        .descriptors
        .iter()
        .map(|d| match &d.hits_addend {
            Some(n) => n.value,
            None => u64::from(request.hits_addend.max(1)),
        })
        .collect()
}

/// A request's `limit` override: a fixed window, as envoy applies it.
fn override_match(domain: &str, d: &RateLimitDescriptor) -> Option<Match> {
    let o = d.limit.as_ref()?;
    let unit = Unit::from_proto(o.unit)?;
    let mut parts = vec![domain.to_string()];
    parts.extend(d.entries.iter().map(|e| {
        if e.value.is_empty() {
            e.key.clone()
        } else {
            format!("{}_{}", e.key, e.value)
        }
    }));
    Some(Match {
        rule: Arc::new(
            Rule {
                full_key: parts.join("."),
                requests_per_unit: o.requests_per_unit,
                unit: Some(unit),
                unlimited: false,
                shadow_mode: false,
                name: String::new(),
                replaces: Vec::new(),
                detailed_metric: false,
                algorithm: Algorithm::FixedWindow,
                burst: None,
                module_args: None,
            }
            .with_module_args(),
        ),
        stat_parts: parts,
        shared_values: vec![None; d.entries.len()],
    })
}

/// A descriptor's `(key, value)` entries.
type Entries<'r> = Vec<(&'r str, &'r str)>;

/// Decides a request: never fails (Redis failures answer the failure mode).
pub async fn decide(shared: &Shared, request: &RateLimitRequest) -> RateLimitResponse {
    let config = shared.config();
    let domain = request.domain.as_str();
    let hits = hits_addends(request);
    let n = request.descriptors.len();
    // Per descriptor: its match and its entries (read once, used twice).
    let mut matches: Vec<(Option<Match>, Entries)> = Vec::with_capacity(n);
    for d in &request.descriptors {
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let m = match override_match(domain, d) {
            Some(m) => Some(m),
            None => config.get_limit(domain, &entries),
        };
        matches.push((m, entries));
    }
    // `replaces`: a matched rule named by another matched rule is dropped.
    let replaced: Vec<String> = matches
        .iter()
        .filter_map(|(m, _)| m.as_ref())
        .flat_map(|m| m.rule.replaces.iter().cloned())
        .collect();
    let mut unlimited = vec![false; n];
    let mut active: Vec<Active> = Vec::new();
    for (i, (m, entries)) in matches.into_iter().enumerate() {
        let Some(m) = m else { continue };
        if m.rule.unlimited {
            unlimited[i] = true;
            continue;
        }
        if !m.rule.name.is_empty() && replaced.contains(&m.rule.name) {
            tracing::debug!(rule = %m.rule.full_key, "replaced");
            continue;
        }
        let key = keys::key(
            &shared.key_prefix,
            &shared.hash_tag_keys,
            domain,
            &entries,
            &m,
        );
        let slot = if shared.backend.is_cluster() {
            keys::slot(key.as_bytes())
        } else {
            0
        };
        active.push(Active {
            index: i,
            m,
            key,
            hits: hits[i],
            slot,
        });
    }

    let mut outcomes: Vec<Option<Outcome>> = vec![None; n];
    // The whole decision, however many calls it takes, within the timeout.
    let timeout = shared.backend.timeout();
    let result = match tokio::time::timeout(timeout, run(shared, &active, &mut outcomes)).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::Timeout(timeout)),
    };
    let mut response = RateLimitResponse {
        overall_code: Code::Ok as i32,
        ..Default::default()
    };
    let denied = match result {
        Ok(denied) => denied,
        Err(e) => {
            match e {
                BackendError::Timeout(_) => shared.metrics.redis_timeouts.increment(1),
                _ => shared.metrics.redis_errors.increment(1),
            };
            shared.metrics.failure_mode_answers.increment(1);
            tracing::warn!(error = %e, domain, failure_mode = ?shared.failure_mode, "redis failed; answering the failure mode");
            let code = match shared.failure_mode {
                FailureMode::Open => Code::Ok,
                FailureMode::Closed => Code::OverLimit,
            };
            response.overall_code = code as i32;
            response.statuses = (0..n)
                .map(|_| DescriptorStatus {
                    code: code as i32,
                    ..Default::default()
                })
                .collect();
            return response;
        }
    };

    // Statuses, statistics and headers.
    let mut statuses: Vec<DescriptorStatus> = (0..n)
        .map(|i| DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: if unlimited[i] { u32::MAX } else { 0 },
            ..Default::default()
        })
        .collect();
    let mut closest: Option<(usize, u32)> = None;
    for a in &active {
        let Some(outcome) = outcomes[a.index] else {
            continue;
        };
        let rule = &a.m.rule;
        let mut r = outcome.reply;
        // Nothing was taken from a limit that allowed a refused request.
        if !r.limited && outcome.untaken > 0 {
            let untaken = i64::try_from(outcome.untaken).unwrap_or(i64::MAX);
            r.remaining = r.remaining.saturating_add(untaken).min(r.limit);
        }
        let limited = r.limited;
        let code = if limited && !rule.shadow_mode {
            Code::OverLimit
        } else {
            Code::Ok
        };
        let remaining = u32::try_from(r.remaining.max(0)).unwrap_or(u32::MAX);
        let reset_ms = if limited && r.retry_after_ms >= 0 {
            r.retry_after_ms
        } else {
            r.reset_after_ms
        }
        .max(0);
        statuses[a.index] = DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: rule.name.clone(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit.map_or(0, Unit::proto),
            }),
            limit_remaining: remaining,
            duration_until_reset: Some(duration_ms(reset_ms)),
            ..Default::default()
        };
        if code == Code::OverLimit {
            closest = Some((a.index, 0));
        } else if closest.is_none_or(|(_, best)| remaining < best) {
            closest = Some((a.index, remaining));
        }
        // envoy's statistics, in hits, against the limit the reply gives
        // (a rule's `burst` when it has one).
        let limit = u64::try_from(r.limit).unwrap_or(0);
        let mut counts = RuleCounts {
            total_hits: a.hits,
            ..Default::default()
        };
        if limited {
            if rule.shadow_mode {
                counts.shadow_mode = a.hits;
            }
            counts.over_limit = a.hits;
        } else {
            counts.within_limit = a.hits;
            let used_after = limit.saturating_sub(u64::try_from(r.remaining.max(0)).unwrap_or(0));
            let near = (limit as f64 * shared.near_limit_ratio).floor() as u64;
            if used_after > near {
                counts.near_limit = (used_after - near).min(a.hits);
            }
        }
        shared.metrics.add(&a.m.stat_parts, counts);
    }
    let mut overall = if denied { Code::OverLimit } else { Code::Ok };
    if overall == Code::OverLimit && shared.global_shadow_mode {
        shared.metrics.global_shadow_mode.increment(1);
        overall = Code::Ok;
    }
    if shared.response_headers {
        if let Some((i, _)) = closest {
            response.response_headers_to_add = ietf_headers(&statuses[i], &active, i);
        }
    }
    tracing::debug!(
        domain,
        descriptors = n,
        limits = active.len(),
        over_limit = denied,
        "decided"
    );
    response.overall_code = overall as i32;
    response.statuses = statuses;
    response
}

/// Decides the active limits, filling `outcomes`; returns whether the
/// request is refused. All-or-nothing across groups: when a later group
/// refuses, the groups already taken are refunded.
async fn run(
    shared: &Shared,
    active: &[Active],
    outcomes: &mut [Option<Outcome>],
) -> Result<bool, BackendError> {
    let groups = plan(active);
    // A rule of 0 requests per unit refuses without asking Redis.
    let mut denied = false;
    for a in active {
        if a.m.rule.module_args.is_none() {
            outcomes[a.index] = Some(Outcome {
                reply: LimitReply {
                    limited: true,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: -1,
                    reset_after_ms: 0,
                },
                untaken: 0,
            });
            denied |= !a.m.rule.shadow_mode;
        }
    }
    let mut taken: Vec<usize> = Vec::new();
    for (gi, ((shadow, slot, hits), members)) in groups.iter().enumerate() {
        // Once refused, the rest is only looked at (PEEK) for its statuses.
        let op = if denied { Op::Peek } else { op_for(*hits) };
        let limits: Vec<(&str, &[String])> = members
            .iter()
            .map(|&m| {
                let a = &active[m];
                (
                    a.key.as_str(),
                    a.m.rule.module_args.as_deref().unwrap_or(&[]),
                )
            })
            .collect();
        let (refused, each) = shared.backend.rl_all(&limits, op, *slot).await?;
        let took = !refused && matches!(op, Op::Take(_));
        let untaken = match op {
            Op::Take(n) if refused => n,
            Op::Take(_) | Op::Refund(_) => 0,
            Op::Peek => 1,
        };
        for (&m, reply) in members.iter().zip(each) {
            outcomes[active[m].index] = Some(Outcome { reply, untaken });
        }
        if took {
            taken.push(gi);
        }
        if refused && !shadow && !denied {
            denied = true;
            // Give back what earlier groups took.
            for &g in &taken {
                let ((_, slot, hits), members) = &groups[g];
                let limits: Vec<(&str, &[String])> = members
                    .iter()
                    .map(|&m| {
                        let a = &active[m];
                        (
                            a.key.as_str(),
                            a.m.rule.module_args.as_deref().unwrap_or(&[]),
                        )
                    })
                    .collect();
                shared
                    .backend
                    .rl_all(&limits, Op::Refund(*hits), *slot)
                    .await?;
                for &m in members {
                    if let Some(o) = outcomes[active[m].index].as_mut() {
                        o.untaken = *hits;
                    }
                }
            }
            taken.clear();
        }
    }
    Ok(denied)
}
