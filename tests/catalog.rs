//! Layered role lookup: roles/ then roles.local/, canonical classes, alias folders refused,
//! failing roles absent. Role trees are written to tempdirs.

use airlock::catalog::Catalog;
use airlock::diag::Problem;
use airlock::policy::Policies;
use std::path::{Path, PathBuf};

fn policies() -> Policies {
    Policies::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .unwrap_or_else(|p| panic!("shipped policies refused: {p:#?}"))
}

struct Tree {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    local: PathBuf,
}

impl Tree {
    fn new() -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("roles");
        let local = tmp.path().join("roles.local");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&local).unwrap();
        Tree {
            _tmp: tmp,
            base,
            local,
        }
    }

    fn dirs(&self) -> Vec<PathBuf> {
        vec![self.base.clone(), self.local.clone()]
    }

    fn load(&self) -> (Catalog, Vec<Problem>) {
        Catalog::load(&self.dirs(), &policies())
    }
}

/// Write `<layer>/<folder>/role.yaml` and its brief.
fn write_role(layer: &Path, folder: &str, role: &str, prs: &str, bash: &str, brief: &str) {
    let dir = layer.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    let level = if prs.contains("merge") { "L3" } else { "L2" };
    let yaml = format!(
        "schema: 1\nrole: {role}\nlevel: {level}\nbrief: brief.md\n\
         writes:\n  repos: [example-org/example-repo]\n  pull_requests: {prs}\n\
         tools:\n  board: [\"board_*\"]\n\
         budget:\n  runs_per_week: 5\n  minutes_per_run: 20\n\
         run:\n  model: test-model\n  bash: {bash}\n"
    );
    std::fs::write(dir.join("role.yaml"), yaml).unwrap();
    std::fs::write(dir.join("brief.md"), brief).unwrap();
}

fn ok_role(layer: &Path, folder: &str) {
    write_role(layer, folder, folder, "[open]", "[\"git log\"]", "Work.\n");
}

fn mentions(problems: &[Problem], folder: &str) -> bool {
    problems
        .iter()
        .any(|p| p.file.parent().and_then(|d| d.file_name()) == Some(folder.as_ref()))
}

#[test]
fn base_roles_load_and_resolve() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    ok_role(&t.base, "review");
    write_role(
        &t.base,
        "merge-gate",
        "merge-gate",
        "[merge]",
        "[]",
        "Land.\n",
    );
    let (cat, problems) = t.load();
    assert_eq!(problems, vec![]);
    assert_eq!(cat.len(), 3);
    let code = cat.resolve("code").unwrap();
    assert_eq!(code.class, "code");
    assert_eq!(code.layer, 0);
    assert_eq!(code.layer_dir, t.base);
    assert!(code.authority.is_empty());
    let gate = cat.resolve("merge-gate").unwrap();
    assert_eq!(gate.authority, ["merge"]);
}

#[test]
fn aliases_resolve_to_canonical_roles_and_nothing_else_does() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    ok_role(&t.base, "review");
    ok_role(&t.base, "interaction");
    let (cat, problems) = t.load();
    assert_eq!(problems, vec![]);
    assert_eq!(cat.resolve("implementer").unwrap().class, "code");
    assert_eq!(cat.resolve("reviewer").unwrap().class, "review");
    let inter = cat.resolve("operator-interaction").unwrap();
    assert_eq!(inter.class, "interaction");
    assert_eq!(inter.authority, ["request-status-surface"]);
    for not_alias in ["worker", "analyst", "canary", "coder", "Code", "tess"] {
        assert!(cat.resolve(not_alias).is_none(), "{not_alias}");
    }
}

#[test]
fn custom_classes_need_their_own_contract() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    ok_role(&t.local, "worker");
    let (cat, problems) = t.load();
    assert_eq!(problems, vec![]);
    let worker = cat.resolve("worker").unwrap();
    assert_eq!(worker.class, "worker");
    assert_eq!(worker.layer, 1);
    assert!(worker.authority.is_empty());
    assert!(cat.resolve("analyst").is_none());
}

#[test]
fn local_layer_overrides_base_for_the_same_class() {
    let t = Tree::new();
    write_role(
        &t.base,
        "code",
        "code",
        "[open]",
        "[\"git log\"]",
        "Base brief.\n",
    );
    write_role(
        &t.local,
        "code",
        "code",
        "[open]",
        "[\"git diff\"]",
        "Local brief.\n",
    );
    ok_role(&t.base, "review");
    let (cat, problems) = t.load();
    assert_eq!(problems, vec![]);
    let code = cat.resolve("implementer").unwrap();
    assert_eq!(code.layer, 1);
    assert_eq!(code.layer_dir, t.local);
    assert_eq!(code.loaded.brief_text, "Local brief.\n");
    assert_eq!(code.loaded.role.bash_prefixes(), ["git diff"]);
    assert_eq!(cat.resolve("review").unwrap().layer, 0);
}

