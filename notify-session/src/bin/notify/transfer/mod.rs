//! `export` and `import`: a journal as JSON lines, in the canonical wire form.
//!
//! Export format 2 (this build's):
//!
//! ```text
//! {"notify_export":2}
//! {"session":"<id>","seq":<n>,"record":<record>}
//! {"session":"<id>","state":"ended","ended_at":"<time>","last_seq":<n>}
//! {"session":"<id>","state":"purged","ended_at":"<time>","purged_at":"<time>","last_seq":<n>,"frames":<n>}
//! ```
//!
//! The first line names the format. Then every session in ID order: its frames in seq
//! order, `<record>` being exactly the bytes of `JournalRecord::encode` (the journal's
//! own deterministic JSON); after the frames of an ended session, its state line (its
//! end time, by the original journal's clock); for a purged session, only its state
//! line (the tombstone). Times are RFC 3339 in UTC, to the nanosecond the journal
//! kept. So an export of an import of an export is the same bytes.
//!
//! Format 1 (earlier builds) is the frame lines alone, with no first line and no state
//! lines; it still imports (its ended sessions then end at the time of the import, its
//! purged sessions are not in it). A file naming a later format is refused.
//!
//! `format.rs` is the lines' form (written and read), `export.rs` and `import.rs` the
//! two commands.

mod export;
mod format;
mod import;

pub(crate) use export::export;
pub(crate) use import::import;
