//! A batch acknowledgement is traced as one `notify.ack` span, alone in its test binary:
//! it sets this thread's default subscriber, and tracing caches each callsite's interest
//! process-wide, so a test on another thread reaching the same span first could race
//! the subscriber's registration and leave the span disabled (it did, in about one run
//! in eight of `batch_ack.rs`, where this test lived beside eleven others).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod batch_support;

use std::sync::{Arc, Mutex};

use batch_support::{Fixture, redb};
use notify_session::{AckError, TxAckError};

/// A span's fields as recorded, in order: (name, value).
type SpanFields = Vec<(String, String)>;

/// The `notify.ack` spans seen on this thread: each span's fields, `outcome` included
/// once recorded (`None`: another span).
#[derive(Default)]
struct AckSpans {
    next: std::sync::atomic::AtomicU64,
    spans: Arc<Mutex<Vec<Option<SpanFields>>>>,
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl tracing::Subscriber for AckSpans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut spans = self.spans.lock().unwrap();
        let fields = (attrs.metadata().name() == "notify.ack").then(|| {
            let mut fields = Vec::new();
            attrs.record(&mut Fields(&mut fields));
            fields
        });
        spans.push(fields);
        tracing::span::Id::from_u64(id + 1)
    }
    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.spans.lock().unwrap();
        let index = usize::try_from(span.into_u64() - 1).unwrap();
        if let Some(Some(fields)) = spans.get_mut(index) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Batch acknowledgements, plain and transactional, each run in one `notify.ack`
/// span (as a single acknowledgement does) naming the session, the loop, how many
/// notifications, and the outcome.
#[tokio::test]
async fn a_batch_ack_is_traced_as_one_notify_ack_span() {
    let spans = AckSpans::default();
    let seen = Arc::clone(&spans.spans);
    let _guard = tracing::subscriber::set_default(spans);
    let (_dir, journal) = redb();
    let mut f = Fixture::new(journal.clone(), 3).await;
    f.batch(2).await.ack().await.unwrap();
    let batch = f.batch(1).await;
    f.session
        .end(notify_session::IfPending::Abandon)
        .await
        .unwrap();
    let err = batch.ack_with(&journal, |_, _| Ok(())).await.unwrap_err();
    assert!(
        matches!(err.error, TxAckError::Ack(AckError::SessionEnded { .. })),
        "{err:?}"
    );
    let acks: Vec<SpanFields> = seen.lock().unwrap().iter().flatten().cloned().collect();
    let field = |span: &[(String, String)], name: &str| {
        span.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(acks.len(), 2, "one span per batch: {acks:?}");
    let session = f.session.id().to_string();
    for (span, (count, outcome)) in acks.iter().zip([("2", "acknowledged"), ("1", "ended")]) {
        assert_eq!(
            field(span, "session").as_deref(),
            Some(session.as_str()),
            "{span:?}"
        );
        assert!(
            field(span, "loop_id").is_some_and(|l| !l.is_empty()),
            "{span:?}"
        );
        assert_eq!(
            field(span, "notifications").as_deref(),
            Some(count),
            "{span:?}"
        );
        assert_eq!(
            field(span, "outcome").as_deref(),
            Some(format!("{outcome:?}").as_str()),
            "{span:?}"
        );
    }
}
