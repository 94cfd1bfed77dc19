//! Running file I/O on tokio's blocking pool, with the task's failure as a typed error.

use faucet_core::{BoxError, FaucetError};

/// Runs a source's `f` on the blocking pool. A panic in `f` (a bug, never a user's input)
/// becomes a [`FaucetError::Read`] for `connector` instead of tearing down the run loop.
pub(crate) async fn read<T: Send + 'static>(
    connector: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FaucetError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        FaucetError::read(
            connector,
            "the file I/O task failed",
            Some(Box::new(e) as BoxError),
        )
    })
}

/// As [`read`], for a sink: a failed task is a [`FaucetError::Write`].
pub(crate) async fn write<T: Send + 'static>(
    connector: &'static str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, FaucetError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        FaucetError::write(
            connector,
            "the file I/O task failed",
            Some(Box::new(e) as BoxError),
        )
    })
}
