# Write a small pure-Python wheel, tinywheel 0.1.0, into the directory argv[1].
import base64, hashlib, os, sys, zipfile

out = sys.argv[1]
name, vers = "tinywheel", "0.1.0"
files = {
    f"{name}/__init__.py": "SEVEN = 7\n",
    f"{name}-{vers}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {vers}\n",
    f"{name}-{vers}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: airlock-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for path, text in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{path},sha256={digest},{len(text.encode())}")
record.append(f"{name}-{vers}.dist-info/RECORD,,")
files[f"{name}-{vers}.dist-info/RECORD"] = "\n".join(record) + "\n"
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(os.path.join(out, f"{name}-{vers}-py3-none-any.whl"), "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
