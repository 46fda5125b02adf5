//! The workspace's layers are Cargo's to enforce (docs/architecture.md):
//! core at the bottom, wire and store on core, summarize on core and wire,
//! the server on all four. An import upward needs a dependency upward, and
//! Cargo refuses that as a cycle before anything compiles.
//!
//! The declared graph is read from `cargo metadata`; the refusals are seen
//! in a copy of the workspace's manifests: an upward import without the
//! dependency does not build, and with it the workspace does not resolve.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every layer and the foldgate crates it may stand on.
const LAYERS: [(&str, &[&str]); 5] = [
    ("foldgate-core", &[]),
    ("foldgate-wire", &["foldgate-core"]),
    ("foldgate-store", &["foldgate-core"]),
    ("foldgate-summarize", &["foldgate-core", "foldgate-wire"]),
    (
        "foldgate",
        &[
            "foldgate-core",
            "foldgate-store",
            "foldgate-summarize",
            "foldgate-wire",
        ],
    ),
];

fn cargo(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO"))
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target())
        .output()
        .unwrap()
}

fn target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("layers")
}

/// Each workspace member's normal dependencies, by package name.
fn declared(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let out = cargo(
        dir,
        &[
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut graph = BTreeMap::new();
    for package in meta["packages"].as_array().unwrap() {
        let deps = package["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        graph.insert(package["name"].as_str().unwrap().to_string(), deps);
    }
    graph
}

#[test]
fn each_crate_stands_only_on_the_layers_below() {
    let graph = declared(Path::new(ROOT));
    for (name, below) in LAYERS {
        let ours: BTreeSet<&str> = graph[name]
            .iter()
            .map(String::as_str)
            .filter(|d| d.starts_with("foldgate"))
            .collect();
        assert_eq!(
            ours,
            below.iter().copied().collect(),
            "{name}'s foldgate crates"
        );
    }
    let members: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    assert_eq!(members, LAYERS.iter().map(|(n, _)| *n).collect());
    // The fold engine is pure: no runtime, no HTTP stack, no database.
    for io in [
        "tokio",
        "hyper",
        "hyper-util",
        "redis",
        "rusqlite",
        "reqwest",
    ] {
        assert!(
            !graph["foldgate-core"].contains(io),
            "foldgate-core depends on {io}"
        );
    }
}

/// A copy of the workspace's manifests and lock, every target a stub:
/// the members keep their foldgate dependencies only (the layers, not
/// what they build on), and `lib.rs` of `planted` is `lib_rs`.
fn skeleton(planted: &str, lib_rs: &str, extra_dependency: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(ROOT);
    let write = |rel: &str, text: &str| {
        let to = dir.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(&to, text).unwrap();
    };
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    write("Cargo.toml", &read("Cargo.toml"));
    write("Cargo.lock", &read("Cargo.lock"));
    for stub in ["src/lib.rs", "src/main.rs", "tests/suite.rs"] {
        write(stub, "fn main() {}\n");
    }
    for bench in std::fs::read_dir(root.join("benches")).unwrap() {
        let name = bench.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".rs") {
            write(&format!("benches/{name}"), "fn main() {}\n");
        }
    }
    for member in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = member.unwrap().file_name().into_string().unwrap();
        let manifest = format!("crates/{name}/Cargo.toml");
        let mut text = String::new();
        let mut section = "";
        for line in read(&manifest).lines() {
            if line.starts_with('[') {
                section = if line == "[dependencies]" {
                    "deps"
                } else if line.ends_with("dependencies]") {
                    "dev"
                } else {
                    ""
                };
                if section == "dev" {
                    continue;
                }
            } else if (section == "deps" && !line.starts_with("foldgate-")) || section == "dev" {
                continue;
            }
            text += line;
            text += "\n";
            if line == "[dependencies]" && name == planted {
                if let Some(dep) = extra_dependency {
                    text += &format!("{dep} = {{ workspace = true }}\n");
                }
            }
        }
        write(&manifest, &text);
        let lib = if name == planted { lib_rs } else { "" };
        write(&format!("crates/{name}/src/lib.rs"), lib);
    }
    dir
}

#[test]
fn an_upward_import_does_not_build() {
    // The control: a crate importing the layer below it builds.
    let below = skeleton("summarize", "pub use foldgate_wire as _;\n", None);
    let out = cargo(
        below.path(),
        &["check", "--offline", "-p", "foldgate-summarize", "--quiet"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let planted = skeleton("core", "pub use foldgate_wire as _;\n", None);
    let out = cargo(
        planted.path(),
        &["check", "--offline", "-p", "foldgate-core", "--quiet"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "foldgate-core built with an import of foldgate-wire"
    );
    assert!(stderr.contains("foldgate_wire"), "{stderr}");
}

#[test]
fn an_upward_dependency_does_not_resolve() {
    let control = skeleton("core", "", None);
    let out = cargo(control.path(), &["tree", "--offline", "--depth", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    for (crate_dir, upward) in [
        ("core", "foldgate-wire"),
        ("wire", "foldgate-summarize"),
        ("core", "foldgate-store"),
    ] {
        let planted = skeleton(crate_dir, "", Some(upward));
        let out = cargo(planted.path(), &["tree", "--offline", "--depth", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{crate_dir} resolved with a dependency on {upward}"
        );
        assert!(stderr.contains("cyclic package dependency"), "{stderr}");
    }
}
