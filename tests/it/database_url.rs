//! No piece of DATABASE_URL's password in what `doctor`, `reconcile --dry-run` and `drain`
//! print, whether the password is percent-encoded as a URL wants it or pasted raw (`@ # / ? :`,
//! which a URL misreads: then the fix alone is printed), and no redaction marker in a word.

use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};

use crate::support::child::{rowbranch, run, stderr, stdout};
use crate::support::db::{admin_config, Install};
use crate::support::local::dir_with_repository;
use crate::support::or_skip;
use crate::support::queue::{local_config, QueueDb};

/// Passwords with each character a URL reserves, and one of a single letter.
const PASSWORDS: [&str; 4] = ["QxZ7Kw@VbN4Jy", "Xy7#kP@q2", "Mn/Bv?Cx:Zl#Kj@Hg", "e"];

/// Each run's stdout and stderr, with what ran.
async fn outputs(dir: &std::path::Path, url: &str) -> Vec<(String, String)> {
    let mut outputs = Vec::new();
    for args in [&["doctor"][..], &["reconcile", "--dry-run"], &["drain"]] {
        let mut command = rowbranch(dir);
        command
            .args(args)
            .args(["--config", "rowbranch.toml"])
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "info");
        let out = run(&mut command).await;
        let text = format!("{}\n{}", stdout(&out), stderr(&out));
        outputs.push((args.join(" "), text));
    }
    outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_three_characters_of_the_password_appear_in_any_output() {
    let db = or_skip!(QueueDb::new(Install::Extension).await);
    let dir = dir_with_repository().await;
    std::fs::write(
        dir.path().join("rowbranch.toml"),
        local_config(&db, "repo.git", "", ""),
    )
    .unwrap();
    let admin = admin_config(&db.db.url);
    let host = match &admin.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("a TCP host, not {other:?}"),
    };
    let port = admin.get_ports().first().copied().unwrap_or(5432);
    let user = admin.get_user().unwrap_or("postgres");
    for password in PASSWORDS {
        let encoded = utf8_percent_encode(password, NON_ALPHANUMERIC).to_string();
        let windows: Vec<String> = [password, encoded.as_str()]
            .iter()
            .flat_map(|text| {
                let chars: Vec<char> = text.chars().collect();
                chars
                    .windows(3)
                    .map(|w| w.iter().collect::<String>())
                    .collect::<Vec<_>>()
            })
            .collect();
        for written in [password, encoded.as_str()] {
            let url = format!(
                "postgres://{user}:{written}@{host}:{port}/{}?sslmode=disable",
                db.db.name
            );
            let misread = written.contains(['@', '#', '/', '?']);
            for (ran, text) in outputs(dir.path(), &url).await {
                for window in &windows {
                    assert!(
                        !text.contains(window.as_str()),
                        "{ran} with the password {written:?}: {window:?} in\n{text}"
                    );
                }
                assert!(
                    !text.contains(&format!(":{written}@")) && !text.contains("[password]"),
                    "{ran} with the password {written:?}:\n{text}"
                );
                if misread {
                    assert!(
                        text.contains("percent-encode each of @ # / ? : in the password"),
                        "{ran} with the password {written:?} says the fix:\n{text}"
                    );
                } else {
                    assert!(
                        !text.contains("would be misread"),
                        "{ran} with the password {written:?}:\n{text}"
                    );
                }
            }
        }
    }
}
