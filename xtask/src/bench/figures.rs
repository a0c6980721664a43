//! The table of absolute figures.

use super::results::Src;

/// The absolute figures, in the order printed.
pub(super) const FIGURES: &[(&str, Src)] = &[
    ("append, journal, 1 appender", Src::Crit("append/journal/1")),
    (
        "append, journal, 16 appenders",
        Src::Crit("append/journal/16"),
    ),
    (
        "append, journal, 64 appenders",
        Src::Crit("append/journal/64"),
    ),
    (
        "append, journal, 256 appenders",
        Src::Crit("append/journal/256"),
    ),
    (
        "append, journal, 1024 appenders",
        Src::Crit("append/journal/1024"),
    ),
    (
        "append, journal, quick-repair, 1 appender",
        Src::Crit("append/journal_quick_repair/1"),
    ),
    (
        "append, journal, quick-repair, 64 appenders",
        Src::Crit("append/journal_quick_repair/64"),
    ),
    (
        "raw redb minimal layout, 1 per txn",
        Src::Crit("append/raw_redb_minimal/1"),
    ),
    (
        "raw redb minimal layout, 64 per txn",
        Src::Crit("append/raw_redb_minimal/64"),
    ),
    (
        "raw redb minimal layout, 1000 per txn",
        Src::Crit("append/raw_redb_minimal/1000"),
    ),
    (
        "SQLite WAL FULL, 1 per txn",
        Src::Crit("append/sqlite_wal_full/1"),
    ),
    (
        "SQLite WAL FULL, 64 per txn",
        Src::Crit("append/sqlite_wal_full/64"),
    ),
    (
        "persistent-queue group, 64 producers",
        Src::Crit("append/persistent_queue_group/64"),
    ),
    ("64 appenders over 1 session", Src::Crit("spread/journal/1")),
    (
        "64 appenders over 8 sessions",
        Src::Crit("spread/journal/8"),
    ),
    (
        "64 appenders over 1,000 sessions",
        Src::Crit("spread/journal/1000"),
    ),
    (
        "64 appenders over 100,000 sessions",
        Src::Crit("spread/journal/100000"),
    ),
    (
        "writer CPU per append, 64 appenders, 1 session",
        Src::Metric("writer_cpu/spread/1"),
    ),
    (
        "writer CPU per append, 64 appenders, 8 sessions",
        Src::Metric("writer_cpu/spread/8"),
    ),
    (
        "writer CPU per append, 64 appenders, 1,000 sessions",
        Src::Metric("writer_cpu/spread/1000"),
    ),
    (
        "writer CPU per append, 64 appenders, 100,000 sessions",
        Src::Metric("writer_cpu/spread/100000"),
    ),
    (
        "140k fresh commands, 64 appenders, 1 session (shuffled)",
        Src::Metric("spread_shuffled/1"),
    ),
    (
        "writer CPU per append, 140k fresh commands, 1 session (shuffled)",
        Src::Metric("spread_shuffled_cpu/1"),
    ),
    (
        "140k fresh commands, 64 appenders, 8 sessions (shuffled)",
        Src::Metric("spread_shuffled/8"),
    ),
    (
        "writer CPU per append, 140k fresh commands, 8 sessions (shuffled)",
        Src::Metric("spread_shuffled_cpu/8"),
    ),
    (
        "140k fresh commands, 64 appenders, 1,000 sessions (shuffled)",
        Src::Metric("spread_shuffled/1000"),
    ),
    (
        "writer CPU per append, 140k fresh commands, 1,000 sessions (shuffled)",
        Src::Metric("spread_shuffled_cpu/1000"),
    ),
    (
        "140k fresh commands, 64 appenders, 100,000 sessions (shuffled)",
        Src::Metric("spread_shuffled/100000"),
    ),
    (
        "writer CPU per append, 140k fresh commands, 100,000 sessions (shuffled)",
        Src::Metric("spread_shuffled_cpu/100000"),
    ),
    (
        "append, format 1, 1 appender",
        Src::Crit("formats/format1/1"),
    ),
    (
        "append, format 3, 1 appender",
        Src::Crit("formats/format2/1"),
    ),
    (
        "append, format 1, 64 appenders",
        Src::Crit("formats/format1/64"),
    ),
    (
        "append, format 3, 64 appenders",
        Src::Crit("formats/format2/64"),
    ),
    (
        "append, format 1, 1024 appenders",
        Src::Crit("formats/format1/1024"),
    ),
    (
        "append, format 3, 1024 appenders",
        Src::Crit("formats/format2/1024"),
    ),
    (
        "steady state: purge rate (frames/s of step time)",
        Src::Metric("retention/purge_rate"),
    ),
    (
        "longest purge step (1,024 frames) under load",
        Src::Metric("retention/purge_step/max"),
    ),
    (
        "append latency p99 while a backlog is purged, 64 appenders",
        Src::Metric("retention/append_latency/p99"),
    ),
    (
        "worst append latency while a backlog is purged, 64 appenders",
        Src::Metric("retention/append_latency/max"),
    ),
    (
        "longest tombstone drop step (1,024 tombstones) while 1M drop under load",
        Src::Metric("retention/drop/step/max"),
    ),
    (
        "append latency p99 while 1M tombstones drop, 64 appenders",
        Src::Metric("retention/drop/append_latency/p99"),
    ),
    (
        "worst append latency while 1M tombstones drop, 64 appenders",
        Src::Metric("retention/drop/append_latency/max"),
    ),
    (
        "tombstones dropped per second under load",
        Src::Metric("retention/drop/tombstones_per_s"),
    ),
    (
        "steady state: file size after the first 100 sessions",
        Src::Metric("retention/file_bytes/after_100_sessions"),
    ),
    (
        "steady state: file size after 2,000 sessions",
        Src::Metric("retention/file_bytes/final"),
    ),
    (
        "append latency p50, 1 appender",
        Src::Metric("latency/journal/1/p50"),
    ),
    (
        "append latency p99, 1 appender",
        Src::Metric("latency/journal/1/p99"),
    ),
    (
        "append latency p50, 64 appenders",
        Src::Metric("latency/journal/64/p50"),
    ),
    (
        "append latency p99, 64 appenders",
        Src::Metric("latency/journal/64/p99"),
    ),
    (
        "replay, one 64k-frame session (frames)",
        Src::Crit("replay/session_64k"),
    ),
    (
        "verify, open handle, 100k records",
        Src::Crit("verify/handle_100k"),
    ),
    (
        "verify_file (with redb's page check), 100k records",
        Src::Crit("verify/file_100k"),
    ),
    (
        "verify, open handle, 1M records (one pass)",
        Src::Metric("verify_once/handle_1m"),
    ),
    (
        "verify_file, 1M records (one pass)",
        Src::Metric("verify_once/file_1m"),
    ),
    ("open 10k records, verify off", Src::Crit("open/off_10k")),
    (
        "open 10k records, background scrub (default)",
        Src::Crit("open/background_10k"),
    ),
    (
        "open 10k records, verify pages",
        Src::Crit("open/pages_10k"),
    ),
    ("open 10k records, verify full", Src::Crit("open/full_10k")),
    ("open 1M records, verify off", Src::Crit("open/off_1m")),
    (
        "open 1M records, background scrub (default)",
        Src::Crit("open/background_1m"),
    ),
    ("open 1M records, verify pages", Src::Crit("open/pages_1m")),
    (
        "background scrub, one unpaced pass over 1M records",
        Src::Metric("scrub_once/pass_1m"),
    ),
    (
        "open 1M records, verify full (one pass)",
        Src::Metric("open_once/full_1m"),
    ),
    (
        "open 5M records, verify off (median of 3)",
        Src::Metric("open_once/off_5m"),
    ),
    (
        "open 5M records, background scrub (default; median of 3)",
        Src::Metric("open_once/background_5m"),
    ),
    (
        "open 5M records, verify pages (median of 3)",
        Src::Metric("open_once/pages_5m"),
    ),
    (
        "first append to a 64k-frame session after open, key census (reads its log once)",
        Src::Metric("first_append_once/session_64k_census"),
    ),
    (
        "first append to a 64k-frame session after open, no key census",
        Src::Metric("first_append_once/session_64k_no_census"),
    ),
    (
        "open after crash, 100k records",
        Src::Crit("open/after_crash_100k"),
    ),
    (
        "open after crash, 100k records, quick-repair",
        Src::Crit("open/after_crash_100k_quick_repair"),
    ),
    (
        "open after crash, 100k records, verify off",
        Src::Crit("open/after_crash_100k_off"),
    ),
    (
        "open after crash, 100k records, quick-repair, verify off",
        Src::Crit("open/after_crash_100k_quick_repair_off"),
    ),
    (
        "bytes per notification, format 3 open fixture (non-durable build), 1M records",
        Src::Metric("disk/format2_fixture/1m"),
    ),
    (
        "bytes per notification, format 1, 10k records",
        Src::Metric("disk/format1/10k"),
    ),
    (
        "bytes per notification, format 3, 10k records",
        Src::Metric("disk/format2/10k"),
    ),
    (
        "bytes per notification, format 1, 1M records",
        Src::Metric("disk/format1/1m"),
    ),
    (
        "bytes per notification, format 3, 1M records",
        Src::Metric("disk/format2/1m"),
    ),
    ("plain ack, 1 consumer", Src::Crit("txack/plain/1")),
    (
        "transactional ack (ack_with), 1 consumer",
        Src::Crit("txack/tx/1"),
    ),
    ("plain ack, 64 consumers", Src::Crit("txack/plain/64")),
    (
        "transactional ack (ack_with), 64 consumers",
        Src::Crit("txack/tx/64"),
    ),
    (
        "restore peak RSS, 1 MiB cache (absolute)",
        Src::Metric("restore/peak_rss_mb/cache_1mib"),
    ),
    (
        "restore peak RSS, default cache (absolute)",
        Src::Metric("restore/peak_rss_mb/default_cache"),
    ),
    (
        "host takeover of 1,000 sessions, death to first accepted, p50 (lease 5 s)",
        Src::Metric("host/takeover_1000/p50"),
    ),
    (
        "host takeover of 1,000 sessions, death to first accepted, p99 (lease 5 s)",
        Src::Metric("host/takeover_1000/p99"),
    ),
    (
        "host takeover of 1,000 sessions, past the lease's expiry, p50",
        Src::Metric("host/takeover_1000/after_expiry_p50"),
    ),
    (
        "host takeover of 1,000 sessions, past the lease's expiry, p99",
        Src::Metric("host/takeover_1000/after_expiry_p99"),
    ),
    (
        "renewal of 10,000 leases (one statement, one round trip)",
        Src::Metric("host/renewal_10000/ms"),
    ),
    (
        "renewal of 10,000 leases, rows extended per second",
        Src::Metric("host/renewal_10000/rows_per_s"),
    ),
    (
        "notify serve, signed, 1 connection: completions",
        Src::Metric("serve/http/1/per_s"),
    ),
    (
        "notify serve, signed, 1 connection: latency p50",
        Src::Metric("serve/http/1/p50_ms"),
    ),
    (
        "notify serve, signed, 1 connection: latency p99",
        Src::Metric("serve/http/1/p99_ms"),
    ),
    (
        "in-process notify_process_completion, 1 task: completions",
        Src::Metric("serve/in_process/1/per_s"),
    ),
    (
        "in-process notify_process_completion, 1 task: latency p50",
        Src::Metric("serve/in_process/1/p50_ms"),
    ),
    (
        "in-process notify_process_completion, 1 task: latency p99",
        Src::Metric("serve/in_process/1/p99_ms"),
    ),
    (
        "notify serve, signed, 64 connections: completions",
        Src::Metric("serve/http/64/per_s"),
    ),
    (
        "notify serve, signed, 64 connections: latency p50",
        Src::Metric("serve/http/64/p50_ms"),
    ),
    (
        "notify serve, signed, 64 connections: latency p99",
        Src::Metric("serve/http/64/p99_ms"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: completions",
        Src::Metric("serve/in_process/64/per_s"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: latency p50",
        Src::Metric("serve/in_process/64/p50_ms"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: latency p99",
        Src::Metric("serve/in_process/64/p99_ms"),
    ),
    (
        "notify serve, signed, 64 connections: server CPU per completion",
        Src::Metric("serve/http/64/cpu_us"),
    ),
    (
        "notify serve, signed, 64 connections: of which its journal threads",
        Src::Metric("serve/http/64/journal_cpu_us"),
    ),
    (
        "notify serve, signed, 64 connections: wrk CPU per request",
        Src::Metric("serve/http/64/generator_cpu_us"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: CPU per completion",
        Src::Metric("serve/in_process/64/cpu_us"),
    ),
    (
        "notify serve, signed, 64 connections: appends per journal commit",
        Src::Metric("serve/http/64/appends_per_commit"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: appends per journal commit",
        Src::Metric("serve/in_process/64/appends_per_commit"),
    ),
    (
        "notify serve, signed, 64 connections: journal threads waiting for a core",
        Src::Metric("serve/http/64/journal_wait_ms_per_s"),
    ),
    (
        "in-process notify_process_completion, 64 tasks: journal threads waiting for a core",
        Src::Metric("serve/in_process/64/journal_wait_ms_per_s"),
    ),
    (
        "notify serve, static answer (GET /healthz), 64 connections",
        Src::Metric("serve/floor/64/per_s"),
    ),
    (
        "notify serve, static answer, 64 connections: server CPU per request",
        Src::Metric("serve/floor/64/cpu_us"),
    ),
    (
        "notify serve, static answer, 64 connections: wrk CPU per request",
        Src::Metric("serve/floor/64/generator_cpu_us"),
    ),
    (
        "notify serve, signed, 256 connections: completions",
        Src::Metric("serve/http/256/per_s"),
    ),
    (
        "notify serve, signed, 256 connections: latency p50",
        Src::Metric("serve/http/256/p50_ms"),
    ),
    (
        "notify serve, signed, 256 connections: latency p99",
        Src::Metric("serve/http/256/p99_ms"),
    ),
    (
        "in-process notify_process_completion, 256 tasks: completions",
        Src::Metric("serve/in_process/256/per_s"),
    ),
    (
        "in-process notify_process_completion, 256 tasks: latency p50",
        Src::Metric("serve/in_process/256/p50_ms"),
    ),
    (
        "in-process notify_process_completion, 256 tasks: latency p99",
        Src::Metric("serve/in_process/256/p99_ms"),
    ),
    (
        "notify serve: resident memory per idle connection (1,000 held open)",
        Src::Metric("serve/idle_connection_kib"),
    ),
];