#[test]
fn alias_folders_are_refused_in_every_layer() {
    for alias in ["implementer", "reviewer", "operator-interaction"] {
        let t = Tree::new();
        ok_role(&t.base, "code");
        ok_role(&t.base, "review");
        ok_role(&t.base, "interaction");
        ok_role(&t.local, alias);
        ok_role(&t.base, alias);
        let (cat, problems) = t.load();
        let refused: Vec<&Problem> = problems
            .iter()
            .filter(|p| p.message.contains("legacy alias"))
            .collect();
        assert_eq!(refused.len(), 2, "{alias}: {problems:#?}");
        // The alias still resolves to the canonical baseline, untouched.
        let e = cat.resolve(alias).unwrap();
        assert_eq!(e.layer, 0);
        assert_ne!(e.class, alias);
    }
}

#[test]
fn merge_in_a_non_merge_gate_role_is_refused_and_absent() {
    let t = Tree::new();
    for name in ["merge-gate-2", "my-merge-gate", "code"] {
        write_role(
            &t.local,
            name,
            name,
            "[open, merge]",
            "[]",
            "I am the merge gate.\n",
        );
    }
    let (cat, problems) = t.load();
    for name in ["merge-gate-2", "my-merge-gate", "code"] {
        assert!(cat.resolve(name).is_none(), "{name}");
        assert!(
            problems.iter().any(|p| p.path == "writes.pull_requests[1]"
                && p.file.parent().and_then(|d| d.file_name()) == Some(name.as_ref())),
            "{name}: {problems:#?}"
        );
    }
}

#[test]
fn a_failing_override_hides_the_baseline() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    write_role(
        &t.local,
        "code",
        "code",
        "[open]",
        "[\"git\"]",
        "Too broad.\n",
    );
    let (cat, problems) = t.load();
    assert!(cat.resolve("code").is_none());
    assert!(
        problems.iter().any(|p| p.path == "run.bash[0]"),
        "{problems:#?}"
    );
}

#[test]
fn a_secret_in_a_brief_refuses_the_role_without_echoing_it() {
    let t = Tree::new();
    let secret = format!("ghp_{}", "Kq7".repeat(12));
    write_role(
        &t.base,
        "code",
        "code",
        "[open]",
        "[]",
        &format!("# Brief\nlogin with {secret}\n"),
    );
    ok_role(&t.base, "review");
    let (cat, problems) = t.load();
    assert!(cat.resolve("code").is_none());
    assert!(cat.resolve("review").is_some());
    let p = problems
        .iter()
        .find(|p| p.path == "brief line 2")
        .unwrap_or_else(|| panic!("{problems:#?}"));
    assert!(p.file.ends_with("code/brief.md"));
    for p in &problems {
        assert!(!p.to_string().contains(&secret));
    }
}

#[test]
fn broken_and_odd_folders() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    // Not YAML.
    std::fs::create_dir_all(t.base.join("broken")).unwrap();
    std::fs::write(t.base.join("broken/role.yaml"), "role: [\n").unwrap();
    // No role.yaml: not a role folder, ignored.
    std::fs::create_dir_all(t.base.join("notes")).unwrap();
    // Folder name is not a class name.
    ok_role(&t.base, "Bad_Name");
    // The role field disagrees with the folder.
    write_role(&t.base, "tester", "merge-gate", "[open]", "[]", "x\n");
    let (cat, problems) = t.load();
    assert_eq!(cat.len(), 1);
    assert!(cat.resolve("code").is_some());
    assert!(mentions(&problems, "broken"), "{problems:#?}");
    assert!(mentions(&problems, "Bad_Name"), "{problems:#?}");
    assert!(
        problems
            .iter()
            .any(|p| p.path == "role" && mentions(std::slice::from_ref(p), "tester")),
        "{problems:#?}"
    );
    assert!(!mentions(&problems, "notes"));
}

#[test]
fn missing_layers_are_empty_and_order_decides() {
    let t = Tree::new();
    ok_role(&t.base, "code");
    let missing = t.base.parent().unwrap().join("nope");
    let (cat, problems) = Catalog::load(&[missing, t.base.clone()], &policies());
    assert_eq!(problems, vec![]);
    assert_eq!(cat.resolve("code").unwrap().layer, 1);
    // Reversed order: the base layer now overrides the local one.
    write_role(&t.local, "code", "code", "[open]", "[]", "Local.\n");
    let (cat, _) = Catalog::load(&[t.local.clone(), t.base.clone()], &policies());
    assert_eq!(cat.resolve("code").unwrap().layer_dir, t.base);
}
