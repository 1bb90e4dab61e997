//! What a command replies and what its statistics count ([`Answer`]):
//! below the handlers, `decide/` and the statistics, which all use it.

use crate::algorithm::plan::{Op, Options};
use crate::algorithm::Decision;

/// What a command replies: the five integers of a decision, and for
/// `RL.ALL` a sixth, the binding limit's 1-based position; and what its
/// statistics count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub decision: Decision,
    pub position: Option<i64>,
    /// Refused by a block in force.
    pub blocked: bool,
    /// Tokens taken (0 when limited, for `PEEK` and for refunds).
    pub taken: i64,
    /// A `SHADOW` policy would have refused the call (which it allowed).
    pub shadow_limited: bool,
    /// A `SOFT` policy admitted the call beyond its nominal limit.
    pub soft_over: bool,
    /// `RL.ALL … WITHLIMITS`: every limit's own decision, in order, replied
    /// after the six integers (empty otherwise).
    pub each: Vec<Decision>,
}

impl Answer {
    pub fn new(
        decision: Decision,
        position: Option<i64>,
        blocked: bool,
        options: &Options,
    ) -> Self {
        let taken = match options.op {
            Op::Take(n) if !decision.limited && !options.peek => n,
            _ => 0,
        };
        Self {
            decision,
            position,
            blocked,
            taken,
            shadow_limited: false,
            soft_over: false,
            each: Vec::new(),
        }
    }
}
