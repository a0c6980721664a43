//! The comparison table: each measured figure beside its same-run baseline, judged
//! against its issue's target.

use super::results::Src;

/// How a figure is judged.
#[derive(Clone, Copy)]
pub(super) enum Goal {
    /// rate(measured) / rate(baseline) must be at least this.
    RateAtLeast(f64),
    /// time(measured) / time(baseline) must be at most this.
    TimeAtMost(f64),
    /// metric(measured) / metric(baseline) must be at most this.
    ValueAtMost(f64),
    /// The measured metric itself must be at most this (no baseline).
    AbsAtMost(f64),
    /// Reported, no target.
    Info,
}

impl Goal {
    /// The bound this goal sets on the measured-to-baseline ratio, if it sets one.
    pub(super) fn ratio_target(&self) -> Option<f64> {
        match *self {
            Goal::RateAtLeast(t) | Goal::TimeAtMost(t) | Goal::ValueAtMost(t) => Some(t),
            Goal::AbsAtMost(_) | Goal::Info => None,
        }
    }
}

/// One comparison: a figure, its baseline (none: judged on its own) and its goal.
pub(super) struct Row {
    pub(super) what: &'static str,
    pub(super) measured: Src,
    pub(super) baseline: Option<Src>,
    pub(super) goal: Goal,
}

fn row(what: &'static str, measured: Src, baseline: Src, goal: Goal) -> Row {
    Row {
        what,
        measured,
        baseline: Some(baseline),
        goal,
    }
}

