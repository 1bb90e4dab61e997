//! One plan for every limiter: what a call does to one key — take, refund,
//! or refuse and block — whatever the state is stored as.
//!
//! Every command runs the same steps on each of its keys: read the stored
//! state and its block (see [`super::block`]), decide with the one `now` of
//! the call, then write either the new state (an allowed request, a refund)
//! or, for a refusal with `BLOCK`, the block. [`plan`] is those steps,
//! written once; the caller supplies the algorithm as two closures (`take`
//! and `refund`, which capture the limiter and its state) and turns the
//! resulting [`Change`] into its storage's writes (a string, a sorted set).

use super::{block, Decision};
use crate::error::Result;

/// What a call does with its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `TOKENS n` (default 1): take `n` if allowed.
    Take(i64),
    /// `REFUND n`: give `n` back, never beyond full.
    Refund(i64),
}

impl Op {
    /// The tokens taken or given back.
    pub fn tokens(self) -> i64 {
        match self {
            Op::Take(n) | Op::Refund(n) => n,
        }
    }
}

/// The options every `RL.*` command and `RL.ALL` accept:
/// `[TOKENS n | REFUND n] [FORCE] [PEEK] [BLOCK duration]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub op: Op,
    /// `PEEK`: answer as the call would, write nothing.
    pub peek: bool,
    /// `BLOCK duration`, in µs.
    pub block_us: Option<i64>,
    /// `FORCE`: record `TOKENS n` whatever the limit says (past it: debt).
    /// Never with `PEEK` nor `REFUND` (the parser refuses both).
    pub force: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            op: Op::Take(1),
            peek: false,
            block_us: None,
            force: false,
        }
    }
}

/// The change a call makes to one key, in the algorithm's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<T, R> {
    /// Nothing is written (a refused call without a block to start, a
    /// refund with nothing to give back).
    Nothing,
    /// An allowed request's update (`take`'s). A block that ended goes with
    /// it.
    Take(T),
    /// A refund's write (`refund`'s); a block in force
    /// ([`Plan::block_in_force_until_us`]) stays.
    Refund(R),
    /// A refusal starts or extends a block until then (µs); the state is
    /// kept as it is.
    Block { until_us: i64 },
    /// `FORCE` recorded its cost (past the limit, or during a block) behind
    /// a block until then (µs): the one it starts or extends, or the one in
    /// force.
    TakeBlocked { take: T, until_us: i64 },
}

/// The plan of one key: the decision as replied, and the change to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan<T, R> {
    pub decision: Decision,
    /// The request was refused by a block in force (a take only).
    pub blocked: bool,
    /// The end of the block in force before the call, if any (µs).
    pub block_in_force_until_us: Option<i64>,
    pub change: Change<T, R>,
}

/// Plans one key's part of a call at `now_us`.
///
/// * `take(cost)` / `refund(tokens)`: the algorithm's decision against the
///   stored state, with what it would write (`None`: nothing).
/// * `stored`: the key holds a state (a block is only ever written beside
///   one).
/// * `blocked_until_us`: the stored block's end, if any (in force when
///   after `now_us`).
/// * `block_us`: the `BLOCK` duration asked for (the longer of the call's
///   and its policy's).
///
/// A request made during a block is refused with the block's time
/// ([`block::blocked_decision`]); a refused take with `BLOCK` on a stored
/// key starts or extends the block, and is answered as one made during it.
///
/// `FORCE` (`force`): `take` answers its update even when limited (the
/// cost recorded past the limit). An overshoot is a
/// refusal: with `BLOCK` it starts or extends the block, and the state in
/// debt is written behind it; during a block in force the cost is recorded
/// behind that block. Either way the reply is the block's ([`block::
/// blocked_decision`]: the later of the two retries).
///
/// Errors: [`crate::error::Error::Overflow`] from the algorithm or the block
/// arithmetic; nothing is written then.
#[inline(always)] // once per storage; inlined, its plan is never copied
#[allow(clippy::too_many_arguments)]
pub fn plan<T, R>(
    op: Op,
    force: bool,
    take: impl FnOnce(i64) -> Result<(Decision, Option<T>)>,
    refund: impl FnOnce(i64) -> Result<(Decision, Option<R>)>,
    stored: bool,
    blocked_until_us: Option<i64>,
    now_us: i64,
    block_us: Option<i64>,
) -> Result<Plan<T, R>> {
    let in_force = blocked_until_us.filter(|&until| until > now_us);
    match op {
        Op::Take(cost) => {
            let (decision, update) = take(cost)?;
            let decision = match in_force {
                Some(until) => block::blocked_decision(decision, until, now_us)?,
                None => decision,
            };
            let blocked = in_force.is_some();
            if !decision.limited {
                let change = update.map_or(Change::Nothing, Change::Take);
                return Ok(Plan {
                    decision,
                    blocked,
                    block_in_force_until_us: in_force,
                    change,
                });
            }
            // Limited: refused, or (FORCE) recorded past the limit or
            // during a block, when `update` is the state in debt (an
            // unforced update during a block is not written). A block goes
            // beside a stored state, or the one FORCE writes.
            let update = update.filter(|_| force);
            let extended = match block_us {
                Some(block_us) if stored || update.is_some() => {
                    block::extend(&decision, in_force, now_us, block_us)?
                }
                _ => None,
            };
            let (decision, change) = match (extended, update) {
                (Some(until_us), Some(take)) => (
                    block::blocked_decision(decision, until_us, now_us)?,
                    Change::TakeBlocked { take, until_us },
                ),
                (Some(until_us), None) => (
                    block::blocked_decision(decision, until_us, now_us)?,
                    Change::Block { until_us },
                ),
                (None, Some(take)) => match in_force {
                    Some(until_us) => (decision, Change::TakeBlocked { take, until_us }),
                    None => (decision, Change::Take(take)),
                },
                (None, None) => (decision, Change::Nothing),
            };
            Ok(Plan {
                decision,
                blocked,
                block_in_force_until_us: in_force,
                change,
            })
        }
        Op::Refund(tokens) => {
            let (decision, write) = refund(tokens)?;
            Ok(Plan {
                decision,
                blocked: false,
                block_in_force_until_us: in_force,
                change: write.map_or(Change::Nothing, Change::Refund),
            })
        }
    }
}

#[cfg(test)]
mod tests;
