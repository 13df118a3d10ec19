// Times warm memory_search through the OpenClaw plugin (integrations/openclaw/dist) as OpenClaw calls
// it in a turn: the plugin's registered tool's execute(), in process, over its `memindex mcp` child.
// For comparison, the same queries through a bare MCP SDK client on a second `memindex mcp` (the same
// SDK and transport the plugin uses, without the plugin). Driven by bench/plugin.py:
//   node bench/plugin_driver.mjs '<json: {pluginDir, command, args, queries, rounds}>'
// prints {"plugin": [seconds...], "direct": [seconds...]} on stdout.
import { pathToFileURL } from "node:url";
import path from "node:path";
import { createRequire } from "node:module";

const spec = JSON.parse(process.argv[2]);
const pluginUrl = pathToFileURL(path.join(spec.pluginDir, "dist", "index.js")).href;
const { default: entry } = await import(pluginUrl);
// The SDK from the plugin's own node_modules (the bench has none of its own).
const require = createRequire(path.join(spec.pluginDir, "package.json"));
const { Client } = await import(pathToFileURL(require.resolve("@modelcontextprotocol/sdk/client/index.js")).href);
const { StdioClientTransport } = await import(pathToFileURL(require.resolve("@modelcontextprotocol/sdk/client/stdio.js")).href);

// The host surface the plugin registers on (OpenClaw 2026.9's names); tool factories are called with
// the context of a direct session, as the gateway does.
const tools = new Map();
const services = [];
const api = {
  id: "memindex", pluginConfig: { command: spec.command, args: spec.args, timeoutMs: 30000 },
  logger: { info() {}, warn(m) { process.stderr.write(`${m}\n`); } },
  registerTool(factory, opts) { for (const n of opts.names) tools.set(n, factory); },
  registerMemoryCapability() {},
  registerService(s) { services.push(s); },
};
entry.register(api);
for (const s of services) await s.start();
const search = tools.get("memory_search")({ agentId: "main", sessionKey: "agent:main:main" });

async function timed(call) {
  for (const q of spec.queries) await call(q); // warm
  const out = [];
  for (let r = 0; r < spec.rounds; r++) {
    for (const q of spec.queries) {
      const t0 = process.hrtime.bigint();
      await call(q);
      out.push(Number(process.hrtime.bigint() - t0) / 1e9);
    }
  }
  return out;
}

const plugin = await timed(async (q) => {
  const res = await search.execute("bench", { query: q });
  if (res.details.unavailable || res.details.disabled) throw new Error(JSON.stringify(res.details));
});

const direct = new Client({ name: "bench", version: "0" });
await direct.connect(new StdioClientTransport({ command: spec.command, args: spec.args, env: process.env }));
const directTimes = await timed(async (q) => {
  const res = await direct.callTool({ name: "memory_search", arguments: { query: q, agent: "main", sessionKey: "agent:main:main" } });
  if (res.isError) throw new Error(JSON.stringify(res.content));
});
await direct.close();
for (const s of services) await s.stop();
process.stdout.write(JSON.stringify({ plugin, direct: directTimes }) + "\n");
