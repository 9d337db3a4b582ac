//! rowbranch on the GitHub forge, against the stateful fake GitHub (`support::github`): the
//! same server, config and pipeline a user runs, with GitHub's answers — and its faults —
//! coming from the fake.

mod bounds;
mod doctor;
mod doctor_bounds;
mod faults;
mod headers;
mod outage;
mod pacing;
mod pipeline;
