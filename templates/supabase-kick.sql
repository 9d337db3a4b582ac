[#- The values below are quoted here, once, and only these quoted forms appear in the SQL:
    identifiers as "…" with " doubled; string literals as E'…' with \ and ' doubled, which reads
    the same whatever standard_conforming_strings says. No raw value is written into a comment
    (a newline there would end it) nor into the $…$ body (a value holding its tag would end
    it): the function reads the URL, the branch and the queue from its trigger's arguments. The
    token is in none of them: the function reads it from Vault when it kicks. -#]
[%- set target = '"' ~ (schema | replace('"', '""')) ~ '"."' ~ (table | replace('"', '""')) ~ '"' -%]
[%- set url_literal = "E'" ~ (kick_url | replace("\\", "\\\\") | replace("'", "''")) ~ "'" -%]
[%- set ref_literal = "E'" ~ (actions.default_branch | replace("\\", "\\\\") | replace("'", "''")) ~ "'" -%]
[%- set queue_literal = "E'" ~ (queue | replace("\\", "\\\\") | replace("'", "''")) ~ "'" -%]
[%- set trigger_name = '"' ~ (kick_trigger | replace('"', '""')) ~ '"' -%]
-- rowbranch: the kick. When rows are inserted into the table named at the end of this file, a
-- trigger asks GitHub to run the drain workflow (rowbranch-drain.yml) now, instead of at its
-- next scheduled time: POST /repos/OWNER/NAME/actions/workflows/rowbranch-drain.yml/dispatches
-- with {"ref": the default branch}
-- (https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event), sent by
-- pg_net's net.http_post (https://supabase.com/docs/guides/database/extensions/pgnet) with the
-- headers GitHub asks for: Accept: application/vnd.github+json, X-GitHub-Api-Version:
-- 2022-11-28 and a User-Agent (https://docs.github.com/rest/using-the-rest-api/getting-started-with-the-rest-api).
--
-- It is only a signal. The rows themselves travel through the queue (supabase-queue.sql), and
-- the drain workflow's schedule runs whether or not a kick arrives, so a kick that is skipped,
-- fails or is lost costs time, never a row.
--
-- How often: at most once in 30 seconds, however many rows arrive and however many sessions
-- insert them. The trigger runs once per INSERT statement (FOR EACH STATEMENT), not per row,
-- and does nothing for a statement that inserted no row. It never waits for another session:
-- it takes a transaction-scoped advisory lock with pg_try_advisory_xact_lock, and when another
-- transaction holds it (that one is kicking), it returns at once. The time of the last kick is
-- kept in a table of its own, rowbranch.kicks. The request is queued in the inserting
-- transaction, as pg_net's queue always is: pg_net sends it once that transaction commits, and
-- a transaction that rolls back sends nothing (and leaves the last kick's time as it was). Of
-- two transactions inserting at the same time, the one that kicks may roll back while the
-- other commits without a kick: the schedule drains that row.
--
-- It never fails an INSERT: whatever goes wrong in it (no token in Vault, pg_net missing, a
-- serialization failure) is a warning, and the row is inserted all the same.
--
-- The token: a fine-grained personal access token (GitHub → Settings → Developer settings →
-- Fine-grained tokens) with access to this one repository and one permission, Actions: Read
-- and write. It can start, cancel and re-run the repository's workflows, enable or disable
-- them, and delete their runs, logs, artifacts and caches; it cannot read or push code, and
-- cannot read the repository's secrets. Such a token expires on the date you chose: a kick
-- with an expired token is refused (401, in net._http_response for six hours), and until it is
-- replaced the schedule alone drains.
--
-- Where the token lives, and who can read it:
-- - In Supabase Vault, as the secret named rowbranch_kick_token: add it in the dashboard
--   (Integrations → Vault → Add new secret, that name), or run, once, in the SQL editor
--     select vault.create_secret('github_pat_…', 'rowbranch_kick_token', 'rowbranch: starts the drain workflow');
--   and delete that query from the editor's history (to replace it: vault.update_secret). It
--   is in no file, no function body and no trigger definition. Its plain text can be read
--   only through vault.decrypted_secrets, which on Supabase the postgres role (and
--   service_role) can read, and anon and authenticated cannot.
-- - rowbranch.kick() reads it as the role that runs this file (SECURITY DEFINER), so a row
--   inserted by any role kicks without that role reading Vault. It runs only as a trigger, and
--   EXECUTE on it is revoked from PUBLIC.
-- - pg_net's queue, net.http_request_queue, holds each request with its headers, the token's
--   Authorization header among them, from the kick's commit until pg_net's worker takes the
--   request to send it (it deletes the row then: supabase/pg_net v0.20.5, src/core.c), which
--   is normally within a second. Since pg_net 0.12 every role may read and write that table
--   ("grant all on all tables in schema net to PUBLIC", sql/pg_net.sql), and on Supabase anon
--   and authenticated have USAGE on schema net: a role that can run SQL of its choice (a
--   database login, or a function of yours that runs what it is given) could read a token in
--   that moment. The Data API exposes no table of schema net unless you add net to its exposed
--   schemas. To close it, as postgres:
--     revoke all on all tables in schema net from public, anon, authenticated;
--   then check: select has_table_privilege('anon', 'net.http_request_queue', 'select');
--   (where the tables belong to supabase_admin the revoke may do nothing: the check says).
--   The answers, net._http_response, hold GitHub's reply, never the token.
--
-- Before running it: supabase-queue.sql has been run, and pg_net is enabled (Integrations →
-- Database Webhooks → Enable turns it on); Vault is on in every Supabase project. Run it in the
-- SQL editor (or with psql) as the postgres role. Running it again is harmless: it replaces the
-- function and the trigger, in one transaction, and keeps the last kick's time.
-- It installs nothing into a schema rowbranch, or beside a table in it, that another role made:
-- the schema and each table in it must belong to the role running it or to postgres, or it
-- stops at once, naming the object and its owner.
--
-- Removing it, as the role that ran this file:
--   begin;
--   drop trigger if exists "rowbranch_kick_QUEUE" on "SCHEMA"."TABLE";
--   drop function if exists rowbranch.kick();
--   drop table if exists rowbranch.kicks;
--   commit;
-- with QUEUE, SCHEMA and TABLE spelled as in the trigger at the end of this file; then delete
-- the Vault secret rowbranch_kick_token and the token on GitHub.

begin;

-- Trust only what rowbranch's setup made: the owner of schema rowbranch may replace or drop
-- anything in it, and the owner of a table in it may put a trigger on that table, which then
-- runs inside this file's SECURITY DEFINER function, as its owner. So when the schema or a table
-- in it exists and belongs to another role than the one running this file and postgres, this
-- file installs nothing and says whose it is.
do $owners$
declare
  found record;
  trusted pg_catalog.text := case
    when current_user = 'postgres' then 'postgres, which runs this file'
    else pg_catalog.format('%s, which runs this file, nor to postgres', current_user)
  end;
begin
  for found in
    select pg_catalog.format('schema %I', n.nspname) as what, n.nspowner as owner
      from pg_catalog.pg_namespace as n
      where n.nspname = 'rowbranch'
    union all
    select pg_catalog.format('%s %I.%I',
             case when c.relkind in ('r', 'p') then 'table' else 'relation' end,
             n.nspname, c.relname),
           c.relowner
      from pg_catalog.pg_class as c
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
      where n.nspname = 'rowbranch' and c.relkind not in ('i', 'I')
  loop
    if pg_catalog.pg_get_userbyid(found.owner) not in (current_user, 'postgres') then
      raise exception 'supabase-kick.sql: % belongs to the role %, not to %, so rowbranch''s setup did not make it: nothing was installed', found.what, pg_catalog.pg_get_userbyid(found.owner), trusted
        using hint = 'find out who made it and why; drop it if it is no one''s, or make it yours (alter ... owner to ' || pg_catalog.quote_ident(current_user) || ') once you trust what it holds, then run this again';
    end if;
  end loop;
end
$owners$;

do $prerequisites$
begin
  if pg_catalog.to_regclass('vault.decrypted_secrets') is null then
    raise exception 'supabase-kick.sql: Supabase Vault is not enabled (the supabase_vault extension): see https://supabase.com/docs/guides/database/vault';
  end if;
  if pg_catalog.to_regprocedure('net.http_post(text, jsonb, jsonb, jsonb, integer)') is null then
    raise exception 'supabase-kick.sql: pg_net is not enabled: turn Database Webhooks on (Integrations → Database Webhooks → Enable), then run this again';
  end if;
end
$prerequisites$;

create schema if not exists rowbranch;

-- When each queue's drain was last kicked; written only by rowbranch.kick().
create table if not exists rowbranch.kicks (
  queue pg_catalog.text primary key,
  kicked_at pg_catalog.timestamptz not null
);

revoke all on table rowbranch.kicks from public;

create or replace function rowbranch.kick()
  returns trigger
  language plpgsql
  security definer
  set search_path = ''
as $kick$
declare
  target pg_catalog.text := TG_ARGV[0];
  branch pg_catalog.text := TG_ARGV[1];
  queue_name pg_catalog.text := TG_ARGV[2];
  last_kick pg_catalog.timestamptz;
  token pg_catalog.text;
begin
  if TG_NARGS <> 3 or TG_LEVEL <> 'STATEMENT' or TG_WHEN <> 'AFTER' or TG_OP <> 'INSERT' then
    raise warning 'rowbranch.kick() runs as an AFTER INSERT ... FOR EACH STATEMENT trigger with three arguments (the URL, the branch, the queue): no kick';
    return null;
  end if;
  begin
    if not exists (select 1 from inserted) then
      return null;
    end if;
    -- Never wait: a transaction that holds the lock is kicking for this queue already.
    if not pg_catalog.pg_try_advisory_xact_lock(
      pg_catalog.hashtext('rowbranch.kick'), pg_catalog.hashtext(queue_name)
    ) then
      return null;
    end if;
    select k.kicked_at into last_kick
      from rowbranch.kicks as k
      where k.queue = queue_name;
    if last_kick > pg_catalog.clock_timestamp() - '30 seconds'::pg_catalog.interval then
      return null;
    end if;
    select s.decrypted_secret into token
      from vault.decrypted_secrets as s
      where s.name = 'rowbranch_kick_token';
    if token is null or token = '' then
      raise warning 'rowbranch: no Vault secret named rowbranch_kick_token, so the drain workflow was not asked to run; its schedule will drain the rows of %.%', TG_TABLE_SCHEMA, TG_TABLE_NAME;
      return null;
    end if;
    insert into rowbranch.kicks as k (queue, kicked_at)
      values (queue_name, pg_catalog.clock_timestamp())
      on conflict (queue) do update set kicked_at = excluded.kicked_at;
    perform net.http_post(
      url => target,
      body => pg_catalog.jsonb_build_object('ref', branch),
      params => '{}'::pg_catalog.jsonb,
      headers => pg_catalog.jsonb_build_object(
        'Content-Type', 'application/json',
        'Accept', 'application/vnd.github+json',
        'X-GitHub-Api-Version', '2022-11-28',
        'User-Agent', 'rowbranch-kick',
        'Authorization', 'Bearer ' || token
      ),
      timeout_milliseconds => 5000
    );
  exception when others then
    raise warning 'rowbranch: the kick for %.% was not queued: %', TG_TABLE_SCHEMA, TG_TABLE_NAME, SQLERRM;
  end;
  return null;
end
$kick$;

revoke all on function rowbranch.kick() from public;

-- What the function's owner needs, checked: a missing piece only warns, since the kick is
-- only ever a signal.
do $checks$
declare
  owner_name pg_catalog.name;
begin
  select pg_catalog.pg_get_userbyid(p.proowner) into strict owner_name
    from pg_catalog.pg_proc as p
    where p.pronamespace = 'rowbranch'::pg_catalog.regnamespace and p.proname = 'kick';
  if not pg_catalog.has_table_privilege(owner_name, 'vault.decrypted_secrets', 'SELECT') then
    raise warning 'supabase-kick.sql: the role %, which owns rowbranch.kick(), cannot read vault.decrypted_secrets: run this as postgres', owner_name;
  end if;
  if not exists (select 1 from vault.decrypted_secrets where name = 'rowbranch_kick_token') then
    raise warning 'supabase-kick.sql: no Vault secret named rowbranch_kick_token yet: until there is one, inserts warn and nothing is kicked (this file''s header says how to add it)';
  end if;
end
$checks$;

drop trigger if exists [[ trigger_name ]] on [[ target ]];

create trigger [[ trigger_name ]]
  after insert on [[ target ]]
  referencing new table as inserted
  for each statement
  execute function rowbranch.kick([[ url_literal ]], [[ ref_literal ]], [[ queue_literal ]]);

commit;
