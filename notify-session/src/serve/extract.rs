//! axum's `Path` and `Query` with their rejections answered as [`ApiError`] (400 in
//! problem+json, naming the query parameter when one is to blame), not axum's plain
//! text; and a JSON request body decoded the same way ([`json_body`], naming the
//! field).

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `Query<T>`, refused as [`ApiError::Invalid`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(q)) => Ok(Self(q)),
            Err(e) => Err(query_error(&e)),
        }
    }
}

fn query_error(e: &QueryRejection) -> ApiError {
    let text = e.body_text();
    ApiError::Invalid {
        field: query_field(&text).map(str::to_owned),
        detail: format!("the query string is invalid: {text}"),
    }
}

/// The parameter axum's rejection text names: the path it puts before the message
/// ("Failed to deserialize query string: max: invalid digit found in string"), else
/// the first name between backticks ("unknown field `x`").
fn query_field(text: &str) -> Option<&str> {
    let is_name = |f: &&str| {
        !f.is_empty() && f.len() <= 64 && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    text.split_once("query string: ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .map(|(path, _)| path)
        .filter(is_name)
        .or_else(|| text.split('`').nth(1).filter(is_name))
}

/// A JSON request body as `T`, refused as [`ApiError::Invalid`] naming the field it
/// failed at (none for a body that is not JSON at all).
pub(crate) fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        // "." is the body itself; "?" a place serde could not name.
        let field = e.path().to_string();
        ApiError::Invalid {
            field: (field != "." && !field.contains('?')).then_some(field),
            detail: format!("the body is not the expected JSON object: {}", e.inner()),
        }
    })?;
    json.end().map_err(|e| ApiError::Invalid {
        field: None,
        detail: format!("the body is not the expected JSON object: {e}"),
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::query_field;

    #[test]
    fn the_query_field_is_the_path_before_the_message_or_the_first_quoted_name() {
        let text = |m: &str| format!("Failed to deserialize query string: {m}");
        assert_eq!(
            query_field(&text("max: invalid digit found in string")),
            Some("max")
        );
        assert_eq!(
            query_field(&text("bogus: unknown field `bogus`, expected `max`")),
            Some("bogus")
        );
        assert_eq!(query_field("unknown field `x`, expected `max`"), Some("x"));
        assert_eq!(query_field(&text("invalid type: map")), None);
        assert_eq!(query_field("no name here"), None);
    }
}

/// `Path<T>`, refused as [`ApiError::Invalid`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(p)) => Ok(Self(p)),
            Err(e) => Err(path_error(&e)),
        }
    }
}

fn path_error(e: &PathRejection) -> ApiError {
    ApiError::Invalid {
        field: None,
        detail: format!("the path is invalid: {}", e.body_text()),
    }
}
