//! What the module's entry points (`RedisModule_OnLoad`,
//! `RedisModule_OnUnload`, exported by the composition root `crate::entry`)
//! do on the server's side, and the module's global allocator.
//!
//! The module declares the entry points itself rather than through the `redis_module!`
//! macro, which also creates a detached thread-safe context at every load
//! that the server never frees (a leak on each `MODULE UNLOAD` + `LOAD`) and
//! registers machinery the module does not use.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_int};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

use super::hooks::Hooks;
use super::string::args_of;
use super::{guard, Ctx, ERR, OK};

/// The module's name (`MODULE LIST`, `INFO` section prefix).
const MODULE_NAME: &[u8] = b"ratelimit\0";
/// The module's version as `MODULE LIST` shows it.
const MODULE_VERSION: c_int = 1;

/// The module's global allocator: the server's (`RedisModule_Alloc`, so that
/// `INFO memory` and `maxmemory` account for the module) once the server has
/// handed the module its API, the system allocator otherwise — in unit tests,
/// doctests and any program that links the rlib without a server.
///
/// The switch happens once, in `RedisModule_Init`, before the module
/// allocates anything (the load entry point keeps its name in a static for
/// that reason), so no block is ever freed by the other allocator. Neither
/// path can panic.
pub struct ModuleAllocator;

// SAFETY: both branches are valid global allocators: the server's returns
// blocks of at least the requested size aligned for any type up to 16 bytes
// (the size is rounded up to the alignment for larger ones, as jemalloc and
// libc malloc align such sizes), and a block is always freed by the
// allocator that made it (see the type's documentation).
unsafe impl GlobalAlloc for ModuleAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: a plain read of a pointer that is written once, at load.
        match unsafe { raw::RedisModule_Alloc } {
            Some(alloc) => {
                let size = (layout.size() + layout.align() - 1) & !(layout.align() - 1);
                // SAFETY: the server's allocator, any size.
                unsafe { alloc(size) }.cast()
            }
            // SAFETY: forwarded with the caller's layout.
            None => unsafe { System.alloc(layout) },
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: a plain read of a pointer that is written once, at load.
        match unsafe { raw::RedisModule_Free } {
            // SAFETY: `ptr` came from the same (server) allocator.
            Some(free) => unsafe { free(ptr.cast()) },
            // SAFETY: `ptr` came from the system allocator with `layout`.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }
}

/// `RedisModule_OnLoad` (`MODULE LOAD` / `loadmodule`): initialises the
/// module API, installs `hooks` and runs [`Hooks::load`] with the load
/// arguments ([`Hooks::unload`] when it refuses).
///
/// # Safety
/// Called from the server's `RedisModule_OnLoad` only, with its load context
/// and arguments.
pub unsafe fn on_load(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
    hooks: &'static Hooks,
) -> c_int {
    // SAFETY: the load context; the name is a static NUL-terminated string.
    let init = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            MODULE_NAME.as_ptr().cast::<c_char>(),
            MODULE_VERSION,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if init != OK {
        return ERR;
    }
    let Some(ctx) = Ctx::from_raw(ctx) else {
        return ERR;
    };
    let argc = usize::try_from(argc).unwrap_or(0);
    let args = if argc == 0 {
        Some(&[][..]) // an empty vector may be null
    } else {
        // SAFETY: the server passes `argc` valid module arguments in `argv`,
        // alive during the load.
        unsafe { args_of(argv, argc) }
    };
    let Some(args) = args else {
        return ERR;
    };
    super::hooks::install(hooks);
    guard(
        || match (hooks.load)(ctx, args) {
            Ok(()) => OK,
            Err(why) => {
                ctx.log_warning(&format!("ratelimit: {why}; not loading"));
                (hooks.unload)(ctx);
                ERR
            }
        },
        || ERR,
    )
}

/// `RedisModule_OnUnload` (`MODULE UNLOAD`): runs [`Hooks::unload`], which
/// frees what the module created.
pub fn on_unload(ctx: *mut RedisModuleCtx, hooks: &'static Hooks) -> c_int {
    let Some(ctx) = Ctx::from_raw(ctx) else {
        return OK;
    };
    guard(
        || {
            (hooks.unload)(ctx);
            OK
        },
        || OK,
    )
}
