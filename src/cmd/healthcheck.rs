//! `rowbranch healthcheck`: asks a running `serve` for `/healthz`, as a container's health
//! check. The image has no shell or curl, and an exec-form `HEALTHCHECK` cannot expand `$PORT`,
//! so without `--url` it finds `serve`'s address the way `serve` does. It needs no secret and
//! no valid config, and every failure exits 1: Docker reserves 2.

use std::time::Duration;

use anyhow::anyhow;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::Failure;
use crate::cli::HealthcheckArgs;
use crate::config::{listen_as_written, process_env};

/// Long enough for a loaded process to answer, short of Docker's default 30 s timeout and of
/// the recipes' 5 s.
const TIMEOUT: Duration = Duration::from_secs(3);

pub async fn run(args: HealthcheckArgs) -> Result<(), Failure> {
    let url = match args.url {
        Some(url) => url,
        None => {
            let (address, from) = listen_as_written(&args.config.config, &process_env);
            probe_url(&address)
                .map_err(|problem| unhealthy(format!("{address} (from {from}): {problem}")))?
        }
    };
    let uri = health_uri(&url).map_err(|e| unhealthy(format!("{url}: {e}")))?;
    let url = uri.to_string();
    // hyper's client reads no proxy from the environment, which would answer for rowbranch.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let answer = tokio::time::timeout(TIMEOUT, client.get(uri))
        .await
        .map_err(|_| unhealthy(format!("{url}: no answer within {}s", TIMEOUT.as_secs())))?
        .map_err(|e| {
            // The innermost error's words ("Connection refused (os error 111)"), not the
            // client's wrapping.
            let connect = if e.is_connect() {
                "cannot connect: "
            } else {
                ""
            };
            unhealthy(format!("{url}: {connect}{}", anyhow!(e).root_cause()))
        })?;
    let status = answer.status();
    if status != http::StatusCode::OK {
        return Err(unhealthy(format!("{url} answered {status}")));
    }
    println!("{url} answered {status}");
    Ok(())
}

/// The URL to ask: `url` as given, or its `/healthz` when it names no path
/// (`http://127.0.0.1:8080` is the server, and its `/` answers 404).
fn health_uri(url: &str) -> Result<http::Uri, http::Error> {
    let uri: http::Uri = url.parse()?;
    if uri.path() != "/" || uri.query().is_some() {
        return Ok(uri);
    }
    // An absolute URI with no path writes its path as `/`.
    Ok(format!("{uri}healthz").parse()?)
}

fn unhealthy(reason: String) -> Failure {
    Failure::Runtime(anyhow!("unhealthy: {reason}"))
}

/// `http://HOST:PORT/healthz` for a listen address, asking an unspecified address (every
/// interface) on loopback: 0.0.0.0 on 127.0.0.1, :: on ::1; else why there is none.
fn probe_url(listen: &str) -> Result<String, String> {
    let (host, port) = listen.rsplit_once(':').ok_or("not HOST:PORT")?;
    port.parse::<u16>()
        .map_err(|_| format!("`{port}` is not a port number"))?;
    let host = match host {
        "" | "0.0.0.0" => "127.0.0.1",
        "::" | "[::]" => "[::1]",
        other => other,
    };
    Ok(format!("http://{host}:{port}/healthz"))
}

#[cfg(test)]
mod tests {
    use super::{health_uri, probe_url};

    #[test]
    fn a_url_without_a_path_asks_healthz_and_one_with_a_path_asks_it() {
        for (given, asked) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/healthz"),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/healthz"),
            ("http://[::1]:80", "http://[::1]:80/healthz"),
            (
                "http://127.0.0.1:8080/healthz",
                "http://127.0.0.1:8080/healthz",
            ),
            (
                "http://127.0.0.1:8080/readyz",
                "http://127.0.0.1:8080/readyz",
            ),
            ("http://host:1/?x=1", "http://host:1/?x=1"),
        ] {
            assert_eq!(health_uri(given).unwrap().to_string(), asked, "{given}");
        }
        assert!(health_uri("not a url").is_err());
    }

    #[test]
    fn every_interface_is_asked_on_loopback_and_other_hosts_as_written() {
        for (listen, url) in [
            ("0.0.0.0:8080", "http://127.0.0.1:8080/healthz"),
            ("[::]:9000", "http://[::1]:9000/healthz"),
            ("127.0.0.1:8081", "http://127.0.0.1:8081/healthz"),
            ("[::1]:8082", "http://[::1]:8082/healthz"),
            ("localhost:8083", "http://localhost:8083/healthz"),
            (":8084", "http://127.0.0.1:8084/healthz"),
        ] {
            assert_eq!(probe_url(listen).as_deref(), Ok(url), "{listen}");
        }
    }

    #[test]
    fn an_address_without_a_port_number_is_refused() {
        for listen in ["8080", "0.0.0.0:http", "0.0.0.0:70000"] {
            assert!(probe_url(listen).is_err(), "{listen}");
        }
    }
}
