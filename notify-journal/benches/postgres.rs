//! PostgreSQL journal benchmark (work in progress).
#![allow(missing_docs)]

fn main() {}
