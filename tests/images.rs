//! The image store: import of an OCI layout, an OCI archive and a `docker save` tar, and
//! every refusal of the unpacker, each on a hostile layer built here byte by byte. Each
//! refusal must name the image, the layer and the entry, and leave nothing behind: no
//! name, no tree, nothing under tmp/, nothing outside the store.

use std::fs;
use std::path::{Path, PathBuf};

use airlock::images::{import, Digest, ImageError, Store};
use serde_json::json;

/// One tar entry, written raw (the tar crate's builder refuses `..` and absolute names,
/// which is what these tests need to send).
struct E<'a> {
    name: &'a [u8],
    kind: u8,
    mode: u32,
    data: &'a [u8],
    link: &'a [u8],
    pax: Vec<(&'a str, &'a [u8])>,
}

fn file<'a>(name: &'a str, data: &'a [u8]) -> E<'a> {
    E {
        name: name.as_bytes(),
        kind: b'0',
        mode: 0o644,
        data,
        link: b"",
        pax: vec![],
    }
}

fn dir(name: &str) -> E<'_> {
    E {
        kind: b'5',
        mode: 0o755,
        ..file(name, b"")
    }
}

fn link<'a>(name: &'a str, kind: u8, to: &'a str) -> E<'a> {
    E {
        kind,
        mode: 0o777,
        link: to.as_bytes(),
        ..file(name, b"")
    }
}

fn header(name: &[u8], kind: u8, mode: u32, size: u64, link: &[u8]) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    let oct = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{:0w$o}\0", v, w = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    oct(&mut h, 100, 8, mode as u64);
    oct(&mut h, 108, 8, 0);
    oct(&mut h, 116, 8, 0);
    oct(&mut h, 124, 12, size);
    oct(&mut h, 136, 12, 0);
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

fn push_data(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn tar(entries: &[E]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        if !e.pax.is_empty() {
            let mut rec = Vec::new();
            for (k, v) in &e.pax {
                let body_len = k.len() + v.len() + 3;
                let mut n = body_len + 1;
                while format!("{n}").len() + body_len != n {
                    n += 1;
                }
                rec.extend_from_slice(format!("{n} {k}=").as_bytes());
                rec.extend_from_slice(v);
                rec.push(b'\n');
            }
            out.extend_from_slice(&header(b"PaxHeader", b'x', 0o644, rec.len() as u64, b""));
            push_data(&mut out, &rec);
        }
        out.extend_from_slice(&header(e.name, e.kind, e.mode, e.data.len() as u64, e.link));
        push_data(&mut out, e.data);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    g.write_all(b).expect("gzip");
    g.finish().expect("gzip")
}

fn sha(b: &[u8]) -> String {
    Digest::of(b).to_string()
}

/// An OCI layout of `layers` (tars, gzipped here) in `dir`, the config's diff_ids right.
fn layout(dir: &Path, layers: &[Vec<u8>]) -> PathBuf {
    let blobs = dir.join("blobs/sha256");
    fs::create_dir_all(&blobs).expect("mkdir");
    let put = |b: &[u8]| {
        let d = Digest::of(b);
        fs::write(blobs.join(d.hex()), b).expect("write blob");
        d.to_string()
    };
    let mut descs = vec![];
    let mut diffs = vec![];
    for l in layers {
        diffs.push(sha(l));
        let z = gzip(l);
        descs.push(json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(&z), "size": z.len()}));
    }
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/opt/tool/bin:/usr/bin:/bin", "LANG=C.UTF-8"], "Entrypoint": ["/bin/sh"], "User": "1000"},
        "rootfs": {"type": "layers", "diff_ids": diffs}
    }))
    .expect("json");
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": put(&config), "size": config.len()},
        "layers": descs,
    }))
    .expect("json");
    let md = put(&manifest);
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": manifest.len()}
        ]}))
        .expect("json"),
    )
    .expect("index");
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    dir.to_path_buf()
}

struct Host {
    _tmp: tempfile::TempDir,
    state: PathBuf,
    src: PathBuf,
    /// A folder beside the store: nothing an import does may touch it.
    outside: PathBuf,
}

fn host() -> Host {
    let tmp = tempfile::tempdir().expect("tempdir");
    let state = tmp.path().join("state");
    let src = tmp.path().join("src");
    let outside = tmp.path().join("outside");
    fs::create_dir_all(&src).expect("mkdir");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(outside.join("keep"), "x").expect("write");
    Host {
        _tmp: tmp,
        state,
        src,
        outside,
    }
}

