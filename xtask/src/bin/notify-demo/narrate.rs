//! The demo's narration: headings, introductions, timestamps, the tally of answers.

use std::collections::BTreeMap;
use std::time::Instant;

use notify_session::prelude::*;

/// Counts every answer the demo received, for the summary.
#[derive(Default)]
pub(crate) struct Tally(pub(crate) BTreeMap<&'static str, usize>);

impl Tally {
    pub(crate) fn record(&mut self, answer: &Result<Notified, NotifyError>) -> String {
        let (key, text) = match answer {
            Ok(Notified::Accepted) => ("Accepted", "Accepted".to_owned()),
            Ok(Notified::Duplicate) => ("Duplicate", "Duplicate".to_owned()),
            Err(e) => match e.disposition() {
                Some(Disposition::Collision) => ("Collision", format!("Collision ({e})")),
                Some(Disposition::Stopped) => ("Stopped", format!("Stopped ({e})")),
                _ => ("Error", format!("error ({e})")),
            },
        };
        *self.0.entry(key).or_default() += 1;
        text
    }
}

/// The demo's clock: every timestamp is the time since it started.
pub(crate) struct Clock(pub(crate) Instant);

impl Clock {
    pub(crate) fn stamp(&self) -> String {
        format!("+{:>6.3}s", self.0.elapsed().as_secs_f64())
    }
}

/// Prints a part's heading.
pub(crate) fn heading(text: &str) {
    println!("\n== {text}");
}

/// Prints an introduction, one indented line each.
pub(crate) fn intro(lines: &[&str]) {
    for line in lines {
        println!("   {line}");
    }
}

/// A state and its reason, as `State/Reason`.
pub(crate) fn pair(state: ProcessLifecycleState, reason: ProcessTerminalReason) -> String {
    format!("{state}/{reason}")
}

/// An ID's last eight characters.
pub(crate) fn short(id: impl std::fmt::Display) -> String {
    let id = id.to_string();
    let start = id.len().saturating_sub(8);
    id.get(start..).unwrap_or(&id).to_owned()
}
