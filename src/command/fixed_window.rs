//! `RL.FIXEDWINDOW key limit window [TZ zone] [TOKENS n] [ALIGN EPOCH | ALIGN FIRST]`
//!
//! The fixed window counter ([`crate::algorithm::fixed_window`]): at most
//! `limit` tokens per window of `window` seconds (fractional allowed), windows
//! aligned to the Unix epoch (`ALIGN EPOCH`, the default) or starting at the
//! first request that finds none open (`ALIGN FIRST`); or per calendar
//! window, `window` being `DAY`, `WEEK`, `MONTH` or `YEAR`, in the time zone
//! `TZ zone` (UTC by default; [`crate::calendar`]). `TOKENS n` (default 1)
//! is the request's cost.

use crate::server::Ctx;

use super::decide;
use super::{
    args::{is_keyword, Args, SettingsBounds},
    docs, Answer, ReplyUnit, Spec,
};
use crate::algorithm::fixed_window::Align;
use crate::error::{Error, Result};
use crate::limit::{misplaced_zone, Kind, Limit};

pub const SPEC: Spec = Spec {
    name: c"rl.fixedwindow",
    stat_name: c"cmdstat_rl.fixedwindow",
    min_argc: 4,
    max_argc: None,
    unit: ReplyUnit::Millis,
    flags: super::O1_FLAGS,
    doc: &docs::CommandDoc {
        summary: c"Rate limits with a fixed window counter: at most limit tokens per window of window seconds, aligned to the epoch or starting at the first request (ALIGN FIRST), or per calendar DAY, WEEK, MONTH or YEAR in a time zone (TZ).",
        complexity: c"O(1)",
        arity: -4,
        acl_categories: "write fast",
        keys: docs::KeySpec::One,
        args: &[docs::KEY, docs::int(c"limit"), docs::string(c"window"), TZ, docs::TOKENS, docs::REFUND, docs::FORCE, docs::PEEK, docs::BLOCK, ALIGN],
    },
    handler,
    stats: &STATS,
};

/// The syntax error of this command's options.
const SYNTAX: Error = Error::WindowSyntax {
    own: "[ALIGN EPOCH | ALIGN FIRST]",
};

/// `[TZ zone]` in `COMMAND DOCS`.
const TZ: docs::ArgDoc = docs::ArgDoc {
    name: c"zone",
    kind: docs::ArgType::String,
    token: Some(c"TZ"),
    optional: true,
    multiple: false,
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
    let (limit, taken) = kind
        .parse_zoned(args, 2, &SettingsBounds)
        .map_err(|e| match e {
            Error::Syntax => SYNTAX,
            e => e,
        })?;
    let mut align = None;
    let calendar = matches!(limit, Limit::FixedWindow(fw) if fw.calendar_window().is_some());
    let options = args
        .options_with(2 + taken, |word, i| {
            if !is_keyword(word, b"ALIGN") || align.is_some() {
                // `TZ` after a window in seconds says so.
                return Err(if calendar {
                    SYNTAX
                } else {
                    misplaced_zone(word, SYNTAX)
                });
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
