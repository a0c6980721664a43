//! `notify serve`: the contract over HTTP, signed, for supervisors and loops in any
//! language (feature `serve`).
//!
//! A [`Server`] runs a [`SessionHost`](crate::SessionHost) behind an axum router on
//! hyper (HTTP/1.1 and HTTP/2, TLS by rustls). A completion is `POST`ed in its wire
//! form, byte for byte the codec's, decoded strictly and answered only after the
//! durable append: **201** accepted, **200** duplicate (the original seq), **409**
//! collision (the SHA-256 of the stored payload, never the payload), **503** +
//! `Retry-After` stopped, **307**/**421** not the owner (the owner's advertised URL),
//! **410** ended, **400** invalid (the first failing field by the wire names),
//! **401** unauthenticated, **413** too large. Every body names the disposition
//! ([`ApiError`] is the one error type). Loops in other languages register, long-poll
//! or stream their notifications and acknowledge each one; what a client was handed
//! and did not acknowledge is handed out again (see `consume.rs`'s redelivery rule).
//! Requests are signed after Standard Webhooks ([`keys`], `auth.rs`).
//!
//! The API is described by the OpenAPI 3.1 document [`OPENAPI`], served at
//! `/openapi.json`; `/healthz`, `/readyz` and `/metrics` (Prometheus text) are the
//! operator's, and so is the read-only console under `/console/` (`console/`: HTML
//! pages behind a login with the same keys; [`JournalInspect`] gives it the engine's
//! figures).
//!
//! Inside, by concern: `server.rs` (start and the ordered shutdown), `config.rs`,
//! `routes/` (thin handlers), `auth.rs` (the signature layer), `keys.rs`, `error.rs`
//! ([`ApiError`]), `locate.rs` (served here, elsewhere, ended), `consume.rs` (the
//! consumers and the redelivery rule), `host.rs` (the host behind a trait object and
//! the server's `HostApp`), `directory.rs` (advertised URLs), `listen.rs` (accept
//! loop, connection limit, drain), `tls.rs`, `layers.rs` (timeout, metrics, spans,
//! panics), `metrics.rs`, `otel.rs` (OpenTelemetry export, feature `otel`),
//! `shutdown.rs`, `state.rs`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use notify_session::SessionHost;
//! use notify_session::notify_journal::{RedbJournal, RedbOptions};
//! use notify_session::serve::{KeySet, ServeConfig, Server, shutdown_signal};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let journal = Arc::new(RedbJournal::open("notify.redb", RedbOptions::default())?);
//! let mut config = ServeConfig::new("127.0.0.1:8080".parse()?);
//! config.keys = KeySet::parse(&std::env::var("NOTIFY_SERVE_KEYS")?).map_err(|(_, e)| e)?;
//! let server = Server::builder(config)
//!     .start(SessionHost::builder(journal))
//!     .await?;
//! server.run_until(shutdown_signal()).await?;
//! # Ok(())
//! # }
//! ```

mod auth;
mod config;
mod console;
mod consume;
mod directory;
mod error;
mod extract;
mod host;
pub mod keys;
mod layers;
mod listen;
mod locate;
mod metrics;
#[cfg(feature = "otel")]
mod otel;
mod routes;
mod server;
mod shutdown;
mod state;
mod tls;

pub use auth::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
pub use config::{
    ConfigError, DEFAULT_BODY_LIMIT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_TOLERANCE, DEFAULT_VISIBILITY, MAX_CONNECTIONS, MAX_POLL_WAIT,
    ServeConfig, TlsFiles,
};
pub use console::{JournalCounts, JournalInspect, PgInspect};
pub use directory::{
    DIRECTORY_APPLICATION_NAME, HostRow, NoDirectory, OwnerDirectory, PgDirectory, PgDirectoryError,
};
pub use error::{ApiError, PROBLEM_JSON};
pub use keys::{KeyError, KeySet, SignKey, VerifyKey};
pub use metrics::install_prometheus;
#[cfg(feature = "otel")]
pub use otel::{OtelError, OtelExport};
pub use routes::ROUTES;
pub use server::{ServeError, Server, ServerBuilder};
pub use shutdown::shutdown_signal;
pub use tls::TlsError;

/// The OpenAPI 3.1 document of the HTTP API (served at `/openapi.json`).
pub const OPENAPI: &str = include_str!("openapi.json");
