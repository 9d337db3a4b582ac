//! Any bytes as a webhook body: parsed and planned as the receiver does, never a panic; a
//! plan only for an id that the identity rules accept.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rowbranch::config::Config;
use rowbranch::pipeline::Routes;
use rowbranch::webhook::payload;

const CONFIG: &str = "[forge]\nkind = \"local\"\npath = \"unused.git\"\n\n[[routes]]\ntable = \"feedbacks\"\nrepo = \"acme/app\"\nbranch_prefix = \"feedback\"\nevent_type = \"feedback\"\n";

fn routes() -> &'static Routes {
    static ROUTES: OnceLock<Routes> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let config = Config::parse(CONFIG, Path::new("rowbranch.toml"), &|_| None).unwrap();
        Routes::compile(&config).unwrap()
    })
}

fuzz_target!(|body: &[u8]| {
    let Ok(event) = payload::parse(body) else {
        return;
    };
    let Ok(route) = routes().route(false, &event) else {
        return;
    };
    if let Ok(plan) = route.plan_json(&event.record) {
        assert!(plan.branch.as_str().starts_with("feedback/"));
        // Rendering may refuse (a payload too large), never panic.
        let _ = plan.render("main", &"0".repeat(40));
    }
});
