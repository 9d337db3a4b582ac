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

crate::reason::named_set! {
    /// A row's state, as its route's `status_column` holds it (SPEC §2): what rowbranch writes
    /// back, and what the planner reads to tell an approval of a row that ran already.
    pub enum RowState {
        /// Seen, and held at the route's gate.
        Waiting => "waiting",
        /// Its branch claimed and the work dispatched.
        Dispatched => "dispatched",
        /// A pull request from its branch is open.
        PrOpen => "pr_open",
        /// The work's run ended without a pull request.
        Failed => "failed",
        /// Its pull request was merged: the last state.
        Merged => "merged",
        /// Its pull request was closed without a merge.
        Closed => "closed",
        /// rowbranch will never run the row (an id it refuses, a column the row lacks).
        Refused => "refused",
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
