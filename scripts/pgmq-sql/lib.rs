//! Empty: this package exists only to fetch the `pgmq` crate for its SQL (see Cargo.toml).
