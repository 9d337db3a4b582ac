//! A private repository's git remote for the workflow's scripts: bare repositories served over
//! HTTP on 127.0.0.1 by `git http-backend`, git's own smart-HTTP server, run as a CGI program
//! (https://git-scm.com/docs/git-http-backend). Like GitHub for a private repository it answers
//! a request without a token it knows with 401 and `WWW-Authenticate: Basic`, lets a read token
//! fetch, and refuses a push with anything but a write token (403). Tokens travel the way
//! actions/checkout and claude-code-action send them: HTTP Basic with the token as the password
//! (`x-access-token:TOKEN`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine as _;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One request the remote answered.
#[derive(Clone, Debug)]
pub struct Served {
    pub query: String,
    pub status: u16,
}

/// A running remote; it stops accepting when dropped (its thread ends with the test binary).
pub struct GitHttp {
    /// `http://127.0.0.1:PORT`; a repository `NAME.git` under the root is at `{base}/NAME.git`.
    pub base: String,
    served: Arc<Mutex<Vec<Served>>>,
}

impl GitHttp {
    /// Serves the bare repositories under `root`; `tokens` are the tokens it knows.
    pub fn serve(root: &Path, tokens: &[(&str, Access)]) -> GitHttp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served = Arc::new(Mutex::new(Vec::new()));
        let tokens: HashMap<String, Access> = tokens
            .iter()
            .map(|(token, access)| ((*token).to_owned(), *access))
            .collect();
        let root = root.to_path_buf();
        let log = served.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (root, tokens, log) = (root.clone(), tokens.clone(), log.clone());
                std::thread::spawn(move || {
                    if let Err(e) = answer(stream, &root, &tokens, &log) {
                        eprintln!("git remote: {e}");
                    }
                });
            }
        });
        GitHttp { base, served }
    }

    /// Every request answered so far.
    pub fn served(&self) -> Vec<Served> {
        self.served.lock().unwrap().clone()
    }
}

/// The `Authorization` header value actions/checkout sends for `token`.
pub fn basic_auth(token: &str) -> String {
    let pair = format!("x-access-token:{token}");
    format!(
        "basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
}

fn read_head(reader: &mut BufReader<TcpStream>) -> std::io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), query.to_owned()),
        None => (target, String::new()),
    };
    Ok(Some(Request {
        method,
        path,
        query,
        headers,
    }))
}

fn read_body(reader: &mut BufReader<TcpStream>, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    let chunked = request
        .headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .map_err(|e| std::io::Error::other(format!("bad chunk size: {e}")))?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(length) = request.headers.get("content-length") {
        let length: usize = length
            .parse()
            .map_err(|e| std::io::Error::other(format!("bad content-length: {e}")))?;
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    Ok(body)
}

/// The access the request's Basic credentials carry, if they name a known token.
fn access(request: &Request, tokens: &HashMap<String, Access>) -> Option<Access> {
    let value = request.headers.get("authorization")?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let pair = String::from_utf8(decoded).ok()?;
    let (_, token) = pair.split_once(':')?;
    tokens.get(token).copied()
}

fn reply(stream: &mut TcpStream, status: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

fn answer(
    stream: TcpStream,
    root: &Path,
    tokens: &HashMap<String, Access>,
    log: &Mutex<Vec<Served>>,
) -> std::io::Result<()> {
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let Some(request) = read_head(&mut reader)? else {
        return Ok(());
    };
    let pushing = request.path.ends_with("/git-receive-pack")
        || request.query.contains("service=git-receive-pack");
    let status = match (access(&request, tokens), pushing) {
        (None, _) => 401,
        (Some(Access::Read), true) => 403,
        _ => 200,
    };
    let record = |status: u16| {
        log.lock().unwrap().push(Served {
            query: request.query.clone(),
            status,
        })
    };
    match status {
        401 => {
            record(401);
            reply(
                &mut writer,
                "401 Unauthorized",
                &[("WWW-Authenticate", "Basic realm=\"GitHub\"")],
                b"",
            );
            return Ok(());
        }
        403 => {
            record(403);
            reply(
                &mut writer,
                "403 Forbidden",
                &[],
                b"Permission to the repository denied: the token cannot write.\n",
            );
            return Ok(());
        }
        _ => {}
    }
    if request
        .headers
        .get("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = read_body(&mut reader, &request)?;
    let answer = cgi(root, &request, &body)?;
    record(answer.status);
    let headers: Vec<(&str, &str)> = answer
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let reason = if answer.status == 200 { "OK" } else { "Status" };
    let status = format!("{} {reason}", answer.status);
    reply(&mut writer, &status, &headers, &answer.body);
    Ok(())
}

/// What `git http-backend` answered: its status, headers and body.
struct CgiReply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Runs `git http-backend` for one request.
fn cgi(root: &Path, request: &Request, body: &[u8]) -> std::io::Result<CgiReply> {
    let header = |name: &str| request.headers.get(name).cloned().unwrap_or_default();
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        // An authenticated user: http-backend enables receive-pack only for one.
        .env("REMOTE_USER", "x-access-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", &request.method)
        .env("PATH_INFO", &request.path)
        .env("QUERY_STRING", &request.query)
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("GIT_PROTOCOL", header("git-protocol"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("a stdin");
    let input = body.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output()?;
    let _ = feeder.join();
    if !output.stderr.is_empty() {
        eprintln!(
            "git http-backend: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let raw = output.stdout;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2)))
        .ok_or_else(|| std::io::Error::other("http-backend wrote no header block"))?;
    let head = String::from_utf8_lossy(&raw[..split.0]).into_owned();
    let mut status = 200;
    let mut headers = Vec::new();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.eq_ignore_ascii_case("status") {
            status = value.trim()[..3].parse().unwrap_or(500);
        } else {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    Ok(CgiReply {
        status,
        headers,
        body: raw[split.0 + split.1..].to_vec(),
    })
}
