//! Crash images through a fault-injecting `redb::StorageBackend`.
//!
//! [`Control`] owns an in-memory disk that keeps what a reader sees (everything
//! written), what is durable (the state at the last successful sync) and the writes in
//! between. It can freeze durability at sync N (that sync fails and the device is gone
//! from then on), hold a commit at its sync, and hand out crash images: only what was
//! synced, everything written, or a torn, seeded subset of the unsynced writes.
//!
//! [`dry_run`] counts the syncs a workload makes; [`sweep`] then crashes the workload at
//! sync 1, 2, 3, ... until a run ends before its crash point, writes each run's three
//! images to files and hands them to the test's verification.

use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use notify_journal::{OpenError, RedbJournal, RedbOptions, RedbVerifyOnOpen};

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

/// Shared control of a [`FaultBackend`]: its disk, its sync count and its faults.
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

/// A poisoned lock only means another test thread panicked; the disk is still whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One step of the xorshift generator the harnesses share (never returns 0 for a
/// non-zero state).
pub fn xorshift(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

impl Control {
    /// A device with an empty disk that never crashes.
    #[must_use]
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
    #[must_use]
    pub fn from_image(image: Vec<u8>) -> Arc<Self> {
        let control = Self::new();
        {
            let mut disk = lock(&control.disk);
            disk.volatile = image.clone();
            disk.durable = image;
        }
        control
    }

    /// A storage backend over this device, for `RedbJournal::open_with_backend`.
    #[must_use]
    pub fn backend(self: &Arc<Self>) -> FaultBackend {
        FaultBackend(Arc::clone(self))
    }

    /// How many syncs were asked for so far (the failing one included).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// The device dies at the `n`-th sync (1-based): that sync fails, as does every
    /// later operation.
    pub fn crash_at_sync(&self, n: u64) {
        self.crash_at.store(n, Ordering::SeqCst);
    }

    /// Whether the device has died.
    pub fn crashed(&self) -> bool {
        self.crashed.load(Ordering::SeqCst)
    }

    /// From now on a sync blocks until [`release`](Self::release).
    pub fn hold(&self) {
        lock(&self.gate).hold = true;
    }

    /// Blocks until a sync is held at the gate.
    pub fn wait_held(&self) {
        let mut g = lock(&self.gate);
        while !g.waiting {
            g = self.gate_cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Lets held syncs (and later ones) through.
    pub fn release(&self) {
        let mut g = lock(&self.gate);
        g.hold = false;
        self.gate_cv.notify_all();
    }

    /// Only what was synced.
    pub fn durable_image(&self) -> Vec<u8> {
        lock(&self.disk).durable.clone()
    }

    /// Everything written, synced or not.
    pub fn volatile_image(&self) -> Vec<u8> {
        lock(&self.disk).volatile.clone()
    }

    /// The synced state plus a seeded random subset of the unsynced writes (length
    /// changes always apply): a torn, reordered write-back.
    pub fn torn_image(&self, seed: u64) -> Vec<u8> {
        let disk = lock(&self.disk);
        let mut img = disk.durable.clone();
        let mut rng = seed | 1;
        for op in &disk.unsynced {
            match op {
                Op::SetLen(len) => img.resize(*len as usize, 0),
                Op::Write(off, data) => {
                    if xorshift(&mut rng) & 1 == 0 {
                        write_at(&mut img, *off, data);
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

/// Writes `data` at `offset`, growing `img` with zeros as needed.
fn write_at(img: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    if let Some(dst) = img.get_mut(start..end) {
        dst.copy_from_slice(data);
    }
}

/// A `redb::StorageBackend` over [`Control`]'s in-memory disk.
#[derive(Debug)]
pub struct FaultBackend(Arc<Control>);

impl redb::StorageBackend for FaultBackend {
    fn len(&self) -> Result<u64, Error> {
        Ok(lock(&self.0.disk).volatile.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        self.0.dead()?;
        let disk = lock(&self.0.disk);
        let start = offset as usize;
        let src = disk
            .volatile
            .get(start..start + out.len())
            .ok_or_else(|| Error::new(ErrorKind::UnexpectedEof, "read past end"))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), Error> {
        self.0.dead()?;
        let mut disk = lock(&self.0.disk);
        disk.volatile.resize(len as usize, 0);
        disk.unsynced.push(Op::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), Error> {
        self.0.dead()?;
        {
            let mut g = lock(&self.0.gate);
            if g.hold {
                g.waiting = true;
                self.0.gate_cv.notify_all();
                while g.hold {
                    g = self
                        .0
                        .gate_cv
                        .wait(g)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                g.waiting = false;
            }
        }
        let n = self.0.syncs.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.0.crash_at.load(Ordering::SeqCst) {
            self.0.crashed.store(true, Ordering::SeqCst);
            return Err(Error::other("injected: sync failed"));
        }
        let mut disk = lock(&self.0.disk);
        disk.durable = disk.volatile.clone();
        disk.unsynced.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.0.dead()?;
        let mut disk = lock(&self.0.disk);
        write_at(&mut disk.volatile, offset, data);
        disk.unsynced.push(Op::Write(offset, data.to_vec()));
        Ok(())
    }
}

/// Runs `workload` once on a journal over a device that never crashes (opened with
/// `options`, the open's check off), closes the journal and returns what the workload
/// returned with the number of syncs it all made (open and close included).
///
/// # Errors
///
/// The journal's open error.
pub fn dry_run<T>(
    options: &RedbOptions,
    workload: impl FnOnce(&RedbJournal) -> T,
) -> Result<(T, u64), OpenError> {
    let ctl = Control::new();
    let j = RedbJournal::open_with_backend(
        ctl.backend(),
        options.clone().verify_on_open(RedbVerifyOnOpen::Off),
    )?;
    let out = workload(&j);
    j.close();
    drop(j);
    Ok((out, ctl.syncs()))
}

/// One crash image of a [`sweep`], written to a file.
#[derive(Debug)]
pub struct CrashImage {
    /// The sync the device died at in this run.
    pub crash_at: u64,
    /// `"durable"`, `"volatile"` or `"torn"`.
    pub kind: &'static str,
    /// The file holding the image.
    pub path: PathBuf,
    /// Whether the device crashed during the run (if not, the run made fewer syncs than
    /// `crash_at`).
    pub crashed: bool,
}

/// What a [`sweep`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sweep {
    /// Runs of the workload (one per crash point).
    pub runs: u64,
    /// Runs in which the device crashed.
    pub crashes: u64,
    /// Images written and handled (verified, or skipped as half-created files).
    pub images: u64,
}

/// Crashes `workload` at sync 1, 2, 3, ... (at most `2 * total + 2`, `total` being a
/// [`dry_run`]'s count: batching is timing dependent, so a run may sync more or less),
/// stopping after the first run that ends before its crash point: then every sync point
/// of the workload has been a crash point.
///
/// Each run opens a journal over a fresh device with `options` (the open's check off;
/// an open the crash cut short gives
/// `A::default()`: nothing was acknowledged), runs `workload`, closes the journal, then
/// writes the durable, volatile and torn images into `dir` and calls `verify` on each,
/// with what the workload returned. An image of a file whose creation the crash cut
/// short (it opens as [`OpenError::NotAJournal`]) is skipped: it never acknowledged
/// anything.
///
/// # Errors
///
/// Writing an image file.
pub fn sweep<A: Default>(
    dir: &Path,
    total: u64,
    options: &RedbOptions,
    mut workload: impl FnMut(&RedbJournal) -> A,
    mut verify: impl FnMut(&CrashImage, &A),
) -> std::io::Result<Sweep> {
    let mut tally = Sweep::default();
    for n in 1..=2 * total + 2 {
        tally.runs += 1;
        let ctl = Control::new();
        ctl.crash_at_sync(n);
        let (created, acked) = match RedbJournal::open_with_backend(
            ctl.backend(),
            options.clone().verify_on_open(RedbVerifyOnOpen::Off),
        ) {
            Ok(j) => {
                let acked = workload(&j);
                j.close();
                (true, acked)
            }
            // The crash hit while the file was being created (in place: the path
            // API creates beside and links).
            Err(_) => (false, A::default()),
        };
        let crashed = ctl.crashed();
        tally.crashes += u64::from(crashed);
        for (kind, image) in [
            ("durable", ctl.durable_image()),
            ("volatile", ctl.volatile_image()),
            ("torn", ctl.torn_image(n * 7919)),
        ] {
            let path = dir.join(format!("crash-{n}-{kind}.redb"));
            std::fs::write(&path, &image)?;
            tally.images += 1;
            if !created
                && matches!(
                    RedbJournal::open(
                        &path,
                        RedbOptions::default().verify_on_open(RedbVerifyOnOpen::Full)
                    ),
                    Err(OpenError::NotAJournal { .. })
                )
            {
                continue;
            }
            let image = CrashImage {
                crash_at: n,
                kind,
                path,
                crashed,
            };
            verify(&image, &acked);
        }
        if !crashed {
            break;
        }
    }
    Ok(tally)
}
