//! The console's work per request is bounded whatever the journal holds: on a redb
//! journal with long live sessions the sessions page filtered to "with pending" stops
//! once its frame budget is spent, says so, and continues from there with its cursor;
//! a session's page does not restore a log longer than the budget (it says so) and
//! pages through the timeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod serve_support;

use notify_journal::{RedbDurability, RedbJournal, RedbOptions};
use notify_testkit::bench::fixture;
use reqwest::StatusCode;
use serve_support::{Server, Start, journal_dir};

/// A page's budget of frames read (`pages/mod.rs`).
const BUDGET: u64 = 10_000;

async fn page(url: &str) -> String {
    let r = reqwest::get(url).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{url}");
    r.text().await.unwrap()
}

/// Appends `frames` completions (none consumed: all pending) to fixture session `n`.
async fn fill(journal: &RedbJournal, n: u64, frames: u64) {
    let s = fixture::session(n);
    let mut i = 0;
    while i < frames {
        let end = (i + 500).min(frames);
        let records = (i..end)
            .map(|k| fixture::record(s, n * 100_000 + k))
            .collect();
        journal.append_all(s, records, None).await.unwrap();
        i = end;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_stop_at_their_frame_budget_and_say_so() {
    let (_dir, path) = journal_dir();
    let journal = RedbJournal::open(
        &path,
        RedbOptions::default().durability(RedbDurability::NonDurableForTestsOnly),
    )
    .unwrap();
    // Two live sessions of 6,000 pending completions each (together past the budget),
    // and one of 10,500 (alone past it).
    let (a, b, c) = (
        fixture::session(1),
        fixture::session(2),
        fixture::session(3),
    );
    fill(&journal, 1, 6_000).await;
    fill(&journal, 2, 6_000).await;
    fill(&journal, 3, BUDGET + 500).await;
    journal.close();

    let server = Server::start(&Start::redb(&path, &[]).arg("--insecure-unsigned"));
    let base = &server.url;

    // "With pending": the first session's log is read whole (6,000 frames), the
    // second's would pass the budget: the page stops before it and says so.
    let first = page(&format!("{base}/console/sessions?pending=1")).await;
    assert!(first.contains(&a.to_string()), "{first}");
    assert!(!first.contains(&b.to_string()), "{first}");
    assert!(first.contains("stopped early"), "{first}");
    assert!(
        first.contains(&format!("budget of {BUDGET} frames")),
        "{first}"
    );
    let next = format!("/console/sessions?after={a}&amp;pending=1");
    assert!(first.contains(&next), "{first}");
    // Its cursor continues from there.
    let second = page(&format!("{base}/console/sessions?after={a}&pending=1")).await;
    assert!(second.contains(&b.to_string()), "{second}");
    // Its row: head 6,000, and its pending counted (6,000 completions, none consumed).
    assert!(second.contains("<td>6000</td><td>6000</td>"), "{second}");

    // A session longer than the budget: pending is not computed on its page, in words,
    // and the timeline pages on.
    let long = page(&format!("{base}/console/sessions/{c}")).await;
    assert!(long.contains("Pending per loop"), "{long}");
    assert!(
        long.contains(&format!("more than a page&#39;s budget of {BUDGET} frames")),
        "{long}"
    );
    assert!(
        long.contains(&format!("/console/sessions/{c}?from=201")),
        "{long}"
    );
    let later = page(&format!("{base}/console/sessions/{c}?from=10401")).await;
    assert!(later.contains("<td>10500</td>"), "{later}");
    assert!(!later.contains("later frames"), "{later}");
    // A session within the budget is restored on its page.
    let short = page(&format!("{base}/console/sessions/{a}")).await;
    assert!(short.contains("<td>6000</td>"), "{short}");
}
