//! Each deploy recipe of docs/deploy.md runs the config `init` wrote. `init` writes a setup with
//! a table, text column and payload template of its own and the status page on; no image can
//! be built here, so each recipe's layout is made on disk from the recipe's own files and the
//! guide's own commands — the files it mounts or installs where it puts them, the secrets it
//! sets, the image's `PORT` and working directory — and in it run the recipe's `rowbranch
//! config`, and `config` with the arguments of its `doctor`. Each prints the config that
//! `rowbranch config --config setup/rowbranch.toml` prints under the same platform variables.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use fake_github::TEST_APP_PRIVATE_KEY_PEM;
use tempfile::TempDir;
use yaml_rust2::YamlLoader;

use crate::support::tools::output_text;

const BINARY: &str = env!("CARGO_BIN_EXE_rowbranch");
/// Where the image (and the guide) puts the binary.
const IMAGE_BINARY: &str = "/usr/local/bin/rowbranch";

/// What makes this setup not `init`'s defaults.
const TABLE: &str = "customer_feedback";
const TEXT_COLUMN: &str = "body";
const PAYLOAD_LINE: &str = "\"author\": {{ record.author }},";

type Env = BTreeMap<String, String>;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A clone's root as the guide expects it: `setup/` as `init` wrote it (then edited as a user
/// would), the App's key where `init --manifest-code` puts it, and the recipes' `deploy/`.
struct Clone {
    root: TempDir,
}

impl Clone {
    fn new() -> Clone {
        let root = TempDir::new().unwrap();
        let setup = root.path().join("setup");
        let out = Command::new(BINARY)
            .args([
                "init",
                "--repo",
                "acme/app",
                "--url",
                "https://hooks.example.com",
            ])
            .args(["--owner-type", "organization", "--table", TABLE])
            .args(["--text-column", TEXT_COLUMN, "--branch-prefix", "idea"])
            .arg("--dir")
            .arg(&setup)
            .env_remove("GITHUB_API_URL")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", output_text(&out));
        let template = setup.join("payload.json.j2");
        let edited = read(&template).replace(
            "\"id\": {{ id }},",
            &format!("\"id\": {{{{ id }}}},\n  {PAYLOAD_LINE}"),
        );
        assert!(edited.contains(PAYLOAD_LINE));
        std::fs::write(&template, edited).unwrap();
        let config = setup.join("rowbranch.toml");
        let on = read(&config).replace("status_page = false", "status_page = true");
        assert!(on.contains("status_page = true"));
        std::fs::write(&config, on).unwrap();
        std::fs::write(setup.join("app.pem"), TEST_APP_PRIVATE_KEY_PEM).unwrap();
        let deploy = root.path().join("deploy");
        std::fs::create_dir(&deploy).unwrap();
        for entry in std::fs::read_dir(repository().join("deploy")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), deploy.join(entry.file_name())).unwrap();
        }
        Clone { root }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.path().join(relative)
    }

    /// The secrets as the platform holds them: the webhook secret `init` generated, the key.
    fn secrets(&self) -> Env {
        let secret = read(self.path("setup/rowbranch.env"))
            .lines()
            .find_map(|l| l.strip_prefix("ROWBRANCH_WEBHOOK_SECRET="))
            .expect("init wrote the webhook secret")
            .to_owned();
        Env::from([
            ("ROWBRANCH_WEBHOOK_SECRET".to_owned(), secret),
            (
                "GITHUB_APP_PRIVATE_KEY".to_owned(),
                TEST_APP_PRIVATE_KEY_PEM.trim().to_owned(),
            ),
        ])
    }

    /// What `rowbranch config --config setup/rowbranch.toml` prints with the platform's
    /// variables `env`: the config init wrote, with nothing of a recipe in between.
    fn written(&self, env: &Env) -> toml::Table {
        let printed = config(self.root.path(), &["--config", "setup/rowbranch.toml"], env);
        // It is init's, as edited.
        let route = &printed["routes"][0];
        assert_eq!(route["table"].as_str(), Some(TABLE));
        assert_eq!(route["text_column"].as_str(), Some(TEXT_COLUMN));
        assert_eq!(route["branch_prefix"].as_str(), Some("idea"));
        let template = route["payload_template_inline"].as_str().unwrap();
        assert!(template.contains(PAYLOAD_LINE), "{template}");
        assert_eq!(printed["status_page"].as_bool(), Some(true));
        printed
    }
}

