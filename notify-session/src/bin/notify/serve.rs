//! `notify serve`: the signed HTTP front (`notify_session::serve`) over a redb file
//! (the only host) or PostgreSQL (one host of a fleet). Keys come from files or the
//! environment, never from argv.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use notify_session::SessionHost;
use notify_session::notify_journal::{PgJournal, RedbJournal, RedbOptions};
use notify_session::serve::{
    JournalInspect, KeySet, PgDirectory, PgInspect, ServeConfig, ServeError, Server, TlsFiles,
    install_prometheus, shutdown_signal,
};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::error::chain;
use crate::journal::{DEFAULT_SCHEMA, pg_options};

/// The environment variable holding keys (whitespace- or comma-separated).
const KEYS_ENV: &str = "NOTIFY_SERVE_KEYS";

/// `notify serve`'s arguments.
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The redb journal file (created if missing): this server is its only host.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "postgres",
        required_unless_present = "postgres"
    )]
    journal: Option<PathBuf>,
    /// The PostgreSQL journal (a libpq string or postgresql:// URL; the password from
    /// PGPASSWORD or the password file): this server joins the fleet of hosts on it.
    #[arg(long, value_name = "CONNINFO")]
    postgres: Option<String>,
    /// The PostgreSQL schema [default: notify_journal].
    #[arg(long, value_name = "S", requires = "postgres")]
    schema: Option<String>,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// This server's base URL as clients and other hosts reach it (advertised on
    /// PostgreSQL so requests to the wrong host are redirected here)
    /// [default: http(s)://LISTEN].
    #[arg(long, value_name = "URL")]
    advertise_url: Option<String>,
    /// The TLS certificate chain (PEM); with --tls-key, the listener speaks TLS.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A file of keys requests are signed with: whsec_… (HMAC-SHA256 secrets) and
    /// whpk_… (ed25519 public keys), and whro_… read-only keys (they open the console
    /// at /console/ and sign nothing), whitespace-separated, `#` comments. Repeatable;
    /// NOTIFY_SERVE_KEYS adds more. Several keys are active at once for rotation.
    #[arg(long, value_name = "FILE")]
    key_file: Vec<PathBuf>,
    /// How far a request's webhook-timestamp may be from this server's clock, in
    /// seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    timestamp_tolerance: u64,
    /// Accept unsigned requests: only on a loopback --listen address, for development.
    #[arg(long)]
    insecure_unsigned: bool,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = notify_session::serve::DEFAULT_BODY_LIMIT)]
    body_limit: usize,
    /// The most connections open at once.
    #[arg(long, value_name = "N", default_value_t = notify_session::serve::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// The longest a client may take over a TLS handshake, a connection's first
    /// request and each HTTP/1.1 request's headers, in seconds (then the connection
    /// is closed).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    header_timeout: u64,
    /// How long a connection may go without starting a request before it is shut
    /// down gracefully (what is in flight finishes), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = notify_session::serve::DEFAULT_IDLE_TIMEOUT.as_secs())]
    idle_timeout: u64,
    /// The most sessions this host serves.
    #[arg(long, value_name = "N", default_value_t = notify_session::DEFAULT_CAPACITY)]
    capacity: usize,
    /// The lease duration on PostgreSQL, in seconds (how soon another host adopts the
    /// sessions of a host that died).
    #[arg(long, value_name = "SECS", requires = "postgres")]
    lease_secs: Option<u64>,
}

/// Runs `notify serve` to the end (a signal), with its own multi-threaded runtime.
/// With the `otel` feature and `OTEL_EXPORTER_OTLP_ENDPOINT` set, its spans are
/// exported, and flushed once the server has shut down.
pub(crate) fn main(args: ServeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the runtime: {e}"), 9),
    };
    #[cfg(feature = "otel")]
    let export = {
        // The batch span processor is a task of this runtime.
        let _entered = runtime.enter();
        match notify_session::serve::OtelExport::from_env() {
            Ok(export) => export,
            Err(e) => return fail(&format!("OpenTelemetry: {}", chain(&e)), 2),
        }
    };
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_env("NOTIFY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        );
    let subscriber = tracing_subscriber::registry().with(logs);
    #[cfg(feature = "otel")]
    let subscriber = subscriber.with(export.as_ref().map(|e| {
        e.layer()
            .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
    }));
    subscriber.init();
    let served = runtime.block_on(serve(args));
    // Off the runtime's workers, which still run the exporter's task.
    #[cfg(feature = "otel")]
    if let Some(export) = export
        && let Err(e) = export.shutdown()
    {
        eprintln!("notify: OpenTelemetry: {}", chain(&e));
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err((message, code)) => fail(&message, code),
    }
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("notify: {message}");
    ExitCode::from(code)
}

