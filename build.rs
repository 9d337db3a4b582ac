//! Names the commit the binary is built from, for `rowbranch --version`, as the compile-time
//! variable `ROWBRANCH_COMMIT`: `ROWBRANCH_BUILD_COMMIT` when the build is given one (an image
//! build, whose context has no `.git`); else git's `HEAD`, when this package is the top of a git
//! work tree (a clone, or the checkout `cargo install --git` makes); else `unknown`.

use std::path::PathBuf;

// The rules, in a file of their own that the tests include too.
#[path = "build/commit.rs"]
mod commit;

use commit::{commit, GIVEN};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/commit.rs");
    println!("cargo:rerun-if-env-changed={GIVEN}");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()));
    let given = std::env::var(GIVEN).ok();
    match commit(&dir, given.as_deref()) {
        Ok(found) => {
            for path in &found.watch {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            println!("cargo:rustc-env=ROWBRANCH_COMMIT={}", found.commit);
        }
        // Cargo stops the build with this message.
        Err(message) => println!("cargo::error={message}"),
    }
}
