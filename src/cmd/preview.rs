//! `rowbranch preview FILE.json`: what a webhook body would do, without touching a forge.

use anyhow::{anyhow, Context};
use serde_json::Value;

use super::Failure;
use crate::cli::PreviewArgs;
use crate::config::{process_env, Config};
use crate::pipeline::{Ignored, Routes};
use crate::reason::Reason;
use crate::webhook::payload;

pub async fn run(args: PreviewArgs) -> Result<(), Failure> {
    let config = Config::load(&args.config.config, &process_env)?;
    let routes = Routes::compile(&config)?;
    let body = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))
        .map_err(Failure::Usage)?;
    let refused = |status: u16, why: String| {
        println!("the webhook would answer {status}: {why}");
        Failure::Runtime(anyhow!(
            "{} would be refused ({status})",
            args.file.display()
        ))
    };
    let event = payload::parse(&body).map_err(|e| refused(400, e.to_string()))?;
    // A queue route's body is previewed as the consumer reads it, gate included.
    let routed = match routes.route(false, &event) {
        Err(Ignored::OtherIntake { .. }) => routes.route(true, &event),
        routed => routed,
    };
    let compiled = match routed {
        Ok(compiled) => compiled,
        Err(no_route @ Ignored::NoRoute { .. }) => return Err(refused(422, no_route.to_string())),
        Err(why) => {
            println!(
                "the webhook would answer 200 ignored (reason {}): {why}",
                why.reason()
            );
            return Ok(());
        }
    };
    let plan = compiled
        .plan_json(&event.record)
        .map_err(|e| match e.reason() {
            Reason::Malformed => refused(400, e.to_string()),
            _ => refused(422, e.to_string()),
        })?;
    let payload = plan
        .render(
            "<default branch>",
            "<head of the default branch when claimed>",
        )
        .map_err(|e| refused(422, e.to_string()))?;
    let route = &plan.route;
    println!("route:       {} -> {}", route.table_name(), route.repo);
    println!("id:          {}", plan.id);
    println!("branch:      {}", plan.branch);
    println!("event_type:  {}", route.event_type);
    println!("payload:");
    let pretty = serde_json::to_string_pretty(&Value::Object(payload))
        .context("the payload does not serialize")?;
    println!("{pretty}");
    Ok(())
}
