//! The backend conformance suite against [`MemoryJournal`].

use notify_testkit::MemoryJournal;

notify_testkit::conformance_tests! {
    setup = MemoryJournal::new(),
    backend = |journal| &journal,
    max_record_bytes = MemoryJournal::DEFAULT_MAX_RECORD_BYTES,
}

mod small_cap {
    //! The same suite with a small size cap, so the boundary is exercised elsewhere
    //! than at the default.
    use notify_testkit::MemoryJournal;

    const CAP: usize = 4096;

    notify_testkit::conformance_tests! {
        setup = MemoryJournal::with_max_record_bytes(CAP),
        backend = |journal| &journal,
        max_record_bytes = CAP,
    }
}

mod shared_backend {
    //! Every check against one journal shared by all of them, as a server-backed
    //! backend's shared database would be: no check may assume an empty backend.
    use std::sync::OnceLock;

    use notify_testkit::MemoryJournal;

    fn shared() -> &'static MemoryJournal {
        static SHARED: OnceLock<MemoryJournal> = OnceLock::new();
        SHARED.get_or_init(MemoryJournal::new)
    }

    notify_testkit::conformance_tests! {
        setup = shared(),
        backend = |journal| journal,
        max_record_bytes = MemoryJournal::DEFAULT_MAX_RECORD_BYTES,
    }
}

mod integrity {
    //! Damage behind the journal's back is named.
    use notify_testkit::MemoryJournal;

    notify_testkit::conformance_integrity_tests! {
        setup = MemoryJournal::new(),
        backend = |journal| &journal,
    }
}

mod retention {
    //! Session end, purge and tombstones, each check on a journal of its own.
    use notify_testkit::MemoryJournal;

    notify_testkit::conformance_retention_tests! {
        setup = MemoryJournal::new(),
        backend = |journal| &journal,
    }
}

mod leases {
    //! The lease contract: one holder, and two handles on one store (two holders)
    //! with short leases, expiring in real time.
    use std::time::Duration;

    use notify_testkit::MemoryJournal;

    fn journal() -> MemoryJournal {
        MemoryJournal::new().with_lease_duration(Duration::from_millis(500))
    }

    notify_testkit::conformance_lease_tests! {
        setup = journal(),
        holder = |journal| &journal,
        holders = |journal| (&journal, &journal.another_holder()),
    }
}
