//! The subcommands of `RL.POLICY`: their handlers, help and documentation.

use super::define::{
    at_line, check_change, dump_text, entry, origin, parse_text, policy, policy_after,
    unusable_message,
};
#[allow(clippy::wildcard_imports)]
use super::*;

// --- the subcommands ---------------------------------------------------------

/// The name argument of `RL.POLICY <sub> name …`.
fn name_arg<'a>(args: &Args<'a>) -> Result<&'a [u8]> {
    let name = args.bytes(2)?;
    if !is_valid_name(name) {
        return Err(Error::PolicyName);
    }
    Ok(name)
}

fn on() -> Result<()> {
    if settings::policies() {
        Ok(())
    } else {
        Err(Error::PoliciesOff)
    }
}

/// A change (`SET`, `DEL`, `LOAD`) is applied where policies are served,
/// and also, where they are only carried (`policies no`), when it comes from
/// the primary or an AOF replay: the data stays whole for a later restart or
/// promotion with `policies yes`.
fn on_or_carried(ctx: Ctx) -> Result<()> {
    if settings::policies()
        || (settings::policies_carried() && effects::is_replicated_or_loading(ctx))
    {
        Ok(())
    } else {
        Err(Error::PoliciesOff)
    }
}

fn set(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let name = name_arg(args)?;
    let words = (3..args.len())
        .map(|i| args.bytes(i))
        .collect::<Result<Vec<_>>>()?;
    let origin = origin(ctx);
    let (name, definition) = entry(name, &words, origin)?;
    if let Some(message) = unusable_message(&name, &definition) {
        ctx.log_warning(&message);
    }
    {
        let mut map = policies();
        if let Some(old) = map.get(&name) {
            check_change(&name, old, &definition, origin, false)?;
        }
        let new = policy(&name, definition, Some(&map));
        map.insert(name, new);
    }
    effects::replicate_verbatim(ctx);
    Ok(Reply::Ok)
}

fn get(_ctx: Ctx, args: &Args) -> Result<Reply> {
    on()?;
    let name = name_arg(args)?;
    Ok(match policies().get(name) {
        Some(p) => Reply::Array(
            p.text
                .split(|&b| b == b' ')
                .map(|w| Reply::Bulk(w.to_vec()))
                .collect(),
        ),
        None => Reply::Null,
    })
}

fn del(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let name = name_arg(args)?;
    let removed = policies().remove(name).is_some();
    if removed {
        effects::replicate_verbatim(ctx);
    }
    Ok(Reply::Integer(i64::from(removed)))
}

fn list(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    Ok(Reply::Array(
        policies().keys().cloned().map(Reply::Bulk).collect(),
    ))
}

fn dump(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    Ok(Reply::Bulk(dump_text(&policies())))
}

/// `RL.POLICY LOAD [REPLACE] [RESET] text`: every line is parsed and
/// checked before anything changes (a refused last line costs no more than
/// a successful load); then the map takes the entries in place.
fn load(ctx: Ctx, args: &Args) -> Result<Reply> {
    on_or_carried(ctx)?;
    let last = args.len().checked_sub(1).ok_or(Error::PolicySyntax)?;
    let (mut replace, mut reset) = (false, false);
    for i in 2..last {
        let word = args.bytes(i)?;
        if is_keyword(word, b"REPLACE") && !replace {
            replace = true;
        } else if is_keyword(word, b"RESET") && !reset {
            reset = true;
        } else {
            return Err(Error::LoadSyntax);
        }
    }
    let text = args.bytes(last)?;
    let origin = origin(ctx);
    let parsed = match parse_text(text, origin) {
        Ok(parsed) => parsed,
        Err(message) => return Ok(Reply::Error(message)),
    };
    let count = parsed.len();
    for (_, name, definition) in &parsed {
        if let Some(message) = unusable_message(name, definition) {
            ctx.log_warning(&message);
        }
    }
    {
        let mut map = policies();
        for (number, name, definition) in &parsed {
            if let Some(old) = map.get(name) {
                if let Err(e) = check_change(name, old, definition, origin, reset) {
                    return Ok(Reply::Error(at_line(*number, &e)));
                }
            }
        }
        if replace || map.is_empty() {
            // A new map, built in one pass from the entries sorted by name;
            // the statistics of the policies of the same name carry over,
            // found by walking the previous map alongside.
            let previous = std::mem::take(&mut *map);
            let mut parsed = parsed;
            parsed.sort_unstable_by(|a, b| a.1.cmp(&b.1));
            let mut before = previous.iter().peekable();
            *map = parsed
                .into_iter()
                .map(|(_, name, definition)| {
                    while before.next_if(|(n, _)| **n < name).is_some() {}
                    let same = before
                        .next_if(|(n, _)| **n == name)
                        .map(|(_, p)| p.as_ref());
                    let p = policy_after(definition, same);
                    (name, p)
                })
                .collect();
            drop(before);
            drop(previous);
        } else {
            for (_, name, definition) in parsed {
                let p = policy(&name, definition, Some(&map));
                map.insert(name, p);
            }
        }
    }
    effects::replicate_verbatim(ctx);
    Ok(Reply::Integer(count as i64))
}

