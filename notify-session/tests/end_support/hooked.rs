//! A memory journal that runs a hook before it forwards each append: how the end tests
//! make another handle append first, or hold an append forever.

use std::future::Future;

use notify_journal::layer::{JournalLayer, JournalReadLayer};
use notify_journal::{AppendError, AppendOutcome, BoxFuture, JournalBackend};
use notify_testkit::MemoryJournal;
use notify_types::{JournalRecord, SessionId};

/// What a [`Hooked`] journal does before it forwards an append.
pub(crate) trait BeforeAppend: Send + Sync {
    /// What the append needs done.
    type Due: Send;

    /// Decides for an append of `records`, when the append is called (before its
    /// future first runs).
    fn due(&self, records: &[JournalRecord]) -> Self::Due;

    /// Does what is `due`, on `journal`, before the append of `records` is forwarded.
    fn run(
        &self,
        journal: &MemoryJournal,
        session: SessionId,
        records: &[JournalRecord],
        due: Self::Due,
    ) -> impl Future<Output = ()> + Send;
}

/// `journal` with `hook` run before each append; everything else is forwarded.
pub(crate) struct Hooked<H> {
    pub(crate) journal: MemoryJournal,
    pub(crate) hook: H,
}

impl<H: BeforeAppend> JournalReadLayer for Hooked<H> {
    type Inner = MemoryJournal;
    fn inner(&self) -> &MemoryJournal {
        &self.journal
    }
}

impl<H: BeforeAppend> JournalLayer for Hooked<H> {
    fn append(
        &self,
        session: SessionId,
        record: JournalRecord,
    ) -> BoxFuture<'_, Result<AppendOutcome, AppendError>> {
        let due = self.hook.due(std::slice::from_ref(&record));
        Box::pin(async move {
            let records = std::slice::from_ref(&record);
            self.hook.run(&self.journal, session, records, due).await;
            self.journal.append(session, record).await
        })
    }
    fn append_all(
        &self,
        session: SessionId,
        records: Vec<JournalRecord>,
        if_head: Option<u64>,
    ) -> BoxFuture<'_, Result<Vec<AppendOutcome>, AppendError>> {
        let due = self.hook.due(&records);
        Box::pin(async move {
            self.hook.run(&self.journal, session, &records, due).await;
            self.journal.append_all(session, records, if_head).await
        })
    }
}
