//! Support for the host runtime's tests: a wrapper counting and failing renewals, an
//! application that registers one seeded loop per session, notifications, starting a
//! host, waiting for what the application saw, and a session ended under a host.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub(crate) mod pg;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{
    BoxFuture, JournalLeases, Lease, LeaseError, LeaseInfo, Renewal, StorageError,
};
use notify_loop::LoopConfig;
use notify_session::{
    AppError, HostApp, HostBuilder, IfPending, RestoreReport, Session, SessionConsumer,
    SessionHost, SessionReceived, StopReason,
};
use notify_types::{
    CommandId, LoopId, Notified, ProcessCompletionNotification, ProcessLifecycleState,
    ProcessTerminalReason, SessionId, Uuid,
};
use tokio::sync::{broadcast, mpsc};

/// A generous bound on every wait for an event (never a timing assertion).
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A journal with leases whose renewals are counted, and fail while `failing` is set.
pub(crate) struct Counting<J> {
    pub(crate) inner: Arc<J>,
    pub(crate) renewals: AtomicUsize,
    pub(crate) failing: AtomicBool,
    /// The next renewal hangs (far past any interval) once, then this is cleared.
    pub(crate) hang_once: AtomicBool,
    /// Every release yields to the scheduler once before it runs.
    pub(crate) yield_releases: AtomicBool,
    /// Every release hangs (far past any grace).
    pub(crate) hang_releases: AtomicBool,
    /// Every release first sleeps this many milliseconds (a round trip).
    pub(crate) release_delay_ms: AtomicU64,
    /// Releases tried.
    pub(crate) releases: AtomicUsize,
    /// Renewals succeed but report nothing (neither renewed nor lost: the rows "not
    /// judged", as a renewal skipping locked rows does).
    pub(crate) hide_renewals: AtomicBool,
    /// Orphan listings asked for.
    pub(crate) listings: AtomicUsize,
}

impl<J> Counting<J> {
    pub(crate) fn new(inner: Arc<J>) -> Self {
        Self {
            inner,
            renewals: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            hang_once: AtomicBool::new(false),
            yield_releases: AtomicBool::new(false),
            hang_releases: AtomicBool::new(false),
            release_delay_ms: AtomicU64::new(0),
            releases: AtomicUsize::new(0),
            hide_renewals: AtomicBool::new(false),
            listings: AtomicUsize::new(0),
        }
    }
}

impl<J: JournalLeases> JournalReadLayer for Counting<J> {
    type Inner = J;
    fn inner(&self) -> &J {
        &self.inner
    }
}

impl<J: JournalLeases> JournalLayer for Counting<J> {}

impl<J: JournalLeases> JournalLeases for Counting<J> {
    fn holder_id(&self) -> Uuid {
        self.inner.holder_id()
    }
    fn lease_duration(&self) -> Duration {
        self.inner.lease_duration()
    }
    fn acquire_lease(&self, session: SessionId) -> BoxFuture<'_, Result<Lease, LeaseError>> {
        self.inner.acquire_lease(session)
    }
    fn renew_leases(&self) -> BoxFuture<'_, Result<Renewal, LeaseError>> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Box::pin(async {
                Err(LeaseError::Storage(StorageError::msg(
                    "renewal refused by the test",
                )))
            });
        }
        if self.hang_once.swap(false, Ordering::SeqCst) {
            return Box::pin(async {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                Err(LeaseError::Storage(StorageError::msg(
                    "renewal hung by the test",
                )))
            });
        }
        if self.hide_renewals.load(Ordering::SeqCst) {
            return Box::pin(async {
                self.inner.renew_leases().await?;
                Ok(Renewal::default())
            });
        }
        self.inner.renew_leases()
    }
    fn release_lease(&self, session: SessionId) -> BoxFuture<'_, Result<(), LeaseError>> {
        let hang = self.hang_releases.load(Ordering::SeqCst);
        let yields = self.yield_releases.load(Ordering::SeqCst);
        let delay = Duration::from_millis(self.release_delay_ms.load(Ordering::SeqCst));
        self.releases.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if hang {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
            }
            if yields {
                tokio::task::yield_now().await;
            }
            self.inner.release_lease(session).await
        })
    }
    fn lease_info(&self, session: SessionId) -> BoxFuture<'_, Result<LeaseInfo, LeaseError>> {
        self.inner.lease_info(session)
    }
    fn orphaned_sessions(&self, limit: usize) -> BoxFuture<'_, Result<Vec<SessionId>, LeaseError>> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        self.inner.orphaned_sessions(limit)
    }
    fn lease_changes(&self) -> Option<broadcast::Receiver<SessionId>> {
        self.inner.lease_changes()
    }
}

