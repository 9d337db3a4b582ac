//! A branch name as git takes it, for the branches rowbranch does not name itself: a
//! repository's default branch, where claims start.

use super::{excerpt, NameError};

/// A short branch name (without `refs/heads/`) that `git check-ref-format --branch` accepts:
/// not empty, no part that starts with `.` or ends with `.lock`, no `..`, `@{`, `//`, no space,
/// control character or any of `~^:?*[\`, and not starting with `-` or `/`, nor ending with `/`
/// or `.`, nor `@` alone. (https://git-scm.com/docs/git-check-ref-format)
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct RefName(String);

shown_as_text!(RefName);

impl RefName {
    pub fn parse(raw: &str) -> Result<RefName, NameError> {
        let refused = || NameError(format!("{:?} is not a branch name git takes", excerpt(raw)));
        let bad_char = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
        let bad_part =
            |part: &str| part.is_empty() || part.starts_with('.') || part.ends_with(".lock");
        if raw.is_empty()
            || raw == "@"
            || raw.starts_with('-')
            || raw.ends_with('.')
            || raw.contains("..")
            || raw.contains("@{")
            || raw.chars().any(bad_char)
            || raw.split('/').any(bad_part)
        {
            return Err(refused());
        }
        Ok(RefName(raw.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_branch_is_taken_as_git_takes_it() {
        for good in [
            "main",
            "master",
            "trunk",
            "release/2.x",
            "feature/a-b_c",
            "ü",
        ] {
            assert_eq!(
                RefName::parse(good).map(|r| r.to_string()),
                Ok(good.to_owned())
            );
        }
        for bad in [
            "",
            "@",
            "-x",
            "x.",
            "a..b",
            "a@{b",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
            "/a",
            "a/",
            "a//b",
            ".a",
            "a/.b",
            "a.lock",
            "a/b.lock/c",
            "a\u{7f}",
        ] {
            assert!(RefName::parse(bad).is_err(), "{bad:?} is refused");
        }
    }
}
