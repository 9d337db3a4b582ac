//! The name of a pgmq queue, checked once: a [`QueueName`] is a name pgmq stores as given.

use super::{excerpt, NameError};

/// Longest queue name pgmq takes (`pgmq.validate_queue_name`): room for its prefixes within
/// PostgreSQL's 63-byte names.
const MAX_LEN: usize = 47;

/// A pgmq queue's name that comes back as it went in: pgmq prefixes it (`q_`, `a_`),
/// lowercases it and keeps table names within PostgreSQL's 63 bytes, so rowbranch takes 1 to
/// 47 of `a-z`, `0-9` and `_`, not starting with a digit.
/// (https://github.com/pgmq/pgmq, `pgmq.format_table_name` and `pgmq.validate_queue_name`)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueName(String);

shown_as_text!(QueueName);

impl QueueName {
    pub fn parse(raw: &str) -> Result<QueueName, NameError> {
        let mut chars = raw.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        ensure!(
            first_ok
                && raw.len() <= MAX_LEN
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "`{}` is not a queue name: use 1 to 47 of a-z, 0-9 and _, not starting with a digit",
            excerpt(raw)
        );
        Ok(QueueName(raw.to_owned()))
    }

    /// `{self}_dead`, the dead-letter queue's name when none is given; refused when that is
    /// over 47 characters.
    pub fn default_dead_letter(&self) -> Result<QueueName, NameError> {
        QueueName::parse(&format!("{self}_dead"))
    }
}

impl PartialEq<QueueName> for String {
    fn eq(&self, other: &QueueName) -> bool {
        *self == other.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_pgmq_keeps_as_they_are_are_taken() {
        for name in ["rowbranch", "_a1", "rows_q", &"q".repeat(47)] {
            assert_eq!(QueueName::parse(name).unwrap(), name);
        }
    }

    #[test]
    fn names_pgmq_would_change_or_cut_are_refused() {
        for name in ["", "Rows", "9rows", "a-b", "a b", "é", &"q".repeat(48)] {
            assert!(QueueName::parse(name).is_err(), "{name:?}");
        }
    }

    #[test]
    fn the_dead_letter_queue_is_the_queues_own_unless_that_is_too_long() {
        let queue = QueueName::parse("rows_q").unwrap();
        assert_eq!(queue.default_dead_letter().unwrap(), "rows_q_dead");
        let longest = QueueName::parse(&"q".repeat(42)).unwrap();
        assert!(longest.default_dead_letter().is_ok());
        let long = QueueName::parse(&"q".repeat(43)).unwrap();
        assert!(long.default_dead_letter().is_err());
    }

    #[test]
    fn a_refusal_quotes_at_most_an_excerpt() {
        let err = QueueName::parse(&"Q".repeat(500)).unwrap_err().to_string();
        assert!(err.len() < 200, "{err}");
    }
}
