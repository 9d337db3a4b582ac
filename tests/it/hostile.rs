//! The receiver as the internet would try it: senders that hang up, trickle or idle; a slow
//! GitHub; big rows; probes in a crowd; a signal with a backlog. Each bound is hit, and the
//! order of events is what is asserted; wall-clock bounds are generous.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fake_github::Op;
use rustix::process::Signal;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::child::{self, Served};
use crate::support::github::{dispatched_branches, fake, spawn, GithubOptions, REPO};
use crate::support::http::{delivery, insert, raw_head, send_whole};
use crate::support::local::dispatches;
use crate::support::random::random_secret;
use crate::support::wait::{eventually, PATIENCE};

/// Reads until the server closes the connection (or `within` passes); what it sent.
async fn until_closed(stream: &mut TcpStream, within: Duration) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(within, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_senders_that_hang_up_at_once_each_get_their_row_dispatched() {
    let fake = fake().await;
    // GitHub slow to create refs: each run is still at its claim when its sender is gone.
    fake.slow_down(&[Op::CreateRef], Duration::from_millis(200));
    let options = GithubOptions {
        write_interval_ms: 1,
        write_burst: 50,
        ..GithubOptions::default()
    };
    let app = spawn(&fake, options).await;
    let addr = app.url.trim_start_matches("http://").parse().unwrap();
    for id in 1..=30 {
        // The whole request, then the socket closed without reading a byte of the answer.
        drop(send_whole(addr, &delivery(&app.secret, json!(id), "Hang up")).await);
    }
    eventually("30 dispatches", || async {
        (dispatched_branches(&fake).len() >= 30).then_some(())
    })
    .await;
    app.drained().await;
    // Counted once every run has ended: a second dispatch of a row would come before that.
    let dispatched = dispatched_branches(&fake);
    assert_eq!(
        dispatched.len(),
        30,
        "no row dispatched twice: {dispatched:?}"
    );
    let unique: BTreeSet<_> = dispatched.into_iter().collect();
    assert_eq!(unique.len(), 30, "every row dispatched");
    app.shutdown().await;
}

#[tokio::test]
async fn a_delivery_without_any_credential_is_refused_before_its_body_is_read() {
    let served = child::serve_local("", None, &random_secret()).await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    // Headers promise a body that never comes.
    stream
        .write_all(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100000\r\n\r\n{\"type\":",
        )
        .await
        .unwrap();
    let answer = until_closed(&mut stream, PATIENCE).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_trickled_a_byte_every_two_seconds_is_cut_within_twenty_seconds() {
    let secret = random_secret();
    // The default read_timeout_ms (10 s).
    let served = child::serve_local("", None, &secret).await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    let body = insert(json!(1), "Trickle").to_string();
    let head = raw_head(&secret, &format!("Content-Length: {}", body.len()));
    stream.write_all(head.as_bytes()).await.unwrap();
    let start = Instant::now();
    let mut sent = 0;
    let cut = loop {
        if stream
            .write_all(&body.as_bytes()[sent..=sent])
            .await
            .is_err()
        {
            break start.elapsed();
        }
        sent += 1;
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte)).await {
            // An answer (408) or the end of the connection: the server is done with it.
            Ok(_) => break start.elapsed(),
            Err(_) => assert!(start.elapsed() < Duration::from_secs(30), "never cut"),
        }
    };
    assert!(cut < Duration::from_secs(20), "cut only after {cut:?}");
    assert!(sent < body.len(), "the whole body got through");
    assert!(
        dispatches(&served.dispatch_log()).is_empty(),
        "nothing ran for a cut-off body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hundred_idle_connections_under_256_open_files_do_not_lock_out_a_delivery() {
    let secret = random_secret();
    // A short read_timeout_ms: the idle ones are cut a cap's worth at a time, sooner.
    let served = child::serve_local("read_timeout_ms = 5000", Some(256), &secret).await;
    // The cap is logged once the server runs, a moment after the address.
    eventually("the connection cap in the log", || async {
        served.log().contains("connections=").then_some(())
    })
    .await;
    assert!(
        served.log().contains("connections=208") && served.log().contains("reserve=48"),
        "the cap is the open-files limit less the reserve (32, and 16 for git): {}",
        served.log()
    );
    let mut idle = Vec::new();
    for _ in 0..400 {
        idle.push(TcpStream::connect(served.addr).await.unwrap());
    }
    let start = Instant::now();
    delivered_within_40_s(&served, &secret, 7, "Behind the idle ones").await;
    println!(
        "answered after {:?} behind 400 idle connections",
        start.elapsed()
    );
    assert_eq!(served.branches().await, ["feedback/7-behind-the-idle-ones"]);
    drop(idle);
}

#[tokio::test]
async fn an_open_files_limit_that_leaves_no_room_beyond_the_reserve_stops_serve() {
    // The local forge's reserve is 48: a limit of 40 leaves nothing for connections.
    let mut served = child::serve_local("", Some(40), &random_secret()).await;
    let code = served.exit_code(PATIENCE).await;
    let log = served.log();
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("open-files limit (40)") && log.contains("48 file descriptors"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_in_a_listen_backlog_of_1024() {
    // Eight served, for a minute each: the others can only wait in the backlog.
    let served = child::serve_local(
        "read_timeout_ms = 60000\nmax_connections = 8",
        None,
        &random_secret(),
    )
    .await;
    let mut waiting = Vec::new();
    for n in 0..600 {
        // With a backlog of 128 the 137th would not connect until a served one is cut.
        let stream = tokio::time::timeout(PATIENCE, TcpStream::connect(served.addr))
            .await
            .unwrap_or_else(|_| panic!("connection {n} could not even connect"))
            .unwrap();
        waiting.push(stream);
    }
}

/// `GET /healthz` without end on one connection, never reading an answer, until a write fails:
/// the server has cut the connection. A small receive buffer, so that the answers back up soon.
/// `served` is told when the first answer has arrived: the server has accepted the connection.
async fn pipeline_without_reading(
    addr: SocketAddr,
    served: Option<tokio::sync::oneshot::Sender<()>>,
) -> std::io::Error {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    let requests = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1000);
    if let Err(e) = stream.write_all(requests.as_bytes()).await {
        return e;
    }
    // Readable (an answer waits) without reading it.
    stream.readable().await.unwrap();
    if let Some(served) = served {
        let _ = served.send(());
    }
    loop {
        if let Err(e) = stream.write_all(requests.as_bytes()).await {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pipelines_requests_and_never_reads_is_cut() {
    let served = child::serve_local("read_timeout_ms = 1000", None, &random_secret()).await;
    let start = Instant::now();
    // Its answers fill its socket and hyper's buffer; then hyper waits to write.
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        pipeline_without_reading(served.addr, None),
    )
    .await
    .expect("a client that never reads kept its connection for 30 s");
    println!("cut after {:?}: {error}", start.elapsed());
    let health = reqwest::get(format!("{}/healthz", served.url))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_filling_the_connection_cap_do_not_lock_out_a_delivery() {
    let secret = random_secret();
    let served =
        child::serve_local("read_timeout_ms = 1000\nmax_connections = 8", None, &secret).await;
    eventually("the connection cap in the log", || async {
        served.log().contains("connections=").then_some(())
    })
    .await;
    assert!(served.log().contains("connections=8"), "{}", served.log());
    // Eight of them, each connecting again as soon as it is cut: the cap stays full of them.
    let addr = served.addr;
    let mut accepted = Vec::new();
    let flood: Vec<_> = (0..8)
        .map(|_| {
            let (served, first_answer) = tokio::sync::oneshot::channel();
            accepted.push(first_answer);
            tokio::spawn(async move {
                pipeline_without_reading(addr, Some(served)).await;
                loop {
                    pipeline_without_reading(addr, None).await;
                }
            })
        })
        .collect();
    // The delivery comes once all eight hold a connection.
    for first_answer in accepted {
        first_answer.await.expect("a non-reader was answered");
    }
    delivered_within_40_s(&served, &secret, 8, "Behind the deaf ones").await;
    for task in flood {
        task.abort();
    }
    assert_eq!(served.branches().await, ["feedback/8-behind-the-deaf-ones"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_kept_busy_within_every_timeout_is_closed_at_its_age() {
    // A connection lives six read timeouts: 12 s here.
    let served = child::serve_local("read_timeout_ms = 2000", None, &random_secret()).await;
    let mut stream = TcpStream::connect(served.addr).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut answers = 0;
    'connection: loop {
        assert!(
            Instant::now() < deadline,
            "still open after {answers} answers"
        );
        if stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .is_err()
        {
            break;
        }
        let mut answer = Vec::new();
        while !answer.ends_with(b"{\"status\":\"ok\"}") {
            let mut buf = [0u8; 1024];
            match tokio::time::timeout(PATIENCE, stream.read(&mut buf))
                .await
                .expect("an answer or the end of the connection")
            {
                Ok(0) | Err(_) => break 'connection,
                Ok(read) => answer.extend_from_slice(&buf[..read]),
            }
        }
        answers += 1;
        // A quarter of the read timeout between requests: never idle long enough to be cut.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("closed after {answers} answers");
    // It lived well past the read timeout: it was its age that closed it.
    assert!(answers > 8, "closed after only {answers} answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_slow_connections_keep_the_peak_rss_under_64_mb() {
    let secret = random_secret();
    let served = child::serve_local("read_timeout_ms = 60000", None, &secret).await;
    // Within max_body_bytes (256 KiB): each body is read, and held, as it comes.
    let head = raw_head(&secret, "Content-Length: 200000");
    let mut slow = Vec::new();
    for _ in 0..500 {
        let mut stream = TcpStream::connect(served.addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(b"{\"type\":\"INSERT\",").await.unwrap();
        slow.push(stream);
    }
    // Every one of them is being read: a healthz still answers, and each sends on, 10 KB a
    // round: 20 KB of body held for each of the 500, 10 MB in all (each body's buffer grows
    // by doubling, so it takes up to twice that).
    let piece = vec![b' '; 10_000];
    for round in 0..2 {
        for stream in &mut slow {
            stream.write_all(&piece).await.unwrap();
        }
        let health = reqwest::get(format!("{}/healthz", served.url))
            .await
            .unwrap();
        assert_eq!(health.status().as_u16(), 200, "round {round}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let peak = served.peak_rss();
    println!(
        "peak RSS with 500 slow connections: {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak < 64 << 20, "peak RSS {peak} bytes");
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_rows_never_have_more_than_the_limit_open_at_github() {
    let fake = fake().await;
    fake.slow_down(&Op::ROW_READS, Duration::from_millis(500));
    let options = GithubOptions {
        write_interval_ms: 1,
        write_burst: 50,
        // 600 writes: more than the default rolling hour allows.
        write_hourly_max: 1000,
        respond_within_ms: 200,
        ..GithubOptions::default()
    };
    let app = spawn(&fake, options).await;
    let sends = (1..=300).map(|id| app.post_insert(json!(id), "Crowd"));
    for reply in futures_util::future::join_all(sends).await {
        assert!(
            matches!(reply.status, 200 | 202),
            "{} {}",
            reply.status,
            reply.text
        );
    }
    app.drained().await;
    let seen = fake.in_flight();
    assert!(
        seen.max_tokens <= 16,
        "{} requests open at once",
        seen.max_tokens
    );
    assert!(
        seen.max_tokens >= 8,
        "the bound was reached: {}",
        seen.max_tokens
    );
    let dispatched: BTreeSet<_> = dispatched_branches(&fake).into_iter().collect();
    assert_eq!(dispatched.len(), 300, "every row dispatched");
    assert_eq!(dispatched_branches(&fake).len(), 300, "none twice");
    let lookups = fake.requests_for(Op::GetInstallation).len();
    assert!(
        lookups <= 2,
        "the installation was looked up {lookups} times"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_big_rows_waiting_on_a_slow_github_stay_under_160_mb() {
    let fake = fake().await;
    fake.slow_down(&Op::ROW_READS, Duration::from_secs(2));
    let options = GithubOptions {
        write_interval_ms: 1,
        write_burst: 50,
        respond_within_ms: 100,
        ..GithubOptions::default()
    };
    let secret = random_secret();
    let served = child::serve_on_fake(&options.config_text(&fake), vec![], &secret).await;
    // A column of 80,000 numbers: about 160 KB of JSON, ten times that as parsed values.
    let numbers: Vec<u32> = (0..80_000).map(|n| n % 10).collect();
    let client = reqwest::Client::new();
    let sends = (1..=200).map(|id| {
        let mut row = insert(json!(id), "A big row");
        row["record"]["samples"] = json!(numbers);
        let body = row.to_string();
        assert!(
            body.len() > 150_000 && body.len() < 262_144,
            "{}",
            body.len()
        );
        let request = client
            .post(format!("{}/webhook", served.url))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {secret}"))
            .body(body);
        async move { request.send().await.map(|r| r.status().as_u16()) }
    });
    for status in futures_util::future::join_all(sends).await {
        assert!(matches!(status, Ok(200 | 202)), "{status:?}");
    }
    // 400 reads, 16 at a time, 2 s each: about 50 s.
    let deadline = Instant::now() + Duration::from_secs(240);
    while dispatched_branches(&fake).len() < 200 {
        assert!(
            Instant::now() < deadline,
            "{} dispatches",
            dispatched_branches(&fake).len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let peak = served.peak_rss();
    println!(
        "peak RSS with 200 rows of 160 KB waiting: {:.1} MB",
        peak as f64 / 1e6
    );
    assert!(peak < 160 << 20, "peak RSS {peak} bytes");
    assert_eq!(fake.dispatches(REPO).len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_healthz_before_github_has_answered_anything() {
    let fake = fake().await;
    fake.slow_down(&Op::ALL, Duration::from_secs(8));
    let served = child::serve_on_fake(
        &GithubOptions::default().config_text(&fake),
        vec![],
        &random_secret(),
    )
    .await;
    let health = reqwest::get(format!("{}/healthz", served.url))
        .await
        .unwrap();
    let answered_then = fake.answered();
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(answered_then, 0, "GitHub answered before /healthz did");
    // Meanwhile the warm-up has asked GitHub, in the background.
    eventually("a request at GitHub", || async {
        (!fake.requests().is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_asks_github_once_per_refresh_however_many_probes_wait() {
    let fake = fake().await;
    fake.slow_down(&[Op::GetApp], Duration::from_secs(1));
    let app = spawn(&fake, GithubOptions::default()).await;
    let until = Instant::now() + Duration::from_secs(12);
    let probes = (0..30).map(|_| async {
        let mut answers = 0;
        while Instant::now() < until {
            let ready = app.get("/readyz").await;
            assert_eq!(ready.status, 200, "{}", ready.text);
            answers += 1;
        }
        answers
    });
    let answers: usize = futures_util::future::join_all(probes)
        .await
        .into_iter()
        .sum();
    let calls = fake.requests_for(Op::GetApp).len();
    assert!(answers > 100, "the probes were answered: {answers}");
    assert!(
        calls <= 4,
        "GET /app was asked {calls} times for {answers} probes"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_backlog_dispatches_every_claim_names_every_abandoned_row_and_exits_0() {
    let fake = fake().await;
    let options = GithubOptions {
        write_interval_ms: 1,
        write_burst: 10,
        // Two claims and a dispatch, then the rolling hour is spent: row two's dispatch and
        // every other row's claim wait for an hour.
        write_hourly_max: 3,
        respond_within_ms: 200,
        extra_top: "shutdown_grace = \"5s\"\n".into(),
        // Longer than the grace: only the grace can end the trickling sender's request.
        extra_webhook: "read_timeout_ms = 60000\n".into(),
        ..GithubOptions::default()
    };
    let secret = random_secret();
    let mut served = child::serve_on_fake(&options.config_text(&fake), vec![], &secret).await;
    let client = reqwest::Client::new();
    let sends = (1..=10).map(|id| {
        client
            .post(format!("{}/webhook", served.url))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {secret}"))
            .body(insert(json!(id), "Backlog").to_string())
            .send()
    });
    for reply in futures_util::future::join_all(sends).await {
        let status = reply.unwrap().status().as_u16();
        assert!(matches!(status, 200 | 202), "{status}");
    }
    eventually("the hourly cap spent", || async {
        (fake.writes().len() >= 3).then_some(())
    })
    .await;
    // A sender whose connection is being served (it had an answer on it already) and who
    // is now trickling a body.
    let mut trickler = TcpStream::connect(served.addr).await.unwrap();
    trickler
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 512];
    let read = trickler.read(&mut answer).await.unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    trickler
        .write_all(raw_head(&secret, "Content-Length: 1000").as_bytes())
        .await
        .unwrap();
    trickler.write_all(b"{").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let start = Instant::now();
    served.signal(Signal::TERM);
    eventually("the shutdown to begin", || async {
        served.log().contains("shutting down").then_some(())
    })
    .await;
    // The trickling sender is given the grace, not cut at once: its socket stays open until
    // the grace has run out (the state of the socket is looked at before the log, so a close
    // seen before the log says so came first).
    let mut seen_open = 0;
    let deadline = Instant::now() + Duration::from_secs(35);
    loop {
        let mut byte = [0u8; 1];
        let open = match trickler.try_read(&mut byte) {
            Ok(read) => read > 0,
            Err(e) => e.kind() == ErrorKind::WouldBlock,
        };
        let ran_out = served.log().contains("the shutdown grace ran out");
        assert!(
            open || ran_out,
            "the trickling sender was cut before the grace ran out"
        );
        if ran_out {
            break;
        }
        seen_open += 1;
        assert!(Instant::now() < deadline, "the grace never ran out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_open > 0,
        "the trickler was never seen open after SIGTERM"
    );
    let code = served.exit_code(Duration::from_secs(35)).await;
    assert_eq!(code, Some(0), "{}", served.log());
    println!("exited {:?} after SIGTERM", start.elapsed());
    // And the server closed it when it was done.
    let mut rest = Vec::new();
    let end = tokio::time::timeout(PATIENCE, trickler.read_to_end(&mut rest)).await;
    assert!(
        end.is_ok(),
        "the trickler's socket is still open after the exit"
    );

    let claimed: Vec<String> = crate::support::github::branches(&fake);
    let dispatched: BTreeSet<String> = dispatched_branches(&fake).into_iter().collect();
    assert!(!claimed.is_empty());
    for branch in &claimed {
        assert!(
            dispatched.contains(branch),
            "{branch} claimed but never dispatched"
        );
    }
    let log = served.log();
    for id in 1..=10 {
        let claimed_it = claimed
            .iter()
            .any(|b| b.starts_with(&format!("feedback/{id}-")));
        if !claimed_it {
            assert!(
                log.lines()
                    .any(|l| l.contains("ERROR") && l.contains(&format!("id={id} "))),
                "row {id} was abandoned without a word: {log}"
            );
        }
    }
}

/// Sends a real delivery of row `id` and checks it is answered within 40 s, dispatched (or
/// accepted, to be dispatched: then waits for its branch, which a loaded machine may take past
/// `respond_within_ms` to make).
async fn delivered_within_40_s(served: &Served, secret: &str, id: u64, text: &str) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(40))
        .build()
        .unwrap();
    let reply = client
        .post(format!("{}/webhook", served.url))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {secret}"))
        .body(insert(json!(id), text).to_string())
        .send()
        .await
        .expect("the delivery was answered within 40 s");
    let status = reply.status().as_u16();
    let body: serde_json::Value = serde_json::from_str(&reply.text().await.unwrap()).unwrap();
    assert!(
        (status, body["outcome"].as_str()) == (200, Some("dispatched"))
            || (status, body["outcome"].as_str()) == (202, Some("accepted")),
        "{status} {body}"
    );
    let branch = format!("feedback/{id}-");
    eventually("the delivered row's branch", || async {
        let branches = served.branches().await;
        branches
            .iter()
            .any(|b| b.starts_with(&branch))
            .then_some(())
    })
    .await;
}
