//! Shared test helpers: record builders, a runtime, and a fault-injecting in-memory
//! `redb::StorageBackend` that can hold a commit at its sync, fail a sync, and produce
//! crash images.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::io::{Error, ErrorKind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use notify_journal::{JournalOptions, RedbJournal, VerifyOnOpen};
use notify_types::{
    CommandId, JournalRecord, LoopId, NotificationConsumed, ProcessCompletionNotification,
    ProcessLifecycleState, ProcessNotification, ProcessTerminalReason, SessionEnded, SessionEvent,
    SessionId, Uuid,
};

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn session(n: u128) -> SessionId {
    SessionId::from_uuid(Uuid::from_u128(
        0x5e55_0000_0000_0000_0000_0000_0000_0000 | n,
    ))
}

pub fn loop_id() -> LoopId {
    LoopId::from_uuid(Uuid::from_u128(0x100b))
}

/// A completion command with a deterministic key `(session, i)`; `variant` changes the
/// payload (same key, different bytes).
pub fn command_with(session: SessionId, key: Uuid, variant: u32) -> JournalRecord {
    let n = ProcessCompletionNotification {
        command_id: CommandId::from_uuid(key),
        session_id: session,
        loop_id: loop_id(),
        process_handle: format!("proc-{variant}"),
        state: ProcessLifecycleState::Exited,
        reason: ProcessTerminalReason::Exited,
    };
    JournalRecord::from(ProcessNotification::new(n))
}

pub fn key_of(session: SessionId, i: u64) -> Uuid {
    let s = session.as_uuid().as_u128() & 0xffff_ffff;
    Uuid::from_u128((1 << 127) | (s << 64) | u128::from(i))
}

pub fn command(session: SessionId, i: u64) -> JournalRecord {
    command_with(session, key_of(session, i), 0)
}

pub fn consumed(session: SessionId, cause: CommandId) -> JournalRecord {
    JournalRecord::from(SessionEvent::NotificationConsumed(
        NotificationConsumed::new(session, loop_id(), cause),
    ))
}

/// The session's end marker.
pub fn ended(session: SessionId) -> JournalRecord {
    JournalRecord::from(SessionEvent::SessionEnded(SessionEnded::new(session)))
}

