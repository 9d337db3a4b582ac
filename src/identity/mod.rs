//! Row identity: the checked id of a database row, the slug of its text, and the
//! git branch name derived from both (plus the one rule for which existing branches belong to
//! a row); the forge-side names a route carries ([`RepoName`], [`EventType`]); and the name of
//! the queue rows arrive on ([`QueueName`]); and a branch name git takes, for a repository's
//! default branch ([`RefName`]).

/// `as_str`, `Display` and `== "…"` for checked names that are their text once checked: each
/// shows as, and compares with, what it holds.
macro_rules! shown_as_text {
    ($($name:ident),+) => {$(
        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    )+};
}

/// Refuses with a [`NameError`] from `format!` arguments unless `$cond` holds.
macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(NameError(format!($($arg)*)));
        }
    };
}

mod forge_names;
mod queue_name;
mod ref_name;

pub use forge_names::{api_url_problem, EventType, RepoName};
pub use queue_name::QueueName;
pub use ref_name::RefName;

shown_as_text!(RowId, Slug, BranchPrefix, BranchName);

use serde_json::Value;

/// Longest id we accept. Leaves room for a slug in the branch name's last
/// component (`{id}-{slug}`), which must fit the 255-byte file name limit
/// that loose refs live under.
const MAX_ID_LEN: usize = 100;

/// Longest branch prefix we accept.
const MAX_PREFIX_LEN: usize = 100;

/// How much of an offending value an error message quotes. Error texts reach
/// users, so they must not grow with whatever a webhook happened to send.
const QUOTE_LIMIT: usize = 40;

/// The id of a database row, as it appears in its branch name.
///
/// Holds only text that is safe as (the start of) a git ref component; see
/// [`RowId::parse`] for the rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct RowId(String);

/// Why a name was refused (a row's id, a branch prefix, a repository, an event type, a queue
/// or a default branch), worded for users: what is wrong, then the rule it breaks. A value it
/// quotes is cut to about 40 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(String);

