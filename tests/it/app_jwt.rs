//! The App's JWT as rowbranch makes it (jsonwebtoken on ring, src/forge/github/jwt.rs), taken
//! by the fake GitHub, which checks an App JWT as GitHub does (RS256 with the App's public key,
//! `iat`, `exp` within 10 minutes, `iss`): the App's own requests and the token mint go through
//! with it. And no RSA implementation but ring's is in what ships (RUSTSEC-2023-0071).

use std::sync::Arc;

use fake_github::{Auth, Op};
use rowbranch::config::{Config, ForgeSettings};
use rowbranch::forge::github::{self, GithubForge};
use rowbranch::forge::Forge;
use rowbranch::identity::RepoName;
use rowbranch::metrics::Metrics;
use rowbranch::shutdown::Shutdown;

use crate::support::github::{env, fake, GithubOptions, REPO};
use crate::support::random::random_secret;

#[tokio::test]
async fn the_apps_jwt_is_taken_by_github_for_the_apps_requests_and_the_token_mint() {
    let fake = fake().await;
    let secret = random_secret();
    let config = Config::parse(
        &GithubOptions::default().config_text(&fake),
        std::path::Path::new("rowbranch.toml"),
        &env(&secret),
    )
    .unwrap();
    let ForgeSettings::Github(settings) = &config.forge else {
        panic!("a GitHub forge");
    };
    let forge = GithubForge::new(settings, Shutdown::new(), Arc::new(Metrics::new())).unwrap();

    let app = github::app_info(&forge)
        .await
        .expect("GET /app with the JWT");
    assert_eq!(app.id, fake.app_id());
    let repo = RepoName::parse(REPO).unwrap();
    forge
        .base(&repo)
        .await
        .expect("the default branch, with a minted token");

    let jwt: Vec<Option<Op>> = fake.jwt_requests().iter().map(|r| r.op).collect();
    assert_eq!(
        jwt,
        [
            Some(Op::GetApp),
            Some(Op::GetInstallation),
            Some(Op::MintToken)
        ],
        "{:?}",
        fake.requests()
    );
    assert_eq!(fake.token_mints(), 1);
    assert!(
        fake.requests()
            .iter()
            .all(|r| !matches!(r.auth, Auth::Rejected(_))),
        "{:?}",
        fake.requests()
    );
    fake.assert_no_unexpected();

    // Another App's id in `iss`: GitHub refuses the JWT, and rowbranch says so.
    fake.set_app_id(fake.app_id() + 1);
    let refused = github::app_info(&forge).await.unwrap_err().to_string();
    assert!(refused.contains("401"), "{refused}");
}

/// What ships signs the App's JWT with jsonwebtoken on ring, and speaks to GitHub through
/// octocrab: neither RustCrypto's `rsa` (RUSTSEC-2023-0071, no fixed release) nor aws-lc (a
/// long C build), the two other backends jsonwebtoken and rustls have, nor reqwest, is in the
/// normal dependency tree. Dev-dependencies (the tests' own HTTP client) are not what ships.
#[test]
fn what_ships_has_jsonwebtoken_and_octocrab_and_no_rsa_aws_lc_or_reqwest() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "rowbranch",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: Vec<&str> = tree.lines().filter_map(|l| l.split(' ').next()).collect();
    for needed in ["octocrab", "jsonwebtoken"] {
        assert!(
            crates.contains(&needed),
            "{needed} is not in the tree:\n{tree}"
        );
    }
    for banned in ["rsa", "aws-lc-sys", "aws-lc-rs", "reqwest"] {
        assert!(
            !crates.contains(&banned),
            "{banned} is in the tree:\n{tree}"
        );
    }
}
