//! `rowbranch healthcheck`, as the image's `HEALTHCHECK` runs it: 0 when `/healthz` answers 200,
//! 1 otherwise with the reason; the address found as `serve` finds it, with no secret and no
//! valid config.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::child::{rowbranch, run, serve_local, stderr, stdout};
use crate::support::http::free_port;
use crate::support::random::random_secret;

/// `rowbranch healthcheck ARGS` in `dir` with `env` and none of the test's own variables.
async fn healthcheck(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut command = rowbranch(dir);
    command.arg("healthcheck").args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    run(&mut command).await
}

/// `healthcheck` in a new, empty folder, with `key` set to `value`; the folder stays while the
/// test holds it.
async fn in_a_new_folder_with(key: &str, value: String) -> (TempDir, Output) {
    let dir = TempDir::new().unwrap();
    let out = healthcheck(dir.path(), &[], &[(key, value)]).await;
    (dir, out)
}

fn expect(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
}

/// A server on `addr` that answers every request with `status_line` (or, for `None`, reads the
/// request and never answers); it stops with the test's runtime.
async fn answering(addr: &str, status_line: Option<&'static str>) -> SocketAddr {
    let listener = TcpListener::bind(addr).await.expect("could not bind");
    let local = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                match status_line {
                    Some(status) => {
                        let answer = format!("{status}\r\ncontent-length: 0\r\n\r\n");
                        let _ = stream.write_all(answer.as_bytes()).await;
                    }
                    None => tokio::time::sleep(Duration::from_secs(30)).await,
                }
            });
        }
    });
    local
}

async fn healthy_on(addr: &str) -> SocketAddr {
    answering(addr, Some("HTTP/1.1 200 OK")).await
}

#[tokio::test]
async fn a_running_serve_is_healthy_found_by_url_by_listen_or_by_port() {
    let served = serve_local("", None, &random_secret()).await;
    let dir = TempDir::new().unwrap();
    let url = format!("{}/healthz", served.url);
    let out = healthcheck(dir.path(), &["--url", &url], &[]).await;
    expect(&out, 0);
    assert!(stdout(&out).contains("answered 200"), "{}", stdout(&out));
    // The server's base URL, as people paste it, asks its /healthz (its / answers 404).
    let out = healthcheck(dir.path(), &["--url", &served.url], &[]).await;
    expect(&out, 0);
    assert!(stdout(&out).contains(&url), "{}", stdout(&out));
    // Where serve listens, as serve would read it; PORT means every interface, asked on
    // 127.0.0.1 (the exec-form HEALTHCHECK cannot expand $PORT: the command reads it).
    let port = served.addr.port().to_string();
    for env in [
        ("ROWBRANCH_LISTEN", served.addr.to_string()),
        ("ROWBRANCH_LISTEN", format!("0.0.0.0:{port}")),
        ("ROWBRANCH_LISTEN", format!("localhost:{port}")),
        ("PORT", port.clone()),
    ] {
        let out = healthcheck(dir.path(), &[], std::slice::from_ref(&env)).await;
        expect(&out, 0);
    }
}

#[tokio::test]
async fn a_closed_port_or_an_answer_other_than_200_is_unhealthy_with_the_reason() {
    let dir = TempDir::new().unwrap();
    let closed = format!("127.0.0.1:{}", free_port());
    let out = healthcheck(dir.path(), &[], &[("ROWBRANCH_LISTEN", closed.clone())]).await;
    expect(&out, 1);
    assert!(
        stderr(&out).contains(&format!("http://{closed}/healthz: cannot connect")),
        "{}",
        stderr(&out)
    );

    let failing = answering("127.0.0.1:0", Some("HTTP/1.1 503 Service Unavailable")).await;
    let out = healthcheck(dir.path(), &[], &[("PORT", failing.port().to_string())]).await;
    expect(&out, 1);
    assert!(
        stderr(&out).contains("answered 503 Service Unavailable"),
        "{}",
        stderr(&out)
    );

    let silent = answering("127.0.0.1:0", None).await;
    let url = format!("http://{silent}/healthz");
    let started = Instant::now();
    let out = healthcheck(dir.path(), &["--url", &url], &[]).await;
    expect(&out, 1);
    assert!(
        stderr(&out).contains("no answer within 3s"),
        "{}",
        stderr(&out)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a short timeout"
    );

    // A bad address is unhealthy too, never 2: Docker reserves it.
    let out = healthcheck(dir.path(), &[], &[("PORT", "http".to_owned())]).await;
    expect(&out, 1);
    assert!(stderr(&out).contains("from PORT"), "{}", stderr(&out));
}

#[tokio::test]
async fn the_address_is_found_as_serve_finds_it_and_needs_no_secret_or_valid_config() {
    let up = healthy_on("127.0.0.1:0").await;
    let down = format!("127.0.0.1:{}", free_port());
    let dir = TempDir::new().unwrap();
    // ROWBRANCH_LISTEN wins over PORT.
    let out = healthcheck(
        dir.path(),
        &[],
        &[
            ("ROWBRANCH_LISTEN", up.to_string()),
            ("PORT", free_port().to_string()),
        ],
    )
    .await;
    expect(&out, 0);
    let out = healthcheck(
        dir.path(),
        &[],
        &[
            ("ROWBRANCH_LISTEN", down.clone()),
            ("PORT", up.port().to_string()),
        ],
    )
    .await;
    expect(&out, 1);

    // Without either, the config's listen: a file that is no valid config (no route, an
    // unknown key, no secret anywhere) still says where.
    std::fs::write(
        dir.path().join("rowbranch.toml"),
        format!("listen = \"{up}\"\nno_such_key = true\n"),
    )
    .unwrap();
    expect(&healthcheck(dir.path(), &[], &[]).await, 0);
    // PORT wins over it.
    let out = healthcheck(dir.path(), &[], &[("PORT", free_port().to_string())]).await;
    expect(&out, 1);
    // --config names another file.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, format!("listen = \"{down}\"\n")).unwrap();
    let out = healthcheck(dir.path(), &["--config", other.to_str().unwrap()], &[]).await;
    expect(&out, 1);
    assert!(stderr(&out).contains(&down), "{}", stderr(&out));

    // With no file, ROWBRANCH_CONFIG's listen; a config that does not parse is one without
    // it, and the default address is asked.
    let (empty, out) =
        in_a_new_folder_with("ROWBRANCH_CONFIG", format!("listen = \"{up}\"\n")).await;
    expect(&out, 0);
    std::fs::write(empty.path().join("rowbranch.toml"), "this is not TOML [").unwrap();
    let out = healthcheck(empty.path(), &[], &[]).await;
    let said = stdout(&out) + &stderr(&out);
    assert!(
        said.contains("http://127.0.0.1:8080/healthz"),
        "the default address: {said}"
    );
}

#[tokio::test]
async fn every_interface_of_ipv6_is_asked_on_its_loopback() {
    let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
        eprintln!("skipping: no IPv6 loopback here");
        return;
    };
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    healthy_on(&format!("[::1]:{port}")).await;
    let (_dir, out) = in_a_new_folder_with("ROWBRANCH_LISTEN", format!("[::]:{port}")).await;
    expect(&out, 0);
    assert!(stdout(&out).contains("http://[::1]:"), "{}", stdout(&out));
}