/// Opens with redb's page check at open and no background scrub: the tests that plant
/// damage before opening check each read's own answer, which a scrub finding the
/// damage first would turn into `AppendError::Damaged` (`tests/scrub.rs` tests that).
pub fn open(path: &Path) -> RedbJournal {
    RedbJournal::open(
        path,
        JournalOptions::default().verify_on_open(VerifyOnOpen::Pages),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// Fault-injecting backend

#[derive(Debug)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Disk {
    /// What a reader sees now (the page cache).
    volatile: Vec<u8>,
    /// What survives power loss for sure: the state at the last successful sync.
    durable: Vec<u8>,
    /// Operations since the last successful sync, in order.
    unsynced: Vec<Op>,
}

#[derive(Debug, Default)]
struct Gate {
    hold: bool,
    waiting: bool,
}

/// Shared control of a [`FaultBackend`].
#[derive(Debug)]
pub struct Control {
    disk: Mutex<Disk>,
    syncs: AtomicU64,
    /// The 1-based sync at which the device dies (that sync fails, as does every later
    /// operation). `u64::MAX`: never.
    crash_at: AtomicU64,
    crashed: AtomicBool,
    gate: Mutex<Gate>,
    gate_cv: Condvar,
}

impl Control {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            disk: Mutex::default(),
            syncs: AtomicU64::new(0),
            crash_at: AtomicU64::new(u64::MAX),
            crashed: AtomicBool::new(false),
            gate: Mutex::default(),
            gate_cv: Condvar::new(),
        })
    }

    /// A device whose disk starts as `image`, all of it durable.
    pub fn from_image(image: Vec<u8>) -> Arc<Self> {
        let control = Self::new();
        {
            let mut disk = control.disk.lock().unwrap();
            disk.volatile = image.clone();
            disk.durable = image;
        }
        control
    }

    pub fn backend(self: &Arc<Self>) -> FaultBackend {
        FaultBackend(Arc::clone(self))
    }

    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    pub fn crash_at_sync(&self, n: u64) {
        self.crash_at.store(n, Ordering::SeqCst);
    }

    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// From now on a sync blocks until [`release`](Self::release).
    pub fn hold(&self) {
        self.gate.lock().unwrap().hold = true;
    }

    /// Blocks until a sync is held at the gate.
    pub fn wait_held(&self) {
        let mut g = self.gate.lock().unwrap();
        while !g.waiting {
            g = self.gate_cv.wait(g).unwrap();
        }
    }

    pub fn release(&self) {
        let mut g = self.gate.lock().unwrap();
        g.hold = false;
        self.gate_cv.notify_all();
    }

    /// Only what was synced.
    pub fn durable_image(&self) -> Vec<u8> {
        self.disk.lock().unwrap().durable.clone()
    }

    /// Everything written, synced or not.
    pub fn volatile_image(&self) -> Vec<u8> {
        self.disk.lock().unwrap().volatile.clone()
    }

    /// The synced state plus a seeded random subset of the unsynced writes (length
    /// changes always apply): a torn, reordered write-back.
    pub fn torn_image(&self, seed: u64) -> Vec<u8> {
        let disk = self.disk.lock().unwrap();
        let mut img = disk.durable.clone();
        let mut rng = seed | 1;
        for op in &disk.unsynced {
            match op {
                Op::SetLen(len) => img.resize(*len as usize, 0),
                Op::Write(off, data) => {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    if rng & 1 == 0 {
                        let end = *off as usize + data.len();
                        if img.len() < end {
                            img.resize(end, 0);
                        }
                        img[*off as usize..end].copy_from_slice(data);
                    }
                }
            }
        }
        img
    }

    fn dead(&self) -> Result<(), Error> {
        if self.crashed() {
            Err(Error::other("injected: device is gone"))
        } else {
            Ok(())
        }
    }
}

/// A `redb::StorageBackend` over [`Control`]'s in-memory disk.
#[derive(Debug)]
pub struct FaultBackend(Arc<Control>);

impl redb::StorageBackend for FaultBackend {
    fn len(&self) -> Result<u64, Error> {
        Ok(self.0.disk.lock().unwrap().volatile.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        self.0.dead()?;
        let disk = self.0.disk.lock().unwrap();
        let start = offset as usize;
        let end = start + out.len();
        if end > disk.volatile.len() {
            return Err(Error::new(ErrorKind::UnexpectedEof, "read past end"));
        }
        out.copy_from_slice(&disk.volatile[start..end]);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), Error> {
        self.0.dead()?;
        let mut disk = self.0.disk.lock().unwrap();
        disk.volatile.resize(len as usize, 0);
        disk.unsynced.push(Op::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), Error> {
        self.0.dead()?;
        {
            let mut g = self.0.gate.lock().unwrap();
            if g.hold {
                g.waiting = true;
                self.0.gate_cv.notify_all();
                while g.hold {
                    g = self.0.gate_cv.wait(g).unwrap();
                }
                g.waiting = false;
            }
        }
        let n = self.0.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.0.crash_at.load(Ordering::SeqCst) {
            self.0.crashed.store(true, Ordering::SeqCst);
            return Err(Error::other("injected: sync failed"));
        }
        let mut disk = self.0.disk.lock().unwrap();
        disk.durable = disk.volatile.clone();
        disk.unsynced.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.0.dead()?;
        let mut disk = self.0.disk.lock().unwrap();
        let start = offset as usize;
        let end = start + data.len();
        if disk.volatile.len() < end {
            disk.volatile.resize(end, 0);
        }
        disk.volatile[start..end].copy_from_slice(data);
        disk.unsynced.push(Op::Write(offset, data.to_vec()));
        Ok(())
    }
}
