//! What the host chaos test (`host_chaos.rs`) is made of: the run's size
//! (`config.rs`), the host processes (`procs.rs`), the host role they run
//! (`child.rs`) and its consumers (`consumer.rs`), the appenders (`driver.rs`), the
//! sessions ending and opening (`churn.rs`), the faults (`faults.rs`), the hosts'
//! timed event logs (`log.rs`), the database reads (`db.rs`), the invariant checkers
//! (`checker.rs`, `attribution.rs`), their planted-failure tests (`planted.rs`,
//! `planted_faults.rs`) and
//! the figures (`report.rs`).

pub(crate) mod attribution;
pub(crate) mod checker;
pub(crate) mod child;
pub(crate) mod churn;
pub(crate) mod config;
pub(crate) mod consumer;
pub(crate) mod db;
pub(crate) mod driver;
pub(crate) mod faults;
pub(crate) mod log;
#[cfg(test)]
mod planted;
#[cfg(test)]
mod planted_faults;
pub(crate) mod procs;
pub(crate) mod report;
