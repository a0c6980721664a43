//! [`HostBuilder`]: a host's settings, and starting it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_journal::JournalLeases;
use tokio::sync::{Semaphore, watch};

use super::adopt;
use super::app::{HostApp, NoApp};
use super::error::HostError;
use super::handle::SessionHost;
use super::inner::{Inner, PARALLEL_STOPS, Task};
use super::keeper;
use super::options::{HostOptions, RetentionSchedule};
use super::retention;
use super::table::LeaseTable;

/// The default capacity: sessions one host serves at most.
pub const DEFAULT_CAPACITY: usize = 10_000;

impl<J: JournalLeases + 'static> SessionHost<J> {
    /// A builder for a host on `journal` (a `PgJournal` shared by many hosts, or a
    /// `RedbJournal`, whose file lock makes this process the only host).
    ///
    /// One journal handle serves one host: the handle's
    /// [`holder_id`](JournalLeases::holder_id) is the host's identity as a lease
    /// holder, so two hosts started on the same handle (or on clones of it sharing
    /// its holder ID) would each renew and release the other's leases. Give every
    /// host its own handle (on PostgreSQL, its own `PgJournal`); start a new host on a
    /// handle only after the previous one has shut down.
    pub fn builder(journal: Arc<J>) -> HostBuilder<J> {
        HostBuilder {
            journal,
            capacity: DEFAULT_CAPACITY,
            renew_every: None,
            margin: None,
            adopt_every: None,
            adopt: true,
            retention: None,
            shutdown_grace: None,
            app: Arc::new(NoApp),
        }
    }
}

/// A host's settings; [`start`](Self::start) starts it. Built by
/// [`SessionHost::builder`].
#[must_use = "a builder does nothing until started"]
pub struct HostBuilder<J: JournalLeases + 'static> {
    journal: Arc<J>,
    capacity: usize,
    renew_every: Option<Duration>,
    margin: Option<Duration>,
    adopt_every: Option<Duration>,
    adopt: bool,
    retention: Option<RetentionSchedule>,
    shutdown_grace: Option<Duration>,
    app: Arc<dyn HostApp>,
}

impl<J: JournalLeases + 'static> std::fmt::Debug for HostBuilder<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuilder")
            .field("capacity", &self.capacity)
            .field("renew_every", &self.renew_every)
            .field("margin", &self.margin)
            .field("adopt_every", &self.adopt_every)
            .field("adopt", &self.adopt)
            .field("retention", &self.retention)
            .field("shutdown_grace", &self.shutdown_grace)
            .finish_non_exhaustive()
    }
}

