//! A small reader of the crate's module tree, enough to see the imports the
//! compiler sees: the files `mod x;` reaches from `src/lib.rs` (and inline
//! `mod x { … }`), every `use` tree (nested groups, `crate::`, `super::`,
//! `self::`, a child module or an imported name as the first segment,
//! renames, globs), every path in code (`crate::x::y::f()`, `super::x::T`,
//! `child::f()`, `alias::f()`), each resolved through `use` bindings and
//! `pub use` re-exports to the module that defines the item.
//!
//! Test code is left out: an item under `#[cfg(test)]` (a `mod tests { … }`
//! block, a `mod tests;` file, a test-only `fn` or `use`) is skipped whole,
//! and whatever follows it is read again. Test modules may reach anywhere
//! (that is what they are for) and are not part of the built library, so
//! they cannot make an import circle in what ships.
//!
//! Comments, strings and character literals are skipped by the lexer
//! (`lex.rs`), so a doc example's `crate::…` is not an import. Attributes
//! are not read for paths (beyond spotting `cfg(test)`).

use super::lex::{Tok, group_end, is, is_cfg_test, item_end, lex, punct};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `[]` is `lib.rs`, `["fold",
/// "plan"]` is `fold/plan.rs`.
pub type ModPath = Vec<String>;

/// One leaf of a `use` tree: the path it names, and the name it binds
/// (`None` for a glob or `as _`).
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    name: Option<String>,
    glob: bool,
}

/// Reads the use tree at `*i` under `prefix`, up to (not past) its end.
fn use_tree(toks: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<UseLeaf>) {
    let mut segs = prefix;
    if toks.get(*i) == Some(&Tok::Sep) {
        // `use ::name`: an external crate.
        segs.push("::".into());
        *i += 1;
    }
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(s)) => {
                segs.push(s.clone());
                *i += 1;
                if toks.get(*i) == Some(&Tok::Sep) {
                    *i += 1;
                    continue;
                }
                break;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < toks.len() && !punct(toks.get(*i), '}') {
                    use_tree(toks, i, segs.clone(), out);
                    if punct(toks.get(*i), ',') {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push(UseLeaf {
                    path: segs,
                    name: None,
                    glob: true,
                });
                return;
            }
            _ => return,
        }
    }
    if segs.last().is_some_and(|s| s == "self") {
        segs.pop();
    }
    let mut name = segs.last().cloned();
    if is(toks.get(*i), "as") {
        name = match toks.get(*i + 1) {
            Some(Tok::Ident(n)) if n != "_" => Some(n.clone()),
            _ => None,
        };
        *i += 2;
    }
    out.push(UseLeaf {
        path: segs,
        name,
        glob: false,
    });
}

/// What one module holds, as far as imports go.
#[derive(Debug, Default)]
pub struct Module {
    /// The file the module's text is in (its `mod.rs`, its `x.rs`, or
    /// the file holding an inline `mod x { … }`).
    pub file: PathBuf,
    children: BTreeSet<String>,
    /// Items defined here (`fn`, `struct`, `const`, `macro_rules!` …).
    defines: BTreeSet<String>,
    /// Names bound by the module's own `use` items, to the paths they
    /// name (a name may be bound in more than one namespace).
    binds: BTreeMap<String, Vec<Vec<String>>>,
    /// The module's glob imports.
    globs: Vec<Vec<String>>,
    /// Names bound by a `use` inside a function body: reached only by
    /// this module's own code.
    local: BTreeMap<String, Vec<Vec<String>>>,
    /// Every path the non-test code names: `use` leaves and paths in code.
    pub refs: Vec<Vec<String>>,
}

/// The crate's module tree.
#[derive(Debug, Default)]
pub struct Crate {
    pub modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Reads the crate whose root is `src/lib.rs` under `src`.
    pub fn read(src: &Path) -> Crate {
        let mut krate = Crate::default();
        krate.file(Vec::new(), &src.join("lib.rs"), src.to_path_buf());
        krate
    }

