//! ARCHITECTURE.md stays true: every crate of the workspace has its row in the crates
//! table, and the row's "may use" column names exactly the workspace crates its manifest
//! depends on (its `[dependencies]`, not its tests').

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `crate name → our crates it depends on`, from each `crates/*/Cargo.toml`.
fn manifests() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let manifest = entry.expect("an entry").path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{manifest:?} has no name"))
            .to_string();
        let mut section = "";
        let mut deps = BTreeSet::new();
        for line in text.lines() {
            if line.starts_with('[') {
                section = line;
            } else if section == "[dependencies]" {
                if let Some(dep) = line.split(['.', ' ', '=']).next() {
                    if let Some(ours) = dep.strip_prefix("wirebench-") {
                        deps.insert(ours.to_string());
                    }
                }
            }
        }
        out.insert(name, deps);
    }
    out
}

/// `crate name → its "may use" column`, from the crates table.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `wirebench")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`').to_string();
        // "proto, stats, sys", "engine, proto (why)", "nothing of ours".
        let uses = cells[3].split('(').next().unwrap_or_default();
        let uses = uses
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty() && *u != "nothing of ours")
            .map(str::to_string)
            .collect();
        out.insert(name, uses);
    }
    out
}

#[test]
fn the_crates_table_names_every_crate_and_what_its_manifest_uses() {
    let (manifests, documented) = (manifests(), documented());
    assert!(manifests.len() >= 9, "{manifests:?}");
    for (name, deps) in &manifests {
        let row = documented
            .get(name)
            .unwrap_or_else(|| panic!("ARCHITECTURE.md has no row for {name}"));
        assert_eq!(
            row, deps,
            "{name}: ARCHITECTURE.md says it may use {row:?}, its manifest uses {deps:?}"
        );
    }
    for name in documented.keys() {
        assert!(
            manifests.contains_key(name),
            "ARCHITECTURE.md names {name}, no crate"
        );
    }
}
