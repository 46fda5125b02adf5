//! The module graph between `src/`'s top-level modules, read from the
//! `crate::…` paths of the non-test code: it must have no circle, and the
//! pure fold engine and the wire formats keep to their layers. Inside each
//! folder the same holds between its modules (read from `super::…` and
//! `crate::folder::…` paths). `scripts/imports` prints both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every top-level module's imports of other top-level modules.
fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = Graph::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if rel.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let edges = graph.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

/// The non-test code of every `.rs` file under `dir`, with its path
/// relative to `dir`.
fn sources(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut files = vec![dir.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: Vec<&str> = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            out.push((
                path.strip_prefix(dir).unwrap().to_path_buf(),
                code.join("\n"),
            ));
        }
    }
    out
}

/// The module names that follow each occurrence of `prefix` in `code`.
fn names_after<'c>(code: &'c str, prefix: &'c str) -> impl Iterator<Item = String> + 'c {
    code.match_indices(prefix).map(move |(at, _)| {
        code[at + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    })
}

/// The graph between the modules of folder `src/{folder}`: a file
/// `{child}.rs` or `{child}/….rs` imports sibling `x` through
/// `crate::{folder}::x` or `super::x` (`super::super::x` from a file one
/// folder further down).
fn folder_graph(folder: &str) -> Graph {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder);
    let mut graph = Graph::new();
    for (rel, code) in sources(&dir) {
        let depth = rel.components().count();
        let child = rel.components().next().unwrap().as_os_str();
        let child = child.to_string_lossy().trim_end_matches(".rs").to_string();
        if child == "mod" {
            continue;
        }
        let own = format!("crate::{folder}::");
        // `super::` climbs to the folder from `{child}.rs` and
        // `{child}/mod.rs`, `super::super::` from `{child}/x.rs`, …
        let up = "super::".repeat(depth - usize::from(rel.ends_with("mod.rs")));
        let edges = graph.entry(child.clone()).or_default();
        let found: Vec<String> = names_after(&code, &own)
            .chain(names_after(&code, &up))
            .collect();
        for name in found {
            if !name.is_empty() && name != child && name != "super" {
                edges.insert(name);
            }
        }
    }
    graph
}

/// A circle through `from`, if there is one.
fn circle(graph: &Graph, from: &str) -> Option<Vec<String>> {
    let mut path = vec![from.to_string()];
    let mut seen = BTreeSet::new();
    fn walk(
        graph: &Graph,
        from: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        let last = path.last().cloned().unwrap_or_default();
        for next in graph.get(&last).into_iter().flatten() {
            if next == from {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, from, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    walk(graph, from, &mut path, &mut seen).then_some(path)
}

fn render(graph: &Graph) -> String {
    graph
        .iter()
        .map(|(m, to)| {
            format!(
                "{m} -> {}",
                to.iter().cloned().collect::<Vec<_>>().join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_module_graph_has_no_circle() {
    let graph = graph();
    println!("{}", render(&graph));
    for module in graph.keys() {
        if let Some(circle) = circle(&graph, module) {
            panic!("import circle: {}\n{}", circle.join(" -> "), render(&graph));
        }
    }
}

#[test]
fn no_folder_has_a_circle_between_its_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    folders.sort();
    for folder in folders {
        let graph = folder_graph(&folder);
        println!("[{folder}]\n{}", render(&graph));
        for module in graph.keys() {
            if let Some(circle) = circle(&graph, module) {
                panic!("import circle in {folder}/: {}", circle.join(" -> "));
            }
        }
    }
}

#[test]
fn layers_hold() {
    let graph = graph();
    let imports = |m: &str, of: &str| graph.get(m).is_some_and(|to| to.contains(of));
    for upper in ["archive", "app", "pipeline", "api", "summarize", "state"] {
        assert!(!imports("fold", upper), "the fold engine imports {upper}");
    }
    assert!(!imports("config", "tokens"), "config imports tokens");
    assert!(!imports("api", "pipeline"), "an API imports the pipeline");
    assert!(
        graph.get("message").is_none_or(BTreeSet::is_empty),
        "message is a leaf"
    );
}
