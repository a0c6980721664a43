//! Output: aligned tables for people, JSON lines for scripts (`--json`), and progress
//! on stderr only when it is a terminal.

use std::io::{BufWriter, IsTerminal as _, Stdout, Write as _};
use std::time::{Duration, Instant};

use crate::error::{CliError, Exit};

/// Standard output, buffered, in the chosen form.
pub(crate) struct Out {
    /// `--json`: one JSON object per line instead of tables.
    pub(crate) json: bool,
    w: BufWriter<Stdout>,
}

/// A failed write to standard output. A reader that went away (`notify show | head`)
/// ends the command quietly.
fn write_failed(e: &std::io::Error) -> CliError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        CliError::new(Exit::Ok, "")
    } else {
        CliError::new(Exit::Failed, format!("writing the output failed: {e}"))
    }
}

impl Out {
    pub(crate) fn new(json: bool) -> Self {
        Self {
            json,
            w: BufWriter::new(std::io::stdout()),
        }
    }

    /// One line of text.
    pub(crate) fn line(&mut self, text: &str) -> Result<(), CliError> {
        writeln!(self.w, "{text}").map_err(|e| write_failed(&e))
    }

    /// One JSON object on its own line.
    pub(crate) fn json(&mut self, value: &serde_json::Value) -> Result<(), CliError> {
        serde_json::to_writer(&mut self.w, value)
            .map_err(std::io::Error::from)
            .and_then(|()| self.w.write_all(b"\n"))
            .map_err(|e| write_failed(&e))
    }

    /// Raw bytes followed by a newline.
    pub(crate) fn bytes_line(&mut self, bytes: &[u8]) -> Result<(), CliError> {
        self.w
            .write_all(bytes)
            .and_then(|()| self.w.write_all(b"\n"))
            .map_err(|e| write_failed(&e))
    }

    pub(crate) fn flush(&mut self) -> Result<(), CliError> {
        self.w.flush().map_err(|e| write_failed(&e))
    }
}

/// A table printed as its rows arrive, in batches: the first batch sets the column
/// widths (later, wider cells push their line out rather than hold the output back).
pub(crate) struct Table {
    headers: &'static [&'static str],
    widths: Option<Vec<usize>>,
}

impl Table {
    pub(crate) fn new(headers: &'static [&'static str]) -> Self {
        Self {
            headers,
            widths: None,
        }
    }

    /// Prints `rows` (the header first, with the first batch).
    pub(crate) fn print(&mut self, out: &mut Out, rows: &[Vec<String>]) -> Result<(), CliError> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.widths.is_none() {
            let columns = rows
                .iter()
                .map(Vec::len)
                .fold(self.headers.len(), usize::max);
            let mut widths = vec![0; columns];
            for (w, h) in widths.iter_mut().zip(self.headers) {
                *w = h.chars().count();
            }
            for row in rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            // A table without headers (name/value pairs) has no header line.
            if !self.headers.is_empty() {
                let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
                out.line(&layout(&widths, &header))?;
            }
            self.widths = Some(widths);
        }
        if let Some(widths) = &self.widths {
            for row in rows {
                out.line(&layout(widths, row))?;
            }
        }
        Ok(())
    }

    /// Whether any row was printed.
    pub(crate) fn printed(&self) -> bool {
        self.widths.is_some()
    }
}

/// One line: every cell but the last padded to its column's width.
fn layout(widths: &[usize], cells: &[String]) -> String {
    let mut line = String::new();
    let last = cells.len().saturating_sub(1);
    for (i, cell) in cells.iter().enumerate() {
        line.push_str(cell);
        if i < last {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    // An empty last cell leaves no trailing blanks.
    line.truncate(line.trim_end().len());
    line
}

/// Progress of long work on stderr, only when stderr is a terminal (piped or
/// redirected, it says nothing). The line is cleared when the work ends.
pub(crate) struct Progress {
    on: bool,
    last: Option<Instant>,
    shown: bool,
}

/// How often the progress line is redrawn at most.
const REDRAW: Duration = Duration::from_millis(150);

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            on: std::io::stderr().is_terminal(),
            last: None,
            shown: false,
        }
    }

    /// Redraws the line with `text()` if the last redraw is old enough.
    pub(crate) fn update(&mut self, text: impl FnOnce() -> String) {
        if !self.on || self.last.is_some_and(|t| t.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{}", text());
        let _ = err.flush();
    }

    /// Awaits `work`, showing `what` and the time spent until it ends.
    pub(crate) async fn during<T>(&mut self, what: &str, work: impl Future<Output = T>) -> T {
        if !self.on {
            return work.await;
        }
        let start = Instant::now();
        let mut work = std::pin::pin!(work);
        let mut tick = tokio::time::interval(REDRAW);
        loop {
            tokio::select! {
                done = &mut work => {
                    self.clear();
                    return done;
                }
                _ = tick.tick() => {
                    self.update(|| format!("{what}… {:.1} s", start.elapsed().as_secs_f64()));
                }
            }
        }
    }

    /// Clears the line.
    pub(crate) fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.shown = false;
            self.last = None;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A byte count for people: `1.2 MB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    match (unit, UNITS.get(unit)) {
        (0, _) => format!("{n} B"),
        (_, Some(u)) => format!("{value:.1} {u}"),
        (_, None) => format!("{n} B"),
    }
}
