//! Supabase's own schemas as a test stands them in: Vault and pg_net's queue, shaped as
//! supabase/vault 0.3 and supabase/pg_net 0.20.5 define them, and pgcrypto where Supabase keeps
//! it. The setup SQL that reads a Vault secret or calls `net.http_post` is run against them.

/// Vault, pg_net and pgcrypto as a Supabase project has them.
pub const STAND_IN: &str = r#"
-- Supabase Vault's interface (supabase/vault, sql/supabase_vault--0.3.0.sql) without its
-- encryption: `secret` holds the text reversed and in base64, so that a trigger reading it
-- instead of decrypted_secret would sign with the wrong key.
create schema vault;
create table vault.secrets (
    id          uuid primary key default gen_random_uuid(),
    name        text,
    description text not null default '',
    secret      text not null,
    key_id      uuid,
    created_at  timestamptz not null default current_timestamp,
    updated_at  timestamptz not null default current_timestamp
);
create unique index on vault.secrets using btree (name) where name is not null;
create function vault._hide(t text) returns text language sql immutable
    as $$ select pg_catalog.encode(pg_catalog.convert_to(pg_catalog.reverse(t), 'UTF8'), 'base64') $$;
create function vault._show(t text) returns text language sql immutable
    as $$ select pg_catalog.reverse(pg_catalog.convert_from(pg_catalog.decode(t, 'base64'), 'UTF8')) $$;
create view vault.decrypted_secrets as
    select s.id, s.name, s.description, s.secret, vault._show(s.secret) as decrypted_secret,
           s.key_id, s.created_at, s.updated_at
    from vault.secrets s;
create function vault.create_secret(
    new_secret text, new_name text = null, new_description text = '', new_key_id uuid = null
) returns uuid security definer language plpgsql set search_path = '' as $$
declare
    rec record;
begin
    insert into vault.secrets (secret, name, description)
    values (vault._hide(new_secret), new_name, new_description)
    returning * into rec;
    return rec.id;
end
$$;
create function vault.update_secret(
    secret_id uuid, new_secret text = null, new_name text = null, new_description text = null,
    new_key_id uuid = null
) returns void security definer language plpgsql set search_path = '' as $$
begin
    update vault.secrets s
    set secret = case when new_secret is null then s.secret else vault._hide(new_secret) end,
        name = coalesce(new_name, s.name),
        description = coalesce(new_description, s.description),
        updated_at = now()
    where s.id = secret_id;
end
$$;
revoke all on function vault.create_secret, vault.update_secret from public;

-- pg_net's queue and net.http_post, as sql/pg_net.sql defines them; the queue readable and
-- writable by every role, as since pg_net 0.12.
create schema net;
create table net.http_request_queue (
    id                   bigserial,
    method               text not null,
    url                  text not null,
    headers              jsonb,
    body                 bytea,
    timeout_milliseconds int not null
);
create function net.http_post(
    url text,
    body jsonb default '{}'::jsonb,
    params jsonb default '{}'::jsonb,
    headers jsonb default '{"Content-Type": "application/json"}'::jsonb,
    timeout_milliseconds int default 5000
) returns bigint language plpgsql as $$
declare
    request_id bigint;
    content_type text;
begin
    select header_value into content_type
    from jsonb_each_text(coalesce(headers, '{}'::jsonb)) r(header_name, header_value)
    where lower(header_name) = 'content-type'
    limit 1;
    if content_type is null then
        select headers || '{"Content-Type": "application/json"}'::jsonb into headers;
    end if;
    if content_type <> 'application/json' then
        raise exception 'Content-Type header must be "application/json"';
    end if;
    if params <> '{}'::jsonb then
        raise exception 'the stand-in net.http_post takes no params';
    end if;
    insert into net.http_request_queue(method, url, headers, body, timeout_milliseconds)
    values ('POST', url, headers, convert_to(body::text, 'UTF8'), timeout_milliseconds)
    returning id into request_id;
    return request_id;
end
$$;
grant usage on schema net to public;
grant all on all sequences in schema net to public;
grant all on all tables in schema net to public;

-- Supabase keeps pgcrypto in the extensions schema.
create schema extensions;
create extension pgcrypto with schema extensions;
"#;
