//! `fuzz-smoke`: the fuzz targets on the stable toolchain, for CI. Each target runs its seed
//! corpus, then mutants of it ([`wirebench_fuzz_targets::mutate`]) until its time is up. A
//! panic, or an input that runs longer than the hang limit, is saved under the artifacts
//! directory and ends the run with exit status 1.
//!
//! ```text
//! fuzz-smoke [--seconds N] [--corpus DIR] [--artifacts DIR] [--seed S] [TARGET...]
//! ```

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wirebench_fuzz_targets::mutate::{mutate, seeds, Rng};
use wirebench_fuzz_targets::{Target, TARGETS};

/// An input that takes longer than this is a hang (the slowest real one draws an SVG in a
/// few milliseconds).
const HANG: Duration = Duration::from_secs(10);

struct Opts {
    seconds: f64,
    corpus: PathBuf,
    artifacts: PathBuf,
    seed: u64,
    only: Vec<String>,
}

fn opts() -> Result<Opts, String> {
    let mut o = Opts {
        seconds: 20.0,
        corpus: PathBuf::from("fuzz/corpus"),
        artifacts: PathBuf::from("fuzz/artifacts"),
        seed: 0x5EED,
        only: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--seconds" => {
                o.seconds = value("--seconds")?
                    .parse()
                    .map_err(|_| "--seconds takes a number".to_string())?;
            }
            "--corpus" => o.corpus = value("--corpus")?.into(),
            "--artifacts" => o.artifacts = value("--artifacts")?.into(),
            "--seed" => {
                o.seed = value("--seed")?
                    .parse()
                    .map_err(|_| "--seed takes an integer".to_string())?;
            }
            t if TARGETS.iter().any(|(n, _)| *n == t) => o.only.push(t.to_string()),
            other => {
                let names: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unknown argument {other:?}; targets: {}",
                    names.join(", ")
                ));
            }
        }
    }
    Ok(o)
}

/// Saves a failing input and says where.
fn save(o: &Opts, name: &str, what: &str, input: &[u8]) {
    let dir = o.artifacts.join(name);
    let _ = std::fs::create_dir_all(&dir);
    let h = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("smoke-{what}-{h:016x}"));
    match std::fs::write(&path, input) {
        Ok(()) => eprintln!("{name}: {what}; input saved as {}", path.display()),
        Err(e) => eprintln!("{name}: {what}; could not save the input: {e}"),
    }
}

/// Runs one target for its time; returns how many inputs ran, or exits on a find.
fn run(o: &Opts, (name, body): Target, rng: &mut Rng) -> u64 {
    let mut pool = seeds(&o.corpus.join(name));
    let n_seeds = pool.len();
    // The target runs on a worker thread, so a hang can be seen (and the process ended).
    let (to_worker, inputs) = mpsc::channel::<Vec<u8>>();
    let (to_main, outcomes) = mpsc::channel::<bool>();
    std::thread::spawn(move || {
        for input in inputs {
            let ok = std::panic::catch_unwind(|| body(&input)).is_ok();
            if to_main.send(ok).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + Duration::from_secs_f64(o.seconds);
    let mut runs = 0u64;
    let mut i = 0usize;
    loop {
        let input = if i < n_seeds {
            pool[i].clone()
        } else if Instant::now() >= end {
            break;
        } else if pool.is_empty() {
            mutate(rng, &[], &pool)
        } else {
            let parent = rng.below(pool.len());
            mutate(rng, &pool[parent], &pool)
        };
        i += 1;
        if to_worker.send(input.clone()).is_err() {
            save(o, name, "crash", &input);
            std::process::exit(1);
        }
        match outcomes.recv_timeout(HANG) {
            Ok(true) => {}
            Ok(false) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                save(o, name, "crash", &input);
                std::process::exit(1);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                save(o, name, "hang", &input);
                std::process::exit(1);
            }
        }
        runs += 1;
        // Some mutants become parents, so changes can pile up over a run.
        if i > n_seeds && pool.len() < 512 && rng.below(16) == 0 {
            pool.push(input);
        }
    }
    runs
}

fn main() {
    let o = match opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let mut rng = Rng::new(o.seed);
    for t in TARGETS {
        if !o.only.is_empty() && !o.only.iter().any(|n| n == t.0) {
            continue;
        }
        let start = Instant::now();
        let runs = run(&o, *t, &mut rng);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{}: {runs} inputs in {secs:.1} s ({:.0}/s), no crash, no hang",
            t.0,
            runs as f64 / secs.max(1e-9)
        );
        let _ = std::io::stdout().flush();
    }
}
