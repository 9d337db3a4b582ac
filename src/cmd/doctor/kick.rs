//! `rowbranch doctor` for the optional kick, with a token: when a queue route's table has the
//! trigger `rowbranch_kick_{queue}` (which `supabase-kick.sql` makes, to ask GitHub to run the
//! drain workflow as rows arrive), that it is enabled and that Supabase Vault holds its token,
//! the secret `rowbranch_kick_token` — found by name in `vault.secrets`, whose value stays
//! encrypted: doctor never reads the decrypted one. Without a kick, rows wait for the drain's
//! schedule, which is a setup too.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::queue::triggers;
use super::{Check, Checks, KICK_SECRET, KICK_TRIGGER_PREFIX};
use crate::config::Config;
use crate::db::{describe, quote_ident, quote_relation, value, Database};

pub(super) async fn checks(config: &Config, database: &Database, out: &mut Checks) {
    let client = database.client();
    let trigger = format!("{KICK_TRIGGER_PREFIX}{}", config.pgmq.queue);
    let mut kicked = false;
    for route in config.routes.iter().filter(|r| r.reads_the_queue()) {
        let table = quote_relation(&route.schema, &route.table);
        let found = triggers(client, route).await.unwrap_or_else(|unreadable| {
            out.push(unreadable);
            Vec::new()
        });
        let Some(kick) = found.iter().find(|t| t.name == trigger) else {
            continue;
        };
        kicked = true;
        let (what, name) = (format!("{table}: trigger {trigger}"), quote_ident(&trigger));
        out.push(match kick.enabled {
            true => Check::pass(format!(
                "{what} asks GitHub to run the drain as rows arrive"
            )),
            false => Check::fail(
                format!("{what} is disabled: rows wait for the drain's schedule"),
                format!(
                    "alter table {table} enable trigger {name}; or run supabase-kick.sql again"
                ),
            ),
        });
    }
    out.push(match kicked {
        true => vault_secret(client).await,
        false => Check::pass(format!(
            "no kick (no trigger {trigger}): rows wait for the drain workflow's schedule \
             (`rowbranch init --host actions --kick` writes one)"
        )),
    });
}

/// Whether Vault holds the kick's secret, asked by name.
async fn vault_secret(client: &Client) -> Check {
    let found = "select exists (select 1 from vault.secrets where name = $1::text)";
    let missing = [SqlState::UNDEFINED_TABLE, SqlState::INVALID_SCHEMA_NAME];
    match value(client, found, &[&KICK_SECRET]).await {
        Err(e) if e.code().is_some_and(|code| missing.contains(code)) => Check::advise(
            format!(
                "this database has no vault.secrets, so the kick's secret {KICK_SECRET} cannot \
                 be checked"
            ),
            "the kick reads its token from Supabase Vault: on Supabase, Vault is there \
             (Integrations → Vault); then run supabase-kick.sql, which says how to store the \
             token",
        ),
        Ok(Some(true)) => Check::pass(format!(
            "Vault holds the kick's token (secret {KICK_SECRET}; its value not read)"
        )),
        Ok(_) => Check::fail(
            format!(
                "Vault has no secret {KICK_SECRET}: the kick's trigger cannot ask GitHub to run \
                 the drain"
            ),
            format!(
                "store a fine-grained token that may only write Actions on the repository: in \
                 the SQL editor, select vault.create_secret('TOKEN', '{KICK_SECRET}'); (as \
                 supabase-kick.sql says)"
            ),
        ),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Check::advise(
            format!(
                "DATABASE_URL's role may not read vault.secrets, so the kick's secret \
                 {KICK_SECRET} cannot be checked"
            ),
            format!(
                "check it in the SQL editor: select name from vault.secrets where name = \
                 '{KICK_SECRET}';"
            ),
        ),
        Err(e) => Check::fail(
            format!("vault.secrets cannot be read: {}", describe(&e)),
            "see the message",
        ),
    }
}
