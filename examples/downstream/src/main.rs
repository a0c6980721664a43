//! The README's usage example, verbatim (extracted by `build.rs`).

include!(concat!(env!("OUT_DIR"), "/readme_example.rs"));
