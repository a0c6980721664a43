//! Lease changes as they happen: a `LISTEN` connection on the schema's lease
//! channel (`sql::lease_channel`), opened on the first
//! [`lease_changes`](crate::JournalLeases::lease_changes) and reopened whenever it
//! drops. Releases and lost leases are announced (`pg_notify`) by the statements
//! that find them, delivered when they commit; what is announced while the
//! listener is reconnecting is missed, which adopters make up for by polling
//! [`orphaned_sessions`](crate::JournalLeases::orphaned_sessions).

use std::sync::Arc;
use std::time::Duration;

use notify_types::{SessionId, Uuid};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::Notification;

use crate::postgres::connect::{Connector, Notifications};
use crate::postgres::error::sanitize;
use crate::postgres::{PgJournal, lock};

/// Announcements a slow receiver may fall behind by before it misses some.
const CAPACITY: usize = 4096;

/// How long the listener waits before connecting again after its connection
/// dropped or could not be opened.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The listening task and the broadcast it feeds; the task stops when this is
/// dropped.
pub(in crate::postgres) struct Listener {
    tx: broadcast::Sender<SessionId>,
    task: JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    /// Starts listening on `channel`; `None` outside a tokio runtime.
    fn start(connector: Arc<Connector>, channel: String, op_timeout: Duration) -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, _) = broadcast::channel(CAPACITY);
        let task = runtime.spawn(listen(connector, channel, op_timeout, tx.clone()));
        Some(Self { tx, task })
    }

    /// A new receiver of the sessions announced from now on.
    fn subscribe(&self) -> broadcast::Receiver<SessionId> {
        self.tx.subscribe()
    }
}

impl PgJournal {
    /// Sessions whose lease any holder released or lost, as announced on the
    /// schema's lease channel; the first call opens the `LISTEN` connection
    /// (reopened whenever it drops). `None` outside a tokio runtime or once closed.
    #[must_use]
    pub fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let mut listener = lock(&self.listener);
        if listener.is_none() {
            *listener = Listener::start(
                std::sync::Arc::clone(&self.connector),
                self.sql.lease_channel.clone(),
                self.op_timeout,
            );
        }
        listener.as_ref().map(Listener::subscribe)
    }
}

/// Connects, listens until the connection ends, and starts again, forever (the
/// task is aborted when the journal closes or is dropped).
async fn listen(
    connector: Arc<Connector>,
    channel: String,
    op_timeout: Duration,
    tx: broadcast::Sender<SessionId>,
) {
    // `channel` is `[a-z0-9_.]` only (see `sql::lease_channel`): safe to quote.
    let command = format!("LISTEN \"{channel}\"");
    loop {
        let (ended, gone) = oneshot::channel();
        let (to, on) = (tx.clone(), channel.clone());
        let sink = Box::new(move |n: Notification| {
            if n.channel() != on {
                return;
            }
            // A payload that is not a session ID was not sent by a journal.
            if let Ok(uuid) = Uuid::parse_str(n.payload()) {
                // No receiver at the moment is fine: nobody is listening.
                let _ = to.send(SessionId::from_uuid(uuid));
            }
        });
        match connector
            .connect_with(Some(Notifications { sink, ended }))
            .await
        {
            Ok(client) => {
                match tokio::time::timeout(op_timeout, client.batch_execute(&command)).await {
                    Ok(Ok(())) => {
                        // Listening: until the connection ends (the driver drops
                        // `ended`). The client must stay alive meanwhile.
                        let _ = gone.await;
                        drop(client);
                        tracing::debug!("lease listener connection ended; reconnecting");
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(error = %sanitize("listen", &e), "lease listener failed");
                    }
                    Err(_) => tracing::debug!("lease listener timed out starting to listen"),
                }
            }
            Err(e) => {
                tracing::debug!(error = %e.into_storage(), "lease listener could not connect");
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}
