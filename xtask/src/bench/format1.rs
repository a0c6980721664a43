//! Format 1 measured in the same run as format 2: its crates extracted from git under
//! `target/format1/`, renamed, and a throwaway harness package depending on both.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};

/// The last commit of the format-1 journal.
const FORMAT1_COMMIT: &str = "cbda868";

/// Lays out `target/format1/`: the format-1 crates from [`FORMAT1_COMMIT`], renamed
/// `notify-journal-v1` and `notify-types-v1`, and a `harness` package whose bench
/// `formats` depends on them and on this tree's journal. Returns the harness manifest.
pub(super) fn format1_harness(root: &Path, target: &Path) -> anyhow::Result<String> {
    let dir = target.join("format1");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir.join("harness"))?;
    let git = |args: &[&str]| -> anyhow::Result<Vec<u8>> {
        let out = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out.stdout)
    };
    // `git archive` takes paths relative to the current directory: run it at the top.
    let top = String::from_utf8(git(&["rev-parse", "--show-toplevel"])?)?;
    let git = |args: &[&str]| -> anyhow::Result<Vec<u8>> {
        let out = Command::new("git")
            .arg("-C")
            .arg(top.trim_end())
            .args(args)
            .output()
            .context("running git")?;
        if !out.status.success() {
            bail!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(out.stdout)
    };
    let tar = dir.join("format1.tar");
    let tar_arg = format!("--output={}", tar.display());
    git(&[
        "archive",
        &tar_arg,
        FORMAT1_COMMIT,
        "Cargo.lock",
        "notify-journal/Cargo.toml",
        "notify-journal/src",
        "notify-types/Cargo.toml",
        "notify-types/src",
    ])?;
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&dir)
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar -xf {}: {status}", tar.display());
    }
    // The format-1 crates, renamed, without their tests, benches and dev-dependencies.
    for (krate, renamed) in [
        ("notify-journal", "notify-journal-v1"),
        ("notify-types", "notify-types-v1"),
    ] {
        let path = dir.join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&path)?;
        let mut out = String::new();
        let mut skipping = false;
        for line in text.lines() {
            if line.starts_with('[') {
                skipping = line == "[dev-dependencies]" || line == "[[bench]]";
            }
            if skipping {
                continue;
            }
            if line == format!("name = \"{krate}\"") {
                let _ = writeln!(out, "name = \"{renamed}\"");
            } else {
                let _ = writeln!(out, "{line}");
            }
        }
        std::fs::write(&path, out)?;
    }
    // Their workspace: the format-1 root manifest's settings, notify-types renamed.
    let old_root = String::from_utf8(git(&["show", &format!("{FORMAT1_COMMIT}:Cargo.toml")])?)?;
    let mut ws = String::new();
    let mut section = String::new();
    for line in old_root.lines() {
        if line.starts_with('[') {
            section = line.to_owned();
            let _ = writeln!(ws, "{line}");
            if line == "[workspace]" {
                let _ = writeln!(
                    ws,
                    "resolver = \"3\"\nmembers = [\"harness\", \"notify-journal\", \"notify-types\"]"
                );
            }
            continue;
        }
        let keep = match section.as_str() {
            "[workspace]" => false,
            "[workspace.dependencies]" => !line.starts_with("notify-"),
            _ => true,
        };
        if keep {
            let _ = writeln!(ws, "{line}");
        }
    }
    ws = ws.replace(
        "[workspace.dependencies]\n",
        "[workspace.dependencies]\nnotify-types = { path = \"notify-types\", package = \"notify-types-v1\" }\n",
    );
    std::fs::write(dir.join("Cargo.toml"), ws)?;
    // Today's lock file, so both journals build against the same dependency versions
    // (and reuse this tree's compiled dependencies).
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"))?;
    let here = root.display().to_string().replace('\\', "/");
    std::fs::write(
        dir.join("harness").join("Cargo.toml"),
        format!(
            "[package]\nname = \"notify-format1-harness\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\n\
             notify-journal = {{ path = \"{here}/notify-journal\" }}\n\
             notify-types = {{ path = \"{here}/notify-types\" }}\n\
             notify-journal-v1 = {{ path = \"../notify-journal\" }}\n\
             notify-types-v1 = {{ path = \"../notify-types\" }}\n\
             notify-testkit = {{ path = \"{here}/notify-testkit\" }}\n\
             tokio = {{ workspace = true, features = [\"rt\", \"rt-multi-thread\", \"sync\", \"macros\"] }}\n\
             tempfile = \"3\"\n\
             criterion.workspace = true\n\n\
             [[bench]]\nname = \"formats\"\npath = \"formats.rs\"\nharness = false\n"
        ),
    )?;
    std::fs::copy(
        root.join("notify-testkit/benches/format1/harness.rs"),
        dir.join("harness").join("formats.rs"),
    )?;
    Ok(dir.join("Cargo.toml").display().to_string())
}
