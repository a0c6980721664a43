//! A storage backend that reads a file as it is and keeps every write in memory, so a
//! check can open a journal the way a writer does (redb's page check, its recovery of a
//! file not closed cleanly, the allocator state it saves at close) without changing a
//! byte of the file.
//!
//! Locks are the file's own ([`FileBackend`]'s): the check holds the file as a writer
//! would, so no other process writes to it meanwhile and a running writer makes the
//! open `AlreadyOpen`. Memory grows with what redb writes during the check (its header,
//! the pages of a recovery commit and of the allocator state), not with the file.

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// Bytes per block of the in-memory copy of what was written.
const BLOCK: u64 = 4096;

/// The file (read, and locked) with the writes laid over it in memory.
pub(crate) struct Overlay {
    file: FileBackend,
    state: Mutex<State>,
}

struct State {
    /// The length the database sees.
    len: u64,
    /// Bytes of the file still visible: its length, less whatever a shrink cut off
    /// (what grows back reads as zeros).
    file_visible: u64,
    /// Written blocks, by block number; bytes at or past `len` are zero.
    blocks: BTreeMap<u64, Box<[u8]>>,
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Overlay")
            .field("file", &self.file)
            .field("len", &state.len)
            .field("blocks_written", &state.blocks.len())
            .finish()
    }
}

impl Overlay {
    /// Lays an empty overlay over `file`, which must be open for reading (and for
    /// writing, for the exclusive locks a writer's open takes; nothing is written
    /// through it).
    pub(crate) fn new(file: File) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        let file = FileBackend::new(file).map_err(std::io::Error::other)?;
        Ok(Self {
            file,
            state: Mutex::new(State {
                len,
                file_visible: len,
                blocks: BTreeMap::new(),
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads `out.len()` bytes at `offset` of the file as it is (zeros past what is
    /// visible of it), ignoring the blocks written.
    fn read_file(&self, state: &State, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let visible = usize::try_from(state.file_visible.saturating_sub(offset))
            .unwrap_or(usize::MAX)
            .min(out.len());
        let (from_file, zeros) = out.split_at_mut(visible);
        if !from_file.is_empty() {
            self.file.read(offset, from_file)?;
        }
        zeros.fill(0);
        Ok(())
    }
}

fn io_error(message: &'static str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, message)
}

/// `buf[from..to]`, or an error (never a panic) should the bounds not hold.
fn piece(buf: &[u8], from: u64, to: u64) -> Result<&[u8], std::io::Error> {
    let (from, to) = (usize::try_from(from), usize::try_from(to));
    match (from, to) {
        (Ok(f), Ok(t)) => buf.get(f..t),
        _ => None,
    }
    .ok_or_else(|| io_error("an overlay range out of bounds"))
}

/// `buf[from..to]`, mutable, or an error (never a panic) should the bounds not hold.
fn piece_mut(buf: &mut [u8], from: u64, to: u64) -> Result<&mut [u8], std::io::Error> {
    let (from, to) = (usize::try_from(from), usize::try_from(to));
    match (from, to) {
        (Ok(f), Ok(t)) => buf.get_mut(f..t),
        _ => None,
    }
    .ok_or_else(|| io_error("an overlay range out of bounds"))
}

impl StorageBackend for Overlay {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.state().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let state = self.state();
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|end| *end <= state.len)
            .ok_or_else(|| io_error("read past the end of the database"))?;
        if out.is_empty() {
            return Ok(());
        }
        // Runs of unwritten blocks are read from the file in one call each.
        let mut at = offset;
        let mut run_start = offset;
        while at < end {
            let block = at / BLOCK;
            let block_start = block * BLOCK;
            let block_end = block_start.saturating_add(BLOCK).min(end);
            if let Some(bytes) = state.blocks.get(&block) {
                let run = piece_mut(out, run_start - offset, at - offset)?;
                self.read_file(&state, run_start, run)?;
                piece_mut(out, at - offset, block_end - offset)?.copy_from_slice(piece(
                    bytes,
                    at - block_start,
                    block_end - block_start,
                )?);
                run_start = block_end;
            }
            at = block_end;
        }
        let rest = piece_mut(out, run_start - offset, end - offset)?;
        self.read_file(&state, run_start, rest)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let mut state = self.state();
        if len < state.len {
            state.file_visible = state.file_visible.min(len);
            let first_gone = len.div_ceil(BLOCK);
            state.blocks.split_off(&first_gone);
            if !len.is_multiple_of(BLOCK)
                && let Some(bytes) = state.blocks.get_mut(&(len / BLOCK))
            {
                piece_mut(bytes, len % BLOCK, BLOCK)?.fill(0);
            }
        }
        state.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut state = self.state();
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io_error("write past the largest offset"))?;
        let mut at = offset;
        while at < end {
            let block = at / BLOCK;
            let block_start = block * BLOCK;
            let block_end = block_start.saturating_add(BLOCK).min(end);
            if !state.blocks.contains_key(&block) {
                let mut bytes = vec![0u8; BLOCK as usize].into_boxed_slice();
                let visible = state.len.saturating_sub(block_start).min(BLOCK);
                self.read_file(&state, block_start, piece_mut(&mut bytes, 0, visible)?)?;
                state.blocks.insert(block, bytes);
            }
            if let Some(bytes) = state.blocks.get_mut(&block) {
                piece_mut(bytes, at - block_start, block_end - block_start)?
                    .copy_from_slice(piece(data, at - offset, block_end - offset)?);
            }
            at = block_end;
        }
        state.len = state.len.max(end);
        Ok(())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        SetLen(u64),
        Read(u64, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0u64..20_000,
                proptest::collection::vec(any::<u8>(), 0..9000)
            )
                .prop_map(|(o, d)| Op::Write(o, d)),
            (0u64..24_000).prop_map(Op::SetLen),
            (0u64..24_000, 0usize..12_000).prop_map(|(o, n)| Op::Read(o, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The overlay reads back exactly what a file given the same writes and lengths
        /// would hold, and the file underneath never changes.
        #[test]
        fn reads_as_the_written_file_and_never_writes_it(
            initial in proptest::collection::vec(any::<u8>(), 0..10_000),
            ops in proptest::collection::vec(op(), 1..40),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("base");
            std::fs::write(&path, &initial).unwrap();
            let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let overlay = Overlay::new(file).unwrap();
            let mut model = initial.clone();
            for op in ops {
                match op {
                    Op::Write(offset, data) => {
                        overlay.write(offset, &data).unwrap();
                        let (o, end) = (offset as usize, offset as usize + data.len());
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[o..end].copy_from_slice(&data);
                    }
                    Op::SetLen(len) => {
                        overlay.set_len(len).unwrap();
                        model.resize(len as usize, 0);
                    }
                    Op::Read(offset, n) => {
                        let mut out = vec![0xAA; n];
                        let got = overlay.read(offset, &mut out);
                        if offset as usize + n <= model.len() {
                            got.unwrap();
                            prop_assert_eq!(&out[..], &model[offset as usize..offset as usize + n]);
                        } else {
                            prop_assert!(got.is_err());
                        }
                    }
                }
                prop_assert_eq!(overlay.len().unwrap(), model.len() as u64);
            }
            let mut all = vec![0; model.len()];
            overlay.read(0, &mut all).unwrap();
            prop_assert_eq!(all, model);
            overlay.close().unwrap();
            prop_assert_eq!(std::fs::read(&path).unwrap(), initial);
        }
    }
}
