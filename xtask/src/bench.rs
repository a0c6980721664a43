//! `cargo xtask bench`: filled in once the benchmarks exist.

use std::path::Path;

pub(crate) fn run(_root: &Path, _args: &[String]) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
