//! The loop's side over the wire: `GET …/notifications` (long poll),
//! `GET …/notifications/stream` (server-sent events) and `POST …/{command_id}/ack`.
//! The redelivery rule is `serve::consume`'s.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::serve::extract::{ApiPath as Path, ApiQuery as Query};
use axum::Extension;
use axum::extract::{OriginalUri, State};
use axum::http::{StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use notify_types::{LoopId, SessionId, consumed_event_id};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

use super::{command_id, json, loop_id, session_id};
use crate::serve::auth::WebhookId;
use crate::serve::config::{DEFAULT_VISIBILITY, MAX_POLL_WAIT};
use crate::serve::console::{AnswerKind, note};
use crate::serve::consume::{AckOutcome, Lent, LoopSlot};
use crate::serve::error::{ApiError, error_chain};
use crate::serve::locate::{Open, served, with_owner};
use crate::serve::state::AppState;

/// The most notifications one poll returns.
const MAX_BATCH: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PollQuery {
    max: Option<usize>,
    wait_ms: Option<u64>,
    visibility_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StreamQuery {
    max_in_flight: Option<usize>,
    visibility_ms: Option<u64>,
}

fn visibility(state: &AppState, ms: Option<u64>) -> Result<Duration, ApiError> {
    let v = ms.map_or(DEFAULT_VISIBILITY, Duration::from_millis);
    if v < Duration::from_millis(100) || v > state.inner.max_visibility {
        return Err(ApiError::Invalid {
            field: Some("visibility_ms".into()),
            detail: format!(
                "`visibility_ms` must be 100 to {}",
                state.inner.max_visibility.as_millis()
            ),
        });
    }
    Ok(v)
}

fn lent_json(lent: &Lent) -> serde_json::Value {
    let raw = String::from_utf8(lent.notification.clone())
        .ok()
        .and_then(|s| RawValue::from_string(s).ok());
    json!({
        "command_id": lent.command_id.to_string(),
        "delivery": lent.delivery,
        "notification": raw,
    })
}

/// The loop's slot here, or the answer that says where the session is.
async fn slot(
    state: &AppState,
    session: SessionId,
    loop_id: LoopId,
    uri: &Uri,
) -> Result<Arc<LoopSlot>, ApiError> {
    served(state, session, uri, Open::IfExists).await?;
    state
        .inner
        .consumers
        .get(session, loop_id)
        .ok_or(ApiError::LoopNotFound { loop_id })
}

/// The answer when the loop's consumer ended (the loop shut, or the session ended
/// or moved): where the session is now.
async fn closed(state: &AppState, session: SessionId, slot: &Arc<LoopSlot>, uri: &Uri) -> ApiError {
    let loop_id = slot.loop_id;
    state.inner.consumers.remove(session, slot);
    match served(state, session, uri, Open::IfExists).await {
        Ok(_) => ApiError::LoopNotFound { loop_id },
        Err(e) => e,
    }
}

/// Long poll: waits up to `wait_ms` (at most 20 s) for a first notification, then
/// returns up to `max` (default 100) in order, unacknowledged ones whose visibility
/// timeout passed first.
pub(crate) async fn poll(
    State(state): State<AppState>,
    Path((session, loop_path)): Path<(String, String)>,
    Query(query): Query<PollQuery>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let loop_id = loop_id(&loop_path)?;
    id.check_operation("poll", "loop_id", &[*loop_id.as_uuid()])?;
    let max = query.max.unwrap_or(100);
    if max == 0 || max > MAX_BATCH {
        return Err(ApiError::Invalid {
            field: Some("max".into()),
            detail: format!("`max` must be 1 to {MAX_BATCH}"),
        });
    }
    let wait = Duration::from_millis(query.wait_ms.unwrap_or(0));
    if wait > MAX_POLL_WAIT {
        return Err(ApiError::Invalid {
            field: Some("wait_ms".into()),
            detail: format!("`wait_ms` must be at most {}", MAX_POLL_WAIT.as_millis()),
        });
    }
    let visibility = visibility(&state, query.visibility_ms)?;
    let slot = slot(&state, session_id, loop_id, &uri).await?;
    let deadline = Instant::now() + wait;
    let Some(mut consumer) = slot.lock(wait.max(Duration::from_millis(50))).await else {
        return Err(ApiError::Conflict {
            reason: "consumer_busy",
            detail: format!("another client is consuming loop {loop_id} (a stream, or a poll)"),
            extra: serde_json::Map::new(),
        });
    };
    let mut drain = state.drain_signal();
    let mut out = Vec::new();
    let mut ended = false;
    loop {
        slot.expire(Instant::now());
        let until = slot.next_expiry().map_or(deadline, |e| e.min(deadline));
        tokio::select! {
            received = consumer.recv() => {
                match received {
                    Some(r) => out.push(slot.lend(r, visibility, 0)),
                    None => ended = true,
                }
                break;
            }
            () = tokio::time::sleep_until(until) => {
                if Instant::now() >= deadline {
                    break;
                }
            }
            () = crate::serve::state::until_true(&mut drain) => break,
        }
    }
    while !ended && out.len() < max {
        match consumer.recv().now_or_never() {
            Some(Some(r)) => out.push(slot.lend(r, visibility, 0)),
            Some(None) => ended = true,
            None => break,
        }
    }
    drop(consumer);
    if ended && out.is_empty() {
        return Err(closed(&state, session_id, &slot, &uri).await);
    }
    Ok(json(
        StatusCode::OK,
        json!({
            "session_id": session_id.to_string(),
            "loop_id": loop_id.to_string(),
            "visibility_ms": u64::try_from(visibility.as_millis()).unwrap_or(u64::MAX),
            "notifications": out.iter().map(lent_json).collect::<Vec<_>>(),
        }),
    ))
}

/// Server-sent events: each notification is an event `notification` (id = its
/// command ID, data = the same object a poll returns). At most `max_in_flight`
/// (default 16) are out unacknowledged at once; when the stream closes, what it
/// handed out and nobody acknowledged is handed out again.
pub(crate) async fn stream(
    State(state): State<AppState>,
    Path((session, loop_path)): Path<(String, String)>,
    Query(query): Query<StreamQuery>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let loop_id = loop_id(&loop_path)?;
    id.check_operation("stream", "loop_id", &[*loop_id.as_uuid()])?;
    let max_in_flight = query.max_in_flight.unwrap_or(16);
    if max_in_flight == 0 || max_in_flight > MAX_BATCH {
        return Err(ApiError::Invalid {
            field: Some("max_in_flight".into()),
            detail: format!("`max_in_flight` must be 1 to {MAX_BATCH}"),
        });
    }
    let visibility = visibility(&state, query.visibility_ms)?;
    let slot = slot(&state, session_id, loop_id, &uri).await?;
    let Some(mut consumer) = slot.lock(MAX_POLL_WAIT).await else {
        return Err(ApiError::Conflict {
            reason: "consumer_busy",
            detail: format!("another client is consuming loop {loop_id}"),
            extra: serde_json::Map::new(),
        });
    };
    let stream_id = state.inner.consumers.stream_id();
    let (tx, mut rx) = mpsc::channel::<Event>(1);
    let mut drain = state.drain_signal();
    let task_slot = Arc::clone(&slot);
    tokio::spawn(
        async move {
            let slot = task_slot;
            loop {
                slot.expire(Instant::now());
                let next = slot.next_expiry();
                let sleep = async {
                    match next {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                if slot.in_flight(stream_id) >= max_in_flight {
                    tokio::select! {
                        () = slot.room(stream_id, max_in_flight) => {}
                        () = sleep => {}
                        () = tx.closed() => break,
                        () = crate::serve::state::until_true(&mut drain) => break,
                    }
                    continue;
                }
                tokio::select! {
                    received = consumer.recv() => {
                        let Some(r) = received else {
                            let _ = tx.send(Event::default().event("end").data("{}")).await;
                            break;
                        };
                        let lent = slot.lend(r, visibility, stream_id);
                        let event = Event::default()
                            .event("notification")
                            .id(lent.command_id.to_string())
                            .json_data(lent_json(&lent))
                            .unwrap_or_default();
                        if tx.send(event).await.is_err() {
                            break;
                        }
                    }
                    () = sleep => {}
                    () = tx.closed() => break,
                    () = crate::serve::state::until_true(&mut drain) => break,
                }
            }
            drop(consumer);
            slot.release_stream(stream_id);
        }
        // The request's span: what the stream logs is in it, and it lasts as the stream.
        .instrument(tracing::Span::current()),
    );
    let events = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|e| e.map(Ok::<_, Infallible>))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

/// Acknowledges one notification: journals its consumption, then releases it.
pub(crate) async fn ack(
    State(state): State<AppState>,
    Path((session, loop_path, command)): Path<(String, String, String)>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let loop_id = loop_id(&loop_path)?;
    let command_id = command_id(&command)?;
    id.check_operation("ack", "command_id", &[*command_id.as_uuid()])?;
    let answer = |outcome: &str| {
        json(
            StatusCode::OK,
            json!({
                "outcome": outcome,
                "session_id": session_id.to_string(),
                "loop_id": loop_id.to_string(),
                "command_id": command_id.to_string(),
            }),
        )
    };
    let slot = slot(&state, session_id, loop_id, &uri).await;
    let outcome = match &slot {
        Ok(slot) => slot.ack(command_id).await,
        Err(_) => AckOutcome::NotHandedOut,
    };
    match outcome {
        AckOutcome::Acknowledged => {
            note(
                &state,
                session_id,
                *command_id.as_uuid(),
                AnswerKind::Acknowledged,
                None,
            );
            Ok(answer("acknowledged"))
        }
        AckOutcome::NotHandedOut => {
            // Acknowledged before (a retry of an ack whose answer was lost)?
            let host = state.host()?;
            let consumed = host
                .reader()
                .lookup(session_id, *consumed_event_id(command_id).as_uuid())
                .await
                .ok()
                .flatten();
            if consumed.is_some() {
                return Ok(answer("already_acknowledged"));
            }
            slot?;
            Err(ApiError::NotFound {
                reason: "not_handed_out",
                detail: format!(
                    "{command_id} is not handed out here (its visibility timeout passed, or it was never delivered): poll again"
                ),
            })
        }
        AckOutcome::Failed(e) => Err(match e {
            crate::AckError::SessionEnded { session_id } => ApiError::Ended {
                session_id,
                purged: false,
            },
            crate::AckError::NotOwner { session_id, owner } => {
                with_owner(
                    &state,
                    ApiError::NotOwner {
                        session_id,
                        owner,
                        owner_url: None,
                        location: None,
                    },
                    &uri,
                )
                .await
            }
            other => ApiError::Journal {
                reason: "ack_failed",
                detail: error_chain(&other),
                retryable: true,
            },
        }),
    }
}
