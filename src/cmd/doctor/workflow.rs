//! What `doctor` reads back from a target repository's workflow: whether it takes the route's
//! `repository_dispatch`, its claude-code-action steps, whether their `allowed_bots` let the
//! App's bot start a run — compared the way the action compares — and what bounds one run,
//! Claude's `--max-turns` and its job's `timeout-minutes`, read the way the action and GitHub
//! read them; and a rule of its `--allowedTools` that lets Claude run any command.

use yaml_rust2::{Yaml, YamlLoader};

/// The action that does the work in `templates/workflow.yml`.
const CLAUDE_ACTION: &str = "anthropics/claude-code-action";

/// One step of a workflow that runs claude-code-action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaudeStep {
    pub job: String,
    /// The step's `with: allowed_bots`, `""` when it has none (the action's default).
    pub allowed_bots: String,
    /// `--max-turns N` in the step's `with: claude_args`.
    pub max_turns: Bound,
    /// The `timeout-minutes` of the step's job.
    pub job_timeout_minutes: Bound,
    /// A rule of `--allowedTools` that lets Claude run any command (see [`catch_all_bash`]).
    pub catch_all_bash: Option<String>,
}

/// A bound on one run that a workflow states, or does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// None is stated: claude-code-action then lets Claude take as many turns as it likes, and
    /// GitHub lets a job run for 360 minutes.
    Missing,
    /// A whole number.
    Set(u64),
    /// Something that is not a whole number, as written (an expression, which only GitHub
    /// evaluates, or a word).
    Unreadable(String),
}

impl Bound {
    /// `text` as a whole number when it is one.
    fn parse(text: &str) -> Bound {
        let text = text.trim();
        match text.parse() {
            Ok(n) if text.bytes().all(|b| b.is_ascii_digit()) => Bound::Set(n),
            _ => Bound::Unreadable(text.to_owned()),
        }
    }
}

/// `--max-turns` in `claude_args`, read as claude-code-action reads it
/// (`parseClaudeArgsToExtraArgs`, in the action's `base-action/src/parse-sdk-options.ts`): the
/// arguments split as a shell splits them, every one that starts with `--` a flag, its value
/// the next one unless that is a flag too, and the last `--max-turns` the one that counts. So
/// `--max-turns=30` is a flag of another name, and sets no bound.
fn max_turns(claude_args: &str) -> Bound {
    let words = shell_words(claude_args);
    let last = words.iter().rposition(|word| word == "--max-turns");
    match last.and_then(|at| words.get(at + 1)) {
        Some(value) if !value.starts_with("--") => Bound::parse(value),
        _ => Bound::Missing,
    }
}

/// The first rule of `--allowedTools` in `claude_args` that lets Claude run any command:
/// `Bash` alone, or a rule that takes every git command (`Bash(*)`, `Bash(git)`,
/// `Bash(git *)`, `Bash(git:*)`), git being a command that runs others
/// (`git -c alias.x='!cmd' x`). Read as claude-code-action reads them
/// (`parseClaudeArgsToExtraArgs`): every word after the flag up to the next flag, split at
/// commas.
fn catch_all_bash(claude_args: &str) -> Option<String> {
    let mut listing = false;
    for word in shell_words(claude_args) {
        if let Some(flag) = word.strip_prefix("--") {
            listing = matches!(flag, "allowedTools" | "allowed-tools");
        } else if listing {
            if let Some(rule) = word
                .split(',')
                .map(str::trim)
                .find(|r| takes_every_command(r))
            {
                return Some(rule.to_owned());
            }
        }
    }
    None
}

/// Whether one rule is `Bash`, or `Bash(…)` with a pattern that every git command matches: empty,
/// `*`, `git`, `git *`, `git*` or `git:*` (`:*` being the older spelling of ` *`).
fn takes_every_command(rule: &str) -> bool {
    let Some(rest) = rule.strip_prefix("Bash").map(str::trim) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let Some(pattern) = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')')) else {
        return false;
    };
    let pattern = pattern.trim().trim_end_matches(":*").trim_end_matches('*');
    matches!(pattern.trim(), "" | "git")
}

