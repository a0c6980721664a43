//! axum's `Path` and `Query` with their rejections answered as [`ApiError`] (400 in
//! problem+json, naming the query parameter when one is to blame), not axum's plain
//! text.

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
    // serde's message names the parameter between backticks: "unknown field `x`" or
    // "invalid digit ... for `max`"; the first such name is the field.
    let field = text
        .split('`')
        .nth(1)
        .filter(|f| !f.is_empty() && f.len() <= 64)
        .map(str::to_owned);
    ApiError::Invalid {
        field,
        detail: format!("the query string is invalid: {text}"),
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
