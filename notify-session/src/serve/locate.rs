//! Finding the session a request names: served here, owned by another host (whose
//! advertised URL the answer carries), ended, or unknown; and reading back what the
//! journal holds under an ID (the original seq of a duplicate, the digest of a
//! collision's stored payload).

use axum::http::Uri;
use notify_journal::{JournalRead, SessionState};
use notify_types::{JournalRecord, SessionId, Uuid};
use sha2::{Digest as _, Sha256};

use super::error::{ApiError, error_chain};
use super::state::AppState;
use crate::{HostError, Session};

/// What the journal holds under a key, compared with a request's record.
pub(crate) enum Stored {
    /// Nothing.
    Absent,
    /// The identical record, at this seq.
    Same(u64),
    /// Another record, at this seq, with the SHA-256 of its payload.
    Other(u64, Option<String>),
}

/// The SHA-256 (hex) of a stored record's payload: for a completion, the
/// notification's canonical wire form (what a client sends); for an event, its
/// wire form.
pub(crate) fn payload_digest(record: &JournalRecord) -> String {
    let bytes = match record {
        JournalRecord::Command(c) => c.notification().encode(),
        JournalRecord::Event(e) => e.encode(),
    };
    hex(&Sha256::digest(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn read_failed(e: &dyn std::error::Error) -> ApiError {
    ApiError::Journal {
        reason: "journal_unavailable",
        detail: error_chain(e),
        retryable: true,
    }
}

/// The record at `seq` of `session`, if it can be read.
pub(crate) async fn record_at(
    journal: &dyn JournalRead,
    session: SessionId,
    seq: u64,
) -> Option<JournalRecord> {
    match journal.replay(session, seq, 1).await {
        Ok(page) => page
            .into_iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, record)| record),
        Err(e) => {
            tracing::warn!(%session, seq, error = %e, "reading a stored record back failed");
            None
        }
    }
}

/// What the journal holds under `key`, compared with `record`.
pub(crate) async fn stored(
    journal: &dyn JournalRead,
    session: SessionId,
    key: Uuid,
    record: &JournalRecord,
) -> Result<Stored, ApiError> {
    let Some(seq) = journal
        .lookup(session, key)
        .await
        .map_err(|e| read_failed(&e))?
    else {
        return Ok(Stored::Absent);
    };
    match record_at(journal, session, seq).await {
        Some(found) if found.encode() == record.encode() => Ok(Stored::Same(seq)),
        Some(found) => Ok(Stored::Other(seq, Some(payload_digest(&found)))),
        None => Err(ApiError::Journal {
            reason: "journal_unavailable",
            detail: format!("the record at seq {seq} could not be read back"),
            retryable: true,
        }),
    }
}

/// Whether a request may open the session here when nobody serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// Always (`PUT /v1/sessions/{id}`).
    Always,
    /// Only if the session exists (has frames): adopting an orphan on demand.
    IfExists,
}

/// The session `id` if this host serves it (opening it here per `open`), or the
/// answer that says where it is: another host's (307/421), ended (410), unknown (404).
/// A session that ended is answered ended at once, though the host still holds it
/// for a few seconds until it lets it go.
pub(crate) async fn served(
    state: &AppState,
    id: SessionId,
    uri: &Uri,
    open: Open,
) -> Result<(Session, bool), ApiError> {
    let host = state.host()?;
    if let Some(session) = host.session(id) {
        if session.shared.is_ended() {
            return Err(ApiError::Ended {
                session_id: id,
                purged: false,
            });
        }
        return Ok((session, false));
    }
    if state.draining() {
        return Err(shutting_down());
    }
    if let Ok(info) = host.lease_info(id).await
        && info.live
        && info.holder != Some(host.holder_id())
    {
        return Err(not_owner(state, id, info.holder, uri).await);
    }
    let journal = host.reader();
    match journal
        .session_state(id)
        .await
        .map_err(|e| read_failed(&e))?
    {
        SessionState::Live => {}
        SessionState::Ended { .. } => {
            return Err(ApiError::Ended {
                session_id: id,
                purged: false,
            });
        }
        // Purged, or a state added later: nothing more is served.
        _ => {
            return Err(ApiError::Ended {
                session_id: id,
                purged: true,
            });
        }
    }
    if open == Open::IfExists && journal.last_seq(id).await.map_err(|e| read_failed(&e))? == 0 {
        return Err(ApiError::NotFound {
            reason: "session_not_found",
            detail: format!("session {id} is not open: open it with PUT /v1/sessions/{id}"),
        });
    }
    match host.open(id).await {
        Ok(session) => Ok((session, true)),
        Err(e) => Err(host_error(state, id, e, uri).await),
    }
}

