//! The module's entry points (`RedisModule_OnLoad`, `RedisModule_OnUnload`)
//! and its global allocator.
//!
//! The module declares these itself rather than through the `redis_module!`
//! macro, which also creates a detached thread-safe context at every load
//! that the server never frees (a leak on each `MODULE UNLOAD` + `LOAD`) and
//! registers machinery the module does not use.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_char, c_int};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};

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
    guard(
        || match crate::command::load(ctx, args) {
            Ok(()) => OK,
            Err(why) => {
                ctx.log_warning(&format!("ratelimit: {why}; not loading"));
                crate::command::unload(ctx);
                ERR
            }
        },
        || ERR,
    )
}

/// Called by the server on `MODULE UNLOAD`: frees what the module created.
///
/// # Safety
/// Called by the server only, with a context of this module.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnUnload(ctx: *mut RedisModuleCtx) -> c_int {
    let Some(ctx) = Ctx::from_raw(ctx) else {
        return OK;
    };
    guard(
        || {
            crate::command::unload(ctx);
            OK
        },
        || OK,
    )
}
