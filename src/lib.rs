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

pub mod db;
pub mod forge;
pub mod templates;

pub mod pipeline;

pub mod doctor;
pub mod http;
pub mod pgmq;
pub mod reconcile;

pub mod startup;

pub mod cli;
pub mod cmd;

pub use cmd::{run, Failure};
