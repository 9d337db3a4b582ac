//! An answer of the fake before it becomes an HTTP response.

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

pub(crate) enum ReplyBody {
    Json(Value),
    Html(String),
    Text(String),
    Empty,
}

pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ReplyBody,
}

impl Reply {
    pub fn json(status: u16, value: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(value),
        }
    }

    pub fn html(status: u16, text: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Html(text.to_owned()),
        }
    }

    pub fn text(status: u16, text: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Text(text.to_owned()),
        }
    }

    pub fn empty(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Empty,
        }
    }

    /// GitHub's error body: `{"message", "documentation_url", "status"}`.
    pub fn error(status: u16, message: impl Into<String>, documentation_url: &str) -> Reply {
        Reply::json(
            status,
            json!({
                "message": message.into(),
                "documentation_url": documentation_url,
                "status": status.to_string(),
            }),
        )
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.set_header(name, value);
        self
    }

    /// Sets a header, replacing one of the same name.
    pub fn set_header(&mut self, name: &str, value: impl Into<String>) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
    }

    pub fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    pub fn into_response(self) -> Response {
        let (content_type, bytes) = match self.body {
            ReplyBody::Json(v) => (
                Some("application/json; charset=utf-8"),
                serde_json::to_vec(&v).unwrap_or_default(),
            ),
            ReplyBody::Html(t) => (Some("text/html"), t.into_bytes()),
            ReplyBody::Text(t) => (Some("text/plain"), t.into_bytes()),
            ReplyBody::Empty => (None, Vec::new()),
        };
        let mut response = Response::new(Body::from(bytes));
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        if let Some(ct) = content_type {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        for (name, value) in self.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.append(n, v);
            }
        }
        response
    }
}
