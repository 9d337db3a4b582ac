//! What the fake's own tests share: an answer as a client reads it, and octocrab as rowbranch
//! builds it.

// Each test file uses a part of this.
#![allow(dead_code)]

use fake_github::FakeGithub;
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

    /// The string `field` of each item of the body, which must be a JSON array.
    pub fn strings(&self, field: &str) -> Vec<&str> {
        self.list()
            .iter()
            .map(|item| item[field].as_str().unwrap_or(""))
            .collect()
    }

    /// The body, which must be a JSON array.
    pub fn list(&self) -> &Vec<Value> {
        self.body.as_array().expect("array")
    }
}

/// octocrab as rowbranch builds it, sending `token` (the App's JWT, or an installation's
/// token) as its bearer.
pub fn octocrab_with(fake: &FakeGithub, token: String) -> octocrab::Octocrab {
    octocrab::Octocrab::builder()
        .base_uri(fake.url())
        .expect("uri")
        .user_access_token(token)
        .build()
        .expect("client")
}
