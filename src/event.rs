//! A database change as rowbranch sees it, whichever way it arrived: the kind of event, the
//! table, and the row.

use std::fmt;

use serde_json::value::RawValue;

/// The kinds of database event a webhook body can carry (Supabase's `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Insert,
    Update,
    Delete,
}

impl EventKind {
    /// The kind named `text` exactly as Supabase writes it (`INSERT`, `UPDATE`, `DELETE`).
    pub fn parse(text: &str) -> Option<EventKind> {
        match text {
            "INSERT" => Some(EventKind::Insert),
            "UPDATE" => Some(EventKind::Update),
            "DELETE" => Some(EventKind::Delete),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Insert => "INSERT",
            EventKind::Update => "UPDATE",
            EventKind::Delete => "DELETE",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A database change, already checked for shape.
#[derive(Debug, Clone)]
pub struct RowEvent {
    pub kind: EventKind,
    pub schema: String,
    pub table: String,
    /// The row (`record`, or `old_record` for a DELETE): a JSON object, kept as its text so
    /// that only the columns a plan needs are ever parsed.
    pub record: Box<RawValue>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_back_as_supabase_writes_it() {
        for kind in [EventKind::Insert, EventKind::Update, EventKind::Delete] {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventKind::parse("insert"), None);
        assert_eq!(EventKind::parse("TRUNCATE"), None);
    }
}
