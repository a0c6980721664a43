//! `PUT /v1/sessions/{id}` (open, idempotent), `POST …/end` (end, refusing or
//! abandoning what is pending) and `PUT …/loops/{loop_id}` (register a loop,
//! idempotent, seeded with what restore found pending).

use crate::serve::extract::ApiPath as Path;
use crate::serve::extract::json_body;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::StatusCode;
use axum::response::Response;
use notify_loop::LoopConfig;
use serde::Deserialize;
use serde_json::{Map, json};

use super::{json, loop_id, session_id};
use crate::serve::auth::WebhookId;
use crate::serve::error::{ApiError, error_chain};
use crate::serve::locate::{Open, served, with_owner};
use crate::serve::state::AppState;
use crate::{EndError, IfPending};

/// The largest capacity a loop may ask for.
const MAX_CAPACITY: usize = 65_536;

/// A JSON body that may be empty (then every field takes its default).
fn body_or_default<T: for<'de> Deserialize<'de> + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    json_body(body)
}

/// Opens the session here (idempotent).
pub(crate) async fn open(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    id.check_operation("open", "session_id", &[*session_id.as_uuid()])?;
    let (session, opened) = served(&state, session_id, &uri, Open::Always).await?;
    let host = state.host()?;
    let (status, outcome) = if opened {
        (StatusCode::CREATED, "opened")
    } else {
        (StatusCode::OK, "already_open")
    };
    Ok(json(
        status,
        json!({
            "outcome": outcome,
            "session_id": session.id().to_string(),
            "holder": host.holder_id().to_string(),
            "loops": session.loops().iter().map(ToString::to_string).collect::<Vec<_>>(),
        }),
    ))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EndBody {
    #[serde(default)]
    if_pending: Pending,
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Pending {
    #[default]
    Refuse,
    Abandon,
}

/// Ends the session.
pub(crate) async fn end(
    State(state): State<AppState>,
    Path(session): Path<String>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    id.check_operation("end", "session_id", &[*session_id.as_uuid()])?;
    let body: EndBody = body_or_default(&body)?;
    // A session this host still holds, ended or not, answers its end itself: a retry
    // of an end gets the same answer (with the end marker's seq), and finishes what
    // an end cut off partway left undone.
    let held = state.host()?.session(session_id);
    let served = match held {
        Some(session) => Ok((session, false)),
        None => served(&state, session_id, &uri, Open::IfExists).await,
    };
    let (session, _) = match served {
        Ok(s) => s,
        // Ending an ended session is not an error.
        Err(ApiError::Ended { purged, .. }) => {
            return Ok(json(
                StatusCode::OK,
                json!({"outcome": "already_ended", "session_id": session_id.to_string(), "purged": purged, "abandoned": []}),
            ));
        }
        Err(e) => return Err(e),
    };
    let pending = match body.if_pending {
        Pending::Refuse => IfPending::Refuse,
        Pending::Abandon => IfPending::Abandon,
    };
    match session.end(pending).await {
        Ok(ended) => {
            state.inner.consumers.drop_session(session_id);
            Ok(json(
                StatusCode::OK,
                json!({
                    "outcome": if ended.already { "already_ended" } else { "ended" },
                    "session_id": session_id.to_string(),
                    "seq": ended.seq,
                    "purged": false,
                    "abandoned": ended.abandoned.iter().map(ToString::to_string).collect::<Vec<_>>(),
                }),
            ))
        }
        Err(EndError::Pending { count }) => {
            let mut extra = Map::new();
            extra.insert("pending".into(), json!(count));
            Err(ApiError::Conflict {
                reason: "pending",
                detail: format!(
                    "{count} notification(s) still pending: acknowledge them, or end with {{\"if_pending\":\"abandon\"}}"
                ),
                extra,
            })
        }
        Err(e) => Err(with_owner(
            &state,
            ApiError::Journal {
                reason: "end_failed",
                detail: error_chain(&e),
                retryable: true,
            },
            &uri,
        )
        .await),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoopBody {
    capacity: Option<usize>,
}

/// Registers a loop (idempotent), seeded with what restore found pending for it.
pub(crate) async fn register_loop(
    State(state): State<AppState>,
    Path((session, loop_path)): Path<(String, String)>,
    Extension(id): Extension<WebhookId>,
    OriginalUri(uri): OriginalUri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let session_id = session_id(&session)?;
    let loop_id = loop_id(&loop_path)?;
    id.check_operation(
        "register",
        "loop_id",
        &[*session_id.as_uuid(), *loop_id.as_uuid()],
    )?;
    let body: LoopBody = body_or_default(&body)?;
    let capacity = body.capacity.unwrap_or(notify_loop::DEFAULT_CAPACITY);
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(ApiError::Invalid {
            field: Some("capacity".into()),
            detail: format!("`capacity` must be 1 to {MAX_CAPACITY}"),
        });
    }
    let (session, _) = served(&state, session_id, &uri, Open::IfExists).await?;
    let answer = |status: StatusCode, outcome: &str, capacity: usize, seeded: usize| {
        json(
            status,
            json!({
                "outcome": outcome,
                "session_id": session_id.to_string(),
                "loop_id": loop_id.to_string(),
                "capacity": capacity,
                "seeded": seeded,
            }),
        )
    };
    let consumers = &state.inner.consumers;
    let _registering = state
        .inner
        .app
        .registering
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(slot) = consumers.get(session_id, loop_id) {
        if slot.capacity != capacity {
            let mut extra = Map::new();
            extra.insert("capacity".into(), json!(slot.capacity));
            return Err(ApiError::Conflict {
                reason: "capacity_mismatch",
                detail: format!(
                    "loop {loop_id} is registered with capacity {}",
                    slot.capacity
                ),
                extra,
            });
        }
        return Ok(answer(StatusCode::OK, "already_registered", capacity, 0));
    }
    let pending = state.inner.app.take_pending(session_id, loop_id);
    let seeded = pending.len();
    let config = LoopConfig::new(session_id, loop_id)
        .capacity(capacity)
        .seed(pending.clone());
    match session.register_loop(config) {
        Ok(consumer) => {
            consumers.insert(session_id, loop_id, capacity, consumer);
            Ok(answer(StatusCode::CREATED, "registered", capacity, seeded))
        }
        Err(crate::RegisterError::AlreadyRegistered { .. }) => {
            // Registered in the session but not here (by the application): leave it
            // be.
            state.inner.app.give_back(session_id, loop_id, pending);
            Ok(answer(StatusCode::OK, "already_registered", capacity, 0))
        }
        Err(crate::RegisterError::SessionEnded { .. }) => {
            // Ended since `served` looked.
            state.inner.app.give_back(session_id, loop_id, pending);
            Err(ApiError::Ended {
                session_id,
                purged: false,
            })
        }
        Err(e) => {
            state.inner.app.give_back(session_id, loop_id, pending);
            Err(ApiError::Invalid {
                field: Some("loop_id".into()),
                detail: e.to_string(),
            })
        }
    }
}
