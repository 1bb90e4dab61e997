//! The composition root: the module's two exported entry points, and the one
//! place where the server glue (`server/`) is handed the module's functions
//! (`command/`) it calls back. `server/` never imports `command/`.

use std::ffi::c_int;

use redis_module::raw::{RedisModuleCtx, RedisModuleString};

use crate::command::{self, policy, policy_aof, propagate};
use crate::server::{self, hooks::Hooks};

/// Every server callback's way into the module.
static HOOKS: Hooks = Hooks {
    load: command::register::load,
    unload: command::register::unload,
    write_info: command::write_info,
    on_sync: propagate::on_sync,
    on_role_or_load: propagate::on_role_or_load,
    on_load_start: policy::on_load_start,
    on_load_ended: policy::on_load_ended,
    on_load_failed: policy::on_load_failed,
    on_fork_born: policy_aof::on_fork_born,
    on_aof_timer: policy_aof::on_retry,
};

/// Called by the server on `MODULE LOAD` / `loadmodule`.
///
/// # Safety
/// Called by the server only, with its load context and arguments.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: forwarded from the server's call, as the function requires.
    unsafe { server::load::on_load(ctx, argv, argc, &HOOKS) }
}

/// Called by the server on `MODULE UNLOAD`: frees what the module created.
///
/// # Safety
/// Called by the server only, with a context of this module.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnUnload(ctx: *mut RedisModuleCtx) -> c_int {
    server::load::on_unload(ctx, &HOOKS)
}
