[#- The values below are quoted here, once, and only these quoted forms appear in the SQL:
    identifiers as "…" with " doubled; string literals as E'…' with \ and ' doubled, which reads
    the same whatever standard_conforming_strings says. The queue names are expected to match
    ^[a-z_][a-z0-9_]{0,46}$ (rowbranch checks its config), and are quoted all the same. No raw
    value is written into a comment (a newline there would end it) nor into a $…$ body (a value
    holding its tag would end it): the blocks read the queue names from settings made for this
    transaction. The events are written as the keywords they name; any other is refused here. -#]
[%- set target = '"' ~ (schema | replace('"', '""')) ~ '"."' ~ (table | replace('"', '""')) ~ '"' -%]
[%- set queue_literal = "E'" ~ (queue | replace("\\", "\\\\") | replace("'", "''")) ~ "'" -%]
[%- set dead_letter_literal = "E'" ~ (dead_letter | replace("\\", "\\\\") | replace("'", "''")) ~ "'" -%]
[%- set trigger_name = '"' ~ (("rowbranch_queue_" ~ queue) | replace('"', '""')) ~ '"' -%]
[%- set gate = '"' ~ (run_when.column | replace('"', '""')) ~ '"' if run_when else "" -%]
[%- set equals_literal = "E'" ~ (equals_json | replace("\\", "\\\\") | replace("'", "''")) ~ "'::jsonb" if run_when else "" -%]
[%- set ready_trigger = '"' ~ (("rowbranch_ready_" ~ queue) | replace('"', '""')) ~ '"' -%]
[%- if not events %][[ events_must_name_at_least_one_of_INSERT_UPDATE_DELETE ]][% endif -%]
-- rowbranch: the trigger that puts each new row into a Supabase Queue (pgmq), where rowbranch
-- reads it.
--
-- What it does: each INSERT on the table named below (and each UPDATE or DELETE, when the route
-- takes them: the events are in the trigger at the end) sends the row to the queue, as the body
-- Supabase's Database Webhook posts: {"type":"INSERT","table":…,"schema":…,"record":{…},
-- "old_record":null} (the same jsonb_build_object as supabase_functions.http_request() in
-- supabase/supabase docker/volumes/db/webhooks.sql at 0bf7caa30ceea38f99eec768d3b54abcfa0601ba).
-- pgmq.send is an INSERT into the queue's table, made by the inserting transaction itself: the
-- message exists if and only if the row's INSERT committed, so a rolled-back INSERT leaves
-- nothing, and nothing can be lost between the table and rowbranch, which reads the queue over
-- its DATABASE_URL (no inbound port, no webhook secret) and archives a message only once its
-- work is settled.
--
-- Before running it: pgmq must be available (on Supabase, PostgreSQL 15.6.1.143 or later:
-- https://supabase.com/docs/guides/queues/quickstart). Run it in the SQL editor (or with psql)
-- as the postgres role. Running it again is harmless: in one transaction it ends in the same
-- state, and leaves the messages already queued where they are.
-- It installs nothing into a schema rowbranch, or beside a table in it, that another role made:
-- the schema and each table in it must belong to the role running it or to postgres, or it
-- stops at once, naming the object and its owner.
--
-- What it installs, in this order:
--   1. pgmq, with `create extension pgmq`, only when there is no schema pgmq yet: pgmq may have
--      been installed as plain SQL (pgmq's INSTALLATION.md, "SQL-only installation", possible
--      from pgmq 1.5.1: pgmq/pgmq 87530eda15c53448dc1e0f222dac67ea4731ff4c), where create
--      extension fails.
--   2. The queue and the dead-letter queue named in rowbranch.toml's [pgmq] section, each made
--      with pgmq.create when pgmq.list_queues() does not hold it yet: the logged tables
--      pgmq.q_<name> (the messages) and pgmq.a_<name> (the archive); pgmq lowercases the table
--      names and keeps the name as given in pgmq.meta. A queue that exists but is unlogged is
--      refused, since a crash empties an unlogged table.
--   3. The trigger function rowbranch.enqueue(), in rowbranch's own schema (supabase-vault.sql
--      uses it too), outside the schemas Supabase's Data API exposes: SECURITY DEFINER with an
--      empty search_path and fully qualified names, one for every table and queue (the queue is
--      its trigger's argument, so two rowbranch deployments with different queues share it and
--      never collide).
--   4. What the function's owner needs to send, granted only where it lacks it: USAGE on schema
--      pgmq, INSERT on pgmq.q_<queue>, and SELECT on its msg_id column (pgmq.send is SECURITY
--      INVOKER and inserts with RETURNING msg_id: pgmq-extension/sql/pgmq.sql, "send", at
--      pgmq/pgmq v1.4.4, 9787166c30ce76dabaa1e781f2ad5b5033d812a0). It checks them afterwards:
--      a GRANT its runner may not make only warns.
--   5. The row trigger rowbranch_queue_<queue> on the table (the queue's name after the
--      prefix), and drops the table's webhook trigger rowbranch_webhook if supabase.sql put one
--      there: both would send each row twice.
-- It calls only what pgmq 1.4.4 (Supabase's PostgreSQL 15 images) and every later pgmq have,
-- every argument cast: pgmq.list_queues(), pgmq.create(text), pgmq.send(text, jsonb, integer).
--
-- Who can read and write the queue. Its messages are unauthenticated input to rowbranch
-- (whoever can write one can make the workflow work on any text they choose), and they hold
-- whole rows:
--   - the role that inserts needs nothing on pgmq: the function runs as its owner (the role that
--     ran this file the first time), so anon and authenticated go on inserting with their rights
--     on the table alone, and get none on the queue;
--   - the queue tables' owner (the role that ran pgmq.create: this file's runner, when it made
--     them) and superusers can do anything with them. rowbranch's own role (the one in its
--     DATABASE_URL) needs rights of its own on both queues to read, archive and dead-letter;
--     this file grants it nothing;
--   - pg_monitor can read every message: pgmq grants it SELECT on every table in schema pgmq,
--     and by default privileges on those its installing role creates later (pgmq.sql, "Grant
--     permission to pg_monitor");
--   - nobody else, unless granted. Grant anon and authenticated nothing on schema pgmq, and do
--     not turn on "Expose Queues via PostgREST" for these queues: its pgmq_public functions are
--     executable by anon and authenticated (https://supabase.com/docs/guides/queues/api). What
--     each role holds there: `select grantee, table_name, privilege_type from
--     information_schema.role_table_grants where table_schema = 'pgmq'`;
--   - no other role can attach rowbranch.enqueue() to a table of its own to write the queue as
--     the function's owner: nobody else is given USAGE on schema rowbranch or EXECUTE on it.
--
-- What makes the table's INSERTs fail (the trigger runs inside each one, so its error is the
-- INSERT's): the queue dropped (pgmq.drop_queue) or pgmq removed while the trigger is there,
-- after which every INSERT fails with "relation pgmq.q_… does not exist", so remove the trigger
-- first (below); the owner's USAGE, INSERT or SELECT on the queue revoked; a full disk, as for
-- any write. A stopped or slow rowbranch never does: the queue grows. What skips the trigger
-- without an error: the trigger disabled, or session_replication_role = replica (as some
-- restores set it); the rows inserted meanwhile never reach the queue.
--
-- Removing it all, as the role that ran this file, once the table's last row for rowbranch is
-- in the queue:
--   begin;
--   drop trigger if exists "rowbranch_queue_QUEUE" on "SCHEMA"."TABLE";
--   drop function if exists rowbranch.enqueue();
--   drop schema if exists rowbranch;
--   commit;
-- with QUEUE, SCHEMA and TABLE spelled as in the trigger at the end of this file, and the drop
-- trigger once for each table the function serves (the drop function refuses while a trigger
-- still uses it; the drop schema, while the schema holds anything else, such as
-- supabase-vault.sql's rowbranch.signed_webhook(): leave that line out then). This lists them:
--   select tgrelid::regclass, tgname from pg_trigger where tgfoid = 'rowbranch.enqueue'::regproc;
-- Then, once rowbranch has emptied the queue and no dead letter is wanted any more
-- (a queue's messages and its archive go with it):
--   select pgmq.drop_queue('QUEUE'::text);
--   select pgmq.drop_queue('DEAD_LETTER'::text);
-- with the two names of the [pgmq] section (the ones in the first statement below).

begin;

-- The queue names, for the blocks below to read: local to this transaction.
select pg_catalog.set_config('rowbranch.queue', [[ queue_literal ]], true),
       pg_catalog.set_config('rowbranch.dead_letter', [[ dead_letter_literal ]], true);

-- Trust only what rowbranch's setup made: the owner of schema rowbranch may replace or drop
-- anything in it, and the owner of a table in it may put a trigger on that table, which then
-- runs inside this file's SECURITY DEFINER function, as its owner. So when the schema or a table
-- in it exists and belongs to another role than the one running this file and postgres, this
-- file installs nothing and says whose it is. (pgmq's own schema is pgmq's business: Supabase's
-- roles may own it.)
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
      raise exception 'supabase-queue.sql: % belongs to the role %, not to %, so rowbranch''s setup did not make it: nothing was installed', found.what, pg_catalog.pg_get_userbyid(found.owner), trusted
        using hint = 'find out who made it and why; drop it if it is no one''s, or make it yours (alter ... owner to ' || pg_catalog.quote_ident(current_user) || ') once you trust what it holds, then run this again';
    end if;
  end loop;
end
$owners$;

-- 1. pgmq, unless there is a schema pgmq already.
do $pgmq$
begin
  if pg_catalog.to_regnamespace('pgmq') is null then
    create extension pgmq;
  end if;
exception
  -- PostgreSQL 15 and later: feature_not_supported, "extension is not available"; before, the
  -- control file's undefined_file.
  when feature_not_supported or undefined_file then
    raise exception 'supabase-queue.sql: pgmq is not installed on this server (%): install or enable it first (on Supabase: Integrations, Queues), then run this again', sqlerrm;
end
$pgmq$;

-- 2. The queue and the dead-letter queue, logged.
do $queues$
declare
  wanted pg_catalog.text;
  unlogged pg_catalog.bool;
  prefix pg_catalog.text;
  persistence "char";
begin
  foreach wanted in array array[
    pg_catalog.current_setting('rowbranch.queue'),
    pg_catalog.current_setting('rowbranch.dead_letter')
  ] loop
    select q.is_unlogged into unlogged
      from pgmq.list_queues() as q
      where q.queue_name = wanted;
    if not found then
      perform pgmq.create(wanted::pg_catalog.text);
    elsif unlogged then
      raise exception 'supabase-queue.sql: the queue % is unlogged, so a crash would empty it: drop it (select pgmq.drop_queue(...)) or choose another name, then run this again', wanted;
    end if;
    foreach prefix in array array['q_', 'a_'] loop
      select c.relpersistence into persistence
        from pg_catalog.pg_class as c
        where c.oid = pg_catalog.to_regclass(
          pg_catalog.format('pgmq.%I', prefix || pg_catalog.lower(wanted)));
      if persistence is distinct from 'p' then
        raise exception 'supabase-queue.sql: the queue % has no logged table pgmq.%', wanted, prefix || pg_catalog.lower(wanted);
      end if;
    end loop;
  end loop;
end
$queues$;

-- 3. The trigger function, in a schema nobody else may use.
create schema if not exists rowbranch;

create or replace function rowbranch.enqueue()
  returns trigger
  language plpgsql
  security definer
  set search_path = ''
as $enqueue$
begin
  if TG_NARGS <> 1 or TG_LEVEL <> 'ROW' or TG_WHEN <> 'AFTER' then
    raise exception 'rowbranch.enqueue() runs as an AFTER ... FOR EACH ROW trigger whose one argument is the queue''s name';
  end if;
  perform pgmq.send(
    TG_ARGV[0]::pg_catalog.text,
    pg_catalog.jsonb_build_object(
      'type', TG_OP,
      'table', TG_TABLE_NAME,
      'schema', TG_TABLE_SCHEMA,
      'record', case when TG_OP = 'DELETE' then null else pg_catalog.to_jsonb(NEW) end,
      'old_record', case when TG_OP = 'INSERT' then null else pg_catalog.to_jsonb(OLD) end
    ),
    0::pg_catalog.int4
  );
  return null;
end
$enqueue$;

revoke all on all functions in schema rowbranch from public;

-- 4. What the function's owner needs to send to this queue, where it lacks it.
do $grants$
declare
  owner_name pg_catalog.name;
  queue_table pg_catalog.text := pg_catalog.format(
    'pgmq.%I', 'q_' || pg_catalog.lower(pg_catalog.current_setting('rowbranch.queue')));
begin
  select pg_catalog.pg_get_userbyid(p.proowner) into strict owner_name
    from pg_catalog.pg_proc as p
    where p.pronamespace = 'rowbranch'::pg_catalog.regnamespace and p.proname = 'enqueue';
  if not pg_catalog.has_schema_privilege(owner_name, 'pgmq', 'USAGE') then
    execute pg_catalog.format('grant usage on schema pgmq to %I', owner_name);
  end if;
  if not pg_catalog.has_table_privilege(owner_name, queue_table, 'INSERT') then
    execute pg_catalog.format('grant insert on table %s to %I', queue_table, owner_name);
  end if;
  if not pg_catalog.has_column_privilege(owner_name, queue_table, 'msg_id', 'SELECT') then
    execute pg_catalog.format('grant select (msg_id) on table %s to %I', queue_table, owner_name);
  end if;
  if not (pg_catalog.has_schema_privilege(owner_name, 'pgmq', 'USAGE')
      and pg_catalog.has_table_privilege(owner_name, queue_table, 'INSERT')
      and pg_catalog.has_column_privilege(owner_name, queue_table, 'msg_id', 'SELECT')) then
    raise exception 'supabase-queue.sql: the role %, which owns rowbranch.enqueue(), cannot be given USAGE on schema pgmq, INSERT on % and SELECT on its msg_id: run this as a role that may grant them (the queue''s owner)', owner_name, queue_table;
  end if;
  if exists (
    select 1 from pg_catalog.pg_proc as p
    where p.pronamespace = 'pgmq'::pg_catalog.regnamespace
      and p.proname in ('send', 'format_table_name')
      and not pg_catalog.has_function_privilege(owner_name, p.oid, 'EXECUTE')
  ) then
    raise exception 'supabase-queue.sql: the role %, which owns rowbranch.enqueue(), may not execute pgmq.send: grant it that, then run this again', owner_name;
  end if;
end
$grants$;

-- 5. The row trigger, and no webhook trigger beside it.
drop trigger if exists rowbranch_webhook on [[ target ]];

drop trigger if exists [[ trigger_name ]] on [[ target ]];

drop trigger if exists [[ ready_trigger ]] on [[ target ]];
[% if run_when %]
-- The gate (the route's run_when): a row goes to the queue when it is inserted holding the
-- value, or when an UPDATE of the column makes it hold the value; no other row, and no other
-- UPDATE (rowbranch's own writes, an updated_at trigger), is sent. The column is compared as
-- JSON, as rowbranch compares it: a number by its value, text as text.
create trigger [[ trigger_name ]]
  after insert on [[ target ]]
  for each row
  when (pg_catalog.to_jsonb(new.[[ gate ]]) = [[ equals_literal ]])
  execute function rowbranch.enqueue([[ queue_literal ]]);

create trigger [[ ready_trigger ]]
  after update of [[ gate ]] on [[ target ]]
  for each row
  when (pg_catalog.to_jsonb(new.[[ gate ]]) = [[ equals_literal ]]
        and pg_catalog.to_jsonb(old.[[ gate ]]) is distinct from [[ equals_literal ]])
  execute function rowbranch.enqueue([[ queue_literal ]]);
[% else %]
create trigger [[ trigger_name ]]
  after [% for event in events %][% if not loop.first %] or [% endif %][% if event == "INSERT" %]insert[% elif event == "UPDATE" %]update[% elif event == "DELETE" %]delete[% else %][[ events_may_hold_only_INSERT_UPDATE_DELETE ]][% endif %][% endfor %] on [[ target ]]
  for each row
  execute function rowbranch.enqueue([[ queue_literal ]]);
[% endif %]
commit;
