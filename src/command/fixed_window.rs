//! `RL.FIXEDWINDOW key limit window [TOKENS n] [ALIGN EPOCH | ALIGN FIRST]`
//!
//! The fixed window counter ([`crate::algorithm::fixed_window`]): at most
//! `limit` tokens per window of `window` seconds (fractional allowed), windows
//! aligned to the Unix epoch (`ALIGN EPOCH`, the default) or starting at the
//! first request that finds none open (`ALIGN FIRST`). `TOKENS n` (default 1)
//! is the request's cost.

use crate::server::Ctx;

use super::decide;
use super::{
    args::{is_keyword, Args, SettingsBounds},
    docs, Answer, ReplyUnit, Spec,
};
use crate::algorithm::fixed_window::Align;
use crate::error::{Error, Result};
use crate::limit::{Kind, Limit};

pub const SPEC: Spec = Spec {
    name: c"rl.fixedwindow",
    stat_name: c"cmdstat_rl.fixedwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a fixed window counter: at most limit tokens per window of window seconds, aligned to the epoch or starting at the first request (ALIGN FIRST).",
        complexity: c"O(1)",
        arity: -4,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"limit"), docs::seconds(c"window"), docs::TOKENS, docs::REFUND, docs::PEEK, docs::BLOCK, ALIGN],
    },
    handler,
    stats: &STATS,
};

/// The syntax error of this command's options.
const SYNTAX: Error = Error::WindowSyntax {
    own: "[ALIGN EPOCH | ALIGN FIRST]",
};

/// `[ALIGN EPOCH | ALIGN FIRST]` in `COMMAND DOCS`.
const ALIGN: docs::ArgDoc = docs::ArgDoc {
    name: c"align",
    kind: docs::ArgType::String,
    token: Some(c"ALIGN"),
    optional: true,
    multiple: false,
};

/// The command's statistics (`INFO ratelimit`).
static STATS: super::stats::CommandStats = super::stats::CommandStats::new();

fn handler(ctx: Ctx, args: &Args) -> Result<Answer> {
    let kind = Kind::FixedWindow;
    let limit = kind.parse(args, 2, &SettingsBounds)?;
    let mut align = None;
    let options = args
        .options_with(2 + kind.params(), |word, i| {
            if !is_keyword(word, b"ALIGN") || align.is_some() {
                return Ok(None);
            }
            let value = args.bytes(i + 1).map_err(|_| SYNTAX)?;
            align = Some(if is_keyword(value, b"EPOCH") {
                Align::Epoch
            } else if is_keyword(value, b"FIRST") {
                Align::First
            } else {
                return Err(SYNTAX);
            });
            Ok(Some(2))
        })
        .map_err(|e| match e {
            Error::Syntax => SYNTAX,
            e => e,
        })?;
    let limit = match (limit, align) {
        (Limit::FixedWindow(fw), Some(Align::First)) => Limit::FixedWindow(fw.aligned_first()?),
        (limit, _) => limit,
    };
    decide::one(ctx, args.arg(1)?, &limit, &options)
}