fn shutting_down() -> ApiError {
    ApiError::Unavailable {
        reason: "shutting_down",
        detail: "the server is shutting down: retry at another host (or here after its restart)"
            .into(),
        retry_after: 1,
    }
}

/// The answer for a host's refusal to open `id`.
pub(crate) async fn host_error(
    state: &AppState,
    id: SessionId,
    e: HostError,
    uri: &Uri,
) -> ApiError {
    match e {
        HostError::Held { holder, .. } => not_owner(state, id, holder, uri).await,
        HostError::Ended { purged, .. } => ApiError::Ended {
            session_id: id,
            purged,
        },
        HostError::Opening { .. } => ApiError::Unavailable {
            reason: "opening",
            detail: format!("session {id} is being opened here: retry"),
            retry_after: 1,
        },
        HostError::Lost { .. } => ApiError::Unavailable {
            reason: "opening",
            detail: format!("the lease on session {id} was lost while opening it: retry"),
            retry_after: 1,
        },
        HostError::AtCapacity { capacity } => ApiError::Unavailable {
            reason: "at_capacity",
            detail: format!("this host serves its capacity of {capacity} sessions"),
            retry_after: 5,
        },
        HostError::ShutDown => shutting_down(),
        other => ApiError::Journal {
            reason: "host_failed",
            detail: error_chain(&other),
            retryable: true,
        },
    }
}

/// "Not the owner", with the owner's URL and this request's URL there when the
/// directory knows the owner.
pub(crate) async fn not_owner(
    state: &AppState,
    id: SessionId,
    owner: Option<Uuid>,
    uri: &Uri,
) -> ApiError {
    let owner_url = match owner {
        Some(holder) => state.inner.directory.url_of(holder).await,
        None => None,
    }
    // Only a URL a client can follow (a row an older build wrote may not be one)...
    .filter(|base| super::config::advertisable(base))
    // ...and not this server's own: the owner is an earlier run of this server
    // (killed and restarted at the same address) whose lease has not run out yet.
    // Sending the client here again would loop: it retries after the answer's
    // `Retry-After`.
    .filter(|base| !same_base(base, &state.inner.base_url));
    let location = owner_url
        .as_ref()
        .map(|base| {
            let path = uri.path_and_query().map_or("/", |p| p.as_str());
            format!("{}{path}", base.trim_end_matches('/'))
        })
        // Only a URL that fits in a header is a place to send the client to.
        .filter(|location| axum::http::HeaderValue::from_str(location).is_ok());
    ApiError::NotOwner {
        session_id: id,
        owner,
        owner_url,
        location,
    }
}

/// Completes a session's answer with the owner's URL, if it is "not the owner".
pub(crate) async fn with_owner(state: &AppState, e: ApiError, uri: &Uri) -> ApiError {
    match e {
        ApiError::NotOwner {
            session_id,
            owner,
            location: None,
            ..
        } => {
            // The session knows the new owner only sometimes; the lease always does.
            let owner = match owner {
                Some(o) => Some(o),
                None => match state.host() {
                    Ok(host) => host
                        .lease_info(session_id)
                        .await
                        .ok()
                        .filter(|i| i.live)
                        .and_then(|i| i.holder)
                        .filter(|h| *h != host.holder_id()),
                    Err(_) => None,
                },
            };
            not_owner(state, session_id, owner, uri).await
        }
        other => other,
    }
}

/// Whether two base URLs name the same place: compared without case (scheme and host
/// are case-insensitive) and without trailing slashes.
fn same_base(a: &str, b: &str) -> bool {
    a.trim_end_matches('/')
        .eq_ignore_ascii_case(b.trim_end_matches('/'))
}
