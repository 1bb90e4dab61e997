//! The local over-limit cache on a request's path ([`crate::cache`]): a
//! request with a limit still refused there is answered without Redis; the
//! refusals Redis answers are recorded, each until its retry time.

use std::time::{Duration, Instant};

use super::calls::{Active, Outcome};
use super::Shared;
use crate::backend::LimitReply;
use crate::cache::Refusal;
use crate::config::Rule;

/// Whether the cache keeps this limit's refusals: an enforced rule decided
/// in Redis (not shadow mode, not a rule of 0, not a request's override,
/// whose limit is not in its key).
fn cacheable(a: &Active) -> bool {
    let rule = &a.m.rule;
    !rule.shadow_mode && rule.module_args.is_some() && rule.id != Rule::OVERRIDE
}

/// Fills `outcomes` with the refusals the cache still holds for the
/// request's limits at `now` (the rules of 0 too, which need no Redis);
/// whether there was one: then the request is refused as it is, and the
/// limits without an outcome were not decided (nothing is taken).
pub(super) fn answer(
    shared: &Shared,
    active: &[Active],
    outcomes: &mut [Option<Outcome>],
    now: Instant,
) -> bool {
    let Some(cache) = &shared.local_cache else {
        return false;
    };
    let mut any = false;
    // A forced limit's hits are recorded whatever the cache says: it goes
    // to Redis (a check of it, 0 hits, is not forced).
    for a in active.iter().filter(|a| cacheable(a) && !a.forced) {
        if let Some(r) = cache.refused(&a.key, a.hits, now) {
            let left = r.until.saturating_duration_since(now);
            // Rounded up: never shorter than the refusal.
            let ms = i64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i64::MAX);
            outcomes[a.index] = Some(Outcome {
                reply: LimitReply {
                    limited: true,
                    limit: r.limit,
                    remaining: 0,
                    retry_after_ms: ms,
                    reset_after_ms: ms,
                },
                untaken: 0,
                cached: true,
            });
            any = true;
        }
    }
    if any {
        for a in active.iter().filter(|a| a.m.rule.module_args.is_none()) {
            outcomes[a.index] = Some(Outcome {
                reply: LimitReply {
                    limited: true,
                    limit: 0,
                    remaining: 0,
                    retry_after_ms: -1,
                    reset_after_ms: 0,
                },
                untaken: 0,
                cached: false,
            });
        }
    }
    any
}

/// Records the refusals Redis answered in `outcomes`, each until `started`
/// (the decision's start, before Redis read its clock) plus its
/// `retry_after`: never longer than the refusal. A refusal "never"
/// (`retry_after` -1: more hits than the limit holds) is not kept. A forced
/// limit past its limit (in debt) refuses one hit until its `retry_after`.
pub(super) fn record(
    shared: &Shared,
    active: &[Active],
    outcomes: &[Option<Outcome>],
    started: Instant,
) {
    let Some(cache) = &shared.local_cache else {
        return;
    };
    for a in active.iter().filter(|a| cacheable(a)) {
        let Some(o) = outcomes[a.index] else { continue };
        let Ok(retry) = u64::try_from(o.reply.retry_after_ms) else {
            continue;
        };
        if o.cached || !o.reply.limited || retry == 0 {
            continue;
        }
        let Some(until) = started.checked_add(Duration::from_millis(retry)) else {
            continue;
        };
        cache.insert(
            &a.key,
            Refusal {
                until,
                hits: if a.forced { 1 } else { a.hits.max(1) },
                limit: o.reply.limit,
            },
        );
    }
}
