//! Policy definitions and their text: `limit [TZ zone] [SHADOW] [SOFT percent]
//! [BLOCK duration] [RESET]` parsed by the limit grammar ([`crate::limit`]),
//! and the `DUMP` / `LOAD` text, one `name definition` a line.
//!
//! A definition's words are read as arguments through a [`ReadWords`]: the
//! module turns them into server strings, so that a policy's numbers parse
//! exactly as the same limit's command would.

use std::collections::HashSet;

use crate::algorithm::policy::{
    is_dumpable_word, is_valid_name, lines, soft_count, SOFT_PERCENT_MAX, SOFT_PERCENT_MIN,
};
use crate::error::{Error, PolicyName, Result};
use crate::limit::{
    is_keyword, misplaced_zone, Args, Count, Kind, Limit, LocalBounds, Modes, Origin, Word,
};

/// Reads the words of a definition as arguments of a command.
pub trait ReadWords {
    /// The arguments' type, for the words' lifetime.
    type W<'a>: Word<'a>;
    /// Calls `parse` with `words` read as arguments from `origin`.
    fn read<T>(
        &self,
        words: &[&[u8]],
        origin: Origin,
        parse: impl for<'a> FnOnce(&Args<'a, Self::W<'a>>) -> Result<T>,
    ) -> Result<T>;
}

/// A policy's limit with what the policy adds to it.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// The limit that decides: the nominal one, scaled up by `SOFT`.
    pub limit: Limit,
    pub modes: Modes,
}

/// A policy definition, parsed.
#[derive(Debug)]
pub struct Definition {
    /// The words as `SET` takes them back (`GET`, `DUMP`), joined by single
    /// spaces: the limit's keyword upper case, its parameters as given, then
    /// `SHADOW`, `SOFT percent`, `BLOCK duration` in that order.
    pub text: Vec<u8>,
    /// `Err` only for an accepted definition this module cannot use (kept
    /// as its words: see [`Definition::unusable`]).
    pub rule: std::result::Result<Rule, Error>,
    /// `RESET`: the definition may change the algorithm of the policy it
    /// replaces (never stored: `GET` and `DUMP` leave it out).
    pub reset: bool,
}

/// Refuses a client's definition that changes the variant of the policy it
/// replaces without `RESET` (`reset`, or the definition's own).
pub fn check_change(
    name: &[u8],
    old: &std::result::Result<Rule, Error>,
    new: &Definition,
    origin: Origin,
    reset: bool,
) -> Result<()> {
    // A policy that cannot be used here has no variant to keep.
    let (Ok(old_rule), Ok(new_rule)) = (old, &new.rule) else {
        return Ok(());
    };
    let (from, to) = (variant(&old_rule.limit), variant(&new_rule.limit));
    if from == to || reset || new.reset || !origin.checks_local_bounds() {
        return Ok(());
    }
    Err(Error::PolicyAlgorithmChange {
        name: PolicyName::new(name),
        from,
        to,
    })
}

