//! A database change as rowbranch sees it, whichever way it arrived: the kind of event, the
//! table, and the row.

use serde_json::value::RawValue;

crate::reason::named_set! {
    /// The kinds of database event a webhook body can carry (Supabase's `type`, written as
    /// Supabase writes it).
    pub enum EventKind {
        Insert => "INSERT",
        Update => "UPDATE",
        Delete => "DELETE",
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
    /// An UPDATE's row as it was before (`old_record`), when the body carries it as an object:
    /// what a route's gate (`run_when`) compares the row with.
    pub old_record: Option<Box<RawValue>>,
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
