[#- The values below are quoted here, once, and only these quoted forms appear in the SQL:
    identifiers as "…" with " doubled; string literals as E'…' with \ and ' doubled, which reads
    the same whatever standard_conforming_strings says; the secret JSON-escaped inside the header
    JSON first. No raw value is written into a comment (a newline there would end it). -#]
[%- set secret = bearer_secret if bearer_secret else "REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET" -%]
[%- set target = '"' ~ (schema | replace('"', '""')) ~ '"."' ~ (table | replace('"', '""')) ~ '"' -%]
[%- set gate = '"' ~ (run_when.column | replace('"', '""')) ~ '"' if run_when else "" -%]
[%- set url_literal = "E'" ~ (url ~ "/webhook") | replace("\\", "\\\\") | replace("'", "''") ~ "'" -%]
[%- set headers = '{"Content-Type":"application/json","Authorization":' ~ ("Bearer " ~ secret) | tojson ~ '}' -%]
[%- set headers_literal = "E'" ~ headers | replace("\\", "\\\\") | replace("'", "''") ~ "'" -%]
-- rowbranch: the Supabase Database Webhook that posts each new row to rowbranch, the way the
-- Dashboard makes one. supabase-vault.sql is the better choice: it keeps the secret in Vault and
-- signs each delivery, so that no secret is readable anywhere in the database. Use this one
-- where that cannot run, and read "The secret" below.
--
-- What it does: after every INSERT on the table named below, Supabase's webhook function
-- supabase_functions.http_request() queues a POST of the new row to rowbranch's /webhook, as
-- {"type":"INSERT","table":…,"schema":…,"record":{…},"old_record":null}, with the secret in an
-- `Authorization: Bearer …` header and a 5000 ms timeout: without that argument http_request
-- waits 1000 ms, its own default (`timeout_ms integer DEFAULT 1000` in Supabase's definition,
-- https://github.com/supabase/supabase/blob/a728696ea82c92ca57ba9b669aa6f0461e7b60d5/docker/volumes/db/webhooks.sql),
-- where pg_net's net.http_post alone would wait 5000 ms. pg_net sends it after the inserting
-- transaction commits, so a rolled-back INSERT sends nothing and a slow or failed request never
-- holds up or fails the INSERT. The trigger is called rowbranch_webhook, like the one
-- supabase-vault.sql installs: running either script replaces the other's trigger.
--
-- Before running it: turn Database Webhooks on in the Supabase dashboard (Integrations →
-- Database Webhooks → Enable). That creates the supabase_functions schema and the pg_net
-- extension this trigger calls; without them this script stops with "schema
-- supabase_functions does not exist". Then run it in the SQL editor (or with psql) as the
-- postgres role. Running it again is harmless: it replaces the trigger in one transaction.
--
-- Names: the schema and table are written as quoted identifiers (a " in a name doubled), so
-- they must be spelled exactly as PostgreSQL stores them: lower case, unless the table was
-- created with a quoted name. That is also the spelling the payload carries and the route's
-- `schema` and `table` in rowbranch.toml must match.
--
-- The secret: the header below is stored in plain text in the trigger's definition, readable
-- by every role that can read the system catalogs (pg_trigger, pg_get_triggerdef), and copied
-- with every request into pg_net's queue, which every role of the database can read and write
-- since pg_net 0.12 (https://github.com/supabase/pg_net/blob/v0.20.5/sql/pg_net.sql). Whoever
-- reads it can send rowbranch deliveries of their own, at any time. So it must be a secret made
-- for this webhook and used for nothing else: the bearer secret in ROWBRANCH_WEBHOOK_SECRET,
-- never the whsec_ one that supabase-vault.sql signs with (rowbranch never takes a whsec_
-- secret as a bearer token, so a signed setup stays signed). Never put a Supabase service_role
-- key, JWT secret or database password here. rowbranch takes bearer tokens only when its
-- [webhook] accept lists "bearer": the rowbranch.toml init writes lists only
-- "standard-webhooks", for supabase-vault.sql, so set accept = ["bearer"] to use this file.
--
-- Rotating the secret without losing a delivery:
--   1. add NEW to ROWBRANCH_WEBHOOK_SECRET beside the secrets it holds (separated by spaces),
--      and restart rowbranch;
--   2. put NEW in the header below and run this script again;
--   3. take OLD out of ROWBRANCH_WEBHOOK_SECRET, and restart rowbranch.
--
-- Lost deliveries: pg_net tries each request once and never retries. rowbranch being down or
-- slower than the timeout, a network error, or a database crash before the queue is sent (it
-- is an unlogged table) loses that row's webhook; pg_net keeps the answers for six hours in
-- net._http_response, where failures can be seen. The sweep (`rowbranch reconcile`) reads the
-- table itself and finishes every row whose webhook never arrived.
[%- if not webhook_secret %]
--
-- !! Replace REPLACE_WITH_ROWBRANCH_WEBHOOK_SECRET below with your bearer secret (one in
-- !! ROWBRANCH_WEBHOOK_SECRET that does not start with whsec_) before running this: until then,
-- !! the check at the end refuses to install the trigger.
[%- endif %]
[%- if run_when %]
--
-- The gate (the route's run_when, from `init --run-when`): the trigger also fires after each
-- UPDATE of the gate's column, with the row before and after it. rowbranch runs the row when an
-- INSERT holds the value or an UPDATE makes it hold it, and answers every other delivery
-- `200 ignored` (not_ready, passed_before), asking nothing of GitHub.
[%- endif %]

begin;

drop trigger if exists rowbranch_webhook on [[ target ]];

create trigger rowbranch_webhook
  after insert[% if run_when %] or update of [[ gate ]][% endif %] on [[ target ]]
  for each row
  execute function supabase_functions.http_request(
    [[ url_literal ]],
    'POST',
    [[ headers_literal ]],
    '{}',
    '5000'
  );
[%- if not webhook_secret %]

-- Refuses a trigger that still sends the placeholder: every delivery would be refused (401).
do $check$
begin
  if exists (
    select 1 from pg_trigger
    where tgname = 'rowbranch_webhook'
      and position(convert_to('REPLACE_WITH_' || 'ROWBRANCH_WEBHOOK_SECRET', 'UTF8') in tgargs) > 0
  ) then
    raise exception 'supabase.sql: the Authorization header still holds the placeholder; put your bearer secret (the one in ROWBRANCH_WEBHOOK_SECRET that does not start with whsec_) in its place and run this again';
  end if;
  if exists (
    select 1 from pg_trigger
    where tgname = 'rowbranch_webhook'
      and position(convert_to('Bearer whsec_', 'UTF8') in tgargs) > 0
  ) then
    raise exception 'supabase.sql: the Authorization header holds a whsec_ secret, a signing key that rowbranch never takes as a bearer token; put the bearer secret (the one in ROWBRANCH_WEBHOOK_SECRET that does not start with whsec_) in its place, or run supabase-vault.sql, which signs';
  end if;
end
$check$;
[%- endif %]

commit;
