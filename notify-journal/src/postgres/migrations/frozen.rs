//! "Never edit a migration, add one", enforced: every migration file's SHA-256 is
//! committed in `frozen.sha256` (the format of `sha256sum`, so
//! `sha256sum -c frozen.sha256` checks it by hand too), and these tests fail when a
//! file changed, went missing, is not listed there, or is not applied in its place.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::MIGRATIONS;

/// The committed list: `(hex digest, file name)`, in its order.
const FROZEN: &str = include_str!("frozen.sha256");

const HOW: &str = "never edit a migration: a database migrated by an earlier build never \
                   runs it again. Undo the edit and add the next NNNN_<what>.sql instead \
                   (notify-journal/src/postgres/migrations/README.md)";

fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/postgres/migrations")
}

fn frozen() -> Vec<(&'static str, &'static str)> {
    FROZEN
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.split_once("  ") {
            Some((hash, name)) => (hash, name),
            None => panic!("frozen.sha256: `{l}` is not `<sha256>  <file>`"), // ok: test-only (cfg(test)): a failed check
        })
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `.sql` files in the folder, by name.
fn sql_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(folder())
        .expect("the migrations folder is readable") // ok: test-only (cfg(test)): a failed check
        .map(|e| {
            e.expect("a folder entry") // ok: test-only (cfg(test)): a failed check
                .file_name()
                .into_string()
                .expect("a UTF-8 file name") // ok: test-only (cfg(test)): a failed check
        })
        .filter(|n| n.ends_with(".sql"))
        .collect();
    names.sort();
    names
}

/// Each migration the build applies is the file of its number, byte for byte as
/// `frozen.sha256` records it.
#[test]
fn no_migration_changed_since_it_was_committed() {
    let frozen = frozen();
    let files = sql_files();
    assert_eq!(
        files.len(),
        MIGRATIONS.len(),
        "the folder's .sql files {files:?} and MIGRATIONS in mod.rs differ in number: \
         list every file in MIGRATIONS, in order"
    );
    for (i, (name, applied)) in files.iter().zip(MIGRATIONS).enumerate() {
        let expected_prefix = format!("{:04}_", i + 1);
        assert!(
            name.starts_with(&expected_prefix),
            "{name}: migration files are numbered 0001_, 0002_, … without gaps"
        );
        let on_disk = std::fs::read(folder().join(name)).expect("a migration file is readable"); // ok: test-only (cfg(test)): a failed check
        assert!(
            on_disk == applied.as_bytes(),
            "MIGRATIONS[{i}] is not {name}: list the files in MIGRATIONS in their order"
        );
        let listed = frozen.iter().find(|(_, n)| n == name);
        assert!(
            listed.is_some(),
            "{name} is not in frozen.sha256: a new migration is added there once written \
             (`sha256sum {name} >> frozen.sha256`); from then on it never changes"
        );
        let want = listed.map_or("", |(w, _)| *w);
        let got = sha256_hex(applied.as_bytes());
        assert_eq!(
            got, want,
            "{name} changed (SHA-256 {got}, committed {want}): {HOW}"
        );
    }
    for (_, name) in &frozen {
        assert!(
            files.iter().any(|f| f == name),
            "{name} is in frozen.sha256 but gone from the folder: {HOW}"
        );
    }
}
