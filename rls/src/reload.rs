//! Hot reload: the configuration's directory (or the file's) is watched
//! (`notify`: inotify on Linux), events debounced; where the system cannot
//! watch it, it is polled at the reload interval. On each change the files
//! are read again and, when they differ, the new configuration replaces the
//! old one whole. A file that does not load keeps the old configuration,
//! and the error is logged (once per bad version) and counted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{PollWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, new_debouncer_opt, DebounceEventResult, Debouncer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{read_files, Config};
use crate::service::Shared;

/// How long events settle before the files are read.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// A watcher kept alive while it is needed.
enum Watching {
    Notify(#[allow(dead_code)] Debouncer<notify::RecommendedWatcher>),
    Poll(#[allow(dead_code)] Debouncer<PollWatcher>),
}

/// Watches `path` (spawned; ends when the task is aborted). `last`: the
/// files as loaded.
pub fn spawn(
    path: PathBuf,
    poll_interval: Duration,
    shared: Arc<Shared>,
    last: Vec<(String, String)>,
) -> JoinHandle<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let watching = watch(&path, poll_interval, tx);
    tokio::spawn(async move {
        let _watching = watching;
        let mut last = last;
        while rx.recv().await.is_some() {
            // Events that came while the files were read count as one.
            while rx.try_recv().is_ok() {}
            reload(&path, &shared, &mut last);
        }
    })
}

/// The directory to watch: the configuration's, or a file's parent (editors
/// and Kubernetes replace files by renaming, which a watch on the file misses).
fn target(path: &Path) -> PathBuf {
    if path.is_dir() {
        return path.to_path_buf();
    }
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn watch(path: &Path, poll_interval: Duration, tx: mpsc::UnboundedSender<()>) -> Option<Watching> {
    let dir = target(path);
    match new_debouncer(DEBOUNCE, handler(tx.clone())).and_then(|mut d| {
        d.watcher().watch(&dir, RecursiveMode::NonRecursive)?;
        Ok(d)
    }) {
        Ok(d) => return Some(Watching::Notify(d)),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), ?poll_interval, "cannot watch the configuration; polling it")
        }
    }
    poll(&dir, poll_interval, tx)
}

/// Sends `()` on each debounced change.
fn handler(tx: mpsc::UnboundedSender<()>) -> impl FnMut(DebounceEventResult) + Send + 'static {
    move |result: DebounceEventResult| {
        if result.is_ok() {
            let _ = tx.send(());
        }
    }
}

/// The fallback: `dir` read again every `poll_interval`.
fn poll(dir: &Path, poll_interval: Duration, tx: mpsc::UnboundedSender<()>) -> Option<Watching> {
    let config = notify_debouncer_mini::Config::default()
        .with_timeout(DEBOUNCE)
        .with_notify_config(
            notify::Config::default()
                .with_poll_interval(poll_interval)
                .with_compare_contents(true),
        );
    match new_debouncer_opt::<_, PollWatcher>(config, handler(tx)).and_then(|mut d| {
        d.watcher().watch(dir, RecursiveMode::NonRecursive)?;
        Ok(d)
    }) {
        Ok(d) => Some(Watching::Poll(d)),
        Err(e) => {
            tracing::error!(error = %e, dir = %dir.display(), "cannot poll the configuration; no hot reload");
            None
        }
    }
}

/// Reads the files again; loads them when they changed.
fn reload(path: &Path, shared: &Shared, last: &mut Vec<(String, String)>) {
    let files = match read_files(path) {
        Ok(files) => files,
        Err(e) => {
            if !last.is_empty() {
                tracing::error!(error = %e, "config reload failed; keeping the current configuration");
                shared.metrics.config_load_error.increment(1);
                last.clear();
            }
            return;
        }
    };
    if files == *last {
        return;
    }
    match Config::from_yaml(&files) {
        Ok(config) => {
            let rules = config.rules().len();
            *shared.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
            shared.metrics.config_load_success.increment(1);
            tracing::info!(path = %path.display(), rules, "configuration reloaded");
        }
        Err(e) => {
            shared.metrics.config_load_error.increment(1);
            tracing::error!(error = %e, "config reload failed; keeping the current configuration");
        }
    }
    *last = files;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where inotify is unavailable, the poll sees a change.
    #[tokio::test]
    async fn the_poll_fallback_sees_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.yaml");
        std::fs::write(&file, "a").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watching = poll(dir.path(), Duration::from_millis(20), tx).expect("polling");
        tokio::time::sleep(Duration::from_millis(100)).await;
        while rx.try_recv().is_ok() {}
        std::fs::write(&file, "bb").unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(matches!(event, Ok(Some(()))), "{event:?}");
    }
}
