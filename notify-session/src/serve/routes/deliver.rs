//! `POST …/completions` and `POST …/events`: the supervisor's side. The body is the
//! codec's wire form (a completion: the `ProcessCompletionNotification` DTO; an
//! event: the lifecycle `SessionEvent`), decoded strictly; the answer comes after
//! the durable append.

use crate::serve::extract::ApiPath as Path;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use notify_types::{
    JournalRecord, Notified, NotifyError, ProcessCompletionNotification, ProcessNotification,
    SessionEvent,
};
use serde::Serialize;
use serde_json::json;

use super::{json, session_id};
use crate::PublishError;
use crate::serve::auth::WebhookId;
use crate::serve::console::{AnswerKind, note};
use crate::serve::error::ApiError;
use crate::serve::locate::payload_digest;
use crate::serve::locate::{Open, Stored, record_at, served, stored, with_owner};
use crate::serve::state::AppState;

/// A delivery's answer, as `json!` would write it (keys in sorted order), without
/// building a `Value` on every delivery.
#[derive(Serialize)]
struct CompletionAnswer {
    command_id: String,
    disposition: &'static str,
    loop_id: String,
    seq: Option<u64>,
    session_id: String,
}

/// Delivers a completion notification.
pub(crate) async fn completion(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let n = ProcessCompletionNotification::decode(&body).map_err(|e| ApiError::from_decode(&e))?;
    id.check("command_id", *n.command_id.as_uuid())?;
    if n.session_id != session_id {
        return Err(ApiError::Invalid {
            field: Some("session_id".into()),
            detail: format!(
                "the notification names session {}, the path {session_id}",
                n.session_id
            ),
        });
    }
    let (command_id, loop_id) = (n.command_id, n.loop_id);
    let answer = |disposition: &'static str, status: StatusCode, seq: Option<u64>| {
        let body = CompletionAnswer {
            command_id: command_id.to_string(),
            disposition,
            loop_id: loop_id.to_string(),
            seq,
            session_id: session_id.to_string(),
        };
        (status, axum::Json(body)).into_response()
    };
    let session = match served(&state, session_id, &uri, Open::IfExists).await {
        Ok((session, _)) => session,
        Err(ApiError::Ended {
            purged: false,
            session_id,
        }) => {
            // Not served (ended): the truthful answer from the journal.
            let record = JournalRecord::from(ProcessNotification::new(n));
            let journal = state.host()?.reader();
            return match stored(journal.as_ref(), session_id, *command_id.as_uuid(), &record)
                .await?
            {
                Stored::Same(seq) => {
                    note(
                        &state,
                        session_id,
                        *command_id.as_uuid(),
                        AnswerKind::Duplicate,
                        Some(seq),
                    );
                    Ok(answer("duplicate", StatusCode::OK, Some(seq)))
                }
                Stored::Other(seq, digest) => Err(ApiError::collision_of(command_id, seq, digest)),
                Stored::Absent => Err(ApiError::Ended {
                    session_id,
                    purged: false,
                }),
            };
        }
        Err(e) => return Err(e),
    };
    match session.notify_process_completion(n).await {
        Ok(Notified::Accepted) => {
            note(
                &state,
                session_id,
                *command_id.as_uuid(),
                AnswerKind::Accepted,
                None,
            );
            Ok(answer("accepted", StatusCode::CREATED, None))
        }
        Ok(_) => {
            let seq = match session.journal() {
                Some(j) => j
                    .lookup(session_id, *command_id.as_uuid())
                    .await
                    .ok()
                    .flatten(),
                None => None,
            };
            note(
                &state,
                session_id,
                *command_id.as_uuid(),
                AnswerKind::Duplicate,
                seq,
            );
            Ok(answer("duplicate", StatusCode::OK, seq))
        }
        Err(NotifyError::Collision { command_id, seq }) => {
            note(
                &state,
                session_id,
                *command_id.as_uuid(),
                AnswerKind::Collision,
                Some(seq),
            );
            let digest = match session.journal() {
                Some(j) => record_at(j.as_ref(), session_id, seq)
                    .await
                    .map(|r| payload_digest(&r)),
                None => None,
            };
            Err(ApiError::collision_of(command_id, seq, digest))
        }
        Err(e) => Err(with_owner(&state, ApiError::from_notify(e), &uri).await),
    }
}

/// Publishes a lifecycle event.
pub(crate) async fn event(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let event = SessionEvent::decode(&body).map_err(|e| ApiError::from_decode(&e))?;
    let SessionEvent::Lifecycle(metadata) = event else {
        return Err(ApiError::Invalid {
            field: Some("type".into()),
            detail: "only lifecycle events (ProcessStarted, ProcessBackgrounded, ProcessCompleted, ProcessStopRequested, ProcessLost) are published".into(),
        });
    };
    let event_id = metadata.event_id;
    id.check("event_id", *event_id.as_uuid())?;
    if metadata.session_id != session_id {
        return Err(ApiError::Invalid {
            field: Some("session_id".into()),
            detail: format!(
                "the event names session {}, the path {session_id}",
                metadata.session_id
            ),
        });
    }
    let answer = |disposition: &str, status: StatusCode, seq: u64| {
        json(
            status,
            json!({
                "disposition": disposition,
                "event_id": event_id.to_string(),
                "session_id": session_id.to_string(),
                "seq": seq,
            }),
        )
    };
    let collision = |seq: u64, digest: Option<String>| ApiError::Collision {
        id: *event_id.as_uuid(),
        seq,
        stored_sha256: digest,
    };
    let session = match served(&state, session_id, &uri, Open::IfExists).await {
        Ok((session, _)) => session,
        Err(ApiError::Ended {
            purged: false,
            session_id,
        }) => {
            let record = JournalRecord::Event(SessionEvent::Lifecycle(metadata));
            let journal = state.host()?.reader();
            return match stored(journal.as_ref(), session_id, *event_id.as_uuid(), &record).await? {
                Stored::Same(seq) => Ok(answer("duplicate", StatusCode::OK, seq)),
                Stored::Other(seq, digest) => Err(collision(seq, digest)),
                Stored::Absent => Err(ApiError::Ended {
                    session_id,
                    purged: false,
                }),
            };
        }
        Err(e) => return Err(e),
    };
    match session.publish_lifecycle(metadata).await {
        Ok(crate::Published::New { seq }) => Ok(answer("accepted", StatusCode::CREATED, seq)),
        Ok(crate::Published::Duplicate { seq }) => Ok(answer("duplicate", StatusCode::OK, seq)),
        Err(PublishError::Collision { seq, .. }) => {
            let digest = match session.journal() {
                Some(j) => record_at(j.as_ref(), session_id, seq)
                    .await
                    .map(|r| payload_digest(&r)),
                None => None,
            };
            Err(collision(seq, digest))
        }
        Err(PublishError::Invalid { field }) => Err(ApiError::invalid_field(field)),
        Err(PublishError::OwnerMismatch { .. }) => Err(ApiError::Invalid {
            field: Some("session_id".into()),
            detail: "the event names another session".into(),
        }),
        Err(PublishError::SessionEnded { session_id, purged }) => {
            Err(ApiError::Ended { session_id, purged })
        }
        Err(PublishError::NotOwner { session_id, owner }) => Err(with_owner(
            &state,
            ApiError::NotOwner {
                session_id,
                owner,
                owner_url: None,
                location: None,
            },
            &uri,
        )
        .await),
        Err(PublishError::Journal(e)) => Err(ApiError::from_notify(crate::error::notify_error(
            notify_types::CommandId::from_uuid(*event_id.as_uuid()),
            e,
        ))),
    }
}