/// Parses `limit [SHADOW] [SOFT percent] [BLOCK duration] [RESET]`.
pub fn define<R: ReadWords>(
    words: &[&[u8]],
    origin: Origin,
    reader: &R,
    bounds: &impl LocalBounds,
) -> Result<Definition> {
    let first = words.first().ok_or(Error::PolicySyntax)?;
    let kind = Kind::of(first).ok_or(Error::UnknownPolicyLimit)?;
    if words.len() < 1 + kind.params() {
        return Err(Error::PolicySyntax);
    }
    let nominal = reader.read(words, origin, |args| {
        let (limit, taken) = kind.parse_zoned(args, 1, bounds)?;
        let mut modes = Modes {
            policy: true,
            ..Modes::default()
        };
        let (mut soft, mut block, mut reset) = (None, None, false);
        let mut i = 1 + taken;
        while i < args.len() {
            let word = args.bytes(i)?;
            if is_keyword(word, b"SHADOW") && !modes.shadow {
                modes.shadow = true;
                i += 1;
            } else if is_keyword(word, b"RESET") && !reset {
                reset = true;
                i += 1;
            } else if is_keyword(word, b"SOFT") && soft.is_none() && i + 1 < args.len() {
                let percent = args.integer(i + 1, "SOFT")?;
                if !(SOFT_PERCENT_MIN..=SOFT_PERCENT_MAX).contains(&percent) {
                    return Err(Error::OutOfRange {
                        arg: "SOFT",
                        bound: ">= 1 and <= 1000",
                    });
                }
                soft = Some((percent, i + 1));
                i += 2;
            } else if is_keyword(word, b"BLOCK") && block.is_none() && i + 1 < args.len() {
                modes.block_us = Some(args.seconds_as_us(i + 1, "BLOCK")?);
                block = Some(i + 1);
                i += 2;
            } else if matches!(limit, Limit::FixedWindow(fw) if fw.calendar_window().is_none()) {
                // `TZ` after a window in seconds says so.
                return Err(misplaced_zone(word, Error::PolicySyntax));
            } else {
                return Err(Error::PolicySyntax);
            }
        }
        Ok((limit, taken, modes, soft, block, reset))
    })?;
    let (mut limit, taken, mut modes, soft, block, reset) = nominal;
    // The words as SET takes them back, joined by spaces.
    let mut canonical: Vec<u8> = Vec::with_capacity(words.iter().map(|w| w.len() + 1).sum());
    let mut push = |word: &[u8]| {
        if !canonical.is_empty() {
            canonical.push(b' ');
        }
        canonical.extend_from_slice(word);
        is_dumpable_word(word)
    };
    let mut dumpable = push(kind.name());
    for word in &words[1..=kind.params()] {
        dumpable &= push(word);
    }
    // A calendar window's `TZ zone`.
    if taken > kind.params() {
        push(b"TZ");
        dumpable &= push(words[taken]);
    }
    if modes.shadow {
        push(b"SHADOW");
    }
    if let Some((_, at)) = soft {
        push(b"SOFT");
        dumpable &= push(words[at]);
    }
    if let Some(at) = block {
        push(b"BLOCK");
        dumpable &= push(words[at]);
    }
    if !dumpable {
        return Err(Error::PolicySyntax);
    }
    if let Some((percent, _)) = soft {
        // Scale every count, then parse the scaled limit as its command would.
        let mut scaled: Vec<Vec<u8>> = words[..=taken].iter().map(|w| w.to_vec()).collect();
        let mut nominal_limit = None;
        for &(pos, count) in kind.counts() {
            let text = std::str::from_utf8(words[1 + pos]).map_err(|_| Error::PolicySyntax)?;
            let value: i64 = text.parse().map_err(|_| Error::PolicySyntax)?;
            let (nominal_count, to_param) = match count {
                Count::Plain => (value, 0),
                Count::Burst => (value.checked_add(1).ok_or(Error::Overflow)?, 1),
            };
            let scaled_count = soft_count(nominal_count, percent).ok_or(Error::Overflow)?;
            nominal_limit.get_or_insert(nominal_count);
            scaled[1 + pos] = (scaled_count - to_param).to_string().into_bytes();
        }
        let scaled_words: Vec<&[u8]> = scaled.iter().map(Vec::as_slice).collect();
        limit = reader.read(&scaled_words, origin, |args| {
            Ok(kind.parse_zoned(args, 1, bounds)?.0)
        })?;
        modes.nominal_limit = nominal_limit;
    }
    Ok(Definition {
        text: canonical,
        rule: Ok(Rule { limit, modes }),
        reset,
    })
}

impl Definition {
    /// An accepted definition this module cannot use, kept as its words
    /// (`why`: the parse error). `Err(why)` when the words cannot even be
    /// kept (none, or not dumpable).
    pub fn unusable(words: &[&[u8]], why: Error) -> Result<Definition> {
        if words.is_empty() || !words.iter().all(|w| is_dumpable_word(w)) {
            return Err(why);
        }
        Ok(Definition {
            text: words.join(&b' '),
            rule: Err(why),
            reset: false,
        })
    }
}

