//! rowbranch: one database row, one branch, one piece of work — however many times the row's
//! webhook arrives. See `docs/design.md` for the flow and its guarantees.

// The modules from the bottom layer up; docs/design.md shows the layers, and a test keeps a
// module from naming one above it.
pub mod event;
pub mod identity;
pub mod metrics;
pub mod reason;
pub mod shutdown;
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