fn stats(_ctx: Ctx, args: &Args) -> Result<Reply> {
    on()?;
    let name = name_arg(args)?;
    Ok(match policies().get(name) {
        Some(p) => Reply::Array(
            p.stats
                .fields()
                .iter()
                .flat_map(|(field, value)| {
                    [
                        Reply::Bulk(field.to_bytes().to_vec()),
                        Reply::Integer(i64::try_from(*value).unwrap_or(i64::MAX)),
                    ]
                })
                .collect(),
        ),
        None => Reply::Null,
    })
}

/// `RL.POLICY HELP`: one line per subcommand, as Redis's containers answer.
const HELP: &[&str] = &[
    "RL.POLICY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "SET <name> <limit> [SHADOW] [SOFT <percent>] [BLOCK <duration>] [RESET]",
    "    Create or replace a policy. <limit> is GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW,",
    "    SLIDINGWINDOW, SLIDINGLOG or CONCURRENCY with its parameters. RESET allows changing",
    "    the algorithm of an existing policy (its limiters start over).",
    "GET <name>",
    "    The policy's definition as SET takes it, or nil.",
    "DEL <name>",
    "    Delete a policy: 1 if it existed, else 0.",
    "LIST",
    "    The names of every policy, sorted.",
    "DUMP",
    "    Every policy, one 'name limit [options]' a line, as LOAD takes it.",
    "LOAD [REPLACE] [RESET] <text>",
    "    Set every policy of a text, all or nothing. REPLACE deletes the others; RESET as in SET.",
    "STATS <name>",
    "    The policy's statistics (the fields of its INFO ratelimit line), or nil.",
    "RESETSTATS",
    "    Zero the statistics of every policy and every command.",
    "HELP",
    "    Print this help.",
];

fn help(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    Ok(Reply::Array(
        HELP.iter()
            .map(|l| Reply::Bulk(l.as_bytes().to_vec()))
            .collect(),
    ))
}

fn reset_stats(_ctx: Ctx, _args: &Args) -> Result<Reply> {
    on()?;
    for policy in policies().values() {
        policy.stats.reset();
    }
    super::super::reset_command_stats();
    Ok(Reply::Ok)
}

/// A subcommand of `RL.POLICY`.
pub struct Subcommand {
    /// Lower case, as registered (`set` → `RL.POLICY|SET`).
    pub name: &'static std::ffi::CStr,
    /// `rl.policy|set`, for `COMMAND DOCS` and ACL categories.
    pub full_name: &'static std::ffi::CStr,
    pub flags: &'static std::ffi::CStr,
    /// Fewest and most arguments, counting `RL.POLICY` and the subcommand.
    pub min_argc: usize,
    pub max_argc: Option<usize>,
    pub doc: &'static docs::CommandDoc,
    pub handler: fn(Ctx, &Args) -> Result<Reply>,
    /// Whether it changes policies or their statistics (`SET`, `LOAD`,
    /// `DEL`, `RESETSTATS`): `@admin @dangerous` only, not in the module's
    /// own ACL category.
    pub changes: bool,
}

/// Changing subcommands: `admin` (so `@admin` and `@dangerous` on servers
/// that give module commands ACL categories); they propagate.
const CHANGE_FLAGS: &std::ffi::CStr = c"write deny-oom admin deny-script";

