//! No import circles, at any depth: between `src/`'s top-level modules, and
//! between the sibling modules of every folder (`fold/plan.rs` and
//! `fold/state.rs`, `api/chat/` and `api/recall/` …). The module graph is
//! read as the compiler reads it (`read.rs`): every `use` tree and every
//! path in non-test code, resolved through `use` and `pub use` to the
//! module that defines the item. A reference from `a/x/…` to `a/y/…` is an
//! edge `x → y` in folder `a`'s graph (the folder where the two paths
//! part); a folder's own `mod.rs` (its face: declarations and re-exports)
//! is not a sibling of its children. The pure fold engine and the wire
//! formats also keep to their layers. `scripts/imports` prints the graphs.
//!
//! The check is trusted because it is seen failing: the `planted_*` tests
//! plant a circle in a copy of `src/` (in a `use` group, a path in code,
//! after a test module, through a re-export, in a nested folder) and see it
//! found.

mod lex;
mod read;

use read::{Crate, ModPath};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One folder's graph: module → module it imports → one place that makes
/// the edge (file and path), for the report.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// Every folder's graph, by folder (`src`, `fold`, `api/recall` …).
fn graphs(src: &Path) -> BTreeMap<String, Graph> {
    let krate = Crate::read(src);
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    for (from, module) in &krate.modules {
        for path in &module.refs {
            let Some(to) = krate.resolve(from, path) else {
                continue;
            };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                // Within one module, or between a folder's face and its
                // children.
                continue;
            }
            let folder = if common == 0 {
                "src".to_string()
            } else {
                from[..common].join("/")
            };
            let file = module.file.strip_prefix(src).unwrap_or(&module.file);
            graphs
                .entry(folder)
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(to[common].clone())
                .or_insert_with(|| format!("src/{}: {}", file.display(), path.join("::")));
        }
    }
    graphs
}

/// The modules `from` reaches.
fn reach(graph: &Graph, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(at) = todo.pop() {
        for next in graph.get(&at).into_iter().flat_map(BTreeMap::keys) {
            if seen.insert(next.clone()) {
                todo.push(next.clone());
            }
        }
    }
    seen
}

/// A shortest circle through `from`, inside `within`.
fn circle(graph: &Graph, from: &str, within: &BTreeSet<String>) -> Vec<String> {
    let mut back: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([from.to_string()]);
    while let Some(at) = todo.pop_front() {
        for next in graph.get(&at).into_iter().flat_map(BTreeMap::keys) {
            if next == from {
                let mut path = vec![at.clone()];
                while let Some(prev) = back.get(path.last().unwrap()) {
                    path.push(prev.clone());
                }
                path.reverse();
                path.push(from.to_string());
                return path;
            }
            if within.contains(next) && !back.contains_key(next) {
                back.insert(next.clone(), at.clone());
                todo.push_back(next.clone());
            }
        }
    }
    Vec::new()
}

/// Every circle in every folder, one per group of modules that reach each
/// other, with the place that makes each edge.
fn circles(graphs: &BTreeMap<String, Graph>) -> Vec<String> {
    let mut out = Vec::new();
    for (folder, graph) in graphs {
        let reaches: BTreeMap<&String, BTreeSet<String>> =
            graph.keys().map(|m| (m, reach(graph, m))).collect();
        let mut done = BTreeSet::new();
        for (module, reached) in &reaches {
            if done.contains(*module) || !reached.contains(*module) {
                continue;
            }
            let group: BTreeSet<String> = reached
                .iter()
                .filter(|m| reaches.get(m).is_some_and(|r| r.contains(*module)))
                .cloned()
                .collect();
            done.extend(group.iter().cloned());
            let path = circle(graph, module, &group);
            let edges: Vec<String> = path
                .windows(2)
                .map(|w| format!("    {} -> {}  ({})", w[0], w[1], graph[&w[0]][&w[1]]))
                .collect();
            out.push(format!(
                "import circle in {folder}/: {} (modules in it: {})\n{}",
                path.join(" -> "),
                group.into_iter().collect::<Vec<_>>().join(", "),
                edges.join("\n")
            ));
        }
    }
    out
}

