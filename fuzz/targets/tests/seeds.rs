//! Every fuzz target over its committed seeds and a fixed number of mutants of them: no
//! timing, a fixed seed, so a failure reproduces. The time-bounded run is `fuzz-smoke`.

use std::path::Path;

use wirebench_fuzz_targets::mutate::{mutate, seeds, Rng};
use wirebench_fuzz_targets::TARGETS;

#[test]
fn every_target_survives_its_seeds_and_their_mutants() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus");
    let mut rng = Rng::new(15);
    for (name, body) in TARGETS {
        let pool = seeds(&corpus.join(name));
        assert!(!pool.is_empty(), "{name}: no seed in fuzz/corpus/{name}");
        for s in &pool {
            body(s);
        }
        for _ in 0..300 {
            let parent = rng.below(pool.len());
            body(&mutate(&mut rng, &pool[parent], &pool));
        }
    }
}
