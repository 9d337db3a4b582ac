//! One module per command.

pub mod demo;
pub mod preview;
pub mod serve;
