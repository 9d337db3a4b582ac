//! The server's two HTML pages: the live status page (`GET /`, when `status_page = true`) and
//! the page GitHub's manifest flow lands on (`GET /?code=…`). Rendered on the server, every
//! value HTML-escaped (minijinja escapes `.html` templates), no script.

use minijinja::Environment;
use serde::Serialize;

const STATUS: &str = include_str!("../../templates/status.html");
const MANIFEST_CODE: &str = include_str!("../../templates/manifest-code.html");

/// One decision on the status page. Never the row's text, never a secret.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionView {
    /// When it was decided, RFC 3339 in UTC to the second.
    pub at: String,
    pub route: String,
    /// The delivery's `schema.table`, as it came.
    pub table: String,
    /// The row's id, or what came as one.
    pub id: String,
    /// The column at fault, for a refused row.
    pub column: String,
    pub branch: String,
    /// The branch's page on the forge, when it has one.
    pub branch_url: Option<String>,
    pub status: u16,
    pub outcome: &'static str,
    /// Why, as the log says it (`unauthorized (wrong_secret)` with a refused credential's kind).
    pub reason: String,
}

/// The status page's content.
#[derive(Debug, Serialize)]
pub struct StatusView {
    /// The routes, `schema.table → owner/name`, for the heading.
    pub routes: String,
    pub now: String,
    pub refresh_s: u32,
    /// Totals, named for people.
    pub counters: Vec<(String, u64)>,
    /// Newest first.
    pub decisions: Vec<DecisionView>,
}

/// `source` rendered under `name`, whose `.html` makes the engine escape every value.
fn render(name: &str, source: &str, values: impl Serialize) -> String {
    Environment::new()
        .render_named_str(name, source, values)
        .unwrap_or_else(|e| panic!("the page {name} renders: {e}"))
}

pub fn status_page(view: &StatusView) -> String {
    render("status.html", STATUS, view)
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
    render(
        "manifest-code.html",
        MANIFEST_CODE,
        minijinja::context! { command },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_page_escapes_what_it_shows() {
        let page = status_page(&StatusView {
            routes: "public.feedbacks → acme/app".into(),
            now: "2026-12-03T10:00:00Z".into(),
            refresh_s: 5,
            counters: vec![("deliveries".into(), 3)],
            decisions: vec![DecisionView {
                at: "2026-12-03T09:59:58Z".into(),
                route: "public.feedbacks".into(),
                table: "public.feedbacks".into(),
                id: "<b>42</b>".into(),
                column: String::new(),
                branch: "feedback/42-x".into(),
                branch_url: Some("https://github.com/acme/app/tree/feedback/42-x".into()),
                status: 200,
                outcome: "dispatched",
                reason: String::new(),
            }],
        });
        assert!(page.contains("&lt;b&gt;42&lt;&#x2f;b&gt;"), "{page}");
        assert!(!page.contains("<b>42"));
        assert!(page.contains("href=\"https:&#x2f;&#x2f;github.com&#x2f;acme&#x2f;app&#x2f;tree&#x2f;feedback&#x2f;42-x\""), "{page}");
        assert!(page.contains("http-equiv=\"refresh\" content=\"5\""));
        assert!(!page.contains("<script"));
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
