//! Any text as an id, a prefix, a repository, an event type and a row's text: parsed or
//! refused with a reason, and every branch built from accepted parts is a valid ref name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rowbranch::identity::{BranchName, BranchPrefix, EventType, RepoName, RowId, Slug};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (head, tail) = text.split_at(
        text.char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i),
    );
    let _ = RepoName::parse(text);
    let _ = EventType::parse(text);
    let id = RowId::parse(&serde_json::Value::String(head.to_owned()));
    let prefix = BranchPrefix::parse(tail);
    let slug = Slug::new(text, 40);
    if let (Ok(id), Ok(prefix)) = (id, prefix) {
        let branch = BranchName::new(&prefix, &id, slug.as_ref());
        assert!(prefix.owns(&id, branch.as_str()));
        assert!(!branch.as_str().contains(".."));
        assert!(!branch.as_str().ends_with(".lock"));
    }
});
