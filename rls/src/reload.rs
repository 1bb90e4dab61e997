//! Hot reload: the configuration files are read again every interval; when
//! they changed, the new configuration replaces the old one whole. A file
//! that does not load keeps the old configuration, and the error is logged
//! (once per bad version) and counted.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{read_files, Config};
use crate::service::Shared;

/// Watches `path` forever (spawn it).
pub async fn watch(
    path: PathBuf,
    interval: Duration,
    shared: Arc<Shared>,
    mut last: Vec<(String, String)>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let files = match read_files(&path) {
            Ok(files) => files,
            Err(e) => {
                if !last.is_empty() {
                    tracing::error!(error = %e, "config reload failed; keeping the current configuration");
                    shared
                        .metrics
                        .config_load_error
                        .fetch_add(1, Ordering::Relaxed);
                    last = Vec::new();
                }
                continue;
            }
        };
        if files == last {
            continue;
        }
        match Config::from_yaml(&files) {
            Ok(config) => {
                let rules = config.rules().len();
                *shared.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                shared
                    .metrics
                    .config_load_success
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(path = %path.display(), rules, "configuration reloaded");
            }
            Err(e) => {
                shared
                    .metrics
                    .config_load_error
                    .fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "config reload failed; keeping the current configuration");
            }
        }
        last = files;
    }
}
