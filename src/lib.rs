//! redis-ratelimit: rate-limiting algorithms that run atomically inside Redis.
//!
//! * [`algorithm`] — the pure algorithms (no Redis imports), one per file;
//! * `command` — one thin handler per Redis command, and the shared glue;
//! * [`time`] — the server clock and unit conversions;
//! * [`error`] — every error reply, in one place.

pub mod algorithm;
mod command;
pub mod error;
pub mod time;

/// The module's global allocator: the server's (`RedisModule_Alloc`, so that
/// `INFO memory` and `maxmemory` account for the module) once the server has
/// handed the module its API, the system allocator otherwise — in unit tests,
/// doctests and any program that links the rlib without a server.
///
/// The switch happens once, in `RedisModule_Init`, before the module
/// allocates anything (the load entry point copies its name into a stack
/// buffer for that reason), so no block is ever freed by the other allocator.
pub struct ModuleAllocator;

impl ModuleAllocator {
    #[inline]
    fn server_present() -> bool {
        // SAFETY: a plain read of a pointer that is written once, at load.
        let alloc = unsafe { redis_module::raw::RedisModule_Alloc };
        alloc.is_some()
    }
}

// SAFETY: both branches are valid global allocators, and a block is always
// freed by the allocator that made it (see the type's documentation).
unsafe impl std::alloc::GlobalAlloc for ModuleAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if Self::server_present() {
            unsafe { redis_module::alloc::RedisAlloc.alloc(layout) }
        } else {
            unsafe { std::alloc::System.alloc(layout) }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        if Self::server_present() {
            unsafe { redis_module::alloc::RedisAlloc.dealloc(ptr, layout) }
        } else {
            unsafe { std::alloc::System.dealloc(ptr, layout) }
        }
    }
}

redis_module::redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (crate::ModuleAllocator, crate::ModuleAllocator),
    data_types: [],
    init: init_module,
}

/// Module arguments (`loadmodule <path> [propagate-always]`):
/// `propagate-always` hands every write's effects to the server even when
/// nothing consumes them (see `command::propagate`). Anything else refuses
/// the load, with a log line.
fn init_module(
    ctx: &redis_module::Context,
    args: &[redis_module::RedisString],
) -> redis_module::Status {
    let mut propagate_always = false;
    for arg in args {
        let arg = arg.to_string_lossy();
        if arg.eq_ignore_ascii_case("propagate-always") {
            propagate_always = true;
        } else {
            ctx.log_warning(&format!(
                "ratelimit: unknown module argument '{arg}' (known: propagate-always); not loading"
            ));
            return redis_module::Status::Err;
        }
    }
    command::register_all(ctx, propagate_always)
}
