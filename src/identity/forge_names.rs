//! Names on the forge's side of a route: the repository (`owner/name`) and the
//! `repository_dispatch` event type, and where GitHub's API is (`api_url`). Checked once, so
//! every call can trust them.

use std::fmt;

use super::{excerpt, NameError};

/// GitHub's limit on a `repository_dispatch` event type.
/// (https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event)
const MAX_EVENT_TYPE_CHARS: usize = 100;

/// `owner/name` of a repository.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoName {
    owner: String,
    name: String,
}

impl RepoName {
    /// Parses `owner/name`.
    pub fn parse(raw: &str) -> Result<RepoName, NameError> {
        let Some((owner, name)) = raw.split_once('/') else {
            let raw = excerpt(raw);
            return Err(NameError(format!("`{raw}` is not of the form owner/name")));
        };
        let owner_ok = !owner.is_empty()
            && owner.len() <= 39
            && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        let name_ok = !name.is_empty()
            && name.len() <= 100
            && name != "."
            && name != ".."
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        ensure!(
            owner_ok,
            "`{}` is not a valid owner: use letters, digits and `-`, up to 39 characters",
            excerpt(owner)
        );
        ensure!(
            name_ok,
            "`{}` is not a valid repository name: use letters, digits, `-`, `_` and `.`",
            excerpt(name)
        );
        Ok(RepoName {
            owner: owner.to_owned(),
            name: name.to_owned(),
        })
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The `event_type` of a route's `repository_dispatch`: 1 to 100 characters, as GitHub wants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventType(String);

shown_as_text!(EventType);

impl EventType {
    pub fn parse(raw: &str) -> Result<EventType, NameError> {
        let chars = raw.chars().count();
        ensure!(
            chars > 0,
            "the event type is empty; GitHub needs 1 to 100 characters, e.g. \"feedback\""
        );
        ensure!(
            chars <= MAX_EVENT_TYPE_CHARS,
            "the event type is {chars} characters long; GitHub refuses event types longer \
             than 100 characters"
        );
        Ok(EventType(raw.to_owned()))
    }
}

/// Why `api_url` may not carry rowbranch's credentials, or `None` when it may: `https://`, or
/// plain `http://` only to a loopback host (127.0.0.0/8, `::1`, `localhost`: a test's or a
/// local proxy's). Anywhere else plain HTTP sends the App's JWT and every token in clear.
/// Decided on the text alone, before any name is looked up or connection made.
pub fn api_url_problem(api_url: &str) -> Option<String> {
    let rest = api_url.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| {
        format!(
            "api_url = `{api_url}` is plain HTTP to a host that is not loopback: the App's JWT and \
             tokens would cross the network in clear; use https:// (plain http:// is for \
             127.0.0.1, ::1 or localhost only)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_name_needs_an_owner_and_a_name() {
        assert!(RepoName::parse("acme/app").is_ok());
        for (raw, why) in [
            ("acme", "`acme` is not of the form owner/name"),
            ("/app", "`` is not a valid owner"),
            ("acme/", "`` is not a valid repository name"),
        ] {
            let err = RepoName::parse(raw).unwrap_err().to_string();
            assert!(err.starts_with(why), "{raw}: {err}");
        }
        assert!(RepoName::parse("acme/a/b").is_err());
        assert!(RepoName::parse("ac me/app").is_err());
        assert_eq!(
            RepoName::parse("acme/my.app_2").unwrap().to_string(),
            "acme/my.app_2"
        );
    }

    #[test]
    fn an_event_type_has_1_to_100_characters() {
        assert_eq!(EventType::parse("feedback").unwrap().as_str(), "feedback");
        let empty = EventType::parse("").unwrap_err().to_string();
        assert!(empty.starts_with("the event type is empty"), "{empty}");
        assert!(EventType::parse(&"é".repeat(100)).is_ok());
        let err = EventType::parse(&"e".repeat(101)).unwrap_err();
        assert!(err.to_string().contains("100 characters"), "{err}");
    }

    #[test]
    fn plain_http_is_for_loopback_only() {
        for fine in [
            "https://api.github.com",
            "https://ghe.example.com/api/v3",
            "http://127.0.0.1:8080/api/v3",
            "http://127.3.4.5",
            "http://[::1]:9000",
            "http://localhost:3000/",
            "http://LOCALHOST",
        ] {
            assert_eq!(api_url_problem(fine), None, "{fine}");
        }
        for clear in [
            "http://ghe.example.com/api/v3",
            "http://10.0.0.1:8080",
            "http://[::2]",
            "http://localhost.example.com",
            "http://127.0.0.1@evil.example.com",
            "http://0.0.0.0",
        ] {
            let problem = api_url_problem(clear).unwrap_or_default();
            assert!(problem.contains("use https://"), "{clear}: {problem}");
        }
    }
}
