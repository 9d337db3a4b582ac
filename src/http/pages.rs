//! The server's two HTML pages at `GET /`: the page GitHub's manifest flow lands on
//! (`?code=…`), and the live status page, when `status_page = true`, behind its password.
//! Rendered on the server, every value HTML-escaped (minijinja escapes `.html` templates), no
//! script.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{Html, IntoResponse, Response};
use minijinja::{context, Environment};

use super::App;

const STATUS: &str = include_str!("../../templates/status.html");
const MANIFEST_CODE: &str = include_str!("../../templates/manifest-code.html");

/// `GET /`: where GitHub sends the browser once the App is created from its manifest
/// (`?code=…`, answered whatever the settings, before any password), else the status page when
/// `status_page = true`.
pub(super) async fn home(
    State(app): State<Arc<App>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if let Some(code) = query.get("code") {
        return Html(manifest_code_page(code)).into_response();
    }
    let Some(page) = &app.config.status_page else {
        return super::not_found("no status page: set status_page = true to have one");
    };
    let password = page.password.as_ref().map(|password| password.expose());
    if let Some(refused) = password.and_then(|p| app.logins.refusal(&headers, p, Instant::now())) {
        return refused;
    }
    let routes: Vec<String> = (app.config.routes.iter())
        .map(|r| format!("{} → {}", r.table_name(), r.repo))
        .collect();
    let mut counters = app.metrics.totals();
    counters.push(("rows in flight".into(), app.pipeline.in_flight() as u64));
    // The forge's web address makes each branch a link; counters are totals named for people.
    let view = context! {
        routes => routes.join(", "),
        now => chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        refresh_s => 5,
        counters,
        decisions => app.decisions.newest_first(),
        web_url => app.config.forge.web_url(),
    };
    Html(render(STATUS, view)).into_response()
}

/// A page's template rendered; named `.html`, so that minijinja escapes every value.
fn render(template: &str, context: minijinja::Value) -> String {
    (Environment::new().render_named_str("page.html", template, context))
        .expect("the page's template renders")
}

/// The page for `GET /?code=CODE`: the command that finishes creating the App, or (for a value
/// that is no code GitHub hands back) what is wrong.
pub fn manifest_code_page(code: &str) -> String {
    let looks_like_a_code = !code.is_empty()
        && code.len() <= 100
        && code
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let command = looks_like_a_code.then(|| format!("rowbranch init --manifest-code {code}"));
    render(MANIFEST_CODE, context! { command => command })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::answer::Answer;
    use crate::http::status::Decision;

    #[test]
    fn the_status_page_escapes_what_it_shows() {
        let refused = Answer::refused(
            crate::reason::Reason::Unauthorized,
            "missing or wrong credentials",
        );
        let mut decision = Decision::default().answered(&refused);
        decision.id = Some("<b>42</b>".into());
        decision.branch = Some("feedback/42-x".into());
        decision.repo = Some("acme/app".into());
        decision.kind = Some("wrong_secret");
        let page = render(
            STATUS,
            context! {
                routes => "public.feedbacks → acme/app",
                now => "2026-12-03T10:00:00Z",
                refresh_s => 5,
                counters => vec![("deliveries", 3)],
                decisions => vec![decision],
                web_url => "https://github.com",
            },
        );
        assert!(page.contains("&lt;b&gt;42&lt;&#x2f;b&gt;"), "{page}");
        assert!(!page.contains("<b>42"));
        assert!(page.contains("href=\"https:&#x2f;&#x2f;github.com&#x2f;acme&#x2f;app&#x2f;tree&#x2f;feedback&#x2f;42-x\""), "{page}");
        assert!(page.contains("http-equiv=\"refresh\" content=\"5\""));
        assert!(!page.contains("<script"));
        // What a decision lacks is shown empty.
        assert!(
            page.contains("<td>none</td><td></td><td>&lt;b&gt;42"),
            "{page}"
        );
        assert!(
            page.contains("<td>unauthorized (wrong_secret)</td>"),
            "{page}"
        );
    }

    #[test]
    fn the_manifest_code_page_shows_the_command_for_a_code_only() {
        assert!(
            manifest_code_page("a1b2_c3-D4").contains("rowbranch init --manifest-code a1b2_c3-D4")
        );
        let refused = manifest_code_page("<script>alert(1)</script>");
        assert!(!refused.contains("<script>alert"), "{refused}");
        assert!(!refused.contains("--manifest-code"));
        assert!(refused.contains("not a code"));
    }
}
