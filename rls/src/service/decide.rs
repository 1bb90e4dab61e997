//! One request's decision: match, decide the limits ([`super::calls`]),
//! then statuses, statistics and headers.

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

use super::calls::{run, Active};
use super::headers::{duration_ms, ietf_headers};
use super::local;
use super::{override_rule, Shared};
use crate::backend::BackendError;
use crate::config::{Charge, Match, Unit};
use crate::keys;

/// Why a request got no decision.
#[derive(Debug)]
pub enum Failure {
    /// The request is invalid (gRPC `INVALID_ARGUMENT`): the message says why.
    Invalid(String),
    /// Redis failed or did not answer within the timeout.
    Redis(BackendError),
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

/// A descriptor's `limit` override (on a domain the configuration has): a
/// fixed window, as envoy applies it; an undefined unit is refused.
fn override_match(domain: &str, d: &RateLimitDescriptor) -> Result<Option<Match>, Failure> {
    let Some(o) = d.limit.as_ref() else {
        return Ok(None);
    };
    let unit = Unit::from_proto(o.unit).ok_or_else(|| {
        Failure::Invalid(format!(
            "descriptor limit override has an undefined unit ({}): SECOND to YEAR",
            o.unit
        ))
    })?;
    let mut parts = vec![domain.to_string()];
    parts.extend(d.entries.iter().map(|e| {
        if e.value.is_empty() {
            e.key.clone()
        } else {
            format!("{}_{}", e.key, e.value)
        }
    }));
    Ok(Some(Match {
        rule: Arc::new(override_rule(parts.clone(), o.requests_per_unit, unit)),
        stat_parts: parts,
        shared_values: vec![None; d.entries.len()],
        static_stats: false,
    }))
}

/// A descriptor's `(key, value)` entries.
type Entries<'r> = Vec<(&'r str, &'r str)>;

/// Decides a request.
pub async fn decide(
    shared: &Shared,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Failure> {
    if request.domain.is_empty() {
        return Err(Failure::Invalid(
            "rate limit domain must not be empty".into(),
        ));
    }
    if request.descriptors.is_empty() {
        return Err(Failure::Invalid(
            "rate limit descriptor list must not be empty".into(),
        ));
    }
    let loaded = shared.config.load();
    let config = &loaded.config;
    let domain = request.domain.as_str();
    let n = request.descriptors.len();
    let ok = |unlimited: bool| DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining: if unlimited { u32::MAX } else { 0 },
        ..Default::default()
    };
    // A domain the configuration does not have: no limit, overrides
    // included (as envoy: counted per descriptor).
    if !config.has_domain(domain) {
        for _ in 0..n {
            shared.metrics.domain_not_found(domain);
        }
        return Ok(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: (0..n).map(|_| ok(false)).collect(),
            ..Default::default()
        });
    }
    let hits = hits_addends(request);
    // Per descriptor: its match and its entries (read once, used twice).
    let mut matches: Vec<(Option<Match>, Entries)> = Vec::with_capacity(n);
    for d in &request.descriptors {
        let entries: Entries = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let m = match override_match(domain, d)? {
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
        let forced = hits[i] > 0 && m.rule.charge.unwrap_or(shared.charge) == Charge::Always;
        active.push(Active {
            index: i,
            m,
            key,
            hits: hits[i],
            slot,
            forced,
        });
    }

    // A limit the local cache still holds refused: refused without Redis
    // (but the forced limits, whose hits are recorded all the same). Else
    // the whole decision, however many calls it takes, within the timeout;
    // its refusals go to the cache.
    let started = Instant::now();
    let mut outcomes = vec![None; n];
    let from_cache = local::answer(shared, &active, &mut outcomes, started);
    let denied = if from_cache && !active.iter().any(|a| a.forced) {
        true
    } else {
        let timeout = shared.backend.timeout();
        let include = |a: &Active| !from_cache || a.forced;
        let decided = tokio::time::timeout(
            timeout,
            run(shared, &active, &mut outcomes, from_cache, include),
        )
        .await;
        let denied = match decided {
            Ok(result) => result.map_err(Failure::Redis)?,
            Err(_) => return Err(Failure::Redis(BackendError::Timeout(timeout))),
        };
        local::record(shared, &active, &outcomes, started);
        denied
    };

    // Statuses, statistics and headers.
    let mut statuses: Vec<DescriptorStatus> = unlimited.iter().map(|&u| ok(u)).collect();
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
        let stats = loaded.stats(&shared.metrics, &a.m);
        stats.total_hits.increment(a.hits);
        if limited {
            if rule.shadow_mode {
                stats.shadow_mode.increment(a.hits);
            }
            stats.over_limit.increment(a.hits);
            if outcome.cached {
                stats.over_limit_with_local_cache.increment(a.hits);
                shared.metrics.over_limit_with_local_cache.increment(a.hits);
            }
        } else {
            stats.within_limit.increment(a.hits);
            let limit = u64::try_from(r.limit).unwrap_or(0);
            let used_after = limit.saturating_sub(u64::try_from(r.remaining.max(0)).unwrap_or(0));
            let near = (limit as f64 * shared.near_limit_ratio).floor() as u64;
            if used_after > near {
                stats.near_limit.increment((used_after - near).min(a.hits));
            }
        }
    }
    let mut overall = if denied { Code::OverLimit } else { Code::Ok };
    if overall == Code::OverLimit && shared.global_shadow_mode {
        shared.metrics.global_shadow_mode.increment(1);
        overall = Code::Ok;
    }
    let mut response = RateLimitResponse {
        overall_code: overall as i32,
        ..Default::default()
    };
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
        from_cache,
        "decided"
    );
    response.statuses = statuses;
    Ok(response)
}