/// The comparisons, each against its same-run baseline and its issue's target.
pub(super) fn rows() -> Vec<Row> {
    use Goal::*;
    use Src::{Crit, Metric};
    let mut rows = vec![
        // Issue 11: today's format (3) costs no more than 5% of format 1's append rate.
        row(
            "format 3 vs format 1, 1 appender",
            Metric("paired/format2_vs_format1_1/a"),
            Metric("paired/format2_vs_format1_1/b"),
            RateAtLeast(0.95),
        ),
        row(
            "format 3 vs format 1, 64 appenders",
            Metric("paired/format2_vs_format1_64/a"),
            Metric("paired/format2_vs_format1_64/b"),
            RateAtLeast(0.95),
        ),
        row(
            "format 3 vs format 1, 1024 appenders",
            Metric("paired/format2_vs_format1_1024/a"),
            Metric("paired/format2_vs_format1_1024/b"),
            RateAtLeast(0.95),
        ),
        // Issues 16 and 24: against raw redb's minimal layout and the peers.
        row(
            "journal, 1 appender vs raw redb minimal 1/txn",
            Metric("paired/journal_1_vs_raw_minimal_1/a"),
            Metric("paired/journal_1_vs_raw_minimal_1/b"),
            RateAtLeast(0.95),
        ),
        row(
            "journal, 64 appenders vs raw redb minimal 64/txn",
            Metric("paired/journal_64_vs_raw_minimal_64/a"),
            Metric("paired/journal_64_vs_raw_minimal_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "journal, 64 appenders vs persistent-queue group",
            Metric("paired/journal_64_vs_persistent_queue_64/a"),
            Metric("paired/journal_64_vs_persistent_queue_64/b"),
            RateAtLeast(2.0),
        ),
        row(
            "journal, 1024 appenders vs raw redb minimal 1000/txn",
            Metric("paired/journal_1024_vs_raw_minimal_1000/a"),
            Metric("paired/journal_1024_vs_raw_minimal_1000/b"),
            RateAtLeast(0.8),
        ),
        row(
            "journal, 16 appenders vs raw redb minimal 64/txn",
            Crit("append/journal/16"),
            Crit("append/raw_redb_minimal/64"),
            Info,
        ),
        row(
            "journal, 256 appenders vs raw redb minimal 1000/txn",
            Crit("append/journal/256"),
            Crit("append/raw_redb_minimal/1000"),
            Info,
        ),
        row(
            "stretch: journal, 1 appender vs SQLite WAL FULL 1/txn",
            Metric("paired/journal_1_vs_sqlite_1/a"),
            Metric("paired/journal_1_vs_sqlite_1/b"),
            RateAtLeast(1.0),
        ),
        row(
            "journal, 64 appenders vs SQLite WAL FULL 64/txn",
            Crit("append/journal/64"),
            Crit("append/sqlite_wal_full/64"),
            Info,
        ),
        row(
            "64 appenders over 8 sessions vs 1 session",
            Crit("spread/journal/8"),
            Crit("spread/journal/1"),
            Info,
        ),
        row(
            "64 appenders over 1,000 sessions vs 1 session (paired rounds)",
            Metric("paired/spread_1000_vs_1/a"),
            Metric("paired/spread_1000_vs_1/b"),
            Info,
        ),
        row(
            "64 appenders over 100,000 sessions vs 1 session (paired rounds)",
            Metric("paired/spread_100000_vs_1/a"),
            Metric("paired/spread_100000_vs_1/b"),
            Info,
        ),
        row(
            "140k fresh commands, 64 appenders over 8 shuffled sessions vs 1",
            Metric("spread_shuffled/8"),
            Metric("spread_shuffled/1"),
            Info,
        ),
        row(
            "140k fresh commands, 64 appenders over 1,000 shuffled sessions vs 1",
            Metric("spread_shuffled/1000"),
            Metric("spread_shuffled/1"),
            RateAtLeast(0.7),
        ),
        row(
            "140k fresh commands, 64 appenders over 100,000 shuffled sessions vs 1",
            Metric("spread_shuffled/100000"),
            Metric("spread_shuffled/1"),
            // Issue 34's target for this row (it raised issue 20's 0.5×).
            RateAtLeast(0.6),
        ),
        row(
            "quick-repair on vs off, 1 appender",
            Metric("paired/quick_repair_vs_default_1/a"),
            Metric("paired/quick_repair_vs_default_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "quick-repair on vs off, 64 appenders",
            Metric("paired/quick_repair_vs_default_64/a"),
            Metric("paired/quick_repair_vs_default_64/b"),
            RateAtLeast(0.9),
        ),
        // Issue 20, item 11: the key census confirming every index miss costs at most
        // 10% of the append rate.
        row(
            "key census on vs off, 1 appender",
            Metric("paired/census_vs_off_1/a"),
            Metric("paired/census_vs_off_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 64 appenders",
            Metric("paired/census_vs_off_64/a"),
            Metric("paired/census_vs_off_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 1024 appenders",
            Metric("paired/census_vs_off_1024/a"),
            Metric("paired/census_vs_off_1024/b"),
            RateAtLeast(0.9),
        ),
        row(
            "key census on vs off, 64 appenders over 1,000 sessions",
            Metric("paired/census_vs_off_spread_1000/a"),
            Metric("paired/census_vs_off_spread_1000/b"),
            RateAtLeast(0.9),
        ),
        // Issue 20, item 11: the background scrub, running continuously at its default
        // pace, costs at most 10% of the append rate.
        row(
            "background scrub running vs off, 1 appender",
            Metric("paired/scrub_vs_off_1/a"),
            Metric("paired/scrub_vs_off_1/b"),
            RateAtLeast(0.9),
        ),
        row(
            "background scrub running vs off, 64 appenders",
            Metric("paired/scrub_vs_off_64/a"),
            Metric("paired/scrub_vs_off_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "bytes on disk per notification, 1M records, format 3 vs 1",
            Metric("disk/format2/1m"),
            Metric("disk/format1/1m"),
            ValueAtMost(0.5),
        ),
        row(
            "bytes on disk per notification, 10k records, format 3 vs 1",
            Metric("disk/format2/10k"),
            Metric("disk/format1/10k"),
            Info,
        ),
        // Issue 12: steady state (2,000 sessions x 500, at most 50 live, each ended and
        // purged after a one-wave horizon).
        row(
            "steady state: final file size vs after the first 100 sessions",
            Metric("retention/file_bytes/final"),
            Metric("retention/file_bytes/after_100_sessions"),
            ValueAtMost(1.5),
        ),
        row(
            "steady state: 64 appenders on the plateaued file vs a fresh file",
            Metric("paired/steady_vs_fresh_64/a"),
            Metric("paired/steady_vs_fresh_64/b"),
            RateAtLeast(0.9),
        ),
        row(
            "64 appenders while a 100,000-frame backlog is purged vs a fresh file",
            Metric("paired/purging_vs_fresh_64/a"),
            Metric("paired/purging_vs_fresh_64/b"),
            Info,
        ),
        row(
            "offline compaction after purging everything: size after vs before",
            Metric("retention/compact/after"),
            Metric("retention/compact/before"),
            Info,
        ),
        // Issue 20, item 10: 1M tombstones dropped (steps of 1,024) while 64 appenders
        // append; an append waits for at most about one step.
        row(
            "worst append latency while 1M tombstones drop vs the longest drop step",
            Metric("retention/drop/append_latency/max"),
            Metric("retention/drop/step/max"),
            Info,
        ),
        Row {
            what: "restore, 1M-frame session, 1,000 pending: peak RSS growth (MB), 1 MiB cache",
            measured: Metric("restore/peak_rss_growth_mb/cache_1mib"),
            baseline: None,
            goal: AbsAtMost(32.0),
        },
        Row {
            what: "restore, the same, default options (16 MiB cache): peak RSS growth (MB)",
            measured: Metric("restore/peak_rss_growth_mb/default_cache"),
            baseline: None,
            goal: AbsAtMost(32.0),
        },
        row(
            "open 1M records vs 10k, no verify (time)",
            Crit("open/off_1m"),
            Crit("open/off_10k"),
            TimeAtMost(3.0),
        ),
        row(
            "open 1M records, verify pages vs off (time)",
            Crit("open/pages_1m"),
            Crit("open/off_1m"),
            Info,
        ),
        row(
            "open after crash, quick-repair vs not (time)",
            Crit("open/after_crash_100k_quick_repair"),
            Crit("open/after_crash_100k"),
            Info,
        ),
        row(
            "open after crash, quick-repair vs not, verify off (time)",
            Crit("open/after_crash_100k_quick_repair_off"),
            Crit("open/after_crash_100k_off"),
            Info,
        ),
        row(
            "session notify, 64 supervisors vs journal-only",
            Crit("end_to_end/notify/64"),
            Crit("end_to_end/journal_only/64"),
            RateAtLeast(0.8),
        ),
        row(
            "transactional ack (ack_with) vs plain ack, 1 consumer",
            Crit("txack/tx/1"),
            Crit("txack/plain/1"),
            RateAtLeast(0.8),
        ),
        row(
            "transactional ack (ack_with) vs plain ack, 64 consumers",
            Crit("txack/tx/64"),
            Crit("txack/plain/64"),
            RateAtLeast(0.8),
        ),
        row(
            "PostgreSQL transactional ack (ack_in_pg) vs plain ack, 1 consumer",
            Crit("txack_pg/tx/1"),
            Crit("txack_pg/plain/1"),
            Info,
        ),
        row(
            "PostgreSQL transactional ack (ack_in_pg) vs plain ack, 64 consumers",
            Crit("txack_pg/tx/64"),
            Crit("txack_pg/plain/64"),
            Info,
        ),
        row(
            "PostgreSQL transactional ack (ack_in_pg) vs plain ack, 64 consumers over 8 sessions",
            Crit("txack_pg/tx/64x8"),
            Crit("txack_pg/plain/64x8"),
            Info,
        ),
        row(
            "PostgreSQL pipelined transactional ack (ack_in_pg_with) vs plain ack, 1 consumer",
            Crit("txack_pg/tx_with/1"),
            Crit("txack_pg/plain/1"),
            Info,
        ),
        row(
            "PostgreSQL pipelined transactional ack (ack_in_pg_with) vs plain ack, 64 consumers",
            Crit("txack_pg/tx_with/64"),
            Crit("txack_pg/plain/64"),
            Info,
        ),
        row(
            "PostgreSQL pipelined transactional ack (ack_in_pg_with) vs ack_in_pg, 1 consumer",
            Crit("txack_pg/tx_with/1"),
            Crit("txack_pg/tx/1"),
            Info,
        ),
        row(
            "PostgreSQL 1 appender vs redb journal",
            Crit("concurrent_appenders/postgres/1"),
            Crit("concurrent_appenders/redb/1"),
            Info,
        ),
        row(
            "PostgreSQL 64 appenders vs redb journal",
            Crit("concurrent_appenders/postgres/64"),
            Crit("concurrent_appenders/redb/64"),
            Info,
        ),
        row(
            "PostgreSQL 1024 appenders vs redb journal",
            Crit("concurrent_appenders/postgres/1024"),
            Crit("concurrent_appenders/redb/1024"),
            Info,
        ),
        row(
            "PostgreSQL one session, 3 processes vs 1",
            Crit("one_session/postgres/3_processes"),
            Crit("one_session/postgres/1_process"),
            Info,
        ),
        // Issue 21: the host runtime's retention yields to appends.
        row(
            "PostgreSQL 64 appenders while a host's retention purges vs without",
            Metric("paired/appends_retention_vs_none_64/a"),
            Metric("paired/appends_retention_vs_none_64/b"),
            RateAtLeast(0.8),
        ),
    ];
    // Issue 24: PgJournal against the bare autocommit insert (a pool of min(N, 64)
    // connections), 4,000 records in a fresh schema, medians of 3; appenders over 8
    // hot sessions and a session per appender. 1024 appenders must also keep the
    // same run's 64-appender rate.
    rows.extend([
        row(
            "PostgreSQL, 1 appender, 8 hot sessions, vs bare insert",
            Metric("pg_shapes/hot8/1/journal"),
            Metric("pg_shapes/hot8/1/bare"),
            RateAtLeast(0.8),
        ),
        row(
            "PostgreSQL, 64 appenders, 8 hot sessions, vs bare insert",
            Metric("pg_shapes/hot8/64/journal"),
            Metric("pg_shapes/hot8/64/bare"),
            RateAtLeast(2.5),
        ),
        row(
            "PostgreSQL, 1024 appenders, 8 hot sessions, vs bare insert",
            Metric("pg_shapes/hot8/1024/journal"),
            Metric("pg_shapes/hot8/1024/bare"),
            RateAtLeast(4.0),
        ),
        row(
            "PostgreSQL, 1024 vs 64 appenders, 8 hot sessions",
            Metric("pg_shapes/hot8/1024/journal"),
            Metric("pg_shapes/hot8/64/journal"),
            RateAtLeast(1.0),
        ),
        row(
            "PostgreSQL, 1 appender, a session each, vs bare insert",
            Metric("pg_shapes/own/1/journal"),
            Metric("pg_shapes/own/1/bare"),
            RateAtLeast(0.8),
        ),
        row(
            "PostgreSQL, 64 appenders, a session each, vs bare insert",
            Metric("pg_shapes/own/64/journal"),
            Metric("pg_shapes/own/64/bare"),
            RateAtLeast(2.5),
        ),
        row(
            "PostgreSQL, 1024 appenders, a session each, vs bare insert",
            Metric("pg_shapes/own/1024/journal"),
            Metric("pg_shapes/own/1024/bare"),
            RateAtLeast(4.0),
        ),
        row(
            "PostgreSQL, 1024 vs 64 appenders, a session each",
            Metric("pg_shapes/own/1024/journal"),
            Metric("pg_shapes/own/64/journal"),
            RateAtLeast(1.0),
        ),
    ]);
    // Issue 31: `notify serve`, signed completions over HTTP/1.1 (one request in flight
    // per connection), against in-process `notify_process_completion` in the same run.
    rows.extend([
        row(
            "notify serve, 1 connection, vs in-process (1 task)",
            Metric("serve/http/1/per_s"),
            Metric("serve/in_process/1/per_s"),
            Info,
        ),
        row(
            "notify serve, 64 connections, vs in-process (64 tasks)",
            Metric("serve/http/64/per_s"),
            Metric("serve/in_process/64/per_s"),
            RateAtLeast(0.5),
        ),
        row(
            "notify serve, 256 connections, vs in-process (256 tasks)",
            Metric("serve/http/256/per_s"),
            Metric("serve/in_process/256/per_s"),
            Info,
        ),
    ]);
    for (measured, baseline, what) in [
        (
            "current_thread/deliver_ack_x1/notify_loop",
            "current_thread/deliver_ack_x1/bare_mpsc_oneshot",
            "loop (current_thread), 1 loop vs bare round trip",
        ),
        (
            "current_thread/deliver_ack_x8/notify_loop",
            "current_thread/deliver_ack_x8/bare_mpsc_oneshot",
            "loop (current_thread), 8 loops vs bare round trips",
        ),
        (
            "multi_thread/deliver_ack_x1/notify_loop",
            "multi_thread/deliver_ack_x1/bare_mpsc_oneshot",
            "loop (multi_thread), 1 loop vs bare round trip",
        ),
        (
            "multi_thread/deliver_ack_x8/notify_loop",
            "multi_thread/deliver_ack_x8/bare_mpsc_oneshot",
            "loop (multi_thread), 8 loops vs bare round trips",
        ),
    ] {
        rows.push(row(
            what,
            Crit(measured),
            Crit(baseline),
            Goal::RateAtLeast(0.5),
        ));
    }
    rows
}
