//! Taking `sslmode` and `sslrootcert` out of a connection string (a `postgres://` URL or libpq
//! `key=value` pairs), read the way libpq reads it, noting the password to keep out of messages.

/// A connection string with `sslmode` and `sslrootcert` taken out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SplitUrl {
    /// The rest, for tokio-postgres.
    pub(super) rest: String,
    pub(super) sslmode: Option<String>,
    pub(super) sslrootcert: Option<String>,
    /// The password as written, and percent-decoded.
    pub(super) secrets: Vec<String>,
}

pub(super) fn split_ssl_options(url: &str) -> SplitUrl {
    for scheme in ["postgres://", "postgresql://"] {
        if url.len() >= scheme.len() && url[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return split_url(url, scheme.len());
        }
    }
    split_key_values(url)
}

fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn add_secret(secrets: &mut Vec<String>, raw: &str) {
    for secret in [raw.to_owned(), percent_decoded(raw)] {
        if !secret.is_empty() && !secrets.contains(&secret) {
            secrets.push(secret);
        }
    }
}

/// `postgres://[user[:password]@][hosts][/db][?k=v&…]`, read the way libpq and tokio-postgres
/// read it: the credentials end at the first `@`, the parameters start at the next `?`.
fn split_url(url: &str, body_start: usize) -> SplitUrl {
    let mut split = SplitUrl::default();
    let body = &url[body_start..];
    let at = body.find('@');
    if let Some(at) = at {
        if let Some((_, password)) = body[..at].split_once(':') {
            add_secret(&mut split.secrets, password);
        }
    }
    let after_credentials = at.map_or(0, |at| at + 1);
    let Some(question) = body[after_credentials..].find('?') else {
        split.rest = url.to_owned();
        return split;
    };
    let question = body_start + after_credentials + question;
    let (base, query) = (&url[..question], &url[question + 1..]);
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (percent_decoded(key), Some(value)),
            None => (String::new(), None),
        };
        match (key.as_str(), value) {
            ("sslmode", Some(value)) => split.sslmode = Some(percent_decoded(value)),
            ("sslrootcert", Some(value)) => split.sslrootcert = Some(percent_decoded(value)),
            ("password", Some(value)) => {
                add_secret(&mut split.secrets, value);
                kept.push(pair);
            }
            _ => kept.push(pair),
        }
    }
    split.rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    split
}

/// `key=value key='quoted value' …`, read the way libpq reads it. When the text does not read,
/// it goes to tokio-postgres whole, for its error.
fn split_key_values(text: &str) -> SplitUrl {
    let mut split = SplitUrl {
        rest: text.to_owned(),
        ..SplitUrl::default()
    };
    let Some(params) = key_values(text) else {
        return split;
    };
    let mut rest = String::new();
    let mut copied_to = 0;
    for (key, value, span) in params {
        match key {
            "sslmode" | "sslrootcert" => {
                rest.push_str(&text[copied_to..span.start]);
                copied_to = span.end;
                if key == "sslmode" {
                    split.sslmode = Some(value);
                } else {
                    split.sslrootcert = Some(value);
                }
            }
            "password" => add_secret(&mut split.secrets, &value),
            _ => {}
        }
    }
    rest.push_str(&text[copied_to..]);
    split.rest = rest;
    split
}

/// The `key=value` pairs of a libpq keyword/value string, each with its span; `None` when the
/// text is not one.
fn key_values(text: &str) -> Option<Vec<(&str, String, std::ops::Range<usize>)>> {
    let mut chars = text.char_indices().peekable();
    let mut params = Vec::new();
    let skip_spaces = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_spaces(&mut chars);
        let Some(&(start, _)) = chars.peek() else {
            return Some(params);
        };
        let mut key_end = start;
        while let Some((i, c)) = chars.next_if(|(_, c)| !c.is_whitespace() && *c != '=') {
            key_end = i + c.len_utf8();
        }
        if key_end == start {
            return None;
        }
        skip_spaces(&mut chars);
        chars.next_if(|(_, c)| *c == '=')?;
        skip_spaces(&mut chars);
        let mut value = String::new();
        let end;
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next()? {
                    (i, '\'') => {
                        end = i + 1;
                        break;
                    }
                    (_, '\\') => value.push(chars.next()?.1),
                    (_, c) => value.push(c),
                }
            }
        } else {
            let mut last = None;
            while let Some((i, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                last = Some(i + c.len_utf8());
                if c == '\\' {
                    if let Some((j, escaped)) = chars.next() {
                        value.push(escaped);
                        last = Some(j + escaped.len_utf8());
                    }
                } else {
                    value.push(c);
                }
            }
            end = last?;
        }
        params.push((&text[start..key_end], value, start..end));
    }
}