/// `rowbranch config ARGS` in `dir` with exactly the variables `env`: its TOML.
fn config(dir: &Path, args: &[&str], env: &Env) -> toml::Table {
    let out = Command::new(BINARY)
        .arg("config")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "config {args:?}: {}",
        output_text(&out)
    );
    parse(&String::from_utf8_lossy(&out.stdout))
}

fn parse(printed: &str) -> toml::Table {
    printed
        .parse()
        .unwrap_or_else(|e| panic!("not TOML: {e}\n{printed}"))
}

/// Runs a line of the guide with `sh`, in `dir`, with nothing of the test's environment but
/// `PATH`: what it printed.
fn shell(dir: &Path, line: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", line])
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(out.status.success(), "{line}: {}", output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The guide's section whose heading starts with `heading`, up to the next.
fn section(heading: &str) -> String {
    let guide = read(repository().join("docs/deploy.md"));
    let start = guide
        .find(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("docs/deploy.md has no section {heading}"));
    let rest = &guide[start + 1..];
    let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
    rest[..end].to_owned()
}

/// The section's `sh` blocks.
fn sh_blocks(section: &str) -> Vec<String> {
    section
        .split("```sh\n")
        .skip(1)
        .map(|rest| rest[..rest.find("```").expect("a block ends")].to_owned())
        .collect()
}

/// The runtime stage's `ENV` and `WORKDIR`: what every container of the image starts with.
fn image() -> (Env, String) {
    let dockerfile = read(repository().join("Dockerfile"));
    let runtime = &dockerfile[dockerfile.rfind("\nFROM ").expect("a runtime stage")..];
    let mut env = Env::new();
    let mut workdir = "/".to_owned();
    for line in runtime.lines() {
        if let Some(pairs) = line.strip_prefix("ENV ") {
            for pair in pairs.split_whitespace() {
                let (key, value) = pair.split_once('=').expect("ENV KEY=VALUE");
                env.insert(key.to_owned(), value.to_owned());
            }
        }
        if let Some(dir) = line.strip_prefix("WORKDIR ") {
            workdir = dir.trim().to_owned();
        }
    }
    assert!(env.contains_key("PORT"), "the image sets PORT");
    (env, workdir)
}

/// An environment file as Compose and systemd read it: `KEY=VALUE` lines, a single-quoted
/// value taken literally and possibly over several lines, `#` lines left out.
fn env_file(text: &str) -> Env {
    let mut env = Env::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').expect("KEY=VALUE");
        let value = match value.strip_prefix('\'') {
            Some(rest) => {
                let mut value = rest.to_owned();
                while !value.ends_with('\'') {
                    value.push('\n');
                    value.push_str(lines.next().expect("the quote closes"));
                }
                value.pop();
                value
            }
            None => value.to_owned(),
        };
        env.insert(key.to_owned(), value);
    }
    env
}

/// `rowbranch` ARGS of a command the guide runs where rowbranch runs, from its words after
/// the binary's path; `doctor` becomes `config`, so that what it checks is printed.
fn checked_by(words: &[&str]) -> Vec<String> {
    let (command, rest) = words.split_first().expect("a command");
    let command = match *command {
        "doctor" | "config" => "config",
        other => {
            panic!("the guide runs `rowbranch {other}` where `config` or `doctor` was expected")
        }
    };
    std::iter::once(command)
        .chain(rest.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// The commands after `IMAGE_BINARY` in the lines of `text` that run one, each as its words;
/// at least a `config` and a `doctor`.
fn commands_in(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let commands: Vec<Vec<String>> = text
        .lines()
        .filter_map(|line| line.split_once(prefix).map(|(_, rest)| rest))
        .map(|rest| {
            let rest = rest.split('"').next().unwrap_or(rest);
            let words: Vec<&str> = rest.split_whitespace().collect();
            checked_by(&words)
        })
        .collect();
    assert!(
        commands.len() >= 2,
        "a `config` and a `doctor` after {prefix:?}:\n{text}"
    );
    commands
}

/// Runs `args` (`config …`) in `dir` with `env`; its TOML.
fn config_command(dir: &Path, args: &[String], env: &Env) -> toml::Table {
    let (command, rest) = args.split_first().unwrap();
    assert_eq!(command, "config");
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    config(dir, &rest, env)
}

#[test]
fn the_fly_recipe_runs_the_config_init_wrote_from_one_secret() {
    let clone = Clone::new();
    let fly = section("## 1. Fly.io");
    // The config's secret, as the guide sets it: what the left of its pipe prints, trimmed the
    // way flyctl reads a value from standard input.
    let line = fly
        .lines()
        .find(|l| l.contains("ROWBRANCH_CONFIG=-"))
        .expect("the guide sets ROWBRANCH_CONFIG");
    let (producer, consumer) = line.split_once(" | ").expect("the value is piped in");
    assert!(consumer.starts_with("fly secrets set"), "{consumer}");
    let words: Vec<&str> = producer.split_whitespace().collect();
    assert_eq!(words[..2], ["rowbranch", "config"], "{producer}");
    let value = shell(
        clone.root.path(),
        &format!("{BINARY} {}", words[1..].join(" ")),
    );
    for secret in [
        "< setup/rowbranch.env",
        "GITHUB_APP_PRIVATE_KEY=- < setup/app.pem",
    ] {
        assert!(fly.contains(secret), "the guide sets the secret {secret}");
    }
    assert!(fly.contains("ROWBRANCH_STATUS_PASSWORD"));

    // The Machine: the image's variables, fly.toml's [env], the secrets; the image's working
    // directory, with no config file in it.
    let (mut machine, _) = image();
    let fly_toml: toml::Table = read(clone.path("deploy/fly.toml")).parse().unwrap();
    for (key, value) in fly_toml
        .get("env")
        .and_then(|e| e.as_table())
        .into_iter()
        .flatten()
    {
        machine.insert(key.clone(), value.as_str().unwrap().to_owned());
    }
    let platform = machine.clone();
    machine.extend(clone.secrets());
    machine.insert("ROWBRANCH_CONFIG".to_owned(), value.trim().to_owned());
    let workdir = TempDir::new().unwrap();

    let mut expected = platform;
    expected.extend(clone.secrets());
    let written = clone.written(&expected);
    for args in commands_in(&fly, &format!("-C \"{IMAGE_BINARY} ")) {
        assert_eq!(
            config_command(workdir.path(), &args, &machine),
            written,
            "fly ssh console -C \"rowbranch {}\"",
            args.join(" ")
        );
    }
}

/// The guide's block that writes `deploy/rowbranch.env`, run in the clone.
fn write_env_file(clone: &Clone) {
    let compose = section("## 2. Docker Compose with Caddy");
    let block = sh_blocks(&compose)
        .into_iter()
        .find(|b| b.contains("> rowbranch.env"))
        .expect("the guide writes deploy/rowbranch.env");
    shell(clone.root.path(), &block);
    let written = clone.path("deploy/rowbranch.env");
    let mode = std::fs::metadata(&written).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the secrets' file is its owner's only");
}

#[test]
fn the_compose_recipe_runs_the_config_init_wrote_from_its_mounts() {
    let clone = Clone::new();
    write_env_file(&clone);
    let guide = section("## 2. Docker Compose with Caddy");
    assert!(guide.contains("ROWBRANCH_STATUS_PASSWORD"));
    let doc = YamlLoader::load_from_str(&read(clone.path("deploy/compose.yaml")))
        .unwrap()
        .remove(0);
    let service = &doc["services"]["rowbranch"];

    // The container: the image's variables and working directory, the env_file, compose's
    // environment, and the bind mounts at their places in a root of its own.
    let (mut container, workdir) = image();
    let platform = container.clone();
    let env_file_name = service["env_file"].as_str().expect("one env_file");
    container.extend(env_file(&read(clone.path("deploy").join(env_file_name))));
    for (key, value) in service["environment"].as_hash().into_iter().flatten() {
        container.insert(
            key.as_str().unwrap().to_owned(),
            value.as_str().unwrap().to_owned(),
        );
    }
    let fs = TempDir::new().unwrap();
    for volume in service["volumes"].as_vec().expect("volumes") {
        let volume = volume.as_str().expect("short syntax");
        let mut parts = volume.split(':');
        let (host, inside) = (parts.next().unwrap(), parts.next().unwrap());
        let target = fs.path().join(inside.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(clone.path("deploy").join(host), &target)
            .unwrap_or_else(|e| panic!("compose.yaml mounts {host}: {e}"));
    }
    let inside = fs.path().join(workdir.trim_start_matches('/'));
    std::fs::create_dir_all(&inside).unwrap();

    let mut expected = platform;
    expected.extend(clone.secrets());
    let written = clone.written(&expected);
    let service_name = "exec rowbranch";
    for args in commands_in(&guide, &format!("{service_name} {IMAGE_BINARY} ")) {
        assert_eq!(
            config_command(&inside, &args, &container),
            written,
            "docker compose exec rowbranch rowbranch {}",
            args.join(" ")
        );
    }
}

#[test]
fn the_systemd_recipe_runs_the_config_init_wrote_from_etc() {
    let clone = Clone::new();
    write_env_file(&clone);
    let guide = section("## 3. systemd on a VM");
    let block = sh_blocks(&guide)
        .into_iter()
        .find(|b| b.contains("sudo install"))
        .expect("the guide installs the files");
    // The machine's root, where the guide's own install lines put the files.
    let machine = TempDir::new().unwrap();
    let root = format!("{}/", machine.path().display());
    std::fs::create_dir_all(machine.path().join("etc/systemd/system")).unwrap();
    let on_machine = |line: &str| {
        line.strip_prefix("sudo ")
            .unwrap()
            .replace(" /etc/", &format!(" {root}etc/"))
    };
    for line in block.lines().filter(|l| l.starts_with("sudo install")) {
        if line.contains(&format!(" rowbranch {IMAGE_BINARY}")) {
            continue; // the binary: this test's own runs instead
        }
        shell(clone.root.path(), &on_machine(line));
    }

    // The service: ExecStart's arguments, its EnvironmentFile and Environment, its folder.
    let unit = read(clone.path("deploy/rowbranch.service"));
    let setting = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
            .collect()
    };
    let exec = setting("ExecStart").remove(0);
    let words: Vec<String> = exec
        .strip_prefix(IMAGE_BINARY)
        .expect("ExecStart runs the binary")
        .split_whitespace()
        .map(|w| w.replace("/etc/", &format!("{root}etc/")))
        .collect();
    assert_eq!(words[0], "serve");
    let mut service = Env::new();
    for file in setting("EnvironmentFile") {
        service.extend(env_file(&read(
            machine.path().join(file.trim_start_matches('/')),
        )));
    }
    for pair in setting("Environment") {
        let (key, value) = pair.split_once('=').unwrap();
        service.insert(key.to_owned(), value.to_owned());
    }
    let workdir = machine
        .path()
        .join(setting("WorkingDirectory")[0].trim_start_matches('/'));

    let written = clone.written(&clone.secrets());
    let mut args = words;
    args[0] = "config".to_owned();
    assert_eq!(
        config_command(&workdir, &args, &service),
        written,
        "ExecStart, as `config`"
    );
    // The guide's own `config` and `doctor` lines: a shell that sources the secrets' file.
    let checks: Vec<&str> = block
        .lines()
        .filter(|l| l.starts_with("sudo sh -c"))
        .collect();
    assert!(
        checks.len() >= 2,
        "a `config` and a `doctor` line:\n{block}"
    );
    for line in checks {
        let line = on_machine(line)
            .replace("exec rowbranch doctor ", &format!("exec {BINARY} config "))
            .replace("exec rowbranch config ", &format!("exec {BINARY} config "));
        assert!(line.contains(BINARY), "{line}");
        let printed = shell(machine.path(), &line);
        assert_eq!(parse(&printed), written, "{line}");
    }
}

#[test]
fn any_platform_takes_the_config_in_one_variable_and_refuses_it_beside_a_file() {
    let clone = Clone::new();
    let other = section("## Any other platform: one variable");
    let line = sh_blocks(&other)
        .into_iter()
        .flat_map(|b| b.lines().map(str::to_owned).collect::<Vec<_>>())
        .find(|l| l.starts_with("rowbranch config "))
        .expect("the guide prints the variable's value");
    let line = line
        .split('#')
        .next()
        .unwrap()
        .trim()
        .replacen("rowbranch", BINARY, 1);
    shell(clone.root.path(), &line);
    let file = line.rsplit("> ").next().unwrap().trim();
    let value = read(clone.path(file));

    let (mut platform, _) = image();
    let expected = {
        let mut env = platform.clone();
        env.extend(clone.secrets());
        env
    };
    platform.extend(clone.secrets());
    platform.insert("ROWBRANCH_CONFIG".to_owned(), value);
    let empty = TempDir::new().unwrap();
    assert_eq!(
        config(empty.path(), &[], &platform),
        clone.written(&expected)
    );

    // With a file at --config as well, refused, naming both.
    let out = Command::new(BINARY)
        .args(["config", "--config", "setup/rowbranch.toml"])
        .current_dir(clone.root.path())
        .env_clear()
        .envs(&platform)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let said = output_text(&out);
    assert!(
        said.contains("ROWBRANCH_CONFIG") && said.contains("setup/rowbranch.toml"),
        "{said}"
    );
}
