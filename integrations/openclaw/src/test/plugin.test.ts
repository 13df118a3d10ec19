// The plugin against real processes: a real `memindex mcp` (MEMINDEX_COMMAND, default `memindex` on
// PATH; skipped when absent), a command that does not exist, and a child that never answers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants, mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { createPlugin } from "../index.js";
import { parsePluginConfig } from "../client.js";
import { addMemoryCommands, indexLines, searchLines, statusLines } from "../cli.js";
import type { Command } from "../cli.js";
import { buildMemoryFlushPlan } from "../flush.js";
import { readPayload, searchHit, searchPayload, unavailableSearch } from "../shapes.js";

type Registered = { tools: Map<string, (ctx: object) => any>; services: any[]; capability?: any; runtime?: any;
  client?: any; cli: string[] };

/** The plugin registered on a host with the given API generation (2026.5+ "capability", 2026.3 "split"). */
function load(config: object, flavor: "capability" | "split" = "capability"): Registered {
  const reg: Registered = { tools: new Map(), services: [], cli: [] };
  const api: Record<string, unknown> = {
    id: "memindex", pluginConfig: config, logger: { info() {}, warn() {} },
    registerTool: (factory: any, opts: { names: string[] }) => opts.names.forEach((n) => reg.tools.set(n, factory)),
    registerService: (s: any) => reg.services.push(s),
    registerCli: (_r: unknown, opts: { descriptors: { name: string }[] }) => reg.cli.push(...opts.descriptors.map((d) => d.name)),
  };
  if (flavor === "capability") api.registerMemoryCapability = (c: any) => { reg.capability = c; };
  else {
    api.registerMemoryRuntime = (r: any) => { reg.runtime = r; };
    api.registerMemoryPromptSection = () => {};
  }
  const plugin = createPlugin(api);
  plugin.register();
  reg.client = plugin.client;
  return reg;
}

const ctx = { agentId: "main", sessionKey: "agent:main:main" };

test("config defaults and refusals of nonsense values", () => {
  assert.deepEqual(parsePluginConfig(undefined), { command: "memindex", args: ["mcp"], url: undefined,
    tokenEnv: undefined, timeoutMs: 30000, startTimeoutMs: 60000 });
  const cfg = parsePluginConfig({ command: " /opt/memindex ", args: ["mcp", "--agent", "ops"], timeoutMs: -5 });
  assert.equal(cfg.command, "/opt/memindex");
  assert.deepEqual(cfg.args, ["mcp", "--agent", "ops"]);
  assert.equal(cfg.timeoutMs, 30000);
});

test("search hits keep the builtin's fields in its order, per API generation", () => {
  const provenance = { originClass: "agent", sessionKind: "unknown", observedAt: 1796347025737 };
  const raw = { path: "memory/a.md", startLine: 2, endLine: 5, score: 0.8, textScore: 0.5, snippet: "x",
    source: "memory", citation: "memory/a.md#L2-L5", provenance, snippetStartLine: 3, kind: undefined };
  assert.deepEqual(Object.keys(searchHit(raw, "capability")),
    ["path", "startLine", "endLine", "score", "textScore", "snippet", "source", "provenance", "corpus", "citation"]);
  assert.deepEqual(searchHit(raw, "capability").provenance, provenance);
  assert.deepEqual(Object.keys(searchHit(raw, "split")),
    ["path", "startLine", "endLine", "score", "snippet", "source", "citation"]);
  const payload = searchPayload({ results: [raw], provider: "none", model: "fts-only", fallback: false,
    citations: "auto", mode: "fts-only", backend: "builtin" }, "split");
  assert.deepEqual(Object.keys(payload), ["results", "provider", "model", "fallback", "citations", "mode"]);
});