impl<J: JournalLeases + 'static> HostBuilder<J> {
    /// The most sessions this host serves at once (opened and adopted); default
    /// [`DEFAULT_CAPACITY`].
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// How often all leases are renewed (one statement each time); default a third
    /// of the journal's lease duration.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How long before a lease would run out (counted from the start of its last
    /// successful renewal) the host stops serving a session whose renewals keep
    /// failing; default a tenth of the lease duration. It covers clock drift between
    /// this process and the engine.
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// How often the host looks for orphaned sessions to adopt (besides the engine's
    /// announcements, which never push a poll back); default the lease duration.
    pub fn adopt_every(mut self, every: Duration) -> Self {
        self.adopt_every = Some(every);
        self
    }

    /// Whether the host adopts orphaned sessions at all (default `true`); a host that
    /// does not only serves what it [opens](SessionHost::open).
    pub fn adopt(mut self, adopt: bool) -> Self {
        self.adopt = adopt;
        self
    }

    /// How long [`shutdown`](SessionHost::shutdown), counted from its call, lets the
    /// host's work finish the step it is in (an adoption waiting for the application's
    /// [`started`](crate::HostApp::started), a stop waiting out appends or its
    /// release) before it cuts it short; default the lease duration.
    /// `Duration::MAX` (or any grace past what an instant can hold) waits as long as
    /// it takes.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = Some(grace);
        self
    }

    /// Runs retention in the background on this schedule (default: none).
    pub fn retention(mut self, schedule: RetentionSchedule) -> Self {
        self.retention = Some(schedule);
        self
    }

    /// The application that registers and seeds each session's loops (default: none,
    /// the host only keeps leases).
    pub fn app(mut self, app: impl HostApp) -> Self {
        self.app = Arc::new(app);
        self
    }

    /// Starts the host: starts renewing, adopts the orphans it finds now (up to its
    /// capacity; on redb, every live session in the file: their leases are renewed
    /// while the application starts them, however long that takes), then adopts and
    /// retires in the background.
    ///
    /// # Errors
    ///
    /// [`HostError::Options`] if twice the renewal interval is not shorter than the
    /// lease duration less the safety margin (room for two renewals before a deadline), or the capacity or an interval is zero.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (it spawns its tasks).
    ///
    /// # Cancel safety
    ///
    /// If dropped during the first adoption, the host is dropped (its keeper ends at
    /// its next step): sessions it adopted are stopped by no one and their leases
    /// expire.
    pub async fn start(self) -> Result<SessionHost<J>, HostError> {
        let lease_duration = self.journal.lease_duration();
        let renew_every = self.renew_every.unwrap_or(lease_duration / 3);
        let margin = self.margin.unwrap_or(lease_duration / 10);
        let adopt_every = self.adopt_every.unwrap_or(lease_duration);
        if self.capacity == 0 {
            return Err(HostError::Options {
                reason: "capacity must be at least 1",
            });
        }
        if renew_every.is_zero() || adopt_every.is_zero() {
            return Err(HostError::Options {
                reason: "intervals must not be zero",
            });
        }
        // Room for at least two renewals before a lease's deadline: one slow or
        // failed round must not cost the lease.
        if renew_every.saturating_mul(2) >= lease_duration.saturating_sub(margin) {
            return Err(HostError::Options {
                reason: "renew_every must be shorter than half the lease duration less the safety margin",
            });
        }
        if let Some(r) = &self.retention
            && (r.every.is_zero() || !(r.max_share > 0.0 && r.max_share <= 1.0))
        {
            return Err(HostError::Options {
                reason: "retention needs a non-zero interval and a max_share in (0, 1]",
            });
        }
        let table = Arc::new(LeaseTable::default());
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            journal: self.journal,
            table,
            app: self.app,
            options: HostOptions {
                capacity: self.capacity,
                lease_duration,
                renew_every,
                margin,
                adopt_every,
                adopt: self.adopt,
                retention: self.retention,
                readopt_after: lease_duration,
                shutdown_grace: self.shutdown_grace.unwrap_or(lease_duration),
            },
            shutdown,
            tasks: Mutex::new(Vec::new()),
            shutdown_done: tokio::sync::Mutex::new(false),
            opens: Mutex::new(Vec::new()),
            stops: Mutex::new(Vec::new()),
            stop_permits: Semaphore::new(PARALLEL_STOPS),
        });
        let weak = Arc::downgrade(&inner);
        let cooperative = |handle| Task {
            handle,
            abort_at_once: false,
        };
        // The keeper first: the leases the first adoption takes are renewed while it
        // goes on, however long the application's starts take.
        let mut tasks = vec![cooperative(tokio::spawn(keeper::run(
            weak.clone(),
            inner.shutdown.subscribe(),
        )))];
        *inner.tasks.lock().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut tasks);
        let changes = if inner.options.adopt {
            let changes = inner.journal.lease_changes();
            adopt::adopt_once(&inner).await;
            changes
        } else {
            None
        };
        if inner.options.adopt {
            tasks.push(cooperative(tokio::spawn(adopt::run(
                weak.clone(),
                changes,
                inner.shutdown.subscribe(),
            ))));
        }
        if let Some(schedule) = inner.options.retention {
            tasks.push(Task {
                handle: tokio::spawn(retention::run(weak, schedule, inner.shutdown.subscribe())),
                abort_at_once: true,
            });
        }
        inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(tasks);
        Ok(SessionHost { inner })
    }
}
