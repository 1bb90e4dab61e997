//! Planning one limit of a call: open its key, plan it over its storage
//! (with a policy's re-plan of another algorithm's state), and leave the key
//! and plan where the call keeps them ([`Put`]): handed back as a pair to a
//! single command, pushed onto `RL.ALL`'s vectors from where each string
//! limit's planner builds its plan.

#[allow(clippy::wildcard_imports)]
use super::*;

#[allow(clippy::too_many_arguments)]
#[inline(never)] // one copy for the single commands
pub(super) fn plan<'a>(
    ctx: Ctx,
    name: Arg<'a>,
    limit: &Limit,
    modes: &Modes,
    lease: Option<Lease<'a>>,
    now_us: i64,
    options: &Options,
    stale_left: &Cell<i64>,
) -> Result<(Key<'a>, Planned<'a>)> {
    plan_into(
        ctx, name, limit, modes, lease, now_us, options, stale_left, &mut Pair,
    )
}

/// Where a planner leaves a limit's key and plan ([`plan_into`]): handed
/// back as a pair (a single command), or pushed where [`all`] keeps them,
/// so that each plan (184 bytes) is moved once, from where it is built.
pub(super) trait Put<'a> {
    /// What the planner returns.
    type Out;
    /// Takes one limit's open key and plan.
    fn put(&mut self, key: Key<'a>, p: Planned<'a>) -> Self::Out;
    /// Marks the plan just put as a replacement of another algorithm's
    /// state (a policy's re-plan).
    fn replaced(&mut self, out: &mut Self::Out);
    /// Plans `limit` on the open `key` ([`plan_key`]), leaving both here.
    fn plan(
        &mut self,
        ctx: Ctx,
        key: Key<'a>,
        name: Arg<'a>,
        limit: &Limit,
        lease: Option<Lease<'a>>,
        at: &At,
    ) -> Result<Self::Out>;
}

/// The key and plan handed back as a pair.
struct Pair;

impl<'a> Put<'a> for Pair {
    type Out = (Key<'a>, Planned<'a>);
    #[inline(always)]
    fn put(&mut self, key: Key<'a>, p: Planned<'a>) -> Self::Out {
        (key, p)
    }
    #[inline(always)]
    fn replaced(&mut self, out: &mut Self::Out) {
        out.1.replace = true;
    }
    #[inline(always)]
    fn plan(
        &mut self,
        ctx: Ctx,
        key: Key<'a>,
        name: Arg<'a>,
        limit: &Limit,
        lease: Option<Lease<'a>>,
        at: &At,
    ) -> Result<Self::Out> {
        plan_key(ctx, key, name, limit, lease, at)
    }
}

/// Every limit's key and plan, in order, pushed onto [`all`]'s vectors.
pub(super) struct Every<'v, 'a> {
    pub(super) keys: &'v mut Few<Key<'a>>,
    pub(super) planned: &'v mut Few<Planned<'a>>,
    pub(super) seen: Seen,
}

/// What the reply needs from all the limits, gathered as they are planned.
#[derive(Default, Clone, Copy)]
pub(super) struct Seen {
    pub(super) shadows: usize,
    pub(super) blocked: bool,
    pub(super) shadow_limited: bool,
    pub(super) soft_over: bool,
}

impl<'a> Put<'a> for Every<'_, 'a> {
    type Out = ();
    #[inline(always)]
    fn put(&mut self, key: Key<'a>, p: Planned<'a>) {
        let seen = &mut self.seen;
        seen.shadows += usize::from(p.shadow);
        seen.blocked |= p.blocked;
        seen.shadow_limited |= p.shadow_limited;
        seen.soft_over |= p.soft_over;
        self.planned.push(p);
        self.keys.push(key);
    }
    #[inline(always)]
    fn replaced(&mut self, _: &mut ()) {
        if let Some(p) = self.planned.last_mut() {
            p.replace = true;
        }
    }
    #[inline(always)]
    fn plan(
        &mut self,
        _: Ctx,
        key: Key<'a>,
        name: Arg<'a>,
        limit: &Limit,
        _: Option<Lease<'a>>,
        at: &At,
    ) -> Result<()> {
        plan_string_key(key, name, limit, at, self)
    }
}

