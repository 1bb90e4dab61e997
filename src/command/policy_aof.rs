//! Policies in an AOF rewritten without the RDB preamble.
//!
//! Such a rewrite (`aof-use-rdb-preamble no`) writes commands for keys only:
//! the policies, module auxiliary data, would be left out of the new base,
//! and the incremental file that follows it holds only changes made after
//! the fork, so a restart would load none of them. On every fork of an AOF
//! rewrite without the preamble, the module therefore propagates one
//! `RL.POLICY LOAD REPLACE <dump>` to the AOF only (not to replicas): the
//! server opened the new incremental file before forking, so the command
//! lands there, after the new base, and a replay restores the policies;
//! changes made later follow it in the same file. With no policies nothing
//! is propagated: the base holds none either. With the preamble the base
//! itself carries them (RDB aux data).
//!
//! The propagation happens from a timer of 0 ms (the next turn of the event
//! loop), not from the fork event itself: inside the command that forked
//! (`BGREWRITEAOF`, `CONFIG SET appendonly yes`) a module's propagation marks
//! that command as a write, and the server would then propagate the command
//! too. A `LOAD REPLACE` of the policies in force is right at any point of
//! the incremental file, since every change after the fork is in it as well.
//! While writes are paused (`CLIENT PAUSE WRITE`, a failover) the server must
//! not propagate anything (no policy can change then either): the timer
//! retries every 100 ms until the pause ends.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{policy, settings};
use crate::server::{aof, Ctx};

/// A propagation waits for its timer.
static PENDING: AtomicBool = AtomicBool::new(false);

/// How often a propagation waiting for the end of a pause retries.
const RETRY_MS: i64 = 100;

/// The server forked a child (in the parent, right after the fork).
pub fn on_fork_born(ctx: Ctx) {
    if !settings::policies_carried() || policy::count() == 0 {
        return;
    }
    // Where the server cannot tell, propagate: a LOAD REPLACE of the
    // policies in force is harmless in any AOF.
    if aof::aof_rewrite_in_progress(ctx) == Some(false) || aof::rdb_preamble(ctx) == Some(true) {
        return;
    }
    if !PENDING.swap(true, Ordering::Relaxed) && !aof::retry_in(ctx, 0) {
        PENDING.store(false, Ordering::Relaxed);
        ctx.log_warning(NOT_WRITTEN);
    }
}

/// The policies could not be written into the AOF being rewritten.
const NOT_WRITTEN: &str = "ratelimit: could not write the policies into the AOF being rewritten without the RDB preamble; run RL.POLICY LOAD REPLACE with RL.POLICY DUMP's text";

/// The timer fired: propagate, unless writes are paused (then retry).
pub fn on_retry(ctx: Ctx) {
    if !PENDING.load(Ordering::Relaxed) {
        return;
    }
    if aof::writes_paused() {
        if !aof::retry_in(ctx, RETRY_MS) {
            PENDING.store(false, Ordering::Relaxed);
            ctx.log_warning(NOT_WRITTEN);
        }
        return;
    }
    PENDING.store(false, Ordering::Relaxed);
    let text = policy::dump_all();
    if !text.is_empty() && !aof::replicate_policy_load_to_aof(ctx, &text) {
        ctx.log_warning(NOT_WRITTEN);
    }
}
