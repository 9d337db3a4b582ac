//! What the tests share, and the only module they import from one another: how to start
//! rowbranch (in this process over the local forge or the fake GitHub, or as a child process),
//! how to get a database, the test doubles, and the small tools every test reaches for.

pub mod app;
pub mod child;
pub mod db;
pub mod faulty_forge;
pub mod git_http;
pub mod github;
pub mod http;
pub mod local;
pub mod queue;
pub mod random;
pub mod server;
pub mod setup;
pub mod sign;
pub mod supabase;
pub mod tools;
pub mod wait;

/// The value in `Some`, or else the end of the test: `None` means the test is skipped, and what
/// returned it has said why (or, under `CI=true`, failed instead).
macro_rules! or_skip {
    ($option:expr) => {
        match $option {
            Some(value) => value,
            None => return,
        }
    };
}
pub(crate) use or_skip;
