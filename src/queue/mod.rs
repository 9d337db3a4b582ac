//! The queue intake: rows that a route with `intake = "pgmq"` reads from a Supabase Queue
//! (pgmq) that the INSERT's own transaction fills (`supabase-queue.sql`), so that no row is lost
//! on the way in. [`consumer`] reads and settles the messages, `holds` keeps what it holds and
//! orders renewals and settles, [`settle`] decides what becomes of each, [`budget`] bounds how
//! many start an hour; the SQL is in [`crate::db::queue`].

pub mod budget;
pub mod consumer;
mod holds;
pub mod settle;

pub use consumer::{Consumer, ConsumerSettings};
