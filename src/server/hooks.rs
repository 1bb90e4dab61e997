//! What the server's callbacks call into: the module's own functions, handed
//! in once at load by the composition root (`crate::entry`), so that
//! `server/` wraps the module API only and never reaches up into the
//! commands.

use std::sync::OnceLock;

use super::info_writer::InfoWriter;
use super::string::Arg;
use super::Ctx;

/// The module's side of every server callback.
pub struct Hooks {
    /// `RedisModule_OnLoad`, after `RedisModule_Init`: registers the
    /// commands, configs, types and subscriptions; `Err(why)` refuses the
    /// load (then [`Hooks::unload`] runs).
    pub load: fn(Ctx, &[Arg]) -> Result<(), String>,
    /// `RedisModule_OnUnload`, or a refused load: frees what `load` created.
    pub unload: fn(Ctx),
    /// Writes the fields of the module's `INFO` section.
    pub write_info: fn(&mut InfoWriter),
    /// A replica asked for a sync (`SYNC` / `PSYNC` seen by the command
    /// filter).
    pub on_sync: fn(),
    /// The server's role changed, a dataset load started or ended, or a
    /// config changed.
    pub on_role_or_load: fn(),
    /// A dataset load (RDB, AOF, or a full sync) starts.
    pub on_load_start: fn(),
    /// A dataset load ended.
    pub on_load_ended: fn(Ctx),
    /// A dataset load failed.
    pub on_load_failed: fn(),
    /// The server forked a child (in the parent).
    pub on_fork_born: fn(Ctx),
    /// The timer armed by [`super::aof::retry_in`] fired.
    pub on_aof_timer: fn(Ctx),
}

/// The hooks of this process, set once by the first load.
static HOOKS: OnceLock<&'static Hooks> = OnceLock::new();

/// Installs `hooks` (the first installed stays: they are the same static in
/// every load of the module).
pub fn install(hooks: &'static Hooks) {
    let _ = HOOKS.set(hooks);
}

/// The installed hooks; `None` before the first load.
pub fn get() -> Option<&'static Hooks> {
    HOOKS.get().copied()
}
