//! The journal file as a whole: opening it (`open.rs`: created atomically, a foreign
//! file refused, the tables laid out or checked), upgrading an older format in place
//! (`upgrade.rs`), and offline compaction (`compact.rs`).

pub(crate) mod compact;
pub(crate) mod open;
pub(crate) mod upgrade;

pub use compact::CompactReport;
