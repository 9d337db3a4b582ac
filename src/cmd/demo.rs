//! `rowbranch demo`: the whole path on a local git repository, with no accounts and no setup.
//! It starts the real server on a free port and sends it what a week of Supabase might:
//! new rows, redeliveries, a burst of copies, an UPDATE, a bad id, a stranger.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use super::Failure;
use crate::cli::DemoArgs;
use crate::config::{Config, LocalSettings};
use crate::forge::local::{create_repository, LocalForge};
use crate::forge::Forge;
use crate::startup::{Application, Launch, Listen, Mode};
use crate::webhook::auth::{generate_bearer_secret, hub_signature_256};

const CONFIG: &str = r#"# Written by `rowbranch demo`. Serve it yourself with
#   ROWBRANCH_WEBHOOK_SECRET=<a secret of 24+ characters> rowbranch serve --config <this file>
listen = "127.0.0.1:8080"

[forge]
kind = "local"
path = "repo.git"

[webhook]
respond_within_ms = 5000

[[routes]]
table = "feedbacks"
repo = "demo/app"
text_column = "message"
branch_prefix = "feedback"
event_type = "feedback"
"#;

const LONG_TEXT: &str = "When I open the settings page on a phone in landscape mode, the \
    sidebar overlaps the main content, the save button is hidden behind the keyboard, and \
    scrolling jumps back to the top every time a toggle changes; it would be great if the \
    layout collapsed the sidebar into a menu below 900 pixels and kept the scroll position.";

/// One delivery and the answer the demo expects of it.
struct Delivery {
    label: &'static str,
    body: String,
    credential: Credential,
    expect: u16,
}

/// How a delivery proves it comes from the sender.
#[derive(Clone, Copy)]
enum Credential {
    Bearer,
    HubSignature,
    None,
}

/// The body Supabase's webhook posts for an INSERT of a row into `feedbacks`.
fn insert(id: Value, text: &str) -> Value {
    json!({
        "type": "INSERT", "table": "feedbacks", "schema": "public",
        "record": { "id": id, "message": text, "created_at": "2026-12-02T09:30:00.000000+00:00" },
        "old_record": null
    })
}

/// What the demo sends, in order: new rows, redeliveries, and what must not become work.
fn deliveries() -> Vec<Delivery> {
    use Credential::{Bearer, HubSignature};
    let mut update = insert(json!(42), "Add dark mode (edited)");
    update["type"] = json!("UPDATE");
    let mut other_table = insert(json!(7), "Nice work");
    other_table["table"] = json!("comments");
    let uuid = json!("0b7c9e1a-5f3d-4c2a-9e8b-7d6f5a4b3c21");
    // One delivery a line: the table is easier to scan than rustfmt's layout.
    #[rustfmt::skip]
    let all = [
        ("new row 42", insert(json!(42), "Add dark mode!"), Bearer, 200),
        ("new row 43, accents", insert(json!(43), "Ärger über die Schriftgröße — bitte 16px!"), Bearer, 200),
        ("new row 44, Japanese", insert(json!(44), "日本語の翻訳を追加してください"), Bearer, 200),
        ("new row 45, very long text", insert(json!(45), LONG_TEXT), Bearer, 200),
        ("new row 46, only punctuation", insert(json!("46"), "?!… ¿¡ —"), Bearer, 200),
        ("new row with a UUID key", insert(uuid, "Export to CSV, please (Excel too?)"), Bearer, 200),
        ("new row 48, signed X-Hub-Signature-256", insert(json!(48), "Keyboard shortcut for search: /"), HubSignature, 200),
        ("row 42 again (redelivery)", insert(json!(42), "Add dark mode!"), Bearer, 200),
        ("row 42 as \"42\" (string id)", insert(json!("42"), "Add dark mode!"), Bearer, 200),
        ("row 43, text edited since", insert(json!(43), "Schrift zu klein"), Bearer, 200),
        ("UPDATE of row 42", update, Bearer, 200),
        ("INSERT into comments (no route)", other_table, Bearer, 200),
        ("row with id \"../etc\"", insert(json!("../etc"), "Sneaky"), Bearer, 422),
        ("row 49 without credentials", insert(json!(49), "Let me in"), Credential::None, 401),
    ];
    all.into_iter()
        .map(|(label, body, credential, expect)| Delivery {
            label,
            body: body.to_string(),
            credential,
            expect,
        })
        .collect()
}

