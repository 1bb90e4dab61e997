//! `RL.LIMIT key policy [TOKENS n | REFUND n] [FORCE] [PEEK]`
//! (a `CONCURRENCY` policy: `RL.LIMIT key policy ACQUIRE id [TOKENS n] [PEEK] | RENEW id [PEEK] | RELEASE id [PEEK]`)
//!
//! Decides `key` with the named policy's algorithm, parameters and modes
//! (`SHADOW`, `SOFT`, `BLOCK`: see [`super::policy`]) and replies as that
//! algorithm's command would. A changed policy applies to existing keys
//! from their next call. Counted in the command's and the policy's
//! statistics.

use super::decide;
use super::{args::Args, docs, policy, Answer, ReplyUnit, Spec};
use crate::error::{Error, Result};
use crate::server::Ctx;

pub const SPEC: Spec = Spec {
    name: c"rl.limit",
    stat_name: c"cmdstat_rl.limit",
    min_argc: 3,
    max_argc: None,
    unit: ReplyUnit::Millis,
    // Not `fast`: a SLIDINGLOG policy costs what RL.SLIDINGLOG costs.
    flags: c"write deny-oom",
    doc: &docs::CommandDoc {
        summary: c"Rate limits a key with a server-side policy (RL.POLICY SET): replies as the policy's algorithm's command.",
        complexity: c"O(log P) for P policies, plus the policy's algorithm (O(1) but for SLIDINGLOG)",
        arity: -3,
        acl_categories: "write",
        keys: docs::KeySpec::One,
        args: &[
            docs::KEY,
            docs::string(c"policy"),
            docs::TOKENS,
            docs::REFUND,
            docs::FORCE,
            docs::PEEK,
        ],
    },
    handler,
    stats: &STATS,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let (found, rule) = policy::find(args.bytes(2)?)?;
    if matches!(rule.limit, decide::Limit::Concurrency(_)) {
        // `ACQUIRE id [TOKENS n] [PEEK]`, `RENEW id [PEEK]`, `RELEASE id [PEEK]`.
        let (lease, options) = super::concurrency::parse_lease(args, 3, false)?;
        let name = args.arg(1)?;
        let answer = decide::rule(ctx, name, &rule.limit, &rule.modes, Some(lease), &options)?;
        let answer = super::concurrency::count_slots(answer, lease.op);
        found.stats.record(&answer);
        return Ok(answer);
    }
    let options = args.options(3).map_err(|e| match e {
        Error::Syntax => Error::LimitSyntax,
        e => e,
    })?;
    if options.block_us.is_some() {
        return Err(Error::LimitSyntax);
    }
    let answer = decide::rule(ctx, args.arg(1)?, &rule.limit, &rule.modes, None, &options)?;
    found.stats.record(&answer);
    Ok(answer)
}
