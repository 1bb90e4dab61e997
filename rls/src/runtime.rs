//! The service's tokio runtime: the one `ratelimit-rls` runs on, and the one
//! `rls-bench` starts the service on (so that the benchmark measures the
//! runtime users get).

/// The name of the runtime's threads (`/proc/<pid>/task/*/comm`): the
/// benchmark counts the CPU time of these threads as the service's.
pub const THREAD_NAME: &str = "rls-service";

/// A multi-threaded runtime, one worker per core.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()
}
