//! SIGINT / SIGTERM: the first one cancels the run gracefully (the run loop finishes the
//! page in hand, flushes, persists the bookmark and returns its summary); a second one exits
//! at once with code 130.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::INTERRUPTED;

/// Cancels `cancel` on the first SIGINT or SIGTERM; exits the process on the second.
///
/// # Errors
/// When the signal handlers cannot be installed.
pub(crate) fn install(cancel: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let mut count = 0u32;
        loop {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            count += 1;
            if count == 1 {
                tracing::warn!(
                    signal = name,
                    "stopping after the page in hand; send it again to exit at once"
                );
                cancel.cancel();
            } else {
                eprintln!(
                    "error: {name} again: exiting at once; the page in hand was not persisted and will be read again"
                );
                std::process::exit(INTERRUPTED);
            }
        }
    });
    Ok(())
}
