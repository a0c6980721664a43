//! What the workspace's benches and measuring tests share, written once: the
//! side-channel for figures that are not times ([`metric`], read back by
//! `cargo xtask bench` beside criterion's), the bench fixture ([`fixture`]: sessions,
//! keys and records, a runtime) and a counting allocator ([`alloc`]: the peak heap of a
//! piece of work). The benches that use it live in this crate's `benches/` (the
//! journal's and the session's), so that every import points down the layers.
//!
//! ```
//! use notify_testkit::bench::fixture::{record, session};
//!
//! let r = record(session(1), 7);
//! assert_eq!(&r.key(), notify_testkit::bench::fixture::command_id(7).as_uuid());
//! ```
//!
//! A bench that cannot record its figure stops with a panic naming the file: these are
//! test helpers, not a library's answers.

pub mod alloc;
pub mod fixture;

use std::path::{Path, PathBuf};

/// The cargo target directory: `CARGO_TARGET_DIR` when it is absolute (as
/// `cargo xtask bench` sets it), else three levels above this executable
/// (`target/release/deps/NAME`).
///
/// # Panics
///
/// When the executable's path cannot be read or is not that deep.
#[must_use]
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() {
            return dir;
        }
    }
    #[allow(clippy::expect_used)] // a bench helper: no target dir, no figures
    let exe = std::env::current_exe().expect("the bench's own path");
    #[allow(clippy::expect_used)]
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .expect("the bench runs from target/<profile>/deps/")
}

/// Records a figure that is not a time: `target/bench-metrics/NAME.json` holds
/// `{"name": NAME, "value": VALUE, "unit": UNIT}` (`name` uses `/` like criterion's
/// IDs; each `/` is `__` in the file name). Also printed on stderr.
///
/// # Panics
///
/// When the file cannot be written.
pub fn metric(name: &str, value: f64, unit: &str) {
    let dir = target_dir().join("bench-metrics");
    let path = dir.join(format!("{}.json", name.replace('/', "__")));
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::write(
            &path,
            format!("{{\"name\": \"{name}\", \"value\": {value}, \"unit\": \"{unit}\"}}\n"),
        )
    });
    if let Err(e) = written {
        #[allow(clippy::panic)] // a bench helper: a figure not recorded is a failed bench
        {
            panic!("cannot record the metric {name} in {}: {e}", path.display());
        }
    }
    eprintln!("metric {name}: {value} {unit}");
}
