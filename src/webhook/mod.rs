//! The webhook's edges: who may post ([`auth`]) and what a post must look like ([`payload`]).

pub mod auth;
pub mod payload;
