// A stand-in for `memindex mcp` (stdio) whose behaviour the tests choose, for what a real memindex
// does not do on demand. Every answer carries its pid, so a test can tell a restarted child and stop
// (SIGSTOP) this one. FAKE_MEMINDEX_MODE=pending: an agent not yet indexed, as memindex answers it
// (no results, `indexing: "pending"`, the warning) until memory_index is called in this process.
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const pending = process.env.FAKE_MEMINDEX_MODE === "pending";
let indexed = !pending;
const calls: string[] = [];

const hit = { path: "memory/2026-05-01.md", startLine: 1, endLine: 3, score: 0.9, snippet: "The loquat crate is blue.",
  source: "memory" };
const answers: Record<string, (args: Record<string, unknown>) => Record<string, unknown>> = {
  memory_search: () => indexed
    ? { results: [hit], provider: "none", model: "fts-only", backend: "builtin" }
    : { results: [], provider: "none", model: "fts-only", backend: "builtin", indexing: "pending",
        warning: "the memory index is being built; results will appear shortly" },
  memory_index: (args) => {
    indexed = true;
    return { agentId: args.agent ?? "main", to_index: 1, to_delete: 0, unchanged: 0 };
  },
  memory_status: () => ({ agentId: "main", backend: "qmd", files: indexed ? 1 : 0, chunks: indexed ? 1 : 0, dirty: !indexed }),
};

const server = new Server({ name: "fake-memindex", version: "0.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: Object.keys(answers).map((name) => ({ name, inputSchema: { type: "object" as const,
    properties: { query: { type: "string" }, agent: { type: "string" }, force: { type: "boolean" } } } })),
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const name = req.params.name;
  calls.push(name);
  const payload = { ...answers[name]((req.params.arguments ?? {}) as Record<string, unknown>), pid: process.pid, calls: [...calls] };
  return { content: [{ type: "text", text: JSON.stringify(payload) }], structuredContent: payload };
});
await server.connect(new StdioServerTransport());