/// What stands for a `${{ … }}` expression while the rest is split.
const EXPRESSION: &str = "${{}}";

/// `text` split into words as a shell splits them (shlex). A `${{ … }}` expression, which
/// GitHub replaces before the action reads the text, stays one word: each is set aside while
/// the rest is split, then put back in order. Unbalanced quotes leave no words.
fn shell_words(text: &str) -> Vec<String> {
    let (mut masked, mut expressions, mut rest) = (String::new(), Vec::new(), text);
    while let Some(start) = rest.find("${{") {
        let end = rest[start..]
            .find("}}")
            .map_or(rest.len(), |at| start + at + 2);
        masked.push_str(&rest[..start]);
        masked.push_str(EXPRESSION);
        expressions.push(&rest[start..end]);
        rest = &rest[end..];
    }
    masked.push_str(rest);
    let mut expressions = expressions.into_iter();
    let words = shlex::split(&masked).unwrap_or_default();
    let restore = |word: String| {
        let mut parts = word.split(EXPRESSION);
        let mut restored = parts.next().unwrap_or_default().to_owned();
        for part in parts {
            restored.push_str(expressions.next().unwrap_or_default());
            restored.push_str(part);
        }
        restored
    };
    words.into_iter().map(restore).collect()
}

/// A job's `timeout-minutes`, as GitHub reads it: a number, or an expression.
fn timeout_minutes(value: &Yaml) -> Bound {
    match value {
        Yaml::BadValue | Yaml::Null => Bound::Missing,
        Yaml::Integer(n) => Bound::parse(&n.to_string()),
        Yaml::String(s) | Yaml::Real(s) => Bound::parse(s),
        other => Bound::Unreadable(format!("{other:?}")),
    }
}

/// The claude-code-action steps of `workflow`, in order; `None` when it is not YAML.
pub fn claude_steps(workflow: &str) -> Option<Vec<ClaudeStep>> {
    let docs = YamlLoader::load_from_str(workflow).ok()?;
    let jobs = docs.first()?["jobs"].as_hash()?;
    let mut found = Vec::new();
    for (name, job) in jobs {
        for step in job["steps"].as_vec().into_iter().flatten() {
            let uses = step["uses"].as_str().unwrap_or_default();
            let action = uses.split('@').next().unwrap_or_default();
            if !action.eq_ignore_ascii_case(CLAUDE_ACTION) {
                continue;
            }
            let allowed_bots = match &step["with"]["allowed_bots"] {
                Yaml::String(s) | Yaml::Real(s) => s.clone(),
                Yaml::Integer(i) => i.to_string(),
                Yaml::Boolean(b) => b.to_string(),
                _ => String::new(),
            };
            let claude_args = step["with"]["claude_args"].as_str();
            found.push(ClaudeStep {
                job: name.as_str().unwrap_or_default().to_owned(),
                allowed_bots,
                max_turns: claude_args.map_or(Bound::Missing, max_turns),
                catch_all_bash: claude_args.and_then(catch_all_bash),
                job_timeout_minutes: timeout_minutes(&job["timeout-minutes"]),
            });
        }
    }
    Some(found)
}

/// Whether a workflow's `on:` takes `repository_dispatch` of `event_type`: a bare
/// `repository_dispatch` (in a string or a list) takes every type; a mapping takes the listed
/// `types`, or every type when it lists none.
pub fn listens_for(workflow: &str, event_type: &str) -> bool {
    let docs = YamlLoader::load_from_str(workflow).unwrap_or_default();
    let on = docs.first().map_or(&Yaml::BadValue, |doc| &doc["on"]);
    /// A string or a list of them, as a list.
    fn listed(value: &Yaml) -> Vec<&str> {
        match value {
            Yaml::Array(items) => items.iter().filter_map(Yaml::as_str).collect(),
            other => other.as_str().into_iter().collect(),
        }
    }
    match &on["repository_dispatch"] {
        Yaml::BadValue => listed(on).contains(&"repository_dispatch"),
        Yaml::Null => true,
        spec => {
            matches!(spec["types"], Yaml::BadValue | Yaml::Null)
                || listed(&spec["types"]).contains(&event_type)
        }
    }
}