/// The keys of every key file and of NOTIFY_SERVE_KEYS.
fn load_keys(files: &[PathBuf]) -> Result<KeySet, String> {
    let mut keys = KeySet::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read the key file {}: {e}", file.display()))?;
        let set =
            KeySet::parse(&text).map_err(|(n, e)| format!("key {n} of {}: {e}", file.display()))?;
        keys.extend(set);
    }
    if let Ok(text) = std::env::var(KEYS_ENV) {
        let set = KeySet::parse(&text).map_err(|(n, e)| format!("key {n} of {KEYS_ENV}: {e}"))?;
        keys.extend(set);
    }
    Ok(keys)
}

async fn serve(args: ServeArgs) -> Result<(), (String, u8)> {
    let usage = |m: String| (m, 2);
    let mut config = ServeConfig::new(args.listen);
    config.keys = load_keys(&args.key_file).map_err(usage)?;
    config.insecure_unsigned = args.insecure_unsigned;
    config.timestamp_tolerance = Duration::from_secs(args.timestamp_tolerance);
    config.body_limit = args.body_limit;
    config.max_connections = args.max_connections;
    config.header_timeout = Duration::from_secs(args.header_timeout);
    config.idle_timeout = Duration::from_secs(args.idle_timeout);
    config.advertise_url = args.advertise_url.clone();
    config.tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    config.check().map_err(|e| usage(e.to_string()))?;
    if args.postgres.is_some() && args.advertise_url.is_none() && args.listen.ip().is_unspecified()
    {
        return Err(usage(format!(
            "--postgres with --listen {}: give --advertise-url, the URL other hosts send clients to (an unspecified address is no place to send them)",
            args.listen
        )));
    }
    let metrics = install_prometheus()
        .map_err(|e| (format!("cannot install the metrics recorder: {e}"), 9))?;
    let builder = Server::builder(config).metrics(metrics);
    let failed = |e: ServeError| (chain(&e), 9);
    let (server, journal) = if let Some(path) = &args.journal {
        let journal = RedbJournal::open(path, RedbOptions::default()).map_err(|e| {
            (
                format!("cannot open the journal {}: {e}", path.display()),
                9,
            )
        })?;
        let journal = Arc::new(journal);
        let server = builder
            .inspect(Arc::clone(&journal) as Arc<dyn JournalInspect>)
            .start(SessionHost::builder(Arc::clone(&journal)).capacity(args.capacity))
            .await
            .map_err(failed)?;
        (server, Opened::Redb(journal))
    } else if let Some(conninfo) = &args.postgres {
        let schema = args
            .schema
            .clone()
            .unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
        let mut options = pg_options(&schema, true);
        if let Some(secs) = args.lease_secs {
            options = options.lease_duration(Duration::from_secs(secs));
        }
        let journal = PgJournal::connect(conninfo, options).await.map_err(|e| {
            (
                format!("cannot open the PostgreSQL journal (schema {schema}): {e}"),
                9,
            )
        })?;
        // The directory connects as the journal does (TLS, password, timeouts), and
        // reconnects by itself: one that cannot connect now is kept and tries again.
        let directory = PgDirectory::new(&journal.connector(), &schema);
        if let Err(e) = directory.connect().await {
            tracing::warn!(
                error = %chain(&e),
                "the host directory is not connected yet (it keeps trying): until it is, requests for sessions other hosts own are answered 421 without their URL"
            );
        }
        let builder = builder.directory(directory);
        let journal = Arc::new(journal);
        let server = builder
            .inspect(Arc::new(PgInspect::new(Arc::clone(&journal), schema)))
            .start(SessionHost::builder(Arc::clone(&journal)).capacity(args.capacity))
            .await
            .map_err(failed)?;
        (server, Opened::Pg(journal))
    } else {
        return Err(usage("give --journal PATH or --postgres CONNINFO".into()));
    };
    // The line scripts and tests wait for: the bound address (port 0 picks one).
    eprintln!(
        "notify serve: listening on {} ({})",
        server.local_addr(),
        server.base_url()
    );
    let served = server.run_until(shutdown_signal()).await.map_err(failed);
    journal.close().await;
    served
}

/// The journal the server ran on, closed once it has shut down: what still reads it
/// then (a verify the console started) stops, and the file or connections are let go.
enum Opened {
    Redb(Arc<RedbJournal>),
    Pg(Arc<PgJournal>),
}

impl Opened {
    async fn close(self) {
        match self {
            // It waits for the writer thread: off the runtime.
            Self::Redb(journal) => {
                let _ = tokio::task::spawn_blocking(move || journal.close()).await;
            }
            Self::Pg(journal) => journal.close().await,
        }
    }
}
