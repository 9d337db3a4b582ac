//! rowbranch's integration tests: the real server on a free port over a fresh local git forge
//! or the fake GitHub, and the binary as a user runs it. One binary, so the crate is linked
//! once. What the tests share is in `support`.

mod support;

mod alerts;
mod app_jwt;
mod auth;
mod cli;
mod concurrency;
mod credentials;
mod database_url;
mod deploy;
mod design;
mod doctor_queue;
mod doctor_token;
mod drain;
mod env_config;
mod explain;
mod exposure;
mod first_run;
mod full_table;
mod github;
mod github_events;
mod github_token;
mod healthcheck;
mod hostile;
mod identity;
mod init;
mod init_actions;
mod init_escaping;
mod init_steps;
mod malformed;
mod metrics_at_start;
mod observe;
mod properties;
mod public_writes;
mod queue;
mod queue_bytes;
mod recipes;
mod reconcile;
mod refusals;
mod row_security;
mod rows;
mod setup_kick_sql;
mod setup_owners;
mod setup_queue;
mod setup_sql;
mod setup_vault_sql;
mod setup_workflow;
mod spec_refs;
mod status_columns;
mod status_page;
mod sweep_states;
mod version;
mod webhook;
mod workflow_bounds;
