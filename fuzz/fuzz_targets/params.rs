//! The JSON params validation of every action (visible and hidden): the registry's validator
//! over each action's schema, then the handler-side decoding (`actions::decode`).
//! Input: one selector byte (which action) and JSON text.
//! Oracle: never panics; params the validator accepts are accepted by the action's own
//! decoding where one exists; a rejection names the action and has a non-empty message.
#![no_main]

use std::sync::OnceLock;

use brainloop::actions::{decode, Registry};
use brainloop::config::Config;
use libfuzzer_sys::fuzz_target;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        let config = Config {
            test_actions: true,
            ..Config::default()
        };
        Registry::new(&config).expect("built-in schemas are valid")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(params) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    let reg = registry();
    let names = reg.all_names();
    let name = names[sel as usize % names.len()];
    let action = reg.get(name).expect("registered name resolves");
    match reg.check_params(action, &params) {
        Ok(()) => {
            assert!(params.is_object(), "{name}: a non-object passed the schema");
            if let Some(Err(e)) = decode::check(action.spec.name, &params) {
                panic!("{name}: the schema accepted {params} but the handler's decoding refused it: {e}");
            }
        }
        Err(e) => {
            let head = format!("invalid params for {}: ", action.spec.name);
            assert!(e.starts_with(&head), "{e}");
            let detail = e[head.len()..]
                .split(" (see get_schema")
                .next()
                .unwrap_or("");
            assert!(!detail.trim().is_empty(), "empty rejection message: {e}");
            assert!(detail.split("; ").all(|m| !m.trim().is_empty()), "{e}");
        }
    }
});