/// What the test application saw: each session started (with its consumer and how
/// many notifications were seeded) and each stop.
pub(crate) enum Seen {
    Started {
        session: SessionId,
        seeded: usize,
        consumer: SessionConsumer,
    },
    Stopped {
        session: SessionId,
        why: StopReason,
    },
}

/// An application that registers loop `LOOP` in every session, seeded from the
/// report, and reports what it saw on a channel.
pub(crate) struct OneLoop {
    pub(crate) loop_id: LoopId,
    pub(crate) seen: mpsc::UnboundedSender<Seen>,
}

impl OneLoop {
    pub(crate) fn new(loop_id: LoopId) -> (Self, mpsc::UnboundedReceiver<Seen>) {
        let (seen, rx) = mpsc::unbounded_channel();
        (Self { loop_id, seen }, rx)
    }
}

impl HostApp for OneLoop {
    fn started<'a>(
        &'a self,
        session: &'a Session,
        report: RestoreReport,
    ) -> BoxFuture<'a, Result<(), AppError>> {
        Box::pin(async move {
            let pending = report
                .pending
                .get(&self.loop_id)
                .cloned()
                .unwrap_or_default();
            let seeded = pending.len();
            let consumer =
                session.register_loop(LoopConfig::new(session.id(), self.loop_id).seed(pending))?;
            let _ = self.seen.send(Seen::Started {
                session: session.id(),
                seeded,
                consumer,
            });
            Ok(())
        })
    }

    fn stopped(&self, session: SessionId, why: StopReason) {
        let _ = self.seen.send(Seen::Stopped { session, why });
    }
}

/// The next thing the application saw, within [`WAIT`].
pub(crate) async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("the application saw nothing within the bound")
        .expect("the host dropped the application")
}

/// The next thing the application saw, which must be a start: the session, how many
/// notifications were seeded, and its consumer.
pub(crate) async fn started(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
) -> (SessionId, usize, SessionConsumer) {
    match next_seen(rx).await {
        Seen::Started {
            session,
            seeded,
            consumer,
        } => (session, seeded, consumer),
        Seen::Stopped { session, why } => panic!("expected a start, saw {session} stop: {why}"),
    }
}

/// Waits for the application to see `id` stopped (passing over whatever else it saw
/// first), answering why.
pub(crate) async fn stop_of(rx: &mut mpsc::UnboundedReceiver<Seen>, id: SessionId) -> StopReason {
    loop {
        if let Seen::Stopped { session, why } = next_seen(rx).await
            && session == id
        {
            return why;
        }
    }
}

/// Starts a host on `journal`, once `configure` has set its options (application,
/// intervals, grace, adoption).
pub(crate) async fn start_host<J>(
    journal: Arc<J>,
    configure: impl FnOnce(HostBuilder<J>) -> HostBuilder<J>,
) -> SessionHost<J>
where
    J: JournalLeases + 'static,
{
    configure(SessionHost::builder(journal))
        .start()
        .await
        .unwrap()
}

/// [`start_host`] for a host that adopts nothing (it serves only what it opens).
pub(crate) async fn opening_host<J>(
    journal: Arc<J>,
    configure: impl FnOnce(HostBuilder<J>) -> HostBuilder<J>,
) -> SessionHost<J>
where
    J: JournalLeases + 'static,
{
    start_host(journal, |h| configure(h.adopt(false))).await
}