test("memory_get excerpts as 2026.9 states them: ok with continuation, not_found", () => {
  const part = readPayload({ path: "memory/a.md", text: "three", from: 3, lines: 1, totalLines: 4 },
    { path: "memory/a.md", from: 3, lines: 1 }, "capability");
  assert.deepEqual(part, { status: "ok", text: "three\n\n[More content available. Use from=4 to continue.]",
    path: "memory/a.md", from: 3, lines: 1, truncated: true, nextFrom: 4 });
  const whole = readPayload({ path: "m.md", text: "a\nb\n", totalLines: 2 }, { path: "m.md", lines: 120 }, "capability");
  assert.deepEqual(whole, { status: "ok", text: "a\nb\n", path: "m.md", from: 1, lines: 2 });
  assert.deepEqual(readPayload({ path: "memory/x.md", text: "" }, { path: "memory/x.md" }, "capability"),
    { status: "not_found", text: "", path: "memory/x.md" });
  assert.deepEqual(readPayload({ path: "m.md", text: "a" }, { path: "m.md" }, "split"), { text: "a", path: "m.md" });
});

test("an unavailable search carries the builtin's failure fields", () => {
  const out = unavailableSearch("boom", "capability", { timeoutMs: 5 });
  assert.deepEqual(Object.keys(out), ["results", "disabled", "unavailable", "timedOut", "timeoutMs", "error",
    "warning", "action", "debug"]);
  assert.deepEqual(Object.keys(unavailableSearch("boom", "split")),
    ["results", "disabled", "unavailable", "error", "warning", "action"]);
});

test("the pre-compaction flush plan is memory-core's: today's file, its thresholds, off when disabled", () => {
  const now = Date.UTC(2026, 10, 20, 12, 0);
  const plan = buildMemoryFlushPlan({ cfg: { agents: { defaults: { userTimezone: "UTC" } } }, nowMs: now })!;
  assert.equal(plan.relativePath, "memory/2026-11-20.md");
  assert.equal(plan.softThresholdTokens, 4000);
  assert.equal(plan.forceFlushTranscriptBytes, 2 * 1024 * 1024);
  assert.equal(plan.reserveTokensFloor, 20000);
  assert.match(plan.prompt, /memory\/2026-11-20\.md/);
  assert.match(plan.prompt, /Reference UTC: 2026-11-20 12:00 UTC/);
  const small = buildMemoryFlushPlan({ cfg: { agents: { defaults: { compaction: { memoryFlush: {
    softThresholdTokens: 9000, forceFlushTranscriptBytes: "1mb" } } } } }, contextWindowTokens: 32000, nowMs: now })!;
  assert.equal(small.reserveTokensFloor, 8000);
  assert.equal(small.softThresholdTokens, 9000);
  assert.equal(small.forceFlushTranscriptBytes, 1024 * 1024);
  assert.equal(buildMemoryFlushPlan({ cfg: { agents: { defaults: { compaction: { memoryFlush: { enabled: false } } } } } }), null);
});

test("a command that does not exist: unavailable with the reason, at once", async () => {
  const missing = path.join(tmpdir(), "no-such-memindex-binary");
  const reg = load({ command: missing, timeoutMs: 5000 });
  const t0 = Date.now();
  const res = await reg.tools.get("memory_search")!(ctx).execute("1", { query: "anything" });
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(res.details.unavailable, true);
  assert.equal(res.details.disabled, true);
  assert.match(res.details.error, /ENOENT/);
  assert.ok(res.details.error.includes(missing));
  assert.equal(JSON.parse(res.content[0].text).error, res.details.error);
  const got = await reg.tools.get("memory_get")!(ctx).execute("2", { path: "MEMORY.md" });
  assert.equal(got.details.status, "error");
  assert.ok(got.details.error.includes(missing));
});

test("a child that never answers: the call ends at its deadline, flagged timedOut", async () => {
  const reg = load({ command: process.execPath, args: ["-e", "setTimeout(() => {}, 3600e3)"], timeoutMs: 700,
    startTimeoutMs: 1500 });
  const t0 = Date.now();
  const res = await reg.tools.get("memory_search")!(ctx).execute("1", { query: "anything" });
  const elapsed = Date.now() - t0;
  assert.ok(elapsed >= 650 && elapsed < 3000, `answered after ${elapsed} ms`);
  assert.equal(res.details.timedOut, true);
  assert.equal(res.details.timeoutMs, 700);
  assert.match(res.details.error, /within 700 ms/);
  for (const s of reg.services) await s.stop();
});