const NAME: docs::ArgDoc = docs::string(c"name");

pub const SUBCOMMANDS: [Subcommand; 9] = [
    Subcommand {
        name: c"set",
        full_name: c"rl.policy|set",
        flags: CHANGE_FLAGS,
        min_argc: 4,
        max_argc: None,
        doc: &docs::CommandDoc {
            summary: c"Creates or replaces a policy: a named limit (GCRA, TOKENBUCKET, LEAKYBUCKET, FIXEDWINDOW, SLIDINGWINDOW, SLIDINGLOG or CONCURRENCY with its parameters), optionally SHADOW, SOFT percent and BLOCK duration. Changing an existing policy's algorithm needs RESET.",
            complexity: c"O(log N) for N policies",
            arity: -4,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[
                NAME,
                docs::ArgDoc {
                    multiple: true,
                    ..docs::string(c"limit")
                },
            ],
        },
        handler: set,
        changes: true,
    },
    Subcommand {
        name: c"get",
        full_name: c"rl.policy|get",
        flags: c"readonly fast",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"The policy's definition as RL.POLICY SET takes it, or nil.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "read fast",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: get,
        changes: false,
    },
    Subcommand {
        name: c"del",
        full_name: c"rl.policy|del",
        flags: c"write admin deny-script",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"Deletes a policy: 1 if it existed, else 0.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: del,
        changes: true,
    },
    Subcommand {
        name: c"list",
        full_name: c"rl.policy|list",
        flags: c"readonly",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"The names of every policy, sorted.",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "read",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: list,
        changes: false,
    },
    Subcommand {
        name: c"load",
        full_name: c"rl.policy|load",
        flags: CHANGE_FLAGS,
        min_argc: 3,
        max_argc: Some(5),
        doc: &docs::CommandDoc {
            summary: c"Sets every policy of a text (one 'name limit [options]' a line, as DUMP writes it); all or nothing. REPLACE deletes the others; RESET allows algorithm changes.",
            complexity: c"O(N log M) for N lines and M policies",
            arity: -3,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[
                docs::ArgDoc {
                    name: c"replace",
                    kind: docs::ArgType::PureToken,
                    token: Some(c"REPLACE"),
                    optional: true,
                    multiple: false,
                },
                docs::ArgDoc {
                    name: c"reset",
                    kind: docs::ArgType::PureToken,
                    token: Some(c"RESET"),
                    optional: true,
                    multiple: false,
                },
                docs::string(c"text"),
            ],
        },
        handler: load,
        changes: true,
    },
    Subcommand {
        name: c"dump",
        full_name: c"rl.policy|dump",
        flags: c"readonly",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Every policy, one 'name limit [options]' a line, as RL.POLICY LOAD takes it.",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "read",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: dump,
        changes: false,
    },
    Subcommand {
        name: c"resetstats",
        full_name: c"rl.policy|resetstats",
        flags: c"admin deny-script",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Zeroes the statistics of every policy and every command (INFO ratelimit).",
            complexity: c"O(N) for N policies",
            arity: 2,
            acl_categories: "admin dangerous",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: reset_stats,
        changes: true,
    },
    Subcommand {
        name: c"stats",
        full_name: c"rl.policy|stats",
        flags: c"readonly fast",
        min_argc: 3,
        max_argc: Some(3),
        doc: &docs::CommandDoc {
            summary: c"The policy's statistics as field-value pairs (the fields of its INFO ratelimit line), or nil.",
            complexity: c"O(log N) for N policies",
            arity: 3,
            acl_categories: "read fast",
            keys: docs::KeySpec::None,
            args: &[NAME],
        },
        handler: stats,
        changes: false,
    },
    Subcommand {
        name: c"help",
        full_name: c"rl.policy|help",
        flags: c"readonly fast",
        min_argc: 2,
        max_argc: Some(2),
        doc: &docs::CommandDoc {
            summary: c"Lines describing each subcommand.",
            complexity: c"O(1)",
            arity: 2,
            acl_categories: "fast",
            keys: docs::KeySpec::None,
            args: &[],
        },
        handler: help,
        changes: false,
    },
];
