//! What the fake's own tests share: an answer as a client reads it, and octocrab signed in as
//! the test App.

// Each test file uses a part of this.
#![allow(dead_code)]

use fake_github::{FakeGithub, TEST_APP_PRIVATE_KEY_PEM};
use octocrab::jsonwebtoken::EncodingKey;
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

/// octocrab as rowbranch builds it, authenticated as the fake's App with its JWT.
pub fn app_client(fake: &FakeGithub) -> octocrab::Octocrab {
    let key = EncodingKey::from_rsa_pem(TEST_APP_PRIVATE_KEY_PEM.as_bytes()).expect("key");
    octocrab::Octocrab::builder()
        .base_uri(fake.url())
        .expect("uri")
        .app(octocrab::models::AppId(fake.app_id()), key)
        .build()
        .expect("client")
}