pub async fn run(_args: DemoArgs) -> Result<(), Failure> {
    let dir = tempfile::Builder::new()
        .prefix("rowbranch-demo-")
        .tempdir()
        .context("could not make a temporary directory")?
        .keep();
    let repo_path = dir.join("repo.git");
    let base = create_repository(&repo_path).await?;
    let config_path = dir.join("rowbranch.toml");
    std::fs::write(&config_path, CONFIG).context("could not write the demo config")?;
    let secret = generate_bearer_secret().context("no randomness for a secret")?;
    let env = |key: &str| (key == "ROWBRANCH_WEBHOOK_SECRET").then(|| secret.clone());
    let config = Config::load(&config_path, &env)?;

    println!("rowbranch demo");
    println!(
        "  repository  {} (main at {})",
        repo_path.display(),
        base.sha.short()
    );
    println!("  config      {}", config_path.display());

    let forge = Arc::new(
        LocalForge::open(&LocalSettings {
            path: repo_path.clone(),
            on_dispatch: None,
        })
        .await
        .map_err(anyhow::Error::new)?,
    );
    let dispatch_log = forge.dispatch_log().to_path_buf();
    let route = config.routes[0].clone();
    let env = Launch {
        // No first look at the repository: it was made a moment ago.
        mode: Mode::Serve {
            listen: Listen::FreePort,
            warm_up: false,
        },
        forge: Some(forge.clone()),
        ..Launch::process()
    };
    let application = Application::build(config, env)
        .await
        .map_err(|e| Failure::Runtime(e.into()))?;
    let url = format!(
        "http://{}/webhook",
        application.addr().expect("the demo listens")
    );
    println!("  server      {url}\n");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(application.run(async {
        let _ = stopped.await;
    }));

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut surprises = 0;
    println!("  {:<42} answer", "delivery");
    for delivery in deliveries() {
        let answer = send(&client, &url, &secret, &delivery).await?;
        surprises += print_answer(delivery.label, delivery.expect, &answer);
    }
    surprises += burst(&client, &url, &secret).await?;

    let _ = stop.send(());
    server
        .await
        .context("the server task failed")?
        .context("the server failed")?;

    let branches: Vec<String> = forge
        .prefix_branches(&route.repo, &route.branch_prefix)
        .await
        .context("could not list the branches")?
        .into_iter()
        .map(|branch| branch.name.to_string())
        .collect();
    let dispatched = read_dispatches(&dispatch_log)?;
    println!("\n  branches in the repository:");
    for branch in &branches {
        println!("    {branch}");
    }
    println!(
        "  dispatches logged in {}: {}",
        dispatch_log.display(),
        dispatched.len()
    );

    let rows = 8; // 42 to 46, the UUID row, 47 (the burst) and 48
    let dispatched_branches: BTreeSet<&str> = dispatched.iter().map(String::as_str).collect();
    let holds = branches.len() == rows
        && dispatched.len() == rows
        && dispatched_branches.len() == rows
        && dispatched_branches
            .iter()
            .all(|b| branches.iter().any(|x| x == b));
    println!(
        "\n{rows} rows → {} branches → {} dispatches: {}",
        branches.len(),
        dispatched.len(),
        if holds {
            "one branch and one dispatch per row, however often it arrived"
        } else {
            "INVARIANT BROKEN"
        }
    );
    println!("see for yourself: git -C {} branch", repo_path.display());
    if !holds || surprises > 0 {
        return Err(Failure::Runtime(anyhow!(
            "the demo saw {surprises} unexpected answers and the invariant {}",
            if holds { "held" } else { "broke" }
        )));
    }
    Ok(())
}

