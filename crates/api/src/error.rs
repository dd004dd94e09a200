//! API errors: what a [`crate::Backend`] returns, the HTTP status each maps
//! to, and the JSON body that carries it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One problem in a rejected config: the key and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigIssue {
    /// The config key, e.g. `router[1].interface[0].vlan`.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Why a request failed. Each variant is one HTTP status.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ApiError {
    /// 400: the request is malformed; `field` names the bad part
    /// (`prefix`, `add[3].via`, `query`, `body`).
    #[error("{field}: {message}")]
    BadRequest {
        /// The offending field.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// 401: no token, or not a token this server knows.
    #[error("missing or invalid token")]
    Unauthorized,
    /// 403: this token may not use this endpoint.
    #[error("this token may not use this endpoint")]
    Forbidden,
    /// 404 for a VR name: the same answer whether the VR does not exist or
    /// belongs to another tenant, so it carries no name.
    #[error("no such virtual router")]
    NoSuchVr,
    /// 404 for anything else (a route, an interface, an address, a path).
    #[error("{0}")]
    NotFound(String),
    /// 409: it exists and differs, or it is in use.
    #[error("{0}")]
    Conflict(String),
    /// 413: the body is larger than this caller may send.
    #[error("{0}")]
    TooLarge(String),
    /// 429: over a rate or in-flight limit; retry later.
    #[error("{0}")]
    TooMany(String),
    /// 422: a config (reload) was rejected as a whole; nothing changed.
    #[error("config rejected, nothing changed: {}", issues_line(.0))]
    Config(Vec<ConfigIssue>),
    /// 500: the server failed.
    #[error("internal error: {0}")]
    Internal(String),
}

fn issues_line(issues: &[ConfigIssue]) -> String {
    issues
        .iter()
        .map(|i| format!("{}: {}", i.key, i.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn bad(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::BadRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest { .. } => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden => 403,
            ApiError::NoSuchVr | ApiError::NotFound(_) => 404,
            ApiError::Conflict(_) => 409,
            ApiError::TooLarge(_) => 413,
            ApiError::TooMany(_) => 429,
            ApiError::Config(_) => 422,
            ApiError::Internal(_) => 500,
        }
    }

    /// The JSON body sent for this error.
    pub fn body(&self) -> ErrorBody {
        let (error, field, errors) = match self {
            ApiError::BadRequest { field, .. } => ("bad_request", Some(field.clone()), vec![]),
            ApiError::Unauthorized => ("unauthorized", None, vec![]),
            ApiError::Forbidden => ("forbidden", None, vec![]),
            ApiError::NoSuchVr => ("no_such_vr", None, vec![]),
            ApiError::NotFound(_) => ("not_found", None, vec![]),
            ApiError::Conflict(_) => ("conflict", None, vec![]),
            ApiError::TooLarge(_) => ("too_large", None, vec![]),
            ApiError::TooMany(_) => ("too_many_requests", None, vec![]),
            ApiError::Config(issues) => ("config_rejected", None, issues.clone()),
            ApiError::Internal(_) => ("internal", None, vec![]),
        };
        let message = match self {
            ApiError::BadRequest { message, .. } => message.clone(),
            other => other.to_string(),
        };
        ErrorBody {
            error: error.to_string(),
            message,
            field,
            errors,
        }
    }

    /// The error a client reads back from a status and body.
    pub fn from_body(status: u16, body: ErrorBody) -> ApiError {
        match (status, body.error.as_str()) {
            (400, _) => ApiError::BadRequest {
                field: body.field.unwrap_or_else(|| "request".into()),
                message: body.message,
            },
            (401, _) => ApiError::Unauthorized,
            (403, _) => ApiError::Forbidden,
            (404, "no_such_vr") => ApiError::NoSuchVr,
            (404, _) => ApiError::NotFound(body.message),
            (409, _) => ApiError::Conflict(body.message),
            (413, _) => ApiError::TooLarge(body.message),
            (429, _) => ApiError::TooMany(body.message),
            (422, _) => ApiError::Config(body.errors),
            (_, _) => ApiError::Internal(format!("HTTP {status}: {}", body.message)),
        }
    }
}

/// The JSON body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// Machine-readable kind: `bad_request`, `unauthorized`, `forbidden`,
    /// `no_such_vr`, `not_found`, `conflict`, `too_large`, `too_many_requests`,
    /// `config_rejected`, `internal`.
    pub error: String,
    /// What went wrong, for people.
    pub message: String,
    /// 400 only: the offending field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// 422 only: every problem in the rejected config.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ConfigIssue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip() {
        let all = [
            ApiError::bad("prefix", "bad"),
            ApiError::Unauthorized,
            ApiError::Forbidden,
            ApiError::NoSuchVr,
            ApiError::NotFound("no such route".into()),
            ApiError::Conflict("exists".into()),
            ApiError::TooLarge("too big".into()),
            ApiError::TooMany("slow down".into()),
            ApiError::Config(vec![ConfigIssue {
                key: "router[0].name".into(),
                reason: "missing".into(),
            }]),
        ];
        for e in all {
            assert_eq!(ApiError::from_body(e.status(), e.body()), e);
        }
    }
}
