//! [`TaskPages`]: the [`PageStream`] of a read that runs in its own task and hands its pages
//! over a channel (the `mysql` query reader, the `mysql-cdc` binlog reader), so the next
//! page is read while the run loop writes the last one.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use faucet_core::{FaucetError, Page, PageStream};

/// Pages (or the error that ended the read) from `task`, in the order it sent them. After
/// an error or the end of the channel it yields `None`. Dropping it aborts the task, which
/// drops its connection: the server stops sending.
pub(crate) struct TaskPages {
    pages: mpsc::Receiver<Result<Page, FaucetError>>,
    task: JoinHandle<()>,
    ended: bool,
}

impl TaskPages {
    /// The pages `task` sends on the channel `pages` receives from.
    pub(crate) fn new(
        pages: mpsc::Receiver<Result<Page, FaucetError>>,
        task: JoinHandle<()>,
    ) -> Self {
        Self {
            pages,
            task,
            ended: false,
        }
    }
}

impl Drop for TaskPages {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[async_trait]
impl PageStream for TaskPages {
    async fn next_page(&mut self) -> Result<Option<Page>, FaucetError> {
        if self.ended {
            return Ok(None);
        }
        match self.pages.recv().await {
            Some(Ok(page)) => Ok(Some(page)),
            Some(Err(e)) => {
                self.ended = true;
                Err(e)
            }
            None => {
                self.ended = true;
                Ok(None)
            }
        }
    }
}
