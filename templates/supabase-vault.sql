[#- The values below are quoted here, once, and only these quoted forms appear in the SQL:
    identifiers as "…" with " doubled; string literals as E'…' with \ and ' doubled, which reads
    the same whatever standard_conforming_strings says. The secret appears only in the two Vault
    statements; the function's body holds no value at all (the URL reaches it as the trigger's
    argument). No raw value is written into a comment (a newline there would end it). -#]
[%- set secret = webhook_secret if webhook_secret else "REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET" -%]
[%- set secret_literal = "E'" ~ secret | replace("\\", "\\\\") | replace("'", "''") ~ "'" -%]
[%- set target = '"' ~ (schema | replace('"', '""')) ~ '"."' ~ (table | replace('"', '""')) ~ '"' -%]
[%- set gate = '"' ~ (run_when.column | replace('"', '""')) ~ '"' if run_when else "" -%]
[%- set url_literal = "E'" ~ (url ~ "/webhook") | replace("\\", "\\\\") | replace("'", "''") ~ "'" -%]
-- rowbranch: a Supabase trigger that posts each new row to rowbranch, signed, with the webhook
-- secret kept in Supabase Vault.
--
-- What it does: after every INSERT on the table named below, the trigger function
-- rowbranch.signed_webhook() builds the body Supabase's own Database Webhooks send,
-- {"type":"INSERT","table":…,"schema":…,"record":{…},"old_record":null}, signs it the Standard
-- Webhooks way (https://www.standardwebhooks.com/: a `webhook-id`, a `webhook-timestamp`, and a
-- `webhook-signature` that is the HMAC-SHA256 of "id.timestamp.body" keyed with the base64-decoded
-- part of the whsec_ secret), and queues a POST of it to rowbranch's /webhook with pg_net's
-- net.http_post and a 5000 ms timeout (https://supabase.com/docs/guides/database/extensions/pgnet).
-- pg_net sends it after the inserting transaction commits, so a rolled-back INSERT sends nothing,
-- and a slow or failed request never holds up or fails the INSERT. The trigger is called
-- rowbranch_webhook, like the one supabase.sql installs: running either script replaces the
-- other's trigger.
--
-- The signature is over exactly the bytes pg_net sends. net.http_post stores the body as
-- convert_to(body::text, 'UTF8'), jsonb's own text form in UTF-8, and its worker sends those bytes
-- unchanged (https://github.com/supabase/pg_net/blob/v0.20.5/sql/pg_net.sql, net.http_post); the
-- function signs convert_to of the same body::text.
--
-- Replays: rowbranch refuses a signature whose timestamp is more than five minutes off, so a
-- request that waits longer than that in pg_net's queue (a transaction that stays open after
-- the INSERT, a backlog) is refused as well; the sweep (`rowbranch reconcile`) finishes such a
-- row. A copy sent again within the five minutes finds the row's branch and changes nothing.
--
-- Who can read what:
-- - The secret is stored once, in Vault (vault.secrets, encrypted at rest). Its plain text can be
--   read only through the view vault.decrypted_secrets, which on Supabase the postgres role can
--   read and grant, and anon and authenticated cannot
--   (https://github.com/supabase/postgres/blob/1e1d69c0760fa7658e6c3f95108f039fb99f9586/migrations/db/migrations/20221207154255_create_vault.sql;
--   https://supabase.com/docs/guides/database/vault). Keep it that way: whoever can read that
--   view can sign deliveries.
-- - rowbranch.signed_webhook() reads it as the role that runs this script (SECURITY DEFINER), so
--   a row inserted by any role is signed without that role reading Vault. It can run only as a
--   trigger, and EXECUTE on it is revoked from PUBLIC.
-- - The trigger's definition holds the URL, never the secret.
-- - pg_net's queue (net.http_request_queue) and its answers (net._http_response, kept six hours)
--   can be read and written by every role of the database since pg_net 0.12
--   (https://github.com/supabase/pg_net/blob/v0.20.5/sql/pg_net.sql, the grants at its end). They
--   hold each request's body (the row) and its three signature headers, never the secret: a
--   signature is good for that one body, and for five minutes.
-- - This file holds the secret in plain text, as rowbranch.env does: it is readable by you only.
--   What you run in the SQL editor may be kept in its history, and a server that logs every
--   statement logs it: delete the query afterwards, or run the file with psql.
--
-- Before running it: turn Database Webhooks on in the Supabase dashboard (Integrations →
-- Database Webhooks → Enable), which enables pg_net; Vault (the supabase_vault extension) and
-- pgcrypto are on in every Supabase project. Then run it in the SQL editor (or with psql) as the
-- postgres role. Running it again is harmless: it updates the secret in Vault (its name,
-- rowbranch_webhook_secret, is unique) and replaces the function and the trigger, in one
-- transaction.
-- It installs nothing into a schema rowbranch, or beside a table in it, that another role made:
-- the schema and each table in it must belong to the role running it or to postgres, or it
-- stops at once, naming the object and its owner.
--
-- Names: the schema and table are written as quoted identifiers (a " in a name doubled), so
-- they must be spelled exactly as PostgreSQL stores them: lower case, unless the table was
-- created with a quoted name. That is also the spelling the payload carries and the route's
-- `schema` and `table` in rowbranch.toml must match. For UPDATEs too, write `after insert or
-- update` below (and add "UPDATE" to the route's events); the body then carries old_record.
--
-- Rotating the secret without losing a delivery:
--   1. add NEW to ROWBRANCH_WEBHOOK_SECRET beside the secrets it holds (separated by spaces),
--      and restart rowbranch;
--   2. put NEW in place of the secret below and run this script again;
--   3. take OLD out of ROWBRANCH_WEBHOOK_SECRET, and restart rowbranch.
--
-- Lost deliveries: pg_net tries each request once and never retries. rowbranch being down or
-- slower than the timeout, a network error, or a database crash before the queue is sent (it is
-- an unlogged table) loses that row's webhook; the failures can be seen in net._http_response.
-- The sweep reads the table itself and finishes every row whose webhook never arrived.
[%- if not webhook_secret %]
--
-- !! Replace REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET below (twice) with your webhook secret, the
-- !! whsec_… one in ROWBRANCH_WEBHOOK_SECRET, before running this: until then, the check after
-- !! it refuses to install the trigger.
[%- endif %]
[%- if run_when %]
--
-- The gate (the route's run_when, from `init --run-when`): the trigger also fires after each
-- UPDATE of the gate's column, with the row before and after it. rowbranch runs the row when an
-- INSERT holds the value or an UPDATE makes it hold it, and answers every other delivery
-- `200 ignored` (not_ready, passed_before), asking nothing of GitHub.
[%- endif %]

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
      raise exception 'supabase-vault.sql: % belongs to the role %, not to %, so rowbranch''s setup did not make it: nothing was installed', found.what, pg_catalog.pg_get_userbyid(found.owner), trusted
        using hint = 'find out who made it and why; drop it if it is no one''s, or make it yours (alter ... owner to ' || pg_catalog.quote_ident(current_user) || ') once you trust what it holds, then run this again';
    end if;
  end loop;
end
$owners$;

do $prerequisites$
begin
  if to_regclass('vault.decrypted_secrets') is null then
    raise exception 'supabase-vault.sql: Supabase Vault is not enabled (the supabase_vault extension): see https://supabase.com/docs/guides/database/vault';
  end if;
  if to_regprocedure('net.http_post(text, jsonb, jsonb, jsonb, integer)') is null then
    raise exception 'supabase-vault.sql: pg_net is not enabled: turn Database Webhooks on (Integrations → Database Webhooks → Enable), then run this again';
  end if;
end
$prerequisites$;

create extension if not exists pgcrypto;

-- The secret, in Vault: updated when it is there already, created otherwise.
select vault.update_secret(id, [[ secret_literal ]])
from vault.secrets
where name = 'rowbranch_webhook_secret';

select vault.create_secret(
  [[ secret_literal ]],
  'rowbranch_webhook_secret',
  'rowbranch: the whsec_ secret the rowbranch_webhook trigger signs with (ROWBRANCH_WEBHOOK_SECRET)'
)
where not exists (select 1 from vault.secrets where name = 'rowbranch_webhook_secret');

-- A secret rowbranch could not check would make every delivery a 401: refuse it here.
do $check$
declare
  stored text;
begin
  select decrypted_secret into stored
  from vault.decrypted_secrets
  where name = 'rowbranch_webhook_secret';
  if left(stored, 3) = 'v1,' then
    stored := substr(stored, 4);
  end if;
  if position('REPLACE_WITH_' || 'ROWBRANCH_WEBHOOK_SECRET' in stored) > 0 then
    raise exception 'supabase-vault.sql: the secret is still the placeholder; put your webhook secret (the whsec_ one in ROWBRANCH_WEBHOOK_SECRET) in its place and run this again';
  end if;
  if stored is null or left(stored, 6) <> 'whsec_' then
    raise exception 'supabase-vault.sql: the secret must be a Standard Webhooks secret, whsec_ and base64 (rowbranch init writes one into rowbranch.env)';
  end if;
  begin
    if length(decode(substr(stored, 7), 'base64')) = 0 then
      raise exception 'empty';
    end if;
  exception when others then
    raise exception 'supabase-vault.sql: the part of the secret after whsec_ is not base64';
  end;
end
$check$;

create schema if not exists rowbranch;

create or replace function rowbranch.signed_webhook() returns trigger
language plpgsql
security definer
-- Replaced below by pg_catalog and pgcrypto's schema: nothing else is looked up by name.
set search_path = pg_catalog
as $function$
declare
  target text := TG_ARGV[0];
  secret text;
  body jsonb;
  message_id text;
  sent_at text;
  signature text;
begin
  select decrypted_secret into secret
  from vault.decrypted_secrets
  where name = 'rowbranch_webhook_secret';
  if secret is null then
    raise warning 'rowbranch: no Vault secret named rowbranch_webhook_secret: the webhook for this row of %.% was not sent', TG_TABLE_SCHEMA, TG_TABLE_NAME;
    return null;
  end if;
  if left(secret, 3) = 'v1,' then
    secret := substr(secret, 4);
  end if;

  -- The body Supabase's webhooks send (https://supabase.com/docs/guides/database/webhooks).
  body := jsonb_build_object(
    'type', TG_OP,
    'table', TG_TABLE_NAME,
    'schema', TG_TABLE_SCHEMA,
    'record', to_jsonb(NEW),
    'old_record', to_jsonb(OLD)
  );
  message_id := 'msg_' || replace(gen_random_uuid()::text, '-', '');
  sent_at := floor(extract(epoch from clock_timestamp()))::bigint::text;
  -- Over convert_to(body::text, 'UTF8'): the bytes net.http_post queues and sends. base64 can
  -- break long lines; a SHA-256 MAC fits on one, and the newline is dropped all the same.
  signature := 'v1,' || replace(encode(hmac(
    convert_to(message_id || '.' || sent_at || '.' || body::text, 'UTF8'),
    decode(substr(secret, 7), 'base64'),
    'sha256'
  ), 'base64'), E'\n', '');

  perform net.http_post(
    url => target,
    body => body,
    params => '{}'::jsonb,
    headers => jsonb_build_object(
      'Content-Type', 'application/json',
      'webhook-id', message_id,
      'webhook-timestamp', sent_at,
      'webhook-signature', signature
    ),
    timeout_milliseconds => 5000
  );
  return null;
exception when others then
  -- A webhook that cannot be queued never fails the INSERT: the row is there, and the sweep
  -- will find it.
  raise warning 'rowbranch: the webhook for this row of %.% was not queued: %', TG_TABLE_SCHEMA, TG_TABLE_NAME, SQLERRM;
  return null;
end
$function$;

-- hmac() comes from pgcrypto, wherever it is installed (on Supabase, the extensions schema).
do $search_path$
declare
  crypto_schema name;
begin
  select n.nspname into crypto_schema
  from pg_extension e
  join pg_namespace n on n.oid = e.extnamespace
  where e.extname = 'pgcrypto';
  execute format(
    'alter function rowbranch.signed_webhook() set search_path = pg_catalog, %I',
    crypto_schema
  );
end
$search_path$;

revoke all on function rowbranch.signed_webhook() from public;

drop trigger if exists rowbranch_webhook on [[ target ]];

create trigger rowbranch_webhook
  after insert[% if run_when %] or update of [[ gate ]][% endif %] on [[ target ]]
  for each row
  execute function rowbranch.signed_webhook([[ url_literal ]]);

commit;
