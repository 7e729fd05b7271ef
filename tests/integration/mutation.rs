//! Mutated workflows never panic the loader: thousands of deterministic mutations of every
//! fixture (byte flips, truncations, duplicated and swapped lines, injected YAML syntax) go
//! through parse, decode and validate. The cargo-fuzz target in `fuzz/` explores further.

use tnh_conductor::workflow::diagnostic::Diagnostics;
use tnh_conductor::workflow::load::check_bytes;
use tnh_conductor::workflow::validate::KnownNames;

use crate::support::fixture;

/// A small deterministic generator (xorshift), so a failure reproduces exactly.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

const INJECTIONS: &[&str] = &[
    "${{", "}}", "${", "&a ", "*a", "[", "]", "{", "}", ": ", "- ", "\t", "'", "\"", "|\n", "#",
    "!!str ", "---\n", "\0", "\u{feff}",
];

fn mutate(source: &[u8], random: &mut Random) -> Vec<u8> {
    let mut bytes = source.to_vec();
    for _ in 0..=random.below(3) {
        if bytes.is_empty() {
            break;
        }
        let at = random.below(bytes.len());
        match random.below(5) {
            0 => bytes[at] ^= 1 << random.below(8),
            1 => bytes.truncate(at),
            2 => {
                let injection = INJECTIONS[random.below(INJECTIONS.len())].as_bytes();
                bytes.splice(at..at, injection.iter().copied());
            }
            3 => {
                let end = (at + random.below(200)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            _ => {
                let end = (at + random.below(40)).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
    bytes
}

#[test]
fn mutated_fixtures_get_diagnostics_never_panics() {
    let known = KnownNames::default();
    let mut sources = Vec::new();
    for folder in ["workflows/valid", "workflows/invalid"] {
        for entry in std::fs::read_dir(fixture(folder)).unwrap() {
            let path = entry.unwrap().path();
            // `invalid/read-error.yaml` is a folder: there is nothing to mutate.
            if path.is_file() {
                sources.push(std::fs::read(path).unwrap());
            }
        }
    }
    let mut random = Random(0x5eed_cafe_f00d_0001);
    let mut rejected = 0;
    for round in 0..4_000 {
        let source = &sources[round % sources.len()];
        let mutated = mutate(source, &mut random);
        let mut diagnostics = Diagnostics::new("mutated.yaml");
        let workflow = check_bytes(&mutated, &known, &mut diagnostics);
        let diagnostics = diagnostics.into_sorted();
        if workflow.is_none() || !diagnostics.is_empty() {
            rejected += 1;
        }
        for diagnostic in diagnostics {
            assert!(
                diagnostic.line >= 1 && diagnostic.column >= 1,
                "round {round}: {diagnostic:?}"
            );
            assert!(
                !diagnostic.message.is_empty() && diagnostic.hint.is_some(),
                "round {round}: {diagnostic:?}"
            );
        }
    }
    assert!(
        rejected > 1_000,
        "mutations should mostly be invalid; only {rejected} were"
    );
}