const BIG: u64 = 1 << 30;

fn import_layers(h: &Host, layers: &[Vec<u8>]) -> Result<PathBuf, ImageError> {
    let dir = layout(&h.src, layers);
    let store = Store::open(&h.state).expect("store");
    let rec = import::import(&store, "img", &dir, BIG)?;
    Ok(store.tree_path(&rec.manifest_digest().expect("digest")))
}

/// The refusal names the image, a layer and the entry, and nothing is left anywhere.
fn refused(h: &Host, layers: &[Vec<u8>], entry: &str, why: &str) {
    let e = import_layers(h, layers).expect_err("the import must be refused");
    let text = e.to_string();
    assert_eq!(e.image, "img", "{text}");
    assert!(
        e.layer.as_deref().is_some_and(|l| l.starts_with("sha256:")),
        "{text}"
    );
    assert_eq!(e.entry.as_deref(), Some(entry), "{text}");
    assert!(text.contains(why), "{text}");
    assert_nothing_left(h);
}

fn assert_nothing_left(h: &Host) {
    let store = Store::existing(&h.state);
    assert!(store.list().expect("list").is_empty(), "a name was kept");
    let trees: Vec<_> = fs::read_dir(store.root().join("trees"))
        .expect("trees")
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".pin"))
        .collect();
    assert!(trees.is_empty(), "a tree was kept: {trees:?}");
    // The next lock of the store clears tmp/; until then the refused import's own
    // folders must be gone already (each is removed when dropped).
    let tmp: Vec<_> = fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .flatten()
        .collect();
    assert!(tmp.is_empty(), "tmp/ kept {tmp:?}");
    let outside: Vec<_> = fs::read_dir(&h.outside)
        .expect("outside")
        .flatten()
        .collect();
    assert_eq!(
        outside.len(),
        1,
        "something was written beside the store: {outside:?}"
    );
}

#[test]
fn an_oci_layout_unpacks_into_one_tree_with_its_env() {
    let h = host();
    let base = tar(&[
        dir("etc/"),
        file("etc/os-release", b"ID=airlock-test\n"),
        dir("usr/bin/"),
        file("usr/bin/tool", b"#!/bin/sh\n"),
        link("bin", b'2', "usr/bin"),
        link("usr/bin/sh", b'2', "/usr/bin/tool"),
        link("usr/bin/tool2", b'1', "usr/bin/tool"),
        // Through the symlink `bin`: lands in usr/bin, inside the tree.
        file("bin/via-link", b"v"),
    ]);
    let tree = import_layers(&h, &[base]).expect("import");
    assert_eq!(
        fs::read_to_string(tree.join("etc/os-release")).expect("os-release"),
        "ID=airlock-test\n"
    );
    assert!(tree.join("usr/bin/via-link").is_file());
    assert_eq!(
        fs::read_link(tree.join("bin")).expect("link"),
        Path::new("usr/bin")
    );
    let store = Store::existing(&h.state);
    let rec = store.get("img").expect("get").expect("named");
    assert_eq!(
        rec.env,
        vec!["PATH=/opt/tool/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
    );
    assert!(rec.size > 0);
    use std::os::unix::fs::MetadataExt;
    let a = fs::metadata(tree.join("usr/bin/tool")).expect("meta");
    let b = fs::metadata(tree.join("usr/bin/tool2")).expect("meta");
    assert_eq!(a.ino(), b.ino(), "the hard link is one file");
    assert_eq!(a.uid(), 0);
}

#[test]
fn an_oci_archive_and_a_docker_save_tar_import_to_the_same_files() {
    let h = host();
    let layer = tar(&[dir("etc/"), file("etc/os-release", b"ID=from-archive\n")]);
    let lay = layout(&h.src, std::slice::from_ref(&layer));
    // The OCI archive: a tar of the layout.
    let mut entries = vec![];
    let mut names = vec![];
    for p in ["oci-layout", "index.json"] {
        names.push((p.to_string(), fs::read(lay.join(p)).expect("read")));
    }
    for e in fs::read_dir(lay.join("blobs/sha256"))
        .expect("blobs")
        .flatten()
    {
        names.push((
            format!("blobs/sha256/{}", e.file_name().to_string_lossy()),
            fs::read(e.path()).expect("read"),
        ));
    }
    for (n, b) in &names {
        entries.push(file(n, b));
    }
    let archive = h.src.join("../image.oci.tar");
    fs::write(&archive, tar(&entries)).expect("write");
    let store = Store::open(&h.state).expect("store");
    let a = import::import(&store, "oci", &archive, BIG).expect("oci archive");

    // docker save: manifest.json, the config as <hex>.json, each layer as <dir>/layer.tar.
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
        "rootfs": {"type": "layers", "diff_ids": [sha(&layer)]}
    }))
    .expect("json");
    let chex = Digest::of(&config).hex().to_string();
    let manifest = serde_json::to_vec(&json!([
        {"Config": format!("{chex}.json"), "RepoTags": ["x:1"], "Layers": ["l1/layer.tar"]}
    ]))
    .expect("json");
    let docker = tar(&[
        file("manifest.json", &manifest),
        file(&format!("{chex}.json"), &config),
        dir("l1/"),
        file("l1/layer.tar", &layer),
    ]);
    let saved = h.src.join("../image.docker.tar");
    fs::write(&saved, docker).expect("write");
    let d = import::import(&store, "docker", &saved, BIG).expect("docker save");
    assert_eq!(d.env, vec!["A=1"]);
    for r in [&a, &d] {
        let tree = store.tree_path(&r.manifest_digest().expect("digest"));
        assert_eq!(
            fs::read_to_string(tree.join("etc/os-release")).expect("read"),
            "ID=from-archive\n"
        );
    }
    assert_eq!(store.list().expect("list").len(), 2);

    // Not an image at all: named as such, and nothing kept.
    let junk = h.src.join("../junk.tar");
    fs::write(&junk, tar(&[file("hello.txt", b"hi")])).expect("write");
    let e = import::import(&store, "junk", &junk, BIG).expect_err("junk");
    assert!(
        e.to_string()
            .contains("not an OCI layout, an OCI archive or a `docker save` archive"),
        "{e}"
    );
    let e =
        import::import(&store, "junk", &h.src.join("../junk-missing"), BIG).expect_err("missing");
    assert!(e.to_string().contains("cannot read"), "{e}");
    let e = import::import(&store, "Bad/Name", &saved, BIG).expect_err("bad name");
    assert!(e.to_string().contains("--name"), "{e}");
}

