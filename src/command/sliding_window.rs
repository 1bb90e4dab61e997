//! `RL.SLIDINGWINDOW key limit window [TOKENS n] [BUCKETS k]`
//!
//! The sliding window counter ([`crate::algorithm::sliding_window`]): at most
//! `limit` tokens in the sliding window of `window` seconds (fractional
//! allowed), estimated from two epoch-aligned fixed windows; with `BUCKETS k`
//! (2 to 60), counted exactly in `k` sub-windows
//! ([`crate::algorithm::bucket_window`]). `TOKENS n` (default 1) is the
//! request's cost.

use crate::server::Ctx;

use super::decide;
use super::{
    args::{is_keyword, Args, SettingsBounds},
    docs, Answer, ReplyUnit, Spec,
};
use crate::algorithm::bucket_window::BucketWindow;
use crate::error::{Error, Result};
use crate::limit::{Kind, Limit};

pub const SPEC: Spec = Spec {
    name: c"rl.slidingwindow",
    stat_name: c"cmdstat_rl.slidingwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with the sliding window counter: the previous window weighted by its overlap plus the current one.",
        complexity: c"O(1); O(k) with BUCKETS k",
        arity: -4,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK, BUCKETS],
    },
    handler,
    stats: &STATS,
};

/// The syntax error of this command's options.
const SYNTAX: Error = Error::WindowSyntax { own: "[BUCKETS k]" };

/// `[BUCKETS k]` in `COMMAND DOCS`.
const BUCKETS: docs::ArgDoc = docs::ArgDoc {
    name: c"buckets",
    kind: docs::ArgType::Integer,
    token: Some(c"BUCKETS"),
    optional: true,
    multiple: false,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let kind = Kind::SlidingWindow;
    let limit = kind.parse(args, 2, &SettingsBounds)?;
    let mut buckets = None;
    let options = args
        .options_with(2 + kind.params(), |word, i| {
            if !is_keyword(word, b"BUCKETS") || buckets.is_some() || i + 1 >= args.len() {
                return Ok(None);
            }
            buckets = Some(args.integer(i + 1, "BUCKETS")?);
            Ok(Some(2))
        })
        .map_err(|e| match e {
            Error::Syntax => SYNTAX,
            e => e,
        })?;
    let limit = match buckets {
        Some(k) => {
            let limit_arg = args.integer(2, "limit")?;
            let window_us = args.seconds_as_us(3, "window")?;
            Limit::BucketWindow(BucketWindow::new(limit_arg, window_us, k)?)
        }
        None => limit,
    };
    decide::one(ctx, args.arg(1)?, &limit, &options)
}