test("memindex's failure reason quotes its stderr lines that say what went wrong, whole, not its INFO log", async () => {
  // A start that logs progress, a warning and a traceback, then more progress, and is killed mid-line.
  const info = (i: number) => `2026-12-04 16:00:0${i % 10},123 INFO memindex.sync: sync main: generation ${i} of the index`;
  const script = `process.stderr.write(${JSON.stringify([info(1),
    "2026-12-04 16:00:02,000 WARNING memindex.embed: provider local unavailable: no model file",
    "Traceback (most recent call last):", '  File "/x/memindex/cli.py", line 3, in main', "    raise ValueError('x')",
    "ValueError: the memory index is locked by another process",
    ...Array.from({ length: 20 }, (_, i) => info(i + 2)), "2026-12-04 16:00:09,999 INFO memindex.sy"].join("\n"))}, () => process.exit(3));`;
  // (a script file: the failure names the command line, which must not carry the log lines itself)
  const dir = mkdtempSync(path.join(tmpdir(), "memindex-log-"));
  writeFileSync(path.join(dir, "noisy.cjs"), script);
  writeFileSync(path.join(dir, "quiet.cjs"), `process.stderr.write(${JSON.stringify(info(1) + "\n")}, () => process.exit(3));`);
  const reg = load({ command: process.execPath, args: [path.join(dir, "noisy.cjs")], timeoutMs: 5000, startTimeoutMs: 5000 });
  const res = await reg.tools.get("memory_search")!(ctx).execute("1", { query: "anything" });
  const error: string = res.details.error;
  assert.equal(res.details.unavailable, true);
  assert.match(error, /stderr: 2026-12-04 16:00:02,000 WARNING memindex\.embed: provider local unavailable: no model file \| ValueError: the memory index is locked by another process$/, error);
  assert.doesNotMatch(error, /INFO|memindex\.sy\b|File "/, error);
  // A child that says nothing wrong: no stderr part at all.
  const quiet = load({ command: process.execPath, args: [path.join(dir, "quiet.cjs")], timeoutMs: 5000, startTimeoutMs: 5000 });
  const q = await quiet.tools.get("memory_search")!(ctx).execute("1", { query: "anything" });
  assert.equal(q.details.unavailable, true);
  assert.doesNotMatch(q.details.error, /stderr:/, q.details.error);
});

// A scripted stand-in for `memindex mcp` (src/test/fake-memindex.ts).
const FAKE = fileURLToPath(new URL("./fake-memindex.js", import.meta.url));
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test("a child that is alive but stopped answering is dropped at the deadline; the next call starts a fresh one", async () => {
  const reg = load({ command: process.execPath, args: [FAKE], timeoutMs: 1500, startTimeoutMs: 10000 });
  const search = reg.tools.get("memory_search")!(ctx);
  const first = await search.execute("1", { query: "loquat" });
  assert.equal(first.details.results.length, 1, JSON.stringify(first.details));
  const pid = (await reg.client.call("memory_status", {})).pid as number;
  assert.ok(pid > 0);
  process.kill(pid, "SIGSTOP");  // alive, hung
  try {
    // One call runs into the deadline; another, with a longer one, is on the same child meanwhile.
    const t0 = Date.now();
    const [hung, waiting] = await Promise.allSettled([
      search.execute("2", { query: "loquat" }),
      reg.client.call("memory_search", { query: "loquat" }, undefined, [], 15000),
    ]);
    assert.equal(hung.status, "fulfilled");
    const h = (hung as PromiseFulfilledResult<any>).value.details;
    assert.equal(h.unavailable, true);
    assert.equal(h.timedOut, true);
    assert.match(h.error, /within 1500 ms/);
    // The waiting call failed over, once, to a fresh child (within its own deadline).
    assert.equal(waiting.status, "fulfilled", String((waiting as PromiseRejectedResult).reason));
    const w = (waiting as PromiseFulfilledResult<any>).value;
    assert.notEqual(w.pid, pid);
    assert.ok(Date.now() - t0 < 15000);
    // And the next call is answered (by the fresh child) at once, not after another deadline.
    const t1 = Date.now();
    const next = await search.execute("3", { query: "loquat" });
    assert.equal(next.details.results[0].path, "memory/2026-05-01.md", JSON.stringify(next.details));
    assert.ok(Date.now() - t1 < 1500);
    // The hung child was ended (closing the stdio session kills it).
    for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(alive(pid), false, "the hung child was left running");
  } finally {
    if (alive(pid)) process.kill(pid, "SIGKILL");
    await reg.client.close();
  }
});

test("the memory runtime's status reports memindex's backend", async () => {
  const reg = load({ command: process.execPath, args: [FAKE], timeoutMs: 5000, startTimeoutMs: 10000 });
  try {
    const { manager } = await reg.capability.runtime.getMemorySearchManager({ agentId: "main" });
    assert.equal(manager.status().backend, "qmd");  // the fake's memory_status says qmd
    assert.equal(manager.status().custom.engine, "memindex");
    await manager.close();
  } finally {
    await reg.client.close();
  }
});

test("openclaw memory search on an agent never indexed builds its index and answers", async () => {
  const client = load({ command: process.execPath, args: [FAKE], timeoutMs: 5000 }).client;
  const pendingEnv = process.env.FAKE_MEMINDEX_MODE;
  process.env.FAKE_MEMINDEX_MODE = "pending";
  const { root, actions } = recorder();
  const printed: string[] = [];
  const errors: string[] = [];
  addMemoryCommands(root, client, { log: (l) => printed.push(l), error: (l) => errors.push(l) });
  try {
    await actions.get("search")!("loquat crate", { agent: "work" });
    assert.deepEqual(errors, []);  // no "being built" warning: it was built
    assert.match(printed.join("\n"), /^0\.900 memory\/2026-05-01\.md:1-3\nThe loquat crate is blue\.$/);
    await actions.get("search")!("loquat crate", { json: true });
    const answered = JSON.parse(printed.pop()!);
    assert.deepEqual(answered.calls, ["memory_search", "memory_index", "memory_search"]);
    assert.equal(answered.results.length, 1);
    assert.equal(answered.indexing, undefined);
  } finally {
    if (pendingEnv === undefined) delete process.env.FAKE_MEMINDEX_MODE;
    else process.env.FAKE_MEMINDEX_MODE = pendingEnv;
    await client.close();
  }
});

// Looked up on PATH by hand: OpenClaw's install scanner refuses a plugin folder whose files spawn
// processes themselves (the MCP SDK's transport, in node_modules, is not scanned).
function onPath(cmd: string): boolean {
  const dirs = cmd.includes(path.sep) ? [""] : (process.env.PATH ?? "").split(path.delimiter);
  return dirs.some((d) => {
    try {
      accessSync(path.join(d, cmd), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}
const MEMINDEX = process.env.MEMINDEX_COMMAND ?? "memindex";
const haveMemindex = onPath(MEMINDEX);

/** A scratch OpenClaw home with one memory note, named to this process as the gateway names it to memindex. */
function scratchOpenClaw(rel: string, text: string): string {
  const root = mkdtempSync(path.join(tmpdir(), "memindex-plugin-"));
  mkdirSync(path.dirname(path.join(root, "ws", rel)), { recursive: true });
  writeFileSync(path.join(root, "ws", rel), text);
  writeFileSync(path.join(root, "openclaw.json"), JSON.stringify({ agents: { defaults: { workspace: path.join(root, "ws") } } }));
  process.env.OPENCLAW_STATE_DIR = path.join(root, "state");
  process.env.OPENCLAW_CONFIG_PATH = path.join(root, "openclaw.json");
  return root;
}

test("real memindex mcp: search, read and status through the plugin", { skip: !haveMemindex && `no ${MEMINDEX}` }, async () => {
  scratchOpenClaw("memory/2026-01-05.md", "# Log\n\nThe persimmon ladder is in shed 3.\n");
  for (const flavor of ["capability", "split"] as const) {
    const reg = load({ command: MEMINDEX, timeoutMs: 20000 }, flavor);
    for (const s of reg.services) await s.start();
    try {  // (a failed assertion must still stop the child, or node's runner never exits)
    const search = reg.tools.get("memory_search")!(ctx);
    let res;
    for (let i = 0; i < 60; i++) {  // the first search schedules the index build
      res = await search.execute("1", { query: "persimmon ladder", corpus: "memory" });
      if (res.details.results.length) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(res.details.results[0].path, "memory/2026-01-05.md", JSON.stringify(res.details));
    // OpenClaw numbers the empty line after the final newline: a 3-line note is cited 1-4.
    assert.equal(res.details.results[0].citation, "memory/2026-01-05.md#L1-L4");
    const got = await reg.tools.get("memory_get")!(ctx).execute("2", { path: "memory/2026-01-05.md", from: 3, lines: 1 });
    assert.equal(got.details.text.split("\n")[0], "The persimmon ladder is in shed 3.");
    const runtime = flavor === "capability" ? reg.capability.runtime : reg.runtime;
    const { manager } = await runtime.getMemorySearchManager({ agentId: "main" });
    assert.equal(manager.status().files, 1);
    const managed = (await manager.search("persimmon"))[0];
    assert.equal(managed.path, "memory/2026-01-05.md");
    assert.equal("corpus" in managed || "citation" in managed, false);
    assert.equal("provenance" in managed, flavor === "capability");  // 2026.9's manager hits carry it
    await manager.close();  // the gateway's service runs: the child stays for the next call
    assert.notEqual(reg.client.client, null);
    if (flavor === "capability") {  // 2026.9's provenance, as memindex gives it
      assert.equal(res.details.results[0].provenance.originClass, "agent");
      assert.equal(typeof res.details.results[0].provenance.observedAt, "number");
    }
    } finally {
      for (const s of reg.services) await s.stop();
    }
  }
});

// A running `memindex mcp --http` (started by tests/test_openclaw_plugin.py, which sets these).
const URL_ = process.env.MEMINDEX_MCP_URL;
test("url: a running memindex mcp --http, its token read from the named variable", { skip: !URL_ && "MEMINDEX_MCP_URL unset" }, async () => {
  const reg = load({ url: URL_, tokenEnv: "MEMINDEX_TEST_TOKEN", timeoutMs: 20000 });
  const search = reg.tools.get("memory_search")!(ctx);
  let res;
  for (let i = 0; i < 60; i++) {
    res = await search.execute("1", { query: "quince orchard" });
    if (res.details.results?.length) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.equal(res.details.results[0].path, "memory/2026-02-01.md", JSON.stringify(res.details));
  for (const s of reg.services) await s.stop();
  const wrong = load({ url: URL_, tokenEnv: "MEMINDEX_TEST_WRONG_TOKEN", timeoutMs: 5000 });
  const refused = await wrong.tools.get("memory_search")!(ctx).execute("2", { query: "quince orchard" });
  assert.equal(refused.details.unavailable, true);
  assert.match(refused.details.error, /401|nauthorized/, refused.details.error);
});

/** A commander-shaped recorder of what the plugin's CLI registers, whose actions the test runs. */
function recorder(): { root: Command; actions: Map<string, (...a: any[]) => Promise<unknown>>; options: Map<string, string[]> } {
  const actions = new Map<string, (...a: any[]) => Promise<unknown>>();
  const options = new Map<string, string[]>();
  const sub = (name: string): Command => {
    const c: Command = {
      command: (n: string) => sub(n),
      description: () => c,
      option: (flags: string) => { options.set(name, [...options.get(name) ?? [], flags.split(" ")[0]]); return c; },
      argument: () => c,
      action: (fn) => { actions.set(name, fn as any); return c; },
    };
    return c;
  };
  return { root: sub("memory"), actions, options };
}

test("openclaw memory status|search|index through the plugin's CLI, on a real memindex", { skip: !haveMemindex && `no ${MEMINDEX}` }, async () => {
  const root = scratchOpenClaw("memory/2026-04-01.md", "# Log\n\nThe medlar tree was pruned.\n");
  const reg = load({ command: MEMINDEX, timeoutMs: 60000 });
  // Two registrations, so `memory` refused (memory-core registered it first) leaves `memindex`.
  assert.deepEqual(reg.cli, ["memory", "memindex"]);
  const { root: cmd, actions, options } = recorder();
  const printed: string[] = [];
  const errors: string[] = [];
  addMemoryCommands(cmd, reg.client, { log: (l) => printed.push(l), error: (l) => errors.push(l) });
  // memory-core's flags, so a user's `openclaw memory ...` habits carry over.
  assert.deepEqual(options.get("search"), ["--query", "--agent", "--max-results", "--min-score", "--json"]);
  assert.ok(options.get("index")!.includes("--force") && options.get("status")!.includes("--deep"));

  await actions.get("index")!({});
  assert.match(printed.pop()!, /^Memory index updated \(main\): 1 files indexed, 0 removed, 0 unchanged\.$/);
  await actions.get("status")!({});
  const status = printed.pop()!;
  assert.match(status, /^Memory Search \(main\) · memindex$/m);
  assert.match(status, /^Indexed: 1\/1 files · \d+ chunks$/m);
  assert.match(status, /^Dirty: no$/m);
  assert.ok(status.includes(`Store: ${path.join(root, "state", "memindex", "main.sqlite")}`), status);
  await actions.get("search")!("medlar pruned", {});
  assert.match(printed.pop()!, /^\d\.\d{3} memory\/2026-04-01\.md:1-4\n/);
  await actions.get("search")!(undefined, {});
  assert.match(errors.pop()!, /Missing search query/);
  process.exitCode = 0;
  assert.deepEqual(errors, []);
  // Each command ends the child it started (a one-shot CLI process must exit).
  assert.equal(reg.client.client, null);
  // So does the memory runtime's manager outside a gateway (`openclaw status --all`).
  const { manager } = await reg.capability.runtime.getMemorySearchManager({ agentId: "main" });
  assert.equal(manager.status().files, 1);
  await manager.close();
  assert.equal(reg.client.client, null);
});

test("status, search and index lines from memindex payloads", () => {
  const lines = statusLines({ agentId: "ops", provider: "none", requestedProvider: "openai", model: "fts-only",
    sources: ["memory"], files: 2, chunks: 5, dirty: true, store: "/s/ops.sqlite", workspace: "/w",
    scan: { totalFiles: 3, issues: [] }, problems: ["one file too large"] });
  assert.deepEqual(lines.slice(0, 8), ["Memory Search (ops) · memindex", "Provider: none (requested: openai)",
    "Model: fts-only", "Sources: memory", "Indexed: 2/3 files · 5 chunks", "Dirty: yes", "Store: /s/ops.sqlite", "Workspace: /w"]);
  assert.deepEqual(lines.slice(-2), ["Issues:", "  one file too large"]);
  assert.deepEqual(searchLines({ results: [] }), ["No matches."]);
  assert.deepEqual(indexLines({ agentId: "main", to_index: 3, to_delete: 1, unchanged: 7, failed: 1 }), [
    "Memory index updated (main): 3 files indexed, 1 removed, 7 unchanged.",
    "Memory index WARNING (main): 1 files not fully indexed; see `openclaw memory status`."]);
});
