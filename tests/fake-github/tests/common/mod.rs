//! What the fake's own tests share: an answer as a client reads it.

use serde_json::Value;

/// The fake's answer to one request: its status, headers and JSON body (`null` when empty).
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// GitHub's `message`, or `""`.
    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or("")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body, which must be a JSON array.
    // Not every test file reads lists.
    #[allow(dead_code)]
    pub fn list(&self) -> &Vec<Value> {
        self.body.as_array().expect("array")
    }
}
