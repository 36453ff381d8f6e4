//! Code inference (`infer::infer`) on arbitrary JS / TS text.
//! Oracle: never panics (on a thread with the production stack size); the permission set is
//! one of the inferable ones (never `trusted`); confidence is finite and in [0, 1]; a pure
//! report is minimal and needs no validation; low confidence or dynamic code always needs
//! validation; every task's set is a known one.
#![no_main]

use brainloop::infer::{self, Lang};
use brainloop::permset::PermissionSet;
use libfuzzer_sys::fuzz_target;

fn known(s: PermissionSet) -> bool {
    matches!(
        s,
        PermissionSet::Minimal
            | PermissionSet::Readonly
            | PermissionSet::Filesystem
            | PermissionSet::NetworkApi
            | PermissionSet::McpStandard
    )
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Ok(code) = std::str::from_utf8(rest) else {
        return;
    };
    let lang = if sel & 1 == 0 { Lang::Js } else { Lang::Ts };
    let code = code.to_string();
    let report = std::thread::Builder::new()
        .stack_size(infer::INFER_STACK_BYTES)
        .spawn(move || {
            infer::infer(
                &code,
                lang,
                &infer::mcp_permissions::McpPermissions::defaults(),
            )
        })
        .unwrap()
        .join()
        .expect("infer panicked");
    assert!(known(report.permission_set), "{:?}", report.permission_set);
    assert!(
        report.confidence.is_finite() && (0.0..=1.0).contains(&report.confidence),
        "confidence {}",
        report.confidence
    );
    if report.pure {
        assert_eq!(report.permission_set, PermissionSet::Minimal);
        assert!(!report.requires_validation, "pure yet requires validation");
        assert!(report.error.is_none());
    }
    if report.error.is_some() || report.unaccounted {
        assert!(report.requires_validation && !report.pure);
    }
    if report.confidence < infer::confidence::LOW_CONFIDENCE {
        assert!(report.requires_validation && !report.pure);
    }
    for t in &report.tasks {
        assert!(known(t.permission_set), "task set {:?}", t.permission_set);
        if t.pure {
            assert_eq!(
                t.permission_set,
                PermissionSet::Minimal,
                "pure task not minimal"
            );
        }
    }
    let json = serde_json::to_value(&report).expect("report serialises");
    assert!(json
        .get("permission_set")
        .and_then(|v| v.as_str())
        .is_some());
});