#[test]
fn names_with_dotdot_or_absolute_paths_are_refused() {
    let h = host();
    refused(
        &h,
        &[tar(&[file("usr/../../escape", b"x")])],
        "usr/../../escape",
        "`..`",
    );
    let h = host();
    refused(
        &h,
        &[tar(&[file("/etc/escape", b"x")])],
        "/etc/escape",
        "absolute",
    );
}

#[test]
fn links_out_of_the_tree_are_refused() {
    let h = host();
    refused(
        &h,
        &[tar(&[
            dir("usr/"),
            link("usr/evil", b'2', "../../../../etc/shadow"),
        ])],
        "usr/evil",
        "points out of the tree",
    );
    let h = host();
    refused(
        &h,
        &[tar(&[link("hard", b'1', "../../etc/shadow")])],
        "hard",
        "out of the tree",
    );
    // A hard link to an absolute host path, or to something not in the tree.
    let h = host();
    refused(
        &h,
        &[tar(&[link("hard", b'1', "/etc/shadow")])],
        "hard",
        "out of the tree",
    );
    let h = host();
    refused(
        &h,
        &[tar(&[link("hard", b'1', "etc/shadow")])],
        "hard",
        "not in the tree",
    );
}

#[test]
fn a_symlinked_folder_is_followed_inside_the_tree_never_onto_the_host() {
    let h = host();
    let outside = h.outside.to_string_lossy().into_owned();
    // `up` points (absolutely) at the test's outside folder; writing through it must land
    // inside the tree at the same path, not in the real folder.
    let layer = tar(&[
        link("up", b'2', &outside),
        file("up/planted", b"x"),
        link("root", b'2', "/"),
        file("root/etc/also", b"y"),
    ]);
    let tree = import_layers(&h, &[layer]).expect("import");
    assert!(
        !h.outside.join("planted").exists(),
        "written outside the tree"
    );
    assert!(tree
        .join(outside.trim_start_matches('/'))
        .join("planted")
        .is_file());
    assert!(tree.join("etc/also").is_file());
}

#[test]
fn device_nodes_and_fifos_are_refused() {
    let h = host();
    let mut e = file("dev/sda", b"");
    e.kind = b'4';
    refused(&h, &[tar(&[e])], "dev/sda", "device node");
    let h = host();
    let mut e = file("dev/console", b"");
    e.kind = b'3';
    refused(&h, &[tar(&[e])], "dev/console", "device node");
    let h = host();
    let mut e = file("run/pipe", b"");
    e.kind = b'6';
    refused(&h, &[tar(&[e])], "run/pipe", "FIFO");
}

