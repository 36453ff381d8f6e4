// `brainloop mcp` driven by the official TypeScript SDK's client, `@modelcontextprotocol/sdk`
// 1.x (protocol 2025-11-25, no Tasks extension), run by tests/mcp_tasks.rs against a running
// worker (issue 55): tools/list (annotations, the read tool's outputSchema, which the SDK checks
// every result against), a read, the blocking call of a command, and a write that returns
// pending_validation at once, is approved with `brainloop approve` and polled with get_result
// through brainloop_read. Any failure throws (exit 1); the last line is `ALL OK`.
//
// Environment: BRAINLOOP_BIN, BRAINLOOP_DATA_DIR, BRAINLOOP_CONFIG; the workspace as argv[2].

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

const BIN = process.env.BRAINLOOP_BIN;
const DATA = process.env.BRAINLOOP_DATA_DIR;
const WORKSPACE = process.argv[2];
const step = (what) => console.log(`ok: ${what}`);

const transport = new StdioClientTransport({
  command: BIN,
  args: ["mcp", "--client", "agent", "--data-dir", DATA],
  env: { ...process.env, BRAINLOOP_LOG: "warn" },
  stderr: "inherit",
});
const client = new Client({ name: "ts-sdk-test", version: "1" });
await client.connect(transport);
step(`connected to ${client.getServerVersion()?.name}`);

const { tools } = await client.listTools();
assert.deepEqual(tools.map((t) => t.name), ["brainloop", "brainloop_read"]);
const [w, r] = tools.map((t) => t.annotations);
assert.deepEqual([w.readOnlyHint, w.destructiveHint, w.openWorldHint], [false, true, true]);
assert.deepEqual(
  [r.readOnlyHint, r.destructiveHint, r.idempotentHint, r.openWorldHint],
  [true, false, true, false],
);
assert.equal(tools[0].outputSchema, undefined);
assert.deepEqual(tools[1].outputSchema.required, ["status", "result", "error"]);
step("tools/list: annotations and the read tool's outputSchema");

const call = (name, action, params) =>
  client.callTool({ name, arguments: { action, params } }, undefined, { timeout: 60000 });

let res = await call("brainloop_read", "list_actions", {});
assert.equal(res.isError, false);
assert.equal(res.structuredContent.status, "succeeded");
step("a read");

res = await call("brainloop", "execute_bash", { command: "echo hi" });
assert.equal(res.isError, false, JSON.stringify(res));
assert.equal(res.structuredContent.result.stdout, "hi\n");
step("a command's blocking call returned its result");

res = await call("brainloop", "execute_bash", { command: "touch ts-approved.txt" });
assert.equal(res.isError, false, JSON.stringify(res));
const { status, validation_id: vid, job_id: job } = res.structuredContent;
assert.equal(status, "pending_validation");
assert.match(res.structuredContent.message, new RegExp(`brainloop approve ${vid}`));
execFileSync(BIN, ["approve", vid], { env: process.env });
const t0 = Date.now();
for (;;) {
  res = await call("brainloop_read", "get_result", { job_id: job });
  assert.equal(res.isError, false, JSON.stringify(res));
  if (res.structuredContent.result.status === "succeeded") break;
  assert.ok(Date.now() - t0 < 60000, JSON.stringify(res));
  await new Promise((f) => setTimeout(f, 100));
}
assert.ok(existsSync(join(WORKSPACE, "ts-approved.txt")));
step("a write waited for the operator, was approved with brainloop approve and polled");

await client.close();
console.log("ALL OK");
