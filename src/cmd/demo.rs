//! `rowbranch demo`: the whole path on a local git repository, with no accounts and no setup.
//! It starts the real server on a free port and sends it what a week of Supabase might:
//! new rows, redeliveries, a burst of copies, an UPDATE, a bad id, a stranger.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use serde_json::{json, Value};

use super::Failure;
use crate::cli::DemoArgs;
use crate::config::{Config, LocalSettings};
use crate::forge::local::{create_repository, LocalForge};
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
    label: String,
    body: String,
    auth: Auth,
    expect: u16,
}

#[derive(Clone, Copy)]
enum Auth {
    Bearer,
    HubSignature,
    None,
}

fn insert(id: Value, text: &str) -> String {
    json!({
        "type": "INSERT", "table": "feedbacks", "schema": "public",
        "record": { "id": id, "message": text, "created_at": "2026-12-02T09:30:00.000000+00:00" },
        "old_record": null
    })
    .to_string()
}

fn deliveries() -> Vec<Delivery> {
    let row = |label: &str, id: Value, text: &str, expect: u16| Delivery {
        label: label.into(),
        body: insert(id, text),
        auth: Auth::Bearer,
        expect,
    };
    let mut update: Value =
        serde_json::from_str(&insert(json!(42), "Add dark mode (edited)")).unwrap();
    update["type"] = json!("UPDATE");
    let mut other_table: Value = serde_json::from_str(&insert(json!(7), "Nice work")).unwrap();
    other_table["table"] = json!("comments");
    vec![
        row("new row 42", json!(42), "Add dark mode!", 200),
        row(
            "new row 43, accents",
            json!(43),
            "Ärger über die Schriftgröße — bitte 16px!",
            200,
        ),
        row(
            "new row 44, Japanese",
            json!(44),
            "日本語の翻訳を追加してください",
            200,
        ),
        row("new row 45, very long text", json!(45), LONG_TEXT, 200),
        row("new row 46, only punctuation", json!("46"), "?!… ¿¡ —", 200),
        row(
            "new row with a UUID key",
            json!("0b7c9e1a-5f3d-4c2a-9e8b-7d6f5a4b3c21"),
            "Export to CSV, please (Excel too?)",
            200,
        ),
        Delivery {
            label: "new row 48, signed X-Hub-Signature-256".into(),
            body: insert(json!(48), "Keyboard shortcut for search: /"),
            auth: Auth::HubSignature,
            expect: 200,
        },
        row(
            "row 42 again (redelivery)",
            json!(42),
            "Add dark mode!",
            200,
        ),
        row(
            "row 42 as \"42\" (string id)",
            json!("42"),
            "Add dark mode!",
            200,
        ),
        row(
            "row 43, text edited since",
            json!(43),
            "Schrift zu klein",
            200,
        ),
        Delivery {
            label: "UPDATE of row 42".into(),
            body: update.to_string(),
            auth: Auth::Bearer,
            expect: 200,
        },
        Delivery {
            label: "INSERT into comments (no route)".into(),
            body: other_table.to_string(),
            auth: Auth::Bearer,
            expect: 200,
        },
        row("row with id \"../etc\"", json!("../etc"), "Sneaky", 422),
        Delivery {
            label: "row 49 without credentials".into(),
            body: insert(json!(49), "Let me in"),
            auth: Auth::None,
            expect: 401,
        },
    ]
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
    let env = Launch {
        // No first look at the repository: it was made a moment ago.
        mode: Mode::Serve {
            listen: Listen::FreePort,
            warm_up: false,
        },
        forge: Some(forge),
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

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .context("could not build the HTTP client")?;
    let mut surprises = 0;
    println!("  {:<42} answer", "delivery");
    for delivery in deliveries() {
        let answer = send(&client, &url, &secret, &delivery).await?;
        surprises += print_answer(&delivery.label, delivery.expect, &answer);
    }
    surprises += burst(&client, &url, &secret).await?;

    let _ = stop.send(());
    server
        .await
        .context("the server task failed")?
        .context("the server failed")?;

    let branches = list_branches(&repo_path).await?;
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

async fn send(
    client: &reqwest::Client,
    url: &str,
    secret: &str,
    delivery: &Delivery,
) -> anyhow::Result<(u16, Value)> {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .body(delivery.body.clone());
    request = match delivery.auth {
        Auth::Bearer => request.header("authorization", format!("Bearer {secret}")),
        Auth::HubSignature => request.header(
            "x-hub-signature-256",
            hub_signature_256(secret, delivery.body.as_bytes()),
        ),
        Auth::None => request,
    };
    let response = request.send().await.context("the delivery failed")?;
    let status = response.status().as_u16();
    let body = response.text().await.context("the answer was cut off")?;
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
async fn burst(client: &reqwest::Client, url: &str, secret: &str) -> anyhow::Result<usize> {
    let delivery = Arc::new(Delivery {
        label: "row 47 ×20 at once".into(),
        body: insert(json!(47), "Crash when uploading a 20 MB avatar"),
        auth: Auth::Bearer,
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

async fn list_branches(repo: &Path) -> anyhow::Result<Vec<String>> {
    let out = tokio::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args([
            "for-each-ref",
            "--format=%(refname:strip=2)",
            "refs/heads/feedback/",
        ])
        .output()
        .await
        .context("could not run git")?;
    anyhow::ensure!(out.status.success(), "git for-each-ref failed");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
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
