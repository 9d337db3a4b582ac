//! rowbranch: one database row, one branch, one piece of work — however many times the row's
//! webhook arrives. See `docs/design.md` for the flow and its guarantees.

// The modules from the bottom floor up; docs/design.md shows the floors, and a test keeps a
// module from naming one on its floor or above (tests/it/design.rs).
pub mod identity;
pub mod reason;
pub mod shutdown;

pub mod event;
pub mod metrics;

pub mod webhook;

pub mod config;

pub mod cli;
pub mod db;
pub mod forge;

pub mod pipeline;

pub mod http;
pub mod queue;
pub mod sweep;

pub mod startup;

pub mod cmd;

pub use cmd::{run, Failure};