    fn file(&mut self, path: ModPath, file: &Path, dir: PathBuf) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let toks = lex(&text);
        self.module(path, file, dir, &toks);
    }

    /// Reads the items of module `path` from `toks`; `dir` is where its
    /// child modules' files are.
    fn module(&mut self, path: ModPath, file: &Path, dir: PathBuf, toks: &[Tok]) {
        self.modules.entry(path.clone()).or_default().file = file.to_path_buf();
        let mut i = 0;
        while i < toks.len() {
            // Attributes: a `cfg(test)` makes the next item test code; an
            // inner `#![cfg(test)]` the whole module.
            let mut test = false;
            while punct(toks.get(i), '#') {
                let inner = punct(toks.get(i + 1), '!');
                let open = i + 1 + usize::from(inner);
                let end = group_end(toks, open);
                if is_cfg_test(&toks[i..end]) {
                    if inner {
                        self.modules.remove(&path);
                        return;
                    }
                    test = true;
                }
                i = end;
            }
            if i >= toks.len() {
                break;
            }
            let end = item_end(toks, i).max(i + 1);
            if test {
                i = end;
                continue;
            }
            let mut k = i;
            if is(toks.get(k), "pub") {
                k += 1;
                if punct(toks.get(k), '(') {
                    k = group_end(toks, k);
                }
            }
            let name = match toks.get(k + 1) {
                Some(Tok::Ident(n)) => Some(n.clone()),
                _ => None,
            };
            if is(toks.get(k), "use") {
                k += 1;
                let mut leaves = Vec::new();
                use_tree(toks, &mut k, Vec::new(), &mut leaves);
                let module = self.modules.entry(path.clone()).or_default();
                for leaf in leaves {
                    if leaf.glob {
                        module.globs.push(leaf.path.clone());
                    } else if let Some(name) = leaf.name {
                        module
                            .binds
                            .entry(name)
                            .or_default()
                            .push(leaf.path.clone());
                    }
                    module.refs.push(leaf.path);
                }
            } else if is(toks.get(k), "mod") && name.is_some() {
                let name = name.unwrap_or_default();
                let mut child = path.clone();
                child.push(name.clone());
                self.modules
                    .entry(path.clone())
                    .or_default()
                    .children
                    .insert(name.clone());
                let child_dir = dir.join(&name);
                if punct(toks.get(k + 2), '{') {
                    let close = group_end(toks, k + 2);
                    self.module(child, file, child_dir, &toks[k + 3..close - 1]);
                } else {
                    let flat = dir.join(format!("{name}.rs"));
                    let nested = child_dir.join("mod.rs");
                    if flat.exists() {
                        self.file(child, &flat, child_dir);
                    } else {
                        self.file(child, &nested, child_dir);
                    }
                }
            } else {
                let mut q = k;
                while ["unsafe", "async", "extern", "const", "default", "auto"]
                    .iter()
                    .any(|w| is(toks.get(q), w))
                    && matches!(toks.get(q + 1), Some(Tok::Ident(_)))
                    && !punct(toks.get(q + 2), ':')
                    && !punct(toks.get(q + 2), '=')
                {
                    q += 1;
                }
                let defined = match (toks.get(q), toks.get(q + 1), toks.get(q + 2)) {
                    (Some(Tok::Ident(kw)), Some(Tok::Ident(n)), _)
                        if [
                            "fn", "struct", "enum", "trait", "type", "const", "static", "union",
                        ]
                        .contains(&kw.as_str()) =>
                    {
                        Some(n.clone())
                    }
                    (Some(Tok::Ident(kw)), Some(Tok::Punct('!')), Some(Tok::Ident(n)))
                        if kw == "macro_rules" =>
                    {
                        Some(n.clone())
                    }
                    _ => None,
                };
                if let Some(n) = defined {
                    self.modules
                        .entry(path.clone())
                        .or_default()
                        .defines
                        .insert(n);
                }
                self.code(&path, &toks[i..end]);
            }
            i = end;
        }
    }

    /// Reads the paths that code (an item other than `use` and `mod`)
    /// names, and the `use` items inside its bodies.
    fn code(&mut self, path: &ModPath, toks: &[Tok]) {
        let module = self.modules.entry(path.clone()).or_default();
        let mut i = 0;
        while i < toks.len() {
            match &toks[i] {
                Tok::Punct('#') => {
                    let inner = punct(toks.get(i + 1), '!');
                    let end = group_end(toks, i + 1 + usize::from(inner));
                    let test = is_cfg_test(&toks[i..end]);
                    i = end;
                    if test {
                        while punct(toks.get(i), '#') {
                            i = group_end(toks, i + 1);
                        }
                        i = item_end(toks, i).max(i + 1);
                    }
                }
                Tok::Ident(w) if w == "use" => {
                    i += 1;
                    let mut leaves = Vec::new();
                    use_tree(toks, &mut i, Vec::new(), &mut leaves);
                    for leaf in leaves {
                        if let (Some(name), false) = (leaf.name, leaf.glob) {
                            module
                                .local
                                .entry(name)
                                .or_default()
                                .push(leaf.path.clone());
                        }
                        module.refs.push(leaf.path);
                    }
                }
                Tok::Ident(first)
                    if toks.get(i + 1) == Some(&Tok::Sep)
                        && (i == 0 || toks[i - 1] != Tok::Sep) =>
                {
                    let mut segs = vec![first.clone()];
                    i += 2;
                    while let Some(Tok::Ident(s)) = toks.get(i) {
                        segs.push(s.clone());
                        i += 1;
                        if toks.get(i) == Some(&Tok::Sep)
                            && matches!(toks.get(i + 1), Some(Tok::Ident(_)))
                        {
                            i += 1;
                        } else {
                            break;
                        }
                    }
                    module.refs.push(segs);
                }
                _ => i += 1,
            }
        }
    }

    /// The module that defines what `segs`, named in module `from`,
    /// names; `None` for something outside the crate (a dependency, std,
    /// the prelude) or a local name (`Self::…`, a generic).
    pub fn resolve(&self, from: &[String], segs: &[String]) -> Option<ModPath> {
        self.resolve_in(from, segs, true, 24)
    }

    fn resolve_in(
        &self,
        from: &[String],
        segs: &[String],
        own_code: bool,
        fuel: u32,
    ) -> Option<ModPath> {
        let first = segs.first()?;
        let fuel = fuel.checked_sub(1)?;
        match first.as_str() {
            "crate" => return self.walk(Vec::new(), &segs[1..], fuel),
            "self" => return self.walk(from.to_vec(), &segs[1..], fuel),
            "super" => {
                let mut at = from.to_vec();
                let mut rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
                return self.walk(at, rest, fuel);
            }
            _ => {}
        }
        // A relative path: its first segment must be in scope here.
        let module = self.modules.get(from)?;
        if module.children.contains(first)
            || module.binds.contains_key(first)
            || module.defines.contains(first)
        {
            return self.walk(from.to_vec(), segs, fuel);
        }
        if own_code {
            for target in module.local.get(first).into_iter().flatten() {
                let mut path = target.clone();
                path.extend_from_slice(&segs[1..]);
                if let Some(found) = self.resolve_in(from, &path, false, fuel) {
                    return Some(found);
                }
            }
        }
        for glob in &module.globs {
            let Some(at) = self.resolve_in(from, glob, false, fuel) else {
                continue;
            };
            if self.has(&at, first) {
                return self.walk(at, segs, fuel);
            }
        }
        None
    }

    /// Whether module `at` has `name` as a child, a binding or an item.
    fn has(&self, at: &[String], name: &str) -> bool {
        self.modules.get(at).is_some_and(|m| {
            m.children.contains(name) || m.binds.contains_key(name) || m.defines.contains(name)
        })
    }

    /// Follows `rest` down from module `at`.
    fn walk(&self, at: ModPath, rest: &[String], fuel: u32) -> Option<ModPath> {
        let Some(name) = rest.first() else {
            return Some(at);
        };
        let module = self.modules.get(&at)?;
        let more = rest.len() > 1;
        if module.children.contains(name) && (more || !module.binds.contains_key(name)) {
            let mut child = at.clone();
            child.push(name.clone());
            return self.walk(child, &rest[1..], fuel);
        }
        if let Some(targets) = module.binds.get(name) {
            // A name bound by `use` (a re-export, when reached from
            // outside): where it leads, or outside the crate.
            return targets.iter().find_map(|target| {
                let mut path = target.clone();
                path.extend_from_slice(&rest[1..]);
                self.resolve_in(&at, &path, false, fuel)
            });
        }
        if !module.defines.contains(name) {
            for glob in &module.globs {
                let Some(from) = self.resolve_in(&at, glob, false, fuel) else {
                    continue;
                };
                if from != at && self.has(&from, name) {
                    return self.walk(from, rest, fuel);
                }
            }
        }
        // An item of this module (or one the reader does not see, like
        // an enum's variant or an associated item): defined here.
        Some(at)
    }
}
