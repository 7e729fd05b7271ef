//! Workflow files through every static check `validate` runs (parse, decode, validate,
//! expression checks): any bytes end in a workflow or in diagnostics that point into the file,
//! never in a panic.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tnh_conductor::workflow::diagnostic::Diagnostics;
use tnh_conductor::workflow::load::check_bytes;
use tnh_conductor::workflow::validate::KnownNames;

fn known() -> &'static KnownNames {
    static KNOWN: OnceLock<KnownNames> = OnceLock::new();
    KNOWN.get_or_init(KnownNames::default)
}

fuzz_target!(|data: &[u8]| {
    let mut diagnostics = Diagnostics::new("fuzz.yaml");
    let workflow = check_bytes(data, known(), &mut diagnostics);
    let diagnostics = diagnostics.into_sorted();
    assert!(
        workflow.is_some() || !diagnostics.is_empty(),
        "a document that does not decode must say why"
    );
    let lines = 1 + data
        .iter()
        .filter(|byte| matches!(byte, b'\n' | b'\r'))
        .count();
    for diagnostic in &diagnostics {
        assert!(
            diagnostic.line >= 1 && diagnostic.column >= 1,
            "{diagnostic:?}"
        );
        assert!(diagnostic.line as usize <= lines, "{diagnostic:?}");
        assert!(
            !diagnostic.message.is_empty() && diagnostic.hint.is_some(),
            "{diagnostic:?}"
        );
    }
});
