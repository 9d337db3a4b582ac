//! One module per command.

pub mod demo;
pub mod doctor;
pub mod preview;
pub mod serve;
