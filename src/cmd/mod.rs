//! One module per command.

pub mod demo;
pub mod doctor;
pub mod init;
pub mod preview;
pub mod queue;
pub mod reconcile;
pub mod redo;
pub mod serve;