impl RowId {
    /// Checks `record[id_column]` and returns it as an id.
    ///
    /// Strings and integers are accepted, and an integer is the same id as its
    /// decimal string (`7` and `"7"`). The text must be 1 to 100 characters of
    /// `A-Z a-z 0-9 . _ -`, must not start with `.` or `-`, contain `..`, or end
    /// with `.` or `.lock`. Anything else is refused, never rewritten: two rows
    /// must not be cleaned into one id.
    pub fn parse(value: &Value) -> Result<RowId, NameError> {
        let found = match value {
            Value::String(text) => return RowId::check(text.clone()),
            Value::Number(n) if n.is_i64() || n.is_u64() => return RowId::check(n.to_string()),
            // `1.0` is refused too: it arrived as a float, and turning it into "1"
            // would be exactly the kind of cleaning the contract forbids.
            Value::Number(n) => {
                return Err(NameError(format!(
                    "the id {} is not an integer; numeric ids must be whole numbers written \
                     without a decimal point or exponent",
                    excerpt(&n.to_string())
                )))
            }
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        Err(NameError(format!(
            "the id is {found}; ids must be a string or an integer"
        )))
    }

    fn check(text: String) -> Result<RowId, NameError> {
        ensure!(
            !text.is_empty(),
            "the id is empty; ids must be 1 to 100 characters from A-Z a-z 0-9 . _ -"
        );
        let value = excerpt(&text);
        let len = text.chars().count();
        ensure!(
            len <= MAX_ID_LEN,
            "the id {value:?} is {len} characters long; ids may be at most 100 characters"
        );
        check_part(&text)
            .map_err(|(fault, rule)| NameError(format!("the id {value:?} {fault}; ids {rule}")))?;
        Ok(RowId(text))
    }

    /// Whether `tail` — a branch name with its `{prefix}/` taken off — belongs to this row:
    /// `{id}` or `{id}-…`, whatever follows the dash, but never `{id}0…` (`420-x` is not row
    /// 42's). The one rule of SPEC §4; every other "is this the row's branch" asks it.
    pub fn owns_tail(&self, tail: &str) -> bool {
        tail.strip_prefix(self.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    }
}

/// The rules shared by ids and prefix parts: git's rules for a ref component,
/// narrowed to a plain ASCII set so names also pass through URLs, shells and
/// CI configuration unquoted. `part` must not be empty. A refusal says what the part does,
/// then the rule it breaks, for its caller to say whose rule it is ("ids", "parts of a
/// branch prefix").
fn check_part(part: &str) -> Result<(), (String, &'static str)> {
    let name_char = |ch: char| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '_' | '-');
    if let Some(ch) = part.chars().find(|&ch| !name_char(ch)) {
        // Named so that a user can see it, invisible ones included: escape_debug turns control
        // and invisible characters into \u{...}.
        let shown = match ch {
            ' ' => "' ' (a space)".to_owned(),
            '\t' => "a tab".to_owned(),
            '\n' | '\r' => "a line break".to_owned(),
            '/' => "'/' (a slash)".to_owned(),
            _ => format!("'{}'", ch.escape_debug()),
        };
        return Err((format!("contains {shown}"), NAME_CHARS));
    }
    let start = "may not start with '.' or '-'";
    let rules = [
        (part.starts_with('.'), "starts with '.'", start),
        (part.starts_with('-'), "starts with '-'", start),
        (
            part.contains(".."),
            "contains '..'",
            "may not contain two dots in a row",
        ),
        (
            part.ends_with(".lock"),
            "ends with '.lock'",
            "may not end with '.lock' (git reserves it)",
        ),
        (part.ends_with('.'), "ends with '.'", "may not end with '.'"),
    ];
    match rules.into_iter().find(|(broken, ..)| *broken) {
        Some((_, fault, rule)) => Err((fault.to_owned(), rule)),
        None => Ok(()),
    }
}

/// The rule [`check_part`] gives for a character outside the set.
const NAME_CHARS: &str = "may contain only A-Z a-z 0-9 . _ -";

/// At most `QUOTE_LIMIT` characters of `text`, with `…` when cut: what an error message quotes
/// of a value it refuses, so that its text does not grow with whatever was sent.
pub fn excerpt(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A short, readable, ASCII rendering of a row's text: `add-dark-mode`.
///
/// Always 1 or more of `a-z 0-9 -`, with no leading, trailing or doubled `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slug(String);

impl Slug {
    /// The slug of `text`, at most `max_len` characters, cut between words
    /// where possible. `None` when nothing is left (empty or symbol-only
    /// text, or `max_len` of 0).
    pub fn new(text: &str, max_len: usize) -> Option<Slug> {
        // slugify transliterates to ASCII, lowercases and turns every run of
        // other characters into a single inner `-`.
        let full = slug::slugify(text);
        let cut = cut_between_words(&full, max_len);
        (!cut.is_empty()).then(|| Slug(cut.to_owned()))
    }
}

/// Cuts a slugified string to at most `max_len` characters, at the last `-`
/// that keeps it within bounds, or hard at `max_len` for one long word.
///
/// `slug` must be slugify output: ASCII (so byte indices are character
/// indices) with single dashes only between words.
fn cut_between_words(slug: &str, max_len: usize) -> &str {
    if slug.len() <= max_len {
        return slug;
    }
    // When the character just past the cut is a dash, the cut already falls
    // between two words and no word needs to be dropped.
    if slug.as_bytes()[max_len] == b'-' {
        return &slug[..max_len];
    }
    let head = &slug[..max_len];
    match head.rfind('-') {
        Some(dash) => &head[..dash],
        None => head,
    }
}

/// The configured start of every branch name, e.g. `feedback` or `bot/feedback`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BranchPrefix(String);

impl BranchPrefix {
    /// Checks a configured prefix: `/`-separated parts, each following the
    /// same rules as an id, at most 100 characters in all.
    pub fn parse(raw: &str) -> Result<BranchPrefix, NameError> {
        ensure!(
            !raw.is_empty(),
            "the branch prefix is empty; give one like \"feedback\" or \"bot/feedback\""
        );
        let prefix = excerpt(raw);
        let len = raw.chars().count();
        ensure!(
            len <= MAX_PREFIX_LEN,
            "the branch prefix {prefix:?} is {len} characters long; branch prefixes may be \
             at most 100 characters"
        );
        for part in raw.split('/') {
            ensure!(
                !part.is_empty(),
                "the branch prefix {prefix:?} has an empty part (a leading, trailing or \
                 doubled '/'); a prefix is one or more parts separated by single '/', like \
                 \"bot/feedback\""
            );
            // A bad character is reported against the whole prefix: that is what the user
            // typed, and the character may be what split it into parts.
            check_part(part).map_err(|(fault, rule)| match rule {
                NAME_CHARS => NameError(format!(
                    "the branch prefix {prefix:?} {fault}; branch prefixes {NAME_CHARS} and '/' \
                     between parts"
                )),
                _ => NameError(format!(
                    "the branch prefix part {:?} {fault}; parts of a branch prefix {rule}",
                    excerpt(part)
                )),
            })?;
        }
        Ok(BranchPrefix(raw.to_owned()))
    }

    /// Whether `branch` (a short branch name, without refs/heads/) belongs to the row `id`.
    ///
    /// The id alone decides: `{prefix}/{id}` and `{prefix}/{id}-anything`
    /// belong to the row whatever the slug says, but `{prefix}/420-x` does
    /// not belong to `42`.
    pub fn owns(&self, id: &RowId, branch: &str) -> bool {
        self.tail(branch).is_some_and(|tail| id.owns_tail(tail))
    }

    /// What follows `{prefix}/` in `branch`, or `None` when the branch is not under the prefix.
    pub fn tail<'a>(&self, branch: &'a str) -> Option<&'a str> {
        branch.strip_prefix(self.as_str())?.strip_prefix('/')
    }
}

