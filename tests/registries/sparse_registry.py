# Build a cargo sparse registry (plain files) under argv[1]: config.json, index entries and
# .crate downloads for a small tree (tinydep 0.1.0 depends on tinyleaf 0.1.0, and on
# tinyleaf1..N with argv[4] = N), with `dl` on the host named by argv[2] and the index on
# argv[3].
import hashlib, io, json, os, sys, tarfile

root, dl_host, index_host = sys.argv[1:4]
extra = int(sys.argv[4]) if len(sys.argv) > 4 else 0


def crate(name, vers, deps):
    manifest = f'[package]\nname = "{name}"\nversion = "{vers}"\nedition = "2021"\n'
    if deps:
        manifest += "[dependencies]\n" + "".join(f'{d} = "0.1"\n' for d in deps)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for fn, text in [("Cargo.toml", manifest), ("src/lib.rs", "pub fn seven() -> u32 { 7 }\n")]:
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{vers}/{fn}")
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def index_path(name):
    if len(name) <= 2:
        return f"{len(name)}/{name}"
    if len(name) == 3:
        return f"3/{name[0]}/{name}"
    return f"{name[:2]}/{name[2:4]}/{name}"


os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "config.json"), "w") as f:
    json.dump({"dl": f"https://{dl_host}/crates", "api": None}, f)
leaves = ["tinyleaf"] + [f"tinyleaf{i}" for i in range(1, extra + 1)]
for name, deps in [(leaf, []) for leaf in leaves] + [("tinydep", leaves)]:
    data = crate(name, "0.1.0", deps)
    d = os.path.join(root, "crates", name, "0.1.0")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "download"), "wb") as f:
        f.write(data)
    entry = {
        "name": name, "vers": "0.1.0", "features": {}, "yanked": False,
        "cksum": hashlib.sha256(data).hexdigest(),
        "deps": [{"name": d, "req": "^0.1", "features": [], "optional": False,
                  "default_features": True, "target": None, "kind": "normal"} for d in deps],
    }
    p = os.path.join(root, index_path(name))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(json.dumps(entry) + "\n")
print(f"sparse+https://{index_host}/")
