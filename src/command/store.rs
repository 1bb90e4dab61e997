//! The life of a request against a string-backed algorithm.
//!
//! A limiter's state lives in one Redis string, written in place through the
//! key API ([`crate::server::key::Key::write_string`]) with an absolute
//! expiry, and propagated to replicas and the AOF as the effect
//! `SET key value PXAT ms` — never as the command, so that no replica or AOF
//! replay recomputes with its own clock (skipped when nothing consumes it:
//! see [`super::propagate`]). It raises the `set` and `expire` keyspace
//! events, as that `SET` would, after the key is closed.

use crate::algorithm::{Algorithm, Decision, STATE_BUF_LEN};
use crate::error::{Error, Result};
use crate::server::effects::{self, EventClass};
use crate::server::key::Key;
use crate::server::string::Arg;
use crate::server::Ctx;
use crate::time::{ceil_ms, server_now_us};

use super::propagate;

/// Loads the state of `name`, decides `cost` tokens with the server clock,
/// stores and propagates the new state (allowed requests only), and returns
/// the decision.
///
/// Errors: [`Error::WrongType`]; [`Error::InvalidState`] (naming `command`)
/// when the string was not written by this algorithm; [`Error::Overflow`].
/// Nothing is written when an error is returned.
pub fn decide_string<A: Algorithm>(
    ctx: Ctx,
    name: Arg,
    algorithm: &A,
    cost: i64,
    command: &'static str,
) -> Result<Decision> {
    let mut key = Key::open(ctx, name)?;
    let stored = key.string()?;
    let old_len = stored.map(<[u8]>::len);
    let state = match stored {
        None => None,
        Some(bytes) => Some(A::decode(bytes).ok_or(Error::InvalidState { command })?),
    };
    let outcome = algorithm.decide(state, server_now_us(), cost)?;
    if let Some(update) = outcome.update {
        let mut buf = [0u8; STATE_BUF_LEN];
        let len = A::encode(&update.state, &mut buf);
        let value = &buf[..len];
        let expire_at_ms = ceil_ms(update.expire_at_us);
        key.write_string(old_len, value, expire_at_ms)?;
        key.close();
        if propagate::effects_needed(ctx) {
            effects::replicate_set_pxat(ctx, name, value, expire_at_ms)?;
        } else {
            effects::count_dirty(ctx);
        }
        // The module signals modified keys itself, only when it writes (see
        // `command::load`): a limited call leaves WATCH alone.
        effects::signal_modified(ctx, name)?;
        effects::notify(ctx, EventClass::String, c"set", name)?;
        effects::notify(ctx, EventClass::Generic, c"expire", name)?;
    }
    Ok(outcome.decision)
}