/// The App's bot user, as GitHub names it: `{slug}[bot]`.
pub fn bot_login(app_slug: &str) -> String {
    format!("{app_slug}[bot]")
}

/// Whether claude-code-action lets a run started by the App `app_slug` through its human-actor
/// check: `allowed_bots` is `*`, or a comma-separated list with an entry equal to the bot's
/// login ignoring case and with or without `[bot]`; empty allows no bot. The same rules as
/// the check inline in `checkHumanActor`, in the action's `src/github/validation/actor.ts`
/// (https://github.com/anthropics/claude-code-action/blob/v1/src/github/validation/actor.ts).
/// The run's actor is taken to be `{slug}[bot]`; because the suffix is optional on both sides,
/// an actor of plain `{slug}` is allowed by the same lists.
pub fn allows_bot(allowed_bots: &str, app_slug: &str) -> bool {
    let trimmed = allowed_bots.trim();
    if trimmed == "*" {
        return true;
    }
    let normalize = |name: &str| {
        let lower = name.to_lowercase();
        lower.strip_suffix("[bot]").unwrap_or(&lower).to_owned()
    };
    let actor = normalize(&bot_login(app_slug));
    trimmed
        .split(',')
        .map(|entry| normalize(entry.trim()))
        .filter(|entry| !entry.is_empty())
        .any(|entry| entry == actor)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A work workflow as `init` writes it, cut to what the bot and step checks read; `init`'s
    /// tests rewrite it too.
    pub(crate) const WORKFLOW: &str = "\
on: repository_dispatch
jobs:
  work:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v5
      - id: work
        uses: anthropics/claude-code-action@v1
        with:
          # who may start it
          allowed_bots: \"rowbranch-acme[bot]\"
          prompt: hi
";

    #[test]
    fn the_action_compares_without_case_and_with_or_without_the_bot_suffix() {
        for allowed in [
            "rowbranch-acme[bot]",
            "rowbranch-acme",
            "RowBranch-Acme[BOT]",
            " other , rowbranch-acme ",
            "other,,rowbranch-acme[bot],",
            "*",
            "  *  ",
        ] {
            assert!(allows_bot(allowed, "rowbranch-acme"), "{allowed:?}");
        }
        for allowed in [
            "",
            "   ",
            "rowbranch-acme-2[bot]",
            "rowbranch",
            "other, *",
            "rowbranch-acme[bot][bot]",
            "rowbranch-acme bot",
        ] {
            assert!(!allows_bot(allowed, "rowbranch-acme"), "{allowed:?}");
        }
    }

    #[test]
    fn the_claude_steps_are_found_with_their_allowed_bots() {
        let steps = claude_steps(WORKFLOW).unwrap();
        assert_eq!(
            steps,
            vec![ClaudeStep {
                job: "work".into(),
                allowed_bots: "rowbranch-acme[bot]".into(),
                max_turns: Bound::Missing,
                job_timeout_minutes: Bound::Missing,
                catch_all_bash: None,
            }]
        );
        let without = WORKFLOW.replace("          allowed_bots: \"rowbranch-acme[bot]\"\n", "");
        assert_eq!(claude_steps(&without).unwrap()[0].allowed_bots, "");
        assert_eq!(claude_steps("on: push\njobs: {}\n"), Some(Vec::new()));
        assert_eq!(claude_steps(": ["), None);
    }

    #[test]
    fn max_turns_is_read_from_claude_args_as_the_action_reads_it() {
        for (args, bound) in [
            ("--max-turns 30", Bound::Set(30)),
            (
                "--allowedTools \"Bash(git:*),Edit\"\n--max-turns 12",
                Bound::Set(12),
            ),
            ("--max-turns '7' --model x", Bound::Set(7)),
            ("--max-turns 5 --max-turns 50", Bound::Set(50)),
            ("--max-turns \"1 0\"", Bound::Unreadable("1 0".into())),
            (
                "--max-turns ${{ vars.TURNS }} --model x",
                Bound::Unreadable("${{ vars.TURNS }}".into()),
            ),
            ("--max-turns -3", Bound::Unreadable("-3".into())),
            ("--max-turns", Bound::Missing),
            ("--max-turns --model x", Bound::Missing),
            ("--max-turns=30", Bound::Missing),
            ("--allowedTools \"--max-turns 30\"", Bound::Missing),
            ("", Bound::Missing),
        ] {
            assert_eq!(max_turns(args), bound, "{args:?}");
        }
    }

    #[test]
    fn a_bash_rule_that_takes_every_command_is_found_as_the_action_reads_the_list() {
        for (args, found) in [
            ("--allowedTools \"Bash,Edit\"", Some("Bash")),
            ("--allowedTools Edit \"Bash(*)\"", Some("Bash(*)")),
            ("--allowed-tools \"Read, Bash(git)\"", Some("Bash(git)")),
            (
                "--allowedTools \"Bash(git *)\" --max-turns 3",
                Some("Bash(git *)"),
            ),
            (
                "--max-turns 3 --allowedTools \"Edit,Bash(git:*)\"",
                Some("Bash(git:*)"),
            ),
            (
                "--allowedTools \"Bash(git add:*),Bash(git commit:*),Edit\"",
                None,
            ),
            ("--allowedTools \"Bash(cargo test:*)\"", None),
            ("--disallowedTools Bash --allowedTools Edit", None),
            ("--settings '{\"allow\": \"Bash\"}'", None),
            ("", None),
        ] {
            assert_eq!(catch_all_bash(args).as_deref(), found, "{args:?}");
        }
    }

    #[test]
    fn the_claude_steps_bounds_are_its_max_turns_and_its_jobs_timeout() {
        let bounded = WORKFLOW
            .replace(
                "    runs-on: ubuntu-latest\n",
                "    runs-on: ubuntu-latest\n    timeout-minutes: 25\n",
            )
            .replace(
                "          prompt: hi\n",
                "          claude_args: >-\n            --max-turns 9\n          prompt: hi\n",
            );
        let step = &claude_steps(&bounded).unwrap()[0];
        assert_eq!(step.max_turns, Bound::Set(9));
        assert_eq!(step.job_timeout_minutes, Bound::Set(25));
        let expression = bounded.replace("timeout-minutes: 25", "timeout-minutes: ${{ vars.T }}");
        assert_eq!(
            claude_steps(&expression).unwrap()[0].job_timeout_minutes,
            Bound::Unreadable("${{ vars.T }}".into())
        );
    }

    #[test]
    fn a_workflow_listens_by_string_list_or_types() {
        assert!(listens_for("on: repository_dispatch\njobs: {}", "feedback"));
        assert!(listens_for("on: [push, repository_dispatch]", "feedback"));
        assert!(listens_for("on:\n  repository_dispatch:\n", "feedback"));
        assert!(listens_for(
            "on:\n  repository_dispatch:\n    types: [feedback]\n",
            "feedback"
        ));
        assert!(listens_for(
            "\"on\":\n  repository_dispatch:\n    types:\n      - other\n      - feedback\n",
            "feedback"
        ));
    }

    #[test]
    fn a_workflow_for_other_events_or_types_does_not() {
        assert!(!listens_for("on: push", "feedback"));
        assert!(!listens_for(
            "on:\n  repository_dispatch:\n    types: [other]\n",
            "feedback"
        ));
        assert!(!listens_for("on: {workflow_dispatch: {}}", "feedback"));
        assert!(!listens_for(": not yaml : [", "feedback"));
        assert!(!listens_for("jobs: {}", "feedback"));
    }
}