#[test]
fn setuid_setgid_and_file_capabilities_are_refused() {
    let h = host();
    let mut e = file("usr/bin/su", b"\x7fELF");
    e.mode = 0o4755;
    refused(&h, &[tar(&[e])], "usr/bin/su", "setuid or setgid");
    let h = host();
    let mut e = file("usr/bin/wall", b"\x7fELF");
    e.mode = 0o2755;
    refused(&h, &[tar(&[e])], "usr/bin/wall", "setuid or setgid");
    let h = host();
    let mut e = file("usr/bin/ping", b"\x7fELF");
    e.pax = vec![(
        "SCHILY.xattr.security.capability",
        b"\x01\x00\x00\x02\x00\x20\x00\x00",
    )];
    refused(&h, &[tar(&[e])], "usr/bin/ping", "security.capability");
}

#[test]
fn whiteouts_remove_what_lower_layers_put_there_including_at_the_root() {
    let h = host();
    let lower = tar(&[
        dir("etc/"),
        file("etc/a", b"a"),
        file("etc/b", b"b"),
        dir("opt/"),
        file("opt/old", b"o"),
        dir("srv/"),
        file("srv/x", b"x"),
        file("top", b"t"),
    ]);
    let upper = tar(&[
        // Plain whiteouts, one in a folder and one at the root.
        file("etc/.wh.a", b""),
        file(".wh.srv", b""),
        // Opaque: opt/ keeps only this layer's entries.
        file("opt/new", b"n"),
        file("opt/.wh..wh..opq", b""),
    ]);
    let tree = import_layers(&h, &[lower.clone(), upper]).expect("import");
    assert!(!tree.join("etc/a").exists());
    assert!(tree.join("etc/b").is_file());
    assert!(!tree.join("srv").exists());
    assert!(!tree.join("opt/old").exists());
    assert!(tree.join("opt/new").is_file());
    assert!(!tree.join("etc/.wh.a").exists() && !tree.join("opt/.wh..wh..opq").exists());

    // An opaque whiteout at the root empties the image of everything below it.
    let h = host();
    let upper = tar(&[file(".wh..wh..opq", b""), file("only", b"1")]);
    let tree = import_layers(&h, &[lower, upper]).expect("import");
    let left: Vec<String> = fs::read_dir(&tree)
        .expect("tree")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["only"]);

    // A whiteout that names `..` is refused like any `..`.
    let h = host();
    refused(
        &h,
        &[tar(&[file("etc/.wh...", b"")])],
        "etc/.wh...",
        "names no entry",
    );
}

#[test]
fn a_blob_whose_digest_does_not_match_or_is_missing_is_refused() {
    // A layer's bytes changed after its manifest named it.
    let h = host();
    let dir = layout(&h.src, &[tar(&[file("a", b"1")])]);
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("index.json")).expect("index")).expect("json");
    let md = Digest::parse(index["manifests"][0]["digest"].as_str().expect("digest")).expect("d");
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("blobs/sha256").join(md.hex())).expect("m"))
            .expect("json");
    let ld = Digest::parse(manifest["layers"][0]["digest"].as_str().expect("l")).expect("d");
    fs::write(
        dir.join("blobs/sha256").join(ld.hex()),
        gzip(&tar(&[file("a", b"2")])),
    )
    .expect("tamper");
    let store = Store::open(&h.state).expect("store");
    let e = import::import(&store, "img", &dir, BIG).expect_err("tampered layer");
    assert_eq!(e.layer.as_deref(), Some(ld.to_string().as_str()), "{e}");
    assert!(e.to_string().contains("hash to"), "{e}");
    assert_nothing_left(&h);
    assert!(!store.blob_path(&ld).exists(), "the tampered blob was kept");

    // The manifest itself changed.
    fs::write(
        dir.join("blobs/sha256").join(md.hex()),
        b"{\"schemaVersion\":2}",
    )
    .expect("w");
    let e = import::import(&store, "img", &dir, BIG).expect_err("tampered manifest");
    assert!(e.to_string().contains("hash to"), "{e}");
    assert_nothing_left(&h);

    // The manifest names a blob the layout lacks.
    let h = host();
    let dir = layout(&h.src, &[tar(&[file("a", b"1")])]);
    let manifest = fs::read(dir.join("blobs/sha256").join(md.hex())).expect("m");
    let mv: serde_json::Value = serde_json::from_slice(&manifest).expect("json");
    let ld = Digest::parse(mv["layers"][0]["digest"].as_str().expect("l")).expect("d");
    fs::remove_file(dir.join("blobs/sha256").join(ld.hex())).expect("rm");
    let store = Store::open(&h.state).expect("store");
    let e = import::import(&store, "img", &dir, BIG).expect_err("missing blob");
    assert!(e.to_string().contains("does not contain"), "{e}");
    assert_eq!(e.layer.as_deref(), Some(ld.to_string().as_str()), "{e}");
    assert_nothing_left(&h);

    // A layer whose uncompressed bytes are not what the config's diff_ids say.
    let h = host();
    let dir = layout(&h.src, &[tar(&[file("a", b"1")])]);
    let blobs = dir.join("blobs/sha256");
    let real_layer = gzip(&tar(&[file("a", b"other")]));
    let ld = Digest::of(&real_layer);
    fs::write(blobs.join(ld.hex()), &real_layer).expect("w");
    let mut mv: serde_json::Value =
        serde_json::from_slice(&fs::read(blobs.join(md.hex())).expect("manifest")).expect("json");
    mv["layers"][0]["digest"] = ld.to_string().into();
    let m2 = serde_json::to_vec(&mv).expect("json");
    let md2 = Digest::of(&m2);
    fs::write(blobs.join(md2.hex()), &m2).expect("w");
    fs::write(
        dir.join("index.json"),
        serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md2.to_string(), "size": m2.len()}]})).expect("json"),
    )
    .expect("w");
    let store = Store::open(&h.state).expect("store");
    let e = import::import(&store, "img", &dir, BIG).expect_err("diff id");
    assert!(
        e.to_string().contains("the uncompressed layer's digest"),
        "{e}"
    );
    assert_nothing_left(&h);
}