/// A short branch name (without refs/heads/): `{prefix}/{id}-{slug}` or
/// `{prefix}/{id}`. Always valid for `git check-ref-format --branch`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct BranchName(String);

impl BranchName {
    pub fn new(prefix: &BranchPrefix, id: &RowId, slug: Option<&Slug>) -> BranchName {
        // Valid as a ref because every piece is: the prefix and id follow the
        // component rules, the `-` joint cannot form `..`, and a slug ends in
        // a letter or digit, so the name cannot end in `.` or `.lock`.
        match slug {
            Some(slug) => BranchName(format!("{prefix}/{id}-{slug}")),
            None => BranchName(format!("{prefix}/{id}")),
        }
    }

    /// A branch that exists on the forge and belongs to row `id` (whatever its slug), or
    /// `None` when it does not belong to the row.
    pub fn existing(prefix: &BranchPrefix, id: &RowId, name: &str) -> Option<BranchName> {
        prefix.owns(id, name).then(|| BranchName(name.to_owned()))
    }

    /// A branch a forge listed under `prefix` (`{prefix}/…`), whichever row it is for; `None`
    /// when it is not under the prefix.
    pub fn listed(prefix: &BranchPrefix, name: &str) -> Option<BranchName> {
        prefix.tail(name).map(|_| BranchName(name.to_owned()))
    }

    /// `{this branch}-redo-{n}` (for deliberate re-runs)
    pub fn redo(&self, n: u32) -> BranchName {
        BranchName(format!("{self}-redo-{n}"))
    }
}