fn render(graphs: &BTreeMap<String, Graph>) -> String {
    let mut out = String::new();
    for (folder, graph) in graphs {
        out.push_str(&format!("[{folder}]\n"));
        for (module, to) in graph {
            let to: Vec<&str> = to.keys().map(String::as_str).collect();
            out.push_str(&format!("  {module} -> {}\n", to.join(" ")));
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circle_at_any_depth() {
    let graphs = graphs(&src());
    println!("{}", render(&graphs));
    let found = circles(&graphs);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn layers_hold() {
    let graphs = graphs(&src());
    let top = &graphs["src"];
    let imports = |m: &str, of: &str| top.get(m).is_some_and(|to| to.contains_key(of));
    for upper in ["archive", "app", "pipeline", "api", "summarize", "state"] {
        assert!(!imports("fold", upper), "the fold engine imports {upper}");
    }
    assert!(!imports("config", "tokens"), "config imports tokens");
    assert!(!imports("api", "pipeline"), "an API imports the pipeline");
    assert!(
        top.get("message").is_none_or(BTreeMap::is_empty),
        "message is a leaf"
    );
}

/// The reader sees the whole tree: every `.rs` file under `src/` but the
/// binary's `main.rs` and test-only files is a module it read.
#[test]
fn every_source_file_is_read() {
    let src = src();
    let krate = Crate::read(&src);
    let read: BTreeSet<PathBuf> = krate.modules.values().map(|m| m.file.clone()).collect();
    let mut files = vec![src.clone()];
    let mut missed = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs")
            && path != src.join("main.rs")
            && !path.ends_with("tests.rs")
            && !path.components().any(|c| c.as_os_str() == "tests")
            && !read.contains(&path)
        {
            missed.push(path);
        }
    }
    assert!(
        missed.is_empty(),
        "files the import check did not read: {missed:?}"
    );
}

// Planted faults: each plants one edge, in a copy of `src/`, that closes a
// circle with an edge the real tree has, and sees the check find it.

/// A copy of `src/`.
fn copy_of_src() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut todo = vec![src()];
    while let Some(path) = todo.pop() {
        let to = dir.path().join(path.strip_prefix(src()).unwrap());
        if path.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            std::fs::copy(&path, &to).unwrap();
        }
    }
    dir
}

/// The file that holds module `path` alone (not an inline module).
fn own_file(krate: &Crate, path: &ModPath) -> PathBuf {
    let file = &krate.modules[path].file;
    let last = path.last().unwrap();
    let stem = file.file_stem().unwrap().to_string_lossy();
    let parent = file
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    assert!(
        stem == last.as_str() || (stem == "mod" && parent == last.as_str()),
        "{path:?} is inline in {}",
        file.display()
    );
    file.clone()
}

/// An edge the real tree has in `folder` (`src` for the top level), as the
/// two modules' paths, from a module with a file of its own.
fn an_edge(folder: &str) -> (ModPath, ModPath) {
    let graphs = graphs(&src());
    let krate = Crate::read(&src());
    let base: ModPath = if folder == "src" {
        Vec::new()
    } else {
        folder.split('/').map(String::from).collect()
    };
    let with = |m: &str| {
        let mut p = base.clone();
        p.push(m.to_string());
        p
    };
    graphs[folder]
        .iter()
        .flat_map(|(from, to)| to.keys().map(move |to| (with(from), with(to))))
        .find(|(_, to)| {
            let file = &krate.modules[to].file;
            let stem = file.file_stem().unwrap().to_string_lossy();
            stem == to.last().unwrap().as_str() || stem == "mod"
        })
        .unwrap_or_else(|| panic!("no edge in {folder}/"))
}

/// Appends `text` to the file of module `module` in the copy `dir`.
fn plant(dir: &Path, module: &ModPath, text: &str) {
    let krate = Crate::read(&src());
    let file = own_file(&krate, module);
    let file = dir.join(file.strip_prefix(src()).unwrap());
    let mut code = std::fs::read_to_string(&file).unwrap();
    code.push_str(text);
    std::fs::write(&file, code).unwrap();
}

fn circles_in(dir: &Path) -> Vec<String> {
    circles(&graphs(dir))
}

#[test]
fn planted_top_level_circles_are_found() {
    let (a, b) = an_edge("src");
    let a = &a[0];
    let forms = [
        // A nested `use` group.
        format!("\nuse crate::{{{a}::{{planted, other}}, glob}};\n"),
        // A path in code, no `use`.
        format!("\npub fn planted() {{ let _ = crate::{a}::planted(); }}\n"),
        // In a signature, after a test module.
        format!(
            "\n#[cfg(test)]\nmod planted_tests {{}}\npub fn planted(_: &crate::{a}::Planted) {{}}\n"
        ),
        // The module itself, used as a name.
        format!("\nuse crate::{a} as planted;\nfn f() {{ planted::g(); }}\n"),
    ];
    for form in forms {
        let dir = copy_of_src();
        plant(dir.path(), &b, &form);
        let found = circles_in(dir.path());
        assert!(
            found.iter().any(|c| c.starts_with("import circle in src/")),
            "planted {:?} in {b:?} (which {a} imports), found {found:?}",
            form
        );
    }
}

#[test]
fn a_circle_planted_through_a_re_export_is_found() {
    let (a, b) = an_edge("src");
    let dir = copy_of_src();
    // `crate::Planted` is `a`'s: the edge is to `a`, not to the crate root.
    let lib = dir.path().join("lib.rs");
    let mut code = std::fs::read_to_string(&lib).unwrap();
    code.push_str(&format!("\npub use crate::{}::Planted;\n", a[0]));
    std::fs::write(&lib, code).unwrap();
    plant(dir.path(), &b, "\nuse crate::Planted;\n");
    let found = circles_in(dir.path());
    assert!(
        found
            .iter()
            .any(|c| c.contains(&format!("{} -> {}", b[0], a[0]))),
        "{found:?}"
    );
}

#[test]
fn circles_planted_between_siblings_of_a_folder_are_found() {
    let graphs = graphs(&src());
    let folders: Vec<&String> = graphs.keys().filter(|f| f.as_str() != "src").collect();
    // A folder of `src/`, and the most deeply nested folder with an edge.
    let shallow = folders
        .first()
        .expect("a folder with an edge between its modules");
    let deep = folders
        .iter()
        .max_by_key(|f| f.matches('/').count())
        .expect("a folder with an edge between its modules");
    assert!(
        deep.contains('/'),
        "no nested folder has an edge: {folders:?}"
    );
    for folder in [shallow, deep] {
        let (x, y) = an_edge(folder);
        let sibling = x.last().unwrap();
        let face: ModPath = x[..x.len() - 1].to_vec();
        // From `y`'s file, `super::` is the folder; `x` a sibling. Planted
        // directly, and through a re-export in the folder's `mod.rs`.
        let plants = [
            vec![(y.clone(), format!("\nuse super::{{{sibling}::planted}};\n"))],
            vec![
                (
                    face,
                    format!("\npub use self::{sibling}::Planted as PlantedHere;\n"),
                ),
                (y.clone(), "\nuse super::PlantedHere;\n".to_string()),
            ],
        ];
        for planted in plants {
            let dir = copy_of_src();
            for (module, text) in &planted {
                plant(dir.path(), module, text);
            }
            let found = circles_in(dir.path());
            assert!(
                found
                    .iter()
                    .any(|c| c.starts_with(&format!("import circle in {folder}/"))),
                "planted {planted:?}, found {found:?}"
            );
        }
    }
}

/// What the compiler does not build into the library, or does not read as
/// a path, is not an import: test modules, comments, strings.
#[test]
fn test_code_comments_and_strings_are_not_imports() {
    let (a, b) = an_edge("src");
    let a = &a[0];
    let forms = [
        format!("\n#[cfg(test)]\nmod planted_tests {{\n    use crate::{a}::planted;\n}}\n"),
        format!("\n#[cfg(test)]\nfn planted() {{ crate::{a}::planted(); }}\n"),
        format!("\n// crate::{a}::planted\n/* use crate::{a}; /* nested */ crate::{a} */\n"),
        format!(
            "\nconst PLANTED: [&str; 2] = [\"crate::{a}::x\", r#\"use crate::{a}::y;\"#];\n\
             fn planted<'a>(x: &'a str) -> char {{ let _ = x; '\"' }}\n"
        ),
    ];
    let before = circles(&graphs(&src()));
    for form in forms {
        let dir = copy_of_src();
        plant(dir.path(), &b, &form);
        assert_eq!(circles_in(dir.path()), before, "planted {form:?}");
    }
}
