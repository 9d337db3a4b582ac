//! `rowbranch demo`: the whole path on a local git repository, with no accounts and no setup.
//! It starts the real server on a free port and sends it what a week of Supabase might
//! (`demo/deliveries.toml`): new rows, redeliveries, a burst of copies, an UPDATE, a bad id, a
//! stranger.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::Failure;
use crate::config::Config;
use crate::forge::local::create_repository;
use crate::startup::{Application, Launch, Listen, Mode};
use crate::webhook::auth::{generate_bearer_secret, hub_signature_256};

/// The config the demo serves, written beside its repository.
const CONFIG: &str = include_str!("demo/rowbranch.toml");

/// What the demo sends, and what it expects: see the file's own words.
const DELIVERIES: &str = include_str!("demo/deliveries.toml");

#[derive(Deserialize)]
struct Deliveries {
    new_rows: usize,
    delivery: Vec<Delivery>,
}

/// One delivery and the answer the demo expects of it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Delivery {
    label: String,
    id: Value,
    message: String,
    r#type: Option<String>,
    table: Option<String>,
    #[serde(default)]
    credential: Credential,
    expect: Option<u16>,
    copies: Option<usize>,
}

/// How a delivery proves it comes from the sender.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "kebab-case")]
enum Credential {
    #[default]
    Bearer,
    HubSignature,
    None,
}

pub async fn run() -> Result<(), Failure> {
    let plan: Deliveries = toml::from_str(DELIVERIES).context("demo/deliveries.toml")?;
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

    let route = config.routes[0].clone();
    let env = Launch {
        // No first look at the repository: it was made a moment ago.
        mode: Mode::Serve {
            listen: Listen::FreePort,
            warm_up: false,
        },
        ..Launch::process()
    };
    // The config's local forge, on the repository just made.
    let application = Application::build(config, env)
        .await
        .map_err(|e| Failure::Runtime(e.into()))?;
    let forge = Arc::clone(application.pipeline().forge());
    let url = format!(
        "http://{}/webhook",
        application.addr().expect("the demo listens")
    );
    println!("  server      {url}\n");
    let stop = CancellationToken::new();
    let server = tokio::spawn(application.run(stop.clone().cancelled_owned()));

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut surprises = 0;
    println!("  {:<42} answer", "delivery");
    for delivery in &plan.delivery {
        surprises += send_all(&client, &url, &secret, delivery).await?;
    }

    stop.cancel();
    server
        .await
        .context("the server task failed")?
        .context("the server failed")?;

    let branches: BTreeSet<String> = forge
        .prefix_branches(&route.repo, &route.branch_prefix)
        .await
        .context("could not list the branches")?
        .into_iter()
        .map(|branch| branch.name.to_string())
        .collect();
    // Where the local forge logs each dispatch: beside the repository (SPEC §2).
    let log = &dir.join("dispatches.jsonl");
    let dispatched: Vec<Value> = std::fs::read_to_string(log)
        .with_context(|| format!("could not read {}", log.display()))?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .context("a dispatch line is not JSON")?;
    println!("\n  branches in the repository:");
    for branch in &branches {
        println!("    {branch}");
    }
    println!(
        "  dispatches logged in {}: {}",
        log.display(),
        dispatched.len()
    );

    let rows = plan.new_rows;
    // One dispatch for each branch, and a branch for each dispatch.
    let holds = branches.len() == rows
        && dispatched.len() == rows
        && branches
            == dispatched
                .iter()
                .filter_map(|d| d["client_payload"]["branch"].as_str().map(str::to_owned))
                .collect();
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

/// Sends the delivery's copies at once and prints on one line how many ended each way and the
/// last one's branch or message; returns how many were not as expected (and 1 more when not
/// exactly one of several copies was dispatched).
async fn send_all(
    client: &Client<HttpConnector, Full<Bytes>>,
    url: &str,
    secret: &str,
    delivery: &Delivery,
) -> anyhow::Result<usize> {
    // The body Supabase's webhook posts for the row.
    let body = json!({
        "type": delivery.r#type.as_deref().unwrap_or("INSERT"),
        "table": delivery.table.as_deref().unwrap_or("feedbacks"),
        "schema": "public",
        "record": {
            "id": delivery.id,
            "message": delivery.message,
            "created_at": "2026-12-02T09:30:00.000000+00:00"
        },
        "old_record": null
    })
    .to_string();
    // One delivery of the body, with its credential: the answer's status and its JSON.
    let send = || async {
        let request = http::Request::post(url).header("content-type", "application/json");
        let request = match delivery.credential {
            Credential::Bearer => request.header("authorization", format!("Bearer {secret}")),
            Credential::HubSignature => request.header(
                "x-hub-signature-256",
                hub_signature_256(secret, body.as_bytes()),
            ),
            Credential::None => request,
        };
        let request = request.body(Full::from(body.clone()))?;
        let response = tokio::time::timeout(Duration::from_secs(60), client.request(request))
            .await
            .context("no answer within 60 s")?
            .context("the delivery failed")?;
        let status = response.status().as_u16();
        let answer = response.into_body().collect().await;
        let answer = answer.context("the answer was cut off")?.to_bytes();
        let text = || Value::String(String::from_utf8_lossy(&answer).into_owned());
        let json = serde_json::from_slice(&answer).unwrap_or_else(|_| text());
        anyhow::Ok((status, json))
    };
    let copies = delivery.copies.unwrap_or(1);
    let answers = futures_util::future::try_join_all((0..copies).map(|_| send())).await?;
    let expect = delivery.expect.unwrap_or(200);
    let mut surprises = answers
        .iter()
        .filter(|(status, _)| *status != expect)
        .count();
    // Each answer as its outcome and reason, or its status when it has none.
    let mut tally = BTreeMap::<String, usize>::new();
    for (status, body) in &answers {
        let key = match (body["outcome"].as_str(), body["reason"].as_str()) {
            (Some(outcome), Some(reason)) => format!("{outcome} {reason}"),
            (Some(outcome), None) => outcome.to_owned(),
            (None, _) => status.to_string(),
        };
        *tally.entry(key).or_default() += 1;
    }
    if copies > 1 {
        surprises += usize::from(tally.get("dispatched") != Some(&1));
    }
    let counts: Vec<String> = match copies {
        1 => tally.into_keys().collect(),
        _ => tally.iter().map(|(k, n)| format!("{n}× {k}")).collect(),
    };
    let (status, last) = &answers[answers.len() - 1];
    let text = |key: &str| last[key].as_str().unwrap_or("");
    let detail = match text("branch") {
        "" => text("message").trim_start_matches("ignored: "),
        branch => branch,
    };
    let mark = if surprises == 0 { " " } else { "✗" };
    let label = &delivery.label;
    println!(
        "{mark} {label:<42} {status} {} — {detail}",
        counts.join(", ")
    );
    Ok(surprises)
}
