//! Extracts the README's usage example (its first ```rust block) so that `main.rs`
//! compiles exactly what the README shows.

use std::path::Path;

fn main() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    println!("cargo::rerun-if-changed={}", readme.display());
    let text = match std::fs::read_to_string(&readme) {
        Ok(text) => text,
        Err(e) => {
            println!("cargo::error=cannot read {}: {e}", readme.display());
            return;
        }
    };
    let Some(example) = text
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
    else {
        println!("cargo::error=README.md has no ```rust block");
        return;
    };
    let out = Path::new(&std::env::var_os("OUT_DIR").unwrap_or_default()).join("readme_example.rs");
    if let Err(e) = std::fs::write(&out, example) {
        println!("cargo::error=cannot write {}: {e}", out.display());
    }
}
