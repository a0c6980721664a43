//! TLS for the journal's connections, through rustls (ring provider), with libpq's
//! `sslmode` semantics: `disable`, `require`, `verify-ca`, `verify-full` (and
//! `require` with a root certificate checks the chain, as libpq's does). The mode
//! table (libpq's meaning and this crate's, with and without `sslrootcert`) is in
//! `docs/postgres.md`.
//!
//! One concern per file: the public settings (`settings.rs`), the connection
//! string's libpq keys (`conninfo.rs`), the mode in force (`resolve.rs`), the rustls
//! client configuration (`client_config.rs`) and its certificate verifiers
//! (`verifiers.rs`), and naming a refused handshake (`refusal.rs`).

mod client_config;
mod conninfo;
mod refusal;
mod resolve;
mod settings;
mod verifiers;

pub(crate) use client_config::client_config;
pub(crate) use conninfo::split_conninfo;
pub(crate) use refusal::refusal;
pub(crate) use resolve::{all_hosts_local, resolve};
pub use settings::{PgSslMode, PgTls};
