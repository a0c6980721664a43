//! The charts `cargo xtask bench` draws, and the figures each one plots.

use super::charts::{Chart, Series, Shape};
use super::results::Src::{Crit, Metric};

/// Every chart, in the order the page shows them.
pub(super) const CHARTS: &[Chart] = &[
    Chart {
        file: "appenders.svg",
        title: "Durable appends per second against appenders",
        x_desc: "appenders (raw redb, SQLite: records per transaction)",
        y_desc: "appends/s",
        shape: Shape::LogLines,
        series: &[
            Series {
                label: "redb journal",
                points: &[
                    (1.0, Crit("append/journal/1")),
                    (16.0, Crit("append/journal/16")),
                    (64.0, Crit("append/journal/64")),
                    (256.0, Crit("append/journal/256")),
                    (1024.0, Crit("append/journal/1024")),
                ],
            },
            Series {
                label: "raw redb, minimal layout (K per txn)",
                points: &[
                    (1.0, Crit("append/raw_redb_minimal/1")),
                    (64.0, Crit("append/raw_redb_minimal/64")),
                    (1000.0, Crit("append/raw_redb_minimal/1000")),
                ],
            },
            Series {
                label: "SQLite WAL synchronous=FULL (K per txn)",
                points: &[
                    (1.0, Crit("append/sqlite_wal_full/1")),
                    (64.0, Crit("append/sqlite_wal_full/64")),
                ],
            },
            Series {
                label: "persistent-queue group (64 producers)",
                points: &[(64.0, Crit("append/persistent_queue_group/64"))],
            },
            Series {
                label: "PostgreSQL journal (8 hot sessions)",
                points: &[
                    (1.0, Metric("pg_shapes/hot8/1/journal")),
                    (64.0, Metric("pg_shapes/hot8/64/journal")),
                    (1024.0, Metric("pg_shapes/hot8/1024/journal")),
                ],
            },
            Series {
                label: "PostgreSQL bare autocommit INSERT (8 hot sessions)",
                points: &[
                    (1.0, Metric("pg_shapes/hot8/1/bare")),
                    (64.0, Metric("pg_shapes/hot8/64/bare")),
                    (1024.0, Metric("pg_shapes/hot8/1024/bare")),
                ],
            },
        ],
    },
    Chart {
        file: "sessions.svg",
        title: "64 appenders spread over sessions (redb journal)",
        x_desc: "sessions",
        y_desc: "appends/s",
        shape: Shape::LogLines,
        series: &[
            Series {
                label: "round robin over the sessions",
                points: &[
                    (1.0, Crit("spread/journal/1")),
                    (8.0, Crit("spread/journal/8")),
                    (1000.0, Crit("spread/journal/1000")),
                    (100_000.0, Crit("spread/journal/100000")),
                ],
            },
            Series {
                label: "140k fresh commands, sessions shuffled",
                points: &[
                    (1.0, Metric("spread_shuffled/1")),
                    (8.0, Metric("spread_shuffled/8")),
                    (1000.0, Metric("spread_shuffled/1000")),
                    (100_000.0, Metric("spread_shuffled/100000")),
                ],
            },
        ],
    },
    Chart {
        file: "takeover.svg",
        title: "Host takeover of 1,000 sessions on PostgreSQL (lease 5 s)",
        x_desc: "percentile over the sessions",
        y_desc: "ms",
        shape: Shape::Bars(&["p50", "p99", "max"]),
        series: &[
            Series {
                label: "from the old host's death to the first accepted",
                points: &[
                    (0.0, Metric("host/takeover_1000/p50")),
                    (1.0, Metric("host/takeover_1000/p99")),
                    (2.0, Metric("host/takeover_1000/max")),
                ],
            },
            Series {
                label: "from the lease's expiry to the first accepted",
                points: &[
                    (0.0, Metric("host/takeover_1000/after_expiry_p50")),
                    (1.0, Metric("host/takeover_1000/after_expiry_p99")),
                ],
            },
        ],
    },
    Chart {
        file: "serve.svg",
        title: "Signed completions over HTTP against in-process delivery (redb)",
        x_desc: "connections (in process: tasks)",
        y_desc: "completions/s",
        shape: Shape::LogLines,
        series: &[
            Series {
                label: "notify serve, HTTP/1.1, signed",
                points: &[
                    (1.0, Metric("serve/http/1/per_s")),
                    (64.0, Metric("serve/http/64/per_s")),
                    (256.0, Metric("serve/http/256/per_s")),
                ],
            },
            Series {
                label: "in process: notify_process_completion",
                points: &[
                    (1.0, Metric("serve/in_process/1/per_s")),
                    (64.0, Metric("serve/in_process/64/per_s")),
                    (256.0, Metric("serve/in_process/256/per_s")),
                ],
            },
        ],
    },
];
