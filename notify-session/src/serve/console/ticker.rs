//! The console's background tasks, started with the server and ended by its drain:
//! every second a sample of appends and acknowledgements (the rate chart) and a look
//! at the scrub; every [`census::EVERY`](super::census::EVERY) a census.

use std::time::Duration;

use notify_journal::ScrubState;
use notify_types::Timestamp;

use super::census;
use super::observed::{Sample, ScrubSeen};
use crate::serve::state::{AppState, until_true};

/// The sampling interval.
const TICK: Duration = Duration::from_secs(1);

/// Starts the sampler and the census; both end when the server begins to drain.
pub(crate) fn spawn(state: &AppState) {
    let sampler = state.clone();
    tokio::spawn(async move {
        let mut drain = sampler.drain_signal();
        let mut last: Option<(u64, u64)> = None;
        let mut tick = interval(TICK);
        loop {
            tokio::select! {
                _ = tick.tick() => sample(&sampler, &mut last),
                () = until_true(&mut drain) => break,
            }
        }
    });
    let census_state = state.clone();
    tokio::spawn(async move {
        let mut drain = census_state.drain_signal();
        let mut tick = interval(census::EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = until_true(&mut drain) => break,
            }
            let Ok(host) = census_state.host() else {
                // Not started yet: look again in a second.
                tokio::time::sleep(TICK).await;
                tick.reset_immediately();
                continue;
            };
            let console = &census_state.inner.console;
            // A "Count now" under way counts for this round.
            // (Or one that ran recently rests.)
            let Ok(ticket) = console.census.begin() else {
                continue;
            };
            let reader = host.reader();
            let taken = tokio::select! {
                c = census::take(reader.as_ref(), console.inspect.as_ref()) => c,
                () = until_true(&mut drain) => break,
            };
            ticket.finish(taken);
        }
    });
}

/// An interval that, after a stall (a busy runtime, a suspended machine), ticks once
/// and then every `period` from there: no burst of catch-up ticks.
fn interval(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

/// One second's sample: the appends the journal answered (its commit counters, or
/// the completions this server accepted when the console has no view of the journal)
/// and the acknowledgements this server journaled.
fn sample(state: &AppState, last: &mut Option<(u64, u64)>) {
    let console = &state.inner.console;
    let (acks, accepted) = console.observed.totals();
    let appends = console
        .inspect
        .as_ref()
        .map_or(accepted, |i| i.commit_stats().appends);
    if let Some((a, k)) = *last {
        console.observed.sample(Sample {
            appends: appends.saturating_sub(a),
            acks: acks.saturating_sub(k),
        });
    }
    *last = Some((appends, acks));
    if let Some(status) = console.inspect.as_ref().and_then(|i| i.scrub()) {
        let (state, damaged) = match &status.state {
            ScrubState::Off => ("off".to_owned(), false),
            ScrubState::Scrubbing => ("scrubbing".to_owned(), false),
            ScrubState::Waiting => ("waiting: the last pass was clean".to_owned(), false),
            ScrubState::Damaged(what) => (format!("damaged: {what}"), true),
            ScrubState::Stopped => ("stopped".to_owned(), false),
            other => (format!("{other:?}"), false),
        };
        console.observed.scrub(ScrubSeen {
            at: Timestamp::now(),
            state,
            clean_passes: status.clean_passes,
            damaged,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stall_is_not_followed_by_a_burst_of_ticks() {
        let mut tick = interval(TICK);
        tick.tick().await;
        // Five periods pass without a tick taken.
        tokio::time::advance(TICK * 5).await;
        tick.tick().await;
        let start = tokio::time::Instant::now();
        // The next tick is a whole period later, not at once.
        tick.tick().await;
        assert_eq!(start.elapsed(), TICK);
    }
}
