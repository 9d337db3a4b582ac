//! `[github] token_env`: a token in place of the App, and what is refused beside it. The
//! token's value shows in no message, no `Debug` and no `rowbranch config`.

use std::collections::HashMap;
use std::path::Path;

use super::file::TOKEN_WRITE_HOURLY_MAX;
use super::*;

/// A queue route on GitHub with a workflow's token.
const TOKEN_CONFIG: &str = r#"
[github]
token_env = "GITHUB_TOKEN"

[[routes]]
table = "feedbacks"
repo = "acme/app"
branch_prefix = "feedback"
event_type = "feedback"
intake = "pgmq"
"#;

/// What no output may show.
const TOKEN: &str = "ghs_0123456789secretTOKENvalue";

fn parse_with(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::parse(text, Path::new("/etc/rowbranch/rowbranch.toml"), &|key| {
        vars.get(key).cloned()
    })
}

fn refused(text: &str, vars: &[(&str, &str)]) -> String {
    let error = parse_with(text, vars).expect_err("refused").to_string();
    assert!(!error.contains(TOKEN), "{error}");
    error
}

#[test]
fn a_token_from_the_named_variable_is_used_as_given_and_never_printed() {
    let config = parse_with(TOKEN_CONFIG, &[("GITHUB_TOKEN", TOKEN)]).unwrap();
    let token = config.forge.token().expect("a token");
    assert_eq!(token.variable(), "GITHUB_TOKEN");
    assert_eq!(token.expose(), TOKEN);
    let ForgeSettings::Github(github) = &config.forge else {
        panic!("github");
    };
    assert!(matches!(github.auth, GithubAuth::Token(_)));
    let debug = format!("{config:?}");
    assert!(!debug.contains(TOKEN), "{debug}");
    assert!(debug.contains("GITHUB_TOKEN"), "{debug}");
    // Any variable may hold it.
    let named = TOKEN_CONFIG.replace("\"GITHUB_TOKEN\"", "\"ROWBRANCH_GH_TOKEN\"");
    let config = parse_with(&named, &[("ROWBRANCH_GH_TOKEN", TOKEN)]).unwrap();
    assert_eq!(
        config.forge.token().unwrap().variable(),
        "ROWBRANCH_GH_TOKEN"
    );
}

#[test]
fn a_token_beside_the_apps_settings_is_refused_naming_both() {
    let with_id = TOKEN_CONFIG.replace("[github]\n", "[github]\napp_id = 42\n");
    let error = refused(&with_id, &[("GITHUB_TOKEN", TOKEN)]);
    assert!(error.contains("token_env = \"GITHUB_TOKEN\""), "{error}");
    assert!(error.contains("[github] app_id"), "{error}");
    let with_key = TOKEN_CONFIG.replace("[github]\n", "[github]\nprivate_key_path = \"app.pem\"\n");
    let error = refused(&with_key, &[("GITHUB_TOKEN", TOKEN)]);
    assert!(error.contains("[github] private_key_path"), "{error}");
    for variable in [env::GITHUB_APP_ID, env::GITHUB_APP_PRIVATE_KEY] {
        let error = refused(TOKEN_CONFIG, &[("GITHUB_TOKEN", TOKEN), (variable, "1")]);
        assert!(error.contains("token_env"), "{error}");
        assert!(error.contains(variable), "{error}");
    }
}

#[test]
fn a_token_variable_unset_or_empty_is_refused_naming_it() {
    for vars in [&[][..], &[("GITHUB_TOKEN", "")][..]] {
        let error = refused(TOKEN_CONFIG, vars);
        assert!(error.contains("GITHUB_TOKEN is not set"), "{error}");
        assert!(error.contains("github.token"), "{error}");
    }
}

#[test]
fn a_token_with_a_space_or_a_line_break_is_refused_without_its_value() {
    for bad in [format!("{TOKEN}\n"), format!("Bearer {TOKEN}")] {
        let error = refused(TOKEN_CONFIG, &[("GITHUB_TOKEN", &bad)]);
        assert!(error.contains("GITHUB_TOKEN holds a space"), "{error}");
    }
}

#[test]
fn a_tokens_hourly_writes_default_to_what_github_token_allows_and_a_written_one_wins() {
    let hourly = |text: &str| {
        let config = parse_with(text, &[("GITHUB_TOKEN", TOKEN)]).unwrap();
        let ForgeSettings::Github(github) = config.forge else {
            panic!("github");
        };
        github.pace.hourly_max
    };
    assert_eq!(hourly(TOKEN_CONFIG), TOKEN_WRITE_HOURLY_MAX);
    assert_eq!(
        TOKEN_WRITE_HOURLY_MAX, 400,
        "1,000 requests an hour, two writes of ~4 a row"
    );
    let written = TOKEN_CONFIG.replace(
        "token_env = \"GITHUB_TOKEN\"",
        "token_env = \"GITHUB_TOKEN\"\nwrite_hourly_max = 100",
    );
    assert_eq!(hourly(&written), 100);
}

#[test]
fn token_env_must_name_a_variable() {
    let bad = TOKEN_CONFIG.replace("\"GITHUB_TOKEN\"", "\"$GITHUB_TOKEN\"");
    let error = refused(&bad, &[("GITHUB_TOKEN", TOKEN)]);
    assert!(
        error.contains("is not the name of an environment variable"),
        "{error}"
    );
}

#[test]
fn a_webhook_route_with_a_token_is_refused_naming_both() {
    let webhook = TOKEN_CONFIG.replace("intake = \"pgmq\"\n", "");
    let error = refused(&webhook, &[("GITHUB_TOKEN", TOKEN)]);
    assert!(error.contains("token_env = \"GITHUB_TOKEN\""), "{error}");
    assert!(
        error.contains("[[routes]] number 1 (public.feedbacks) takes webhooks"),
        "{error}"
    );
    assert!(error.contains("intake = \"pgmq\""), "{error}");
}

#[test]
fn the_effective_config_prints_token_env_and_says_the_token_is_set_never_its_value() {
    let dir = tempfile::TempDir::new().unwrap();
    let path = dir.path().join("rowbranch.toml");
    std::fs::write(&path, TOKEN_CONFIG).unwrap();
    let vars = |key: &str| (key == "GITHUB_TOKEN").then(|| TOKEN.to_owned());
    let shown = Config::show(&path, &vars).unwrap();
    assert!(!shown.toml.contains(TOKEN), "{}", shown.toml);
    let lines: Vec<&str> = shown.toml.lines().collect();
    assert!(
        lines.contains(&"token_env = \"GITHUB_TOKEN\""),
        "{}",
        shown.toml
    );
    assert!(
        lines.contains(&"# the token: GITHUB_TOKEN (never printed)"),
        "{}",
        shown.toml
    );
    assert!(!shown.toml.contains("app_id"), "{}", shown.toml);
    assert!(shown.secrets.contains(&("GITHUB_TOKEN".to_owned(), "set")));
    // And it loads back.
    let again = Config::parse(&shown.toml, &path, &vars).unwrap();
    assert_eq!(again.forge.token().unwrap().variable(), "GITHUB_TOKEN");
}