/// Parses one `name limit [options]` entry; the name is checked.
pub fn entry<R: ReadWords>(
    name: &[u8],
    words: &[&[u8]],
    origin: Origin,
    reader: &R,
    bounds: &impl LocalBounds,
) -> Result<(Vec<u8>, Definition)> {
    if !is_valid_name(name) {
        return Err(Error::PolicyName);
    }
    let definition = match define(words, origin, reader, bounds) {
        Ok(definition) => definition,
        // The primary, an AOF or an RDB accepted it: keep it, unusable here,
        // rather than drop it or refuse the replication stream.
        Err(why) if !origin.checks_local_bounds() => Definition::unusable(words, why)?,
        Err(why) => return Err(why),
    };
    Ok((name.to_vec(), definition))
}

/// The log line for an accepted definition this module cannot use.
pub fn unusable_message(name: &[u8], definition: &Definition) -> Option<String> {
    let why = definition.rule.as_ref().err()?;
    Some(format!(
        "ratelimit: policy '{}' kept as defined but not usable by this module ({why}): RL.LIMIT and RL.ALL refuse it until RL.POLICY SET redefines it",
        PolicyName::new(name)
    ))
}

/// `ERR line N: …` for an error of line `number` of a `LOAD` text.
pub fn at_line(number: usize, e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    format!("ERR line {number}: {text}")
}

/// One parsed entry of a `LOAD` text: its line number, name, definition.
pub type Parsed = (usize, Vec<u8>, Definition);

/// Parses a `DUMP` / `LOAD` text: every entry, or the first error with its
/// line number (`ERR line N: …`). Linear in the text: a hash set finds a
/// name defined twice.
pub fn parse_text<R: ReadWords>(
    text: &[u8],
    origin: Origin,
    reader: &R,
    bounds: &impl LocalBounds,
) -> std::result::Result<Vec<Parsed>, String> {
    // At most one entry a line: sized once, never moved while growing.
    let most = text.iter().filter(|&&b| b == b'\n').count() + 1;
    let mut parsed: Vec<Parsed> = Vec::with_capacity(most);
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(most);
    for line in lines(text) {
        let number = line.number;
        let (&name, rest) = line
            .words
            .split_first()
            .ok_or_else(|| at_line(number, &"empty"))?;
        let (name_owned, definition) =
            entry(name, rest, origin, reader, bounds).map_err(|e| at_line(number, &e))?;
        if !seen.insert(name) {
            return Err(at_line(
                number,
                &format!("policy '{}' is defined twice", PolicyName::new(name)),
            ));
        }
        parsed.push((number, name_owned, definition));
    }
    Ok(parsed)
}

/// `name word word …` per policy, one a line, in the order given (the
/// module gives them sorted by name).
pub fn dump_text<'p>(policies: impl IntoIterator<Item = (&'p [u8], &'p [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, text) in policies {
        out.extend_from_slice(name);
        out.push(b' ');
        out.extend_from_slice(text);
        out.push(b'\n');
    }
    out
}

/// The algorithm of a limit with its variant, as `RL.POLICY SET` names it:
/// limiters of two limits of the same variant read each other's state.
pub fn variant(limit: &Limit) -> &'static str {
    use crate::algorithm::fixed_window::Align;

    match limit {
        Limit::Gcra(_) => "GCRA",
        Limit::TokenBucket(_) => "TOKENBUCKET",
        Limit::LeakyBucket(_) => "LEAKYBUCKET",
        Limit::FixedWindow(w) if w.align() == Align::First => "FIXEDWINDOW ALIGN FIRST",
        Limit::FixedWindow(_) => "FIXEDWINDOW",
        Limit::SlidingWindow(_) => "SLIDINGWINDOW",
        Limit::BucketWindow(_) => "SLIDINGWINDOW BUCKETS",
        Limit::SlidingLog(_) => "SLIDINGLOG",
        Limit::Concurrency(_) => "CONCURRENCY",
        Limit::Throttle(_) => "CL.THROTTLE",
    }
}

#[cfg(test)]
mod tests;