/// [`start_host`] for a host that looks for orphans to adopt every `every` (besides
/// the engine's announcements).
pub(crate) async fn adopting_host<J>(
    journal: Arc<J>,
    every: Duration,
    configure: impl FnOnce(HostBuilder<J>) -> HostBuilder<J>,
) -> SessionHost<J>
where
    J: JournalLeases + 'static,
{
    start_host(journal, |h| configure(h.adopt_every(every))).await
}

/// One session a host opened and serves, on one loop: see [`one_session`].
pub(crate) struct OneSession<J: JournalLeases + 'static> {
    pub(crate) host: SessionHost<J>,
    pub(crate) id: SessionId,
    /// The loop [`OneLoop`] registered for the session.
    pub(crate) loop_id: LoopId,
    pub(crate) session: Session,
    /// The loop's consumer.
    pub(crate) consumer: SessionConsumer,
    /// What the application saw after the start.
    pub(crate) seen: mpsc::UnboundedReceiver<Seen>,
}

/// A host on `journal` (adopting nothing, application [`OneLoop`], then `configure`)
/// that opened a session and started it, and `notified` completion notifications
/// delivered to its loop (each asserted `Accepted`), none received yet.
pub(crate) async fn one_session<J>(
    journal: Arc<J>,
    configure: impl FnOnce(HostBuilder<J>) -> HostBuilder<J>,
    notified: usize,
) -> OneSession<J>
where
    J: JournalLeases + 'static,
{
    let loop_id = LoopId::new();
    let (app, mut seen) = OneLoop::new(loop_id);
    let host = opening_host(journal, |h| configure(h.app(app))).await;
    let id = SessionId::new();
    let session = host.open(id).await.unwrap();
    let (_, _, consumer) = started(&mut seen).await;
    for _ in 0..notified {
        let outcome = session
            .notify_process_completion(notification(id, loop_id))
            .await
            .unwrap();
        assert_eq!(outcome, Notified::Accepted);
    }
    OneSession {
        host,
        id,
        loop_id,
        session,
        consumer,
        seen,
    }
}

/// A session ended under a host, with a notification received before the end and not
/// acknowledged: see [`ended_with_one_received`].
pub(crate) struct EndedUnderHost<J: JournalLeases + 'static> {
    pub(crate) host: SessionHost<J>,
    pub(crate) id: SessionId,
    /// The session's handle from the open, kept alive as an application would.
    pub(crate) session: Session,
    /// The loop's consumer, kept alive as an application would.
    pub(crate) consumer: SessionConsumer,
    pub(crate) received: SessionReceived,
}

/// A host on `journal` (renewing every 50 ms, application [`OneLoop`]) that opened a
/// session, notified it once, received that notification and ended the session
/// (abandoning what was pending); returns once the keeper stopped the ended session
/// (`StopReason::Ended`, asserted).
pub(crate) async fn ended_with_one_received<J>(journal: Arc<J>) -> EndedUnderHost<J>
where
    J: JournalLeases + 'static,
{
    let OneSession {
        host,
        id,
        session,
        mut consumer,
        mut seen,
        ..
    } = one_session(journal, |h| h.renew_every(Duration::from_millis(50)), 1).await;
    let received = consumer.recv().await.unwrap();
    session.end(IfPending::Abandon).await.unwrap();
    assert_eq!(stop_of(&mut seen, id).await, StopReason::Ended);
    EndedUnderHost {
        host,
        id,
        session,
        consumer,
        received,
    }
}

/// A valid completion notification for `loop_id` in `session`.
pub(crate) fn notification(session: SessionId, loop_id: LoopId) -> ProcessCompletionNotification {
    ProcessCompletionNotification {
        command_id: CommandId::new(),
        session_id: session,
        loop_id,
        process_handle: "build-42".into(),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    }
}

/// The session `id` once `host` serves it: its `HostApp::started` has returned (the
/// application hears of the start from inside `started`, a moment before). Waits
/// within [`WAIT`].
pub(crate) async fn served<J>(host: &SessionHost<J>, id: SessionId) -> Session
where
    J: JournalLeases + 'static,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(session) = host.session(id) {
            return session;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the host never served {id}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
