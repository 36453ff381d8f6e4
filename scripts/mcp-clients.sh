#!/usr/bin/env bash
# Installs the real MCP clients that tests/mcp_tasks.rs drives `brainloop mcp` with (issue 55),
# project-local under DIR (default target/mcp-clients; git-ignored), never globally:
#   DIR/py    a venv with the official Python SDK (`mcp` from PyPI)
#   DIR/node  the official TypeScript clients from npm: `@modelcontextprotocol/sdk` 1.x (protocol
#             2025-11-25), `@modelcontextprotocol/client` 2.x with `@modelcontextprotocol/ext-tasks`
# Idempotent: a DIR that already holds these versions is left as it is. .ci/run calls it; the
# tests fail saying CANNOT RUN HERE (naming this script) when the clients are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY_MCP=2.3.0
TS_SDK=1.32.2
TS_CLIENT=2.4.0
TS_TASKS=0.2.2
dir=${1:-target/mcp-clients}
mkdir -p "$dir"
stamp="$dir/versions"
want="mcp==$PY_MCP @modelcontextprotocol/sdk@$TS_SDK @modelcontextprotocol/client@$TS_CLIENT @modelcontextprotocol/ext-tasks@$TS_TASKS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
rm -rf "$dir/py" "$dir/node" "$stamp"
python3 -m venv "$dir/py"
"$dir/py/bin/pip" install --quiet --disable-pip-version-check "mcp==$PY_MCP"
mkdir -p "$dir/node"
echo '{"private": true}' >"$dir/node/package.json"
npm install --prefix "$dir/node" --silent --no-audit --no-fund --save-exact \
  "@modelcontextprotocol/sdk@$TS_SDK" "@modelcontextprotocol/client@$TS_CLIENT" "@modelcontextprotocol/ext-tasks@$TS_TASKS"
echo "$want" >"$stamp"