#[test]
fn a_store_past_images_max_bytes_is_refused() {
    let h = host();
    let big = vec![7u8; 256 << 10];
    let dir = layout(&h.src, &[tar(&[file("big", &big)])]);
    let store = Store::open(&h.state).expect("store");
    // Enough for the compressed blobs, not for the unpacked file as well.
    let blobs: u64 = fs::read_dir(dir.join("blobs/sha256"))
        .expect("blobs")
        .flatten()
        .map(|e| e.metadata().expect("meta").len())
        .sum();
    let e = import::import(&store, "img", &dir, blobs + 1000).expect_err("too big");
    assert!(e.to_string().contains("images.max_bytes"), "{e}");
    assert_eq!(e.entry.as_deref(), Some("big"), "{e}");
    assert_nothing_left(&h);
    let e = import::import(&store, "img", &dir, 100).expect_err("too big");
    assert!(e.to_string().contains("images.max_bytes"), "{e}");
    assert_nothing_left(&h);
    import::import(&store, "img", &dir, BIG).expect("fits");
}

#[test]
fn an_interrupted_import_leaves_nothing_the_next_one_keeps() {
    let h = host();
    let store = Store::open(&h.state).expect("store");
    // What a killed import leaves: its work folder under tmp/.
    let stale = store.root().join("tmp/import-1-2/rootfs/usr");
    fs::create_dir_all(&stale).expect("mkdir");
    fs::write(stale.join("half"), "x").expect("write");
    let dir = layout(&h.src, &[tar(&[file("a", b"1")])]);
    import::import(&store, "img", &dir, BIG).expect("import");
    let tmp: Vec<_> = fs::read_dir(store.root().join("tmp"))
        .expect("tmp")
        .flatten()
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

#[test]
fn removal_is_refused_while_a_run_holds_the_image_and_frees_it_after() {
    let h = host();
    let tree = import_layers(&h, &[tar(&[file("a", b"1")])]).expect("import");
    let store = Store::existing(&h.state);
    let rec = store.get("img").expect("get").expect("named");
    let d = rec.manifest_digest().expect("digest");
    let pin = store.pin(&d).expect("pin");
    let lock = store.lock().expect("lock");
    let e = store.remove(&lock, "img", &[]).expect_err("pinned");
    assert!(e.to_string().contains("a live run uses it"), "{e}");
    let e = store
        .remove(&lock, "img", &["code".into()])
        .expect_err("environment");
    assert!(e.to_string().contains("environments.code"), "{e}");
    drop(pin);
    store.remove(&lock, "img", &[]).expect("remove");
    assert!(!tree.exists());
    assert!(!store.blob_path(&d).exists());
    let e = store.remove(&lock, "img", &[]).expect_err("gone");
    assert!(e.to_string().contains("no image has this name"), "{e}");
}