/// How late a redo a branch name is: how many `-redo-N` it ends with, then the last N (`0, 0`
/// for a first branch). Of a row's branches, those of the highest rank are its current work:
/// a redo appends `-redo-N` to the branch it redoes, with the first N free, so a later redo
/// ranks higher whatever the slug.
pub fn redo_rank(branch: &str) -> (usize, u32) {
    let (mut rest, mut depth, mut last) = (branch, 0, 0);
    while let Some((before, digits)) = rest.rsplit_once("-redo-") {
        // `redo` writes N in plain digits, from 1.
        let parsed = digits.parse::<u32>().ok();
        let Some(n) = parsed.filter(|n| *n > 0 && n.to_string() == digits) else {
            break;
        };
        if depth == 0 {
            last = n;
        }
        (rest, depth) = (before, depth + 1);
    }
    (depth, last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::process::{Command, Stdio};

    fn id(value: Value) -> RowId {
        RowId::parse(&value).expect("test id should be valid")
    }

    fn prefix(raw: &str) -> BranchPrefix {
        BranchPrefix::parse(raw).expect("test prefix should be valid")
    }

    fn branch(prefix_raw: &str, id_value: Value, text: &str) -> String {
        let slug = Slug::new(text, 40);
        BranchName::new(&prefix(prefix_raw), &id(id_value), slug.as_ref()).to_string()
    }

    // ---- ids ----

    #[test]
    fn each_refused_id_gets_its_own_reason() {
        let long = "x".repeat(101);
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases: Vec<(Value, &str)> = vec![
            (json!(null), "the id is null; ids must be a string or an integer"),
            (json!(true), "the id is a boolean; ids must be a string or an integer"),
            (json!([7]), "the id is an array; ids must be a string or an integer"),
            (json!({"id": 7}), "the id is an object; ids must be a string or an integer"),
            (json!(1.5), "the id 1.5 is not an integer; numeric ids must be whole numbers written without a decimal point or exponent"),
            (json!(1.0), "the id 1.0 is not an integer; numeric ids must be whole numbers written without a decimal point or exponent"),
            (json!(""), "the id is empty; ids must be 1 to 100 characters from A-Z a-z 0-9 . _ -"),
            (json!(long), "the id \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…\" is 101 characters long; ids may be at most 100 characters"),
            (json!("my id"), "the id \"my id\" contains ' ' (a space); ids may contain only A-Z a-z 0-9 . _ -"),
            (json!("a/b"), "the id \"a/b\" contains '/' (a slash); ids may contain only A-Z a-z 0-9 . _ -"),
            (json!("tab\tx"), "the id \"tab\\tx\" contains a tab; ids may contain only A-Z a-z 0-9 . _ -"),
            (json!("größe"), "the id \"größe\" contains 'ö'; ids may contain only A-Z a-z 0-9 . _ -"),
            (json!("a\u{200b}"), "the id \"a\\u{200b}\" contains '\\u{200b}'; ids may contain only A-Z a-z 0-9 . _ -"),
            (json!(-5), "the id \"-5\" starts with '-'; ids may not start with '.' or '-'"),
            (json!(".x"), "the id \".x\" starts with '.'; ids may not start with '.' or '-'"),
            (json!("a..b"), "the id \"a..b\" contains '..'; ids may not contain two dots in a row"),
            (json!("x.lock"), "the id \"x.lock\" ends with '.lock'; ids may not end with '.lock' (git reserves it)"),
            (json!("v1."), "the id \"v1.\" ends with '.'; ids may not end with '.'"),
        ];
        for (value, expected) in cases {
            let error = RowId::parse(&value).expect_err(&format!("{value} should be refused"));
            assert_eq!(error.to_string(), expected, "for {value}");
        }
    }

    #[test]
    fn an_id_with_a_space_is_refused_with_a_message_naming_the_space() {
        let error = RowId::parse(&json!("my id")).unwrap_err();
        assert_eq!(
            error.to_string(),
            "the id \"my id\" contains ' ' (a space); ids may contain only A-Z a-z 0-9 . _ -"
        );
    }

    #[test]
    fn a_huge_refused_id_is_quoted_only_in_part() {
        let huge = format!("{} tail", "y".repeat(5_000));
        for value in [json!(huge), json!(format!("ab cd{}", "z".repeat(90)))] {
            let message = RowId::parse(&value).unwrap_err().to_string();
            assert!(message.len() < 200, "message too long: {message}");
        }
    }

    #[test]
    fn accepted_ids_keep_their_text_exactly() {
        let hundred = "a".repeat(100);
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases: Vec<(Value, &str)> = vec![
            (json!(7), "7"),
            (json!(0), "0"),
            (json!(i64::MAX), "9223372036854775807"),
            (json!(u64::MAX), "18446744073709551615"),
            (json!("007"), "007"),
            (json!("3f2504e0-4f89-11d3-9a0c-0305e82c3301"), "3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
            (json!("a.b_c-d"), "a.b_c-d"),
            (json!("_private"), "_private"),
            (json!("x.locked"), "x.locked"),
            (json!("lock"), "lock"),
            (json!(hundred.clone()), hundred.as_str()),
        ];
        for (value, text) in cases {
            let parsed = RowId::parse(&value).unwrap_or_else(|e| panic!("{value}: {e}"));
            assert_eq!(parsed.as_str(), text);
            assert_eq!(parsed.to_string(), text);
        }
    }

    #[test]
    fn a_number_and_the_same_number_as_a_string_are_the_same_id() {
        assert_eq!(id(json!(7)), id(json!("7")));
        assert_eq!(id(json!(u64::MAX)), id(json!(u64::MAX.to_string())));
        assert_ne!(id(json!(7)), id(json!("007")));
    }

    #[test]
    fn an_id_of_100_characters_is_accepted_and_101_refused() {
        assert!(RowId::parse(&json!("9".repeat(100))).is_ok());
        let error = RowId::parse(&json!("9".repeat(101))).unwrap_err();
        assert!(
            error.to_string().contains("is 101 characters long"),
            "{error}"
        );
    }

    // ---- slugs ----

    fn slug_text(text: &str, max_len: usize) -> Option<String> {
        Slug::new(text, max_len).map(|slug| slug.as_str().to_owned())
    }

    #[test]
    fn slugs_are_lowercase_ascii_words_joined_by_dashes() {
        let cases = [
            ("Add dark mode!", Some("add-dark-mode")),
            ("Ärger über Größe", Some("arger-uber-grosse")),
            ("日本語のテキスト", Some("ri-ben-yu-notekisuto")),
            ("🎉🚀", Some("tada-rocket")),
            ("  --Fix   the__bug--  ", Some("fix-the-bug")),
            ("v2.0: faster", Some("v2-0-faster")),
            ("", None),
            ("   ", None),
            ("!!! ???", None),
            ("\u{200b}", None),
        ];
        for (text, expected) in cases {
            assert_eq!(slug_text(text, 40).as_deref(), expected, "for {text:?}");
        }
    }

    #[test]
    fn a_long_slug_is_cut_between_words() {
        let cases = [
            (1, Some("a")),
            (3, Some("add")),
            (5, Some("add")),
            (7, Some("add")),
            (8, Some("add-dark")),
            (12, Some("add-dark")),
            (13, Some("add-dark-mode")),
            (100, Some("add-dark-mode")),
        ];
        for (max_len, expected) in cases {
            assert_eq!(
                slug_text("Add dark mode!", max_len).as_deref(),
                expected,
                "max_len {max_len}"
            );
        }
    }

    #[test]
    fn a_single_long_word_is_cut_hard() {
        assert_eq!(
            slug_text("Supercalifragilistic", 5).as_deref(),
            Some("super")
        );
        assert_eq!(
            slug_text("Supercalifragilistic mode", 9).as_deref(),
            Some("supercali")
        );
    }

    #[test]
    fn a_max_len_of_zero_means_no_slug() {
        assert_eq!(Slug::new("Add dark mode", 0), None);
    }

    // ---- prefixes ----

    #[test]
    fn each_refused_prefix_gets_its_own_reason() {
        let long = "p".repeat(101);
        // One case a line: the table is easier to scan than rustfmt's layout.
        #[rustfmt::skip]
        let cases: Vec<(&str, &str)> = vec![
            ("", "the branch prefix is empty; give one like \"feedback\" or \"bot/feedback\""),
            (&long, "the branch prefix \"pppppppppppppppppppppppppppppppppppppppp…\" is 101 characters long; branch prefixes may be at most 100 characters"),
            ("feedback/", "the branch prefix \"feedback/\" has an empty part (a leading, trailing or doubled '/'); a prefix is one or more parts separated by single '/', like \"bot/feedback\""),
            ("/feedback", "the branch prefix \"/feedback\" has an empty part (a leading, trailing or doubled '/'); a prefix is one or more parts separated by single '/', like \"bot/feedback\""),
            ("bot//feedback", "the branch prefix \"bot//feedback\" has an empty part (a leading, trailing or doubled '/'); a prefix is one or more parts separated by single '/', like \"bot/feedback\""),
            ("bot feedback", "the branch prefix \"bot feedback\" contains ' ' (a space); branch prefixes may contain only A-Z a-z 0-9 . _ - and '/' between parts"),
            ("bot/fée", "the branch prefix \"bot/fée\" contains 'é'; branch prefixes may contain only A-Z a-z 0-9 . _ - and '/' between parts"),
            ("bot/x~1", "the branch prefix \"bot/x~1\" contains '~'; branch prefixes may contain only A-Z a-z 0-9 . _ - and '/' between parts"),
            (".bot/x", "the branch prefix part \".bot\" starts with '.'; parts of a branch prefix may not start with '.' or '-'"),
            ("bot/-x", "the branch prefix part \"-x\" starts with '-'; parts of a branch prefix may not start with '.' or '-'"),
            ("bot/a..b", "the branch prefix part \"a..b\" contains '..'; parts of a branch prefix may not contain two dots in a row"),
            ("bot/x.lock", "the branch prefix part \"x.lock\" ends with '.lock'; parts of a branch prefix may not end with '.lock' (git reserves it)"),
            ("bot./x", "the branch prefix part \"bot.\" ends with '.'; parts of a branch prefix may not end with '.'"),
        ];
        for (raw, expected) in cases {
            let error = BranchPrefix::parse(raw).expect_err(&format!("{raw:?} should be refused"));
            assert_eq!(error.to_string(), expected, "for {raw:?}");
        }
    }

    #[test]
    fn accepted_prefixes_keep_their_text_exactly() {
        let hundred = "q".repeat(100);
        for raw in [
            "feedback",
            "bot/feedback",
            "a.b_c-d/E9/x",
            "HEAD",
            hundred.as_str(),
        ] {
            assert_eq!(prefix(raw).as_str(), raw);
            assert_eq!(prefix(raw).to_string(), raw);
        }
    }

    // ---- branch names ----

    #[test]
    fn a_branch_is_prefix_then_id_then_slug() {
        assert_eq!(
            branch("feedback", json!(42), "Add dark mode!"),
            "feedback/42-add-dark-mode"
        );
        assert_eq!(
            branch("bot/feedback", json!("a.b"), "Fix"),
            "bot/feedback/a.b-fix"
        );
    }

    #[test]
    fn a_branch_without_a_slug_is_prefix_then_id() {
        assert_eq!(branch("feedback", json!(42), ""), "feedback/42");
        assert_eq!(branch("feedback", json!("42"), "?!"), "feedback/42");
    }

    #[test]
    fn a_later_redo_ranks_higher_whatever_its_slug() {
        for (branch, rank) in [
            ("feedback/42-add-dark-mode", (0, 0)),
            ("feedback/42-add-dark-mode-redo-1", (1, 1)),
            ("feedback/42-add-dark-mode-redo-12", (1, 12)),
            ("feedback/42-x-redo-2-redo-1", (2, 1)),
            ("feedback/42-redo-01", (0, 0)),
            ("feedback/42-redo-", (0, 0)),
            ("feedback/42-redo-x", (0, 0)),
        ] {
            assert_eq!(redo_rank(branch), rank, "{branch}");
        }
        assert!(redo_rank("feedback/42-x-redo-2") > redo_rank("feedback/42-x-redo-1"));
        assert!(redo_rank("feedback/42-redo-5-redo-1") > redo_rank("feedback/42-redo-5"));
    }

    #[test]
    fn a_redo_branch_appends_its_number() {
        let slug = Slug::new("Add dark mode", 40);
        let name = BranchName::new(&prefix("feedback"), &id(json!(42)), slug.as_ref());
        assert_eq!(name.redo(2).as_str(), "feedback/42-add-dark-mode-redo-2");
    }

    #[test]
    fn a_prefix_owns_the_branches_of_its_row_whatever_the_slug() {
        let feedback = prefix("feedback");
        let id_42 = id(json!(42));
        let cases = [
            ("feedback/42", true),
            ("feedback/42-old-text", true),
            ("feedback/42-add-dark-mode-redo-1", true),
            ("feedback/420-x", false),
            ("feedback/420", false),
            ("feedback/4", false),
            ("feedback/142", false),
            ("feedback/42_x", false),
            ("feedback/42.x", false),
            ("feedback/42/x", false),
            ("other/42", false),
            ("feedbackx/42", false),
            ("bot/feedback/42", false),
            ("Feedback/42", false),
            ("42", false),
        ];
        for (name, expected) in cases {
            assert_eq!(feedback.owns(&id_42, name), expected, "for {name:?}");
        }
    }

    #[test]
    fn a_nested_prefix_owns_only_its_own_branches() {
        let nested = prefix("bot/feedback");
        assert!(nested.owns(&id(json!("abc")), "bot/feedback/abc-x"));
        assert!(!nested.owns(&id(json!("abc")), "feedback/abc-x"));
        assert!(!nested.owns(&id(json!("feedback")), "bot/feedback"));
    }

    // ---- properties ----

    /// Independent statement of the id rules, to compare `RowId::parse` against.
    fn obeys_id_rules(text: &str) -> bool {
        let bytes = text.as_bytes();
        (1..=100).contains(&bytes.len())
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(b))
            && bytes[0] != b'.'
            && bytes[0] != b'-'
            && !bytes.windows(2).any(|pair| pair == b"..")
            && !bytes.ends_with(b".")
            && !bytes.ends_with(b".lock")
    }

    fn any_json_id() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<String>().prop_map(Value::from),
            "[ -~]{0,110}".prop_map(Value::from),
            "[A-Za-z0-9._-]{0,105}".prop_map(Value::from),
            "[a.-]{0,8}(lock)?".prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(Value::from),
        ]
    }

    /// Valid ids, with many short look-alikes so that near misses
    /// (`42` vs `42-1` vs `420`) come up often.
    fn valid_id() -> impl Strategy<Value = RowId> {
        prop_oneof![
            (0u64..500).prop_map(Value::from),
            "[0-9a][0-9a.-]{0,4}".prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            "[A-Za-z0-9_][A-Za-z0-9._-]{0,99}".prop_map(Value::from),
        ]
        .prop_filter_map("invalid id", |value| RowId::parse(&value).ok())
    }

    fn valid_prefix() -> impl Strategy<Value = BranchPrefix> {
        prop::collection::vec("[A-Za-z0-9_][A-Za-z0-9._-]{0,20}", 1..=3)
            .prop_filter_map("invalid prefix", |parts| {
                BranchPrefix::parse(&parts.join("/")).ok()
            })
    }

    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[A-Za-z0-9 !?.,'-]{0,80}",
            "[0-9a -]{0,8}",
            "\\PC{0,40}",
        ]
    }

    /// A branch as the rest of the program builds one, optionally a redo.
    fn build(
        prefix: &BranchPrefix,
        id: &RowId,
        text: &str,
        max_len: usize,
        redo: Option<u32>,
    ) -> BranchName {
        let name = BranchName::new(prefix, id, Slug::new(text, max_len).as_ref());
        match redo {
            Some(n) => name.redo(n),
            None => name,
        }
    }

    /// The names among `names` that `git check-ref-format --branch` refuses.
    fn refused_by_git(names: &[String]) -> Vec<String> {
        names
            .iter()
            .filter(|name| {
                let status = Command::new("git")
                    .args(["check-ref-format", "--branch", name.as_str()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .expect("the git binary must be installed to run this test");
                !status.success()
            })
            .cloned()
            .collect()
    }

    fn branch_case() -> impl Strategy<Value = (BranchPrefix, RowId, String, usize, Option<u32>)> {
        (
            valid_prefix(),
            valid_id(),
            any_text(),
            0usize..80,
            any::<Option<u32>>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn a_slug_that_exists_is_short_lowercase_ascii_with_single_inner_dashes(
            text in any_text(),
            max_len in 0usize..60,
        ) {
            let full = slug::slugify(&text);
            match Slug::new(&text, max_len) {
                Some(slug) => {
                    let s = slug.as_str();
                    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
                    prop_assert!(s.bytes().all(allowed), "{s:?} has a character outside a-z 0-9 -");
                    prop_assert!((1..=max_len).contains(&s.len()));
                    prop_assert!(!s.starts_with('-') && !s.ends_with('-') && !s.contains("--"));
                    prop_assert!(full.starts_with(s), "{s:?} is not a cut of {full:?}");
                }
                None => prop_assert!(max_len == 0 || full.is_empty()),
            }
        }

        #[test]
        fn an_accepted_id_obeys_every_rule_and_is_never_rewritten(value in any_json_id()) {
            let text = match &value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => unreachable!(),
            };
            let is_float = value.is_f64();
            match RowId::parse(&value) {
                Ok(parsed) => {
                    prop_assert!(!is_float);
                    prop_assert!(obeys_id_rules(parsed.as_str()));
                    prop_assert_eq!(parsed.as_str(), text.as_str());
                }
                Err(_) => prop_assert!(is_float || !obeys_id_rules(&text)),
            }
        }

        #[test]
        fn an_integer_and_its_decimal_string_are_the_same_id(n in any::<u64>()) {
            prop_assert_eq!(id(json!(n)), id(json!(n.to_string())));
        }

        #[test]
        fn a_prefix_owns_every_branch_built_for_its_row(
            (prefix, id, text, max_len, redo) in branch_case(),
        ) {
            let name = build(&prefix, &id, &text, max_len, redo);
            prop_assert!(prefix.owns(&id, name.as_str()), "{} should own {}", id, name);
        }

        #[test]
        fn a_prefix_never_gives_a_row_the_branch_of_an_unrelated_row(
            (prefix, b, text, max_len, redo) in branch_case(),
            a in valid_id(),
        ) {
            let dash_prefix = |x: &RowId, y: &RowId| y.as_str().starts_with(&format!("{x}-"));
            prop_assume!(a != b && !dash_prefix(&a, &b) && !dash_prefix(&b, &a));
            let name = build(&prefix, &b, &text, max_len, redo);
            prop_assert!(!prefix.owns(&a, name.as_str()), "{} should not own {}", a, name);
        }
    }

    proptest! {
        // Each case checks a batch of names, one git process per name, so a
        // few dozen cases cover a few hundred names in about a second.
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn every_branch_name_passes_git_check_ref_format(
            cases in prop::collection::vec(branch_case(), 1..=16),
        ) {
            let names: Vec<String> = cases
                .iter()
                .map(|(prefix, id, text, max_len, redo)| {
                    build(prefix, id, text, *max_len, *redo).to_string()
                })
                .collect();
            let refused = refused_by_git(&names);
            prop_assert!(refused.is_empty(), "git refused {:?}", refused);
        }
    }
}
