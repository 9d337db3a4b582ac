//! A connection table at its cap makes room: clients that open connections and never finish a
//! request head cannot keep a delivery out, and a request under way — even a slow one — is not
//! cut to make room for them.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::child::{self, local_config, measured_binary, Served, Start};
use crate::support::http::{delivery, insert, raw_head};
use crate::support::local::dir_with_repository;
use crate::support::random::random_secret;
use crate::support::wait::eventually;

/// The served connections' cap in these tests, well below the flood.
const CAP: usize = 64;
/// Connections that never finish their request head.
const FLOOD: usize = 600;
/// A head begun and never ended.
const UNFINISHED_HEAD: &[u8] = b"POST /webhook HTTP/1.1\r\nHost: localhost\r\nContent-Type: appl";

/// `binary`'s `serve` on a new local repository, serving at most [`CAP`] connections, with a
/// minute for a head: only making room lets a delivery in sooner than that.
async fn serve_at_the_cap(binary: &Path, secret: &str) -> Served {
    let config = local_config(&format!("read_timeout_ms = 60000\nmax_connections = {CAP}"));
    let served = child::serve_binary(
        binary,
        dir_with_repository().await,
        Start {
            config: &config,
            env: vec![],
            nofile: None,
            secret: secret.to_owned(),
        },
    )
    .await;
    eventually("the connection cap in the log", || async {
        served.log().contains("connections=").then_some(())
    })
    .await;
    assert!(
        served.log().contains(&format!("connections={CAP}")),
        "{}",
        served.log()
    );
    served
}

/// [`FLOOD`] connections, each with the start of a head and nothing more.
async fn flood(addr: SocketAddr) -> Vec<TcpStream> {
    let mut idle = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        let mut stream = TcpStream::connect(addr).await.expect("could not connect");
        stream
            .write_all(UNFINISHED_HEAD)
            .await
            .expect("could not send the start of a head");
        idle.push(stream);
    }
    idle
}

/// Sends `request` on a new connection and reads the answer's status line, for at most
/// `within`; the status, or `None` when no answer came in time (or the connection was cut).
async fn status_within(addr: SocketAddr, request: &[u8], within: Duration) -> Option<u16> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        stream.write_all(request).await.ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !answer.windows(2).any(|w| w == b"\r\n") {
            let read = stream.read(&mut buf).await.ok()?;
            if read == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..read]);
        }
        let line = String::from_utf8_lossy(&answer).into_owned();
        line.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(within, exchange).await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_connections_that_never_finish_their_head_do_not_keep_a_delivery_out() {
    let secret = random_secret();
    let served = serve_at_the_cap(Path::new(env!("CARGO_BIN_EXE_rowbranch")), &secret).await;
    let idle = flood(served.addr).await;
    let start = Instant::now();
    let request = delivery(&secret, json!(9), "Past the unfinished ones");
    let status = status_within(served.addr, &request, Duration::from_secs(5)).await;
    println!(
        "answered {status:?} after {:?} behind {FLOOD} unfinished heads (cap {CAP})",
        start.elapsed()
    );
    assert_eq!(status, Some(200), "no answer within 5 s");
    assert_eq!(
        served.branches().await,
        ["feedback/9-past-the-unfinished-ones"]
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_idle_after_a_request_make_room_for_a_delivery() {
    let secret = random_secret();
    let served = serve_at_the_cap(Path::new(env!("CARGO_BIN_EXE_rowbranch")), &secret).await;
    // The whole table: each asks for `/healthz`, reads its answer, and keeps its connection.
    let mut idle = Vec::with_capacity(CAP);
    for _ in 0..CAP {
        let mut stream = TcpStream::connect(served.addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !answer.ends_with(b"{\"status\":\"ok\"}") {
            let mut buf = [0u8; 1024];
            let read = stream.read(&mut buf).await.unwrap();
            assert!(read > 0, "closed after one request");
            answer.extend_from_slice(&buf[..read]);
        }
        idle.push(stream);
    }
    let request = delivery(&secret, json!(12), "Past the idle ones");
    let status = status_within(served.addr, &request, Duration::from_secs(5)).await;
    assert_eq!(status, Some(200), "no answer within 5 s");
    assert_eq!(served.branches().await, ["feedback/12-past-the-idle-ones"]);
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_that_keeps_sending_is_not_cut_to_make_room() {
    let secret = random_secret();
    let served = serve_at_the_cap(Path::new(env!("CARGO_BIN_EXE_rowbranch")), &secret).await;
    // Its head whole at once, then its body a piece at a time while the flood comes. The
    // flood starts once the server has read the head (its `100 Continue` says so: it asks for
    // the body only then), however slowly a loaded machine gets to it.
    let body = insert(json!(10), "Slow but steady").to_string();
    let head = raw_head(
        &secret,
        &format!("Content-Length: {}\r\nExpect: 100-continue", body.len()),
    );
    let mut slow = TcpStream::connect(served.addr).await.unwrap();
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(30), slow.read_exact(&mut byte))
            .await
            .expect("no 100 Continue for the slow request's head")
            .expect("the slow request was cut before its body");
        interim.push(byte[0]);
    }
    assert!(
        interim.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&interim)
    );
    let pieces: Vec<&[u8]> = body.as_bytes().chunks(body.len() / 4 + 1).collect();
    slow.write_all(pieces[0]).await.unwrap();
    // The flood opens many times the cap: every place but the slow one's is given up again
    // and again.
    let addr = served.addr;
    let flooding = tokio::spawn(async move { flood(addr).await });
    for piece in &pieces[1..] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        slow.write_all(piece)
            .await
            .expect("the slow request was cut while it was sending");
    }
    let idle = flooding.await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_string(&mut answer))
        .await
        .expect("no answer to the slow request")
        .expect("the slow request's answer could not be read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(served.branches().await, ["feedback/10-slow-but-steady"]);
    drop(idle);
}

/// The same delivery behind the same flood, timed, for any build (`ROWBRANCH_MEASURE_BINARY`):
/// `cargo test --test it full_table::measure -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: it waits up to two minutes for a build that does not make room"]
async fn measure_the_time_to_answer_a_delivery_behind_600_unfinished_heads() {
    let secret = random_secret();
    let binary = measured_binary();
    let served = serve_at_the_cap(&binary, &secret).await;
    let idle = Arc::new(flood(served.addr).await);
    let start = Instant::now();
    let request = delivery(&secret, json!(11), "Timed");
    let status = status_within(served.addr, &request, Duration::from_secs(120)).await;
    println!(
        "{}: answered {status:?} after {:.2} s behind {FLOOD} unfinished heads (cap {CAP}, \
         read_timeout_ms = 60000)",
        binary.display(),
        start.elapsed().as_secs_f64()
    );
    drop(idle);
}