/// The demo's HTTP client: hyper's, on loopback.
type HttpClient = Client<HttpConnector, Full<Bytes>>;

async fn send(
    client: &HttpClient,
    url: &str,
    secret: &str,
    delivery: &Delivery,
) -> anyhow::Result<(u16, Value)> {
    let mut request = http::Request::post(url).header("content-type", "application/json");
    request = match delivery.credential {
        Credential::Bearer => request.header("authorization", format!("Bearer {secret}")),
        Credential::HubSignature => request.header(
            "x-hub-signature-256",
            hub_signature_256(secret, delivery.body.as_bytes()),
        ),
        Credential::None => request,
    };
    let request = request
        .body(Full::new(Bytes::from(delivery.body.clone())))
        .context("the delivery could not be made")?;
    let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
        .await
        .context("no answer within 60 s")?
        .context("the delivery failed")?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .context("the answer was cut off")?
        .to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
    Ok((status, body))
}

/// Prints one answer; returns 1 when it was not the expected status.
fn print_answer(label: &str, expect: u16, (status, body): &(u16, Value)) -> usize {
    let outcome = body["outcome"].as_str().unwrap_or("?");
    let detail = match outcome {
        "dispatched" => body["branch"].as_str().unwrap_or("").to_owned(),
        "duplicate" => format!(
            "{} ({})",
            body["reason"].as_str().unwrap_or(""),
            body["branch"].as_str().unwrap_or("")
        ),
        _ => body["message"]
            .as_str()
            .unwrap_or("")
            .trim_start_matches("ignored: ")
            .to_owned(),
    };
    let mark = if *status == expect { " " } else { "✗" };
    println!("{mark} {label:<42} {status} {outcome:<10} {detail}");
    usize::from(*status != expect)
}

/// Twenty copies of one new row at once: one claims and dispatches, the rest are duplicates.
async fn burst(client: &HttpClient, url: &str, secret: &str) -> anyhow::Result<usize> {
    let delivery = Arc::new(Delivery {
        label: "row 47 ×20 at once",
        body: insert(json!(47), "Crash when uploading a 20 MB avatar").to_string(),
        credential: Credential::Bearer,
        expect: 200,
    });
    let sends = (0..20).map(|_| {
        let (client, url, secret, delivery) = (
            client.clone(),
            url.to_owned(),
            secret.to_owned(),
            Arc::clone(&delivery),
        );
        tokio::spawn(async move { send(&client, &url, &secret, &delivery).await })
    });
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    let mut surprises = 0;
    let mut branch = String::new();
    for send in futures_util::future::join_all(sends).await {
        let (status, body) = send.context("a delivery task failed")??;
        let key = match body["outcome"].as_str() {
            Some("duplicate") => format!("duplicate {}", body["reason"].as_str().unwrap_or("")),
            Some(other) => other.to_owned(),
            None => format!("{status}"),
        };
        *tally.entry(key).or_default() += 1;
        surprises += usize::from(status != 200);
        branch = body["branch"].as_str().unwrap_or("").to_owned();
    }
    let dispatched = tally.get("dispatched").copied().unwrap_or(0);
    surprises += usize::from(dispatched != 1);
    let summary: Vec<String> = tally.iter().map(|(k, n)| format!("{n}× {k}")).collect();
    let mark = if surprises == 0 { " " } else { "✗" };
    println!(
        "{mark} {:<42} 200 {} — {branch}",
        delivery.label,
        summary.join(", ")
    );
    Ok(surprises)
}

/// The branch of every dispatch in the log.
fn read_dispatches(log: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(log)
        .with_context(|| format!("could not read {}", log.display()))?;
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).context("a dispatch line is not JSON")?;
            v["client_payload"]["branch"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("a dispatch without a branch: {line}"))
        })
        .collect()
}