/// Opens `name` and plans `limit` on it, leaving the key and plan to `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn plan_into<'a, P: Put<'a>>(
    ctx: Ctx,
    name: Arg<'a>,
    limit: &Limit,
    modes: &Modes,
    lease: Option<Lease<'a>>,
    now_us: i64,
    options: &Options,
    stale_left: &Cell<i64>,
    out: &mut P,
) -> Result<P::Out> {
    let key = Key::open(ctx, name)?;
    let mut at = At {
        now_us,
        options,
        modes,
        fresh: false,
        force: options.force || modes.force,
        stale_left,
    };
    match out.plan(ctx, key, name, limit, lease, &at) {
        // Under a policy, another algorithm's state (or variant's) reads as
        // no key; anything the module did not write keeps its error.
        Err(e) if modes.policy && e.is_state_mismatch() => {
            let key = Key::open(ctx, name)?;
            if !holds_limiter_state(ctx, &key, now_us)? {
                return Err(e);
            }
            at.fresh = true;
            let mut done = out.plan(ctx, key, name, limit, lease, &at)?;
            out.replaced(&mut done);
            Ok(done)
        }
        planned => planned,
    }
}

/// Whether `key` holds a state some command of the module wrote: a string
/// state of any algorithm, or a sliding log.
fn holds_limiter_state(ctx: Ctx, key: &Key, now_us: i64) -> Result<bool> {
    Ok(match key.kind()? {
        KeyKind::String => key.string()?.is_some_and(is_limiter_state),
        KeyKind::SortedSet => {
            ZsetLog::open(ctx, key, now_us).is_ok_and(|log| log.is_some())
                || crate::command::store::lease_set::holds_leases(ctx, key, now_us)
        }
        _ => false,
    })
}

fn plan_key<'a>(
    ctx: Ctx,
    key: Key<'a>,
    name: Arg<'a>,
    limit: &Limit,
    lease: Option<Lease<'a>>,
    at: &At,
) -> Result<(Key<'a>, Planned<'a>)> {
    match limit {
        Limit::Gcra(a) => plan_string(key, name, &Fixed(a), "RL.GCRA", at, &mut Pair),
        Limit::TokenBucket(a) => plan_string(key, name, &Fixed(a), "RL.TOKENBUCKET", at, &mut Pair),
        Limit::LeakyBucket(a) => plan_string(key, name, &Fixed(a), "RL.LEAKYBUCKET", at, &mut Pair),
        Limit::FixedWindow(a) => plan_string(key, name, &Fixed(a), "RL.FIXEDWINDOW", at, &mut Pair),
        Limit::SlidingWindow(a) => {
            plan_string(key, name, &Fixed(a), "RL.SLIDINGWINDOW", at, &mut Pair)
        }
        Limit::Throttle(a) => plan_string(key, name, &Fixed(a), "CL.THROTTLE", at, &mut Pair),
        Limit::BucketWindow(a) => {
            plan_string(key, name, &Buckets(a), "RL.SLIDINGWINDOW", at, &mut Pair)
        }
        Limit::SlidingLog(a) => plan_log(ctx, key, name, a, at),
        Limit::Concurrency(a) => {
            let lease = lease.ok_or(Error::Internal {
                what: "a CONCURRENCY limit without its lease",
            })?;
            plan_lease(ctx, key, name, a, lease, at)
        }
    }
}

/// [`plan_key`] of a limit held in one fixed-size string, its key and plan
/// pushed where [`all`] keeps them. A bucketed window's and a sorted set's
/// limit are planned by [`plan`], as their single commands plan them (one
/// copy of their planners, inlined as it was).
fn plan_string_key<'a>(
    key: Key<'a>,
    name: Arg<'a>,
    limit: &Limit,
    at: &At,
    out: &mut Every<'_, 'a>,
) -> Result<()> {
    match limit {
        Limit::Gcra(a) => plan_string(key, name, &Fixed(a), "RL.GCRA", at, out),
        Limit::TokenBucket(a) => plan_string(key, name, &Fixed(a), "RL.TOKENBUCKET", at, out),
        Limit::LeakyBucket(a) => plan_string(key, name, &Fixed(a), "RL.LEAKYBUCKET", at, out),
        Limit::FixedWindow(a) => plan_string(key, name, &Fixed(a), "RL.FIXEDWINDOW", at, out),
        Limit::SlidingWindow(a) => plan_string(key, name, &Fixed(a), "RL.SLIDINGWINDOW", at, out),
        Limit::Throttle(a) => plan_string(key, name, &Fixed(a), "CL.THROTTLE", at, out),
        Limit::BucketWindow(_) | Limit::SlidingLog(_) | Limit::Concurrency(_) => {
            Err(Error::Internal {
                what: "a bucketed window's or a sorted set's limit pushed by plan_string_key",
            })
        }
    }
}
