//! What the host chaos test (`host_chaos.rs`) is made of: the host processes
//! (`procs.rs`), the host role they run (`child.rs`), the supervisors' driver
//! (`driver.rs`), the hosts' event logs (`log.rs`) and the invariant checker
//! (`checker.rs`).

pub(crate) mod checker;
pub(crate) mod child;
pub(crate) mod driver;
pub(crate) mod log;
#[cfg(test)]
mod planted;
pub(crate) mod procs;
