// OpenClaw memory-slot plugin: OpenClaw's own memory_search / memory_get (and the memory
// capability behind `openclaw status`, the memory prompt section and memory CLI) answered by memindex.
//
// Select it with plugins.slots.memory = "memindex". It starts `memindex mcp` (stdio) as a child of
// the gateway when the gateway starts (or at the first tool call in a process without services,
// e.g. the CLI), or connects to a running `memindex mcp --http` when `url` is configured. memindex
// reads OpenClaw's own config (OPENCLAW_CONFIG_PATH / OPENCLAW_STATE_DIR are passed through).
//
// The plugin API differs by release and is feature-detected: 2026.5+ registers one memory
// capability (`registerMemoryCapability`), late 2026.3 the split registerMemoryRuntime /
// registerMemoryPromptSection calls.
import { MemindexClient, MemindexToolError, MemindexUnavailable, parsePluginConfig } from "./client.js";
import type { OpenClawPaths } from "./client.js";
import { registerMemoryCli } from "./cli.js";
import { buildMemoryFlushPlan } from "./flush.js";
import {
  disabledSearch, failedRead, jsonResult, memoryPromptSection, readPayload, searchHit, searchPayload, unavailableSearch,
  DEFAULT_READ_LINES,
} from "./shapes.js";
import type { Flavor, Json } from "./shapes.js";

type Api = Record<string, any>;
type ToolCtx = { agentId?: string; sessionKey?: string; config?: Json } & Record<string, unknown>;

export const PLUGIN_ID = "memindex";

// The builtin tool contracts' input schemas (memory-core's MemorySearchSchema / MemoryGetSchema).
const CORPORA = ["memory", "wiki", "all", "sessions"];

function searchSchema(flavor: Flavor): Json {
  const properties: Json = {
    query: { type: "string", description: "What to look for, in natural language or keywords." },
    maxResults: { type: "integer", minimum: 1, description: "At most this many results." },
    minScore: { type: "number", description: "Drop results scoring below this (0-1)." },
  };
  if (flavor === "capability") {
    properties.corpus = { type: "string", enum: CORPORA, description: "memory: memory files only; sessions: session transcripts only; all / wiki: everything memindex indexes." };
  }
  return { type: "object", properties, required: ["query"], additionalProperties: false };
}

const GET_SCHEMA: Json = {
  type: "object",
  properties: {
    path: { type: "string", description: "Workspace-relative memory file, e.g. memory/2026-02-10.md or a search result's path." },
    from: { type: "integer", minimum: 1, description: "First line to read (1-based)." },
    lines: { type: "integer", minimum: 1, description: "How many lines to read from `from`." },
  },
  required: ["path"],
  additionalProperties: false,
};

const SEARCH_DESCRIPTION = "Mandatory recall step: search long-term memory (MEMORY.md, memory/*.md, configured extra paths and, when enabled, session transcripts; indexed by memindex) before answering questions about prior work, decisions, dates, people, preferences, or todos; returns top snippets with path + lines. If response has disabled=true or unavailable=true, memory retrieval failed: tell the user and include the warning/action guidance.";
const GET_DESCRIPTION = "Safe snippet read from MEMORY.md, memory/*.md or a path memory_search returned, with optional from/lines; use after memory_search to pull only the needed lines and keep context small.";

function num(params: Json, key: string): number | undefined {
  const v = params[key];
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

/** Where memindex finds OpenClaw's config and state: this process's own (env, else the runtime's resolver). */
function openclawPaths(api: Api): OpenClawPaths {
  let stateDir = process.env.OPENCLAW_STATE_DIR;
  if (!stateDir) {
    try {
      const resolved = api.runtime?.state?.resolveStateDir?.();
      if (typeof resolved === "string" && resolved) stateDir = resolved;
    } catch {
      // an older runtime without the resolver: memindex applies OpenClaw's default itself
    }
  }
  return { stateDir, configPath: process.env.OPENCLAW_CONFIG_PATH };
}

// OpenClaw may load a plugin more than once in a process (the gateway's registry, then one per tool
// resolution); every load shares one memindex session per configuration, so one child serves them all.
const CLIENTS = Symbol.for("memindex.openclaw.clients");

function sharedClient(config: ReturnType<typeof parsePluginConfig>, paths: () => OpenClawPaths, log: Api["logger"]): MemindexClient {
  const g = globalThis as unknown as Record<symbol, Map<string, MemindexClient> | undefined>;
  const clients = (g[CLIENTS] ??= new Map());
  const key = JSON.stringify({ ...config, ...paths() });
  let client = clients.get(key);
  if (!client) {
    client = new MemindexClient(config, paths, log);
    clients.set(key, client);
  }
  return client;
}

function reasonOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function createPlugin(api: Api) {
  const flavor: Flavor = typeof api.registerMemoryCapability === "function" ? "capability" : "split";
  const config = parsePluginConfig(api.pluginConfig);
  const client = sharedClient(config, () => openclawPaths(api), api.logger);

  async function search(params: Json, ctx: ToolCtx, signal?: AbortSignal): Promise<Json> {
    const query = params.query;
    if (typeof query !== "string" || !query.trim()) throw new Error("query required");
    const args: Json = { query };
    const maxResults = num(params, "maxResults");
    const minScore = num(params, "minScore");
    if (maxResults !== undefined) args.maxResults = Math.max(1, Math.floor(maxResults));
    if (minScore !== undefined) args.minScore = minScore;
    if (ctx.agentId) args.agent = ctx.agentId;
    if (ctx.sessionKey) args.sessionKey = ctx.sessionKey;
    // memindex's memory_search takes `corpus` from the release that added it; an older one would
    // refuse the unknown argument, so it goes only where memindex's schema lists it.
    if (typeof params.corpus === "string") args.corpus = params.corpus;
    try {
      return searchPayload(await client.call("memory_search", args, signal, ["corpus"]), flavor);
    } catch (err) {
      if (err instanceof MemindexToolError && err.payload) {
        if (err.payload.unavailable) return unavailableSearch(String(err.payload.error ?? err.message), flavor, undefined, err.payload);
        if (err.payload.disabled) return disabledSearch(String(err.payload.error ?? err.message), flavor);
      }
      const timeout = err instanceof MemindexUnavailable && err.deadline ? { timeoutMs: config.timeoutMs } : undefined;
      return unavailableSearch(reasonOf(err), flavor, timeout);
    }
  }

  async function read(params: Json, ctx: ToolCtx, signal?: AbortSignal): Promise<Json> {
    const path = params.path;
    if (typeof path !== "string" || !path.trim()) throw new Error("path required");
    const from = num(params, "from");
    let lines = num(params, "lines");
    // 2026.5+'s builtin reads a bounded excerpt when no `lines` is given; 2026.3's the whole file.
    if (lines === undefined && flavor === "capability") lines = DEFAULT_READ_LINES;
    const args: Json = { path };
    if (from !== undefined) args.from = Math.floor(from);
    if (lines !== undefined) args.lines = Math.floor(lines);
    if (ctx.agentId) args.agent = ctx.agentId;
    try {
      const raw = await client.call("memory_get", args, signal);
      return readPayload(raw, { path, from: args.from as number | undefined, lines: args.lines as number | undefined }, flavor);
    } catch (err) {
      // memindex's refusal of a path outside the memory files, under the builtin's code for it.
      const code = err instanceof MemindexToolError && /path rejected/i.test(err.message) ? "MEMORY_PATH_NOT_ALLOWED" : undefined;
      return failedRead(path, reasonOf(err), flavor, code);
    }
  }

  function tools(ctx: ToolCtx) {
    return {
      search: {
        label: "Memory Search",
        name: "memory_search",
        description: SEARCH_DESCRIPTION,
        parameters: searchSchema(flavor),
        execute: async (_id: string, params: Json, signal?: AbortSignal) => jsonResult(await search(params ?? {}, ctx, signal)),
      },
      get: {
        label: "Memory Get",
        name: "memory_get",
        description: GET_DESCRIPTION,
        parameters: GET_SCHEMA,
        execute: async (_id: string, params: Json, signal?: AbortSignal) => jsonResult(await read(params ?? {}, ctx, signal)),
      },
    };
  }

  // The active memory runtime: what OpenClaw's own consumers of the memory slot (status reports,
  // session recall) ask, answered from memindex's memory_status / memory_search / memory_get.
  async function getMemorySearchManager(params: { agentId?: string }) {
    const agent = params.agentId ? { agent: params.agentId } : {};
    let status: Json;
    try {
      status = await client.call("memory_status", agent);
    } catch (err) {
      return { manager: null, error: reasonOf(err) };
    }
    const providerStatus: Json = {
      ...status,
      // memindex's own backend (memory.backend: builtin, or qmd with the builtin index as fallback);
      // OpenClaw's status type knows only these two.
      backend: status.backend === "qmd" ? "qmd" : "builtin",
      custom: { ...(status.custom as Json | undefined), engine: "memindex",
        searchMode: status.mode ?? ((status.vector as Json | undefined)?.available ? "hybrid" : "fts-only") },
    };
    return {
      manager: {
        status: () => providerStatus,
        async search(query: string, opts: { maxResults?: number; minScore?: number; sessionKey?: string } = {}) {
          const raw = await client.call("memory_search", { query, ...agent, ...opts.maxResults ? { maxResults: opts.maxResults } : {}, ...opts.minScore !== undefined ? { minScore: opts.minScore } : {}, ...opts.sessionKey ? { sessionKey: opts.sessionKey } : {} });
          // The manager's hits as memory-core's manager returns them: the tool's presentation
          // (corpus, citation) is added by the tool, not here.
          return (Array.isArray(raw.results) ? (raw.results as Json[]) : []).map((r) => {
            const { corpus: _corpus, citation: _citation, ...hit } = searchHit(r, flavor);
            return hit;
          });
        },
        async readFile(p: { relPath: string; from?: number; lines?: number }) {
          const raw = await client.call("memory_get", { path: p.relPath, ...agent, ...p.from ? { from: p.from } : {}, ...p.lines ? { lines: p.lines } : {} });
          return readPayload(raw, { path: p.relPath, from: p.from, lines: p.lines }, flavor);
        },
        async probeEmbeddingAvailability() {
          const probe = status.embeddingProbe as Json | undefined;
          if (probe && typeof probe.ok === "boolean") return { ok: probe.ok, ...probe.error ? { error: String(probe.error) } : {} };
          return { ok: Boolean(status.provider && status.provider !== "none") };
        },
        async probeVectorAvailability() {
          return Boolean((status.vector as Json | undefined)?.available);
        },
        async close() {
          // In the gateway the child serves every later call; in a one-shot CLI process (`openclaw
          // status --all`) it is the only thing left keeping the process alive.
          if (!client.keepAlive) await client.close();
        },
      },
    };
  }

  const runtime = {
    getMemorySearchManager,
    resolveMemoryBackendConfig: () => ({ backend: "builtin" as const }),
    async closeAllMemorySearchManagers() {},
  };

  function register(): void {
    api.registerTool((ctx: ToolCtx) => tools(ctx).search, { names: ["memory_search"] });
    api.registerTool((ctx: ToolCtx) => tools(ctx).get, { names: ["memory_get"] });

    const promptBuilder = (p: { availableTools: Set<string>; citationsMode?: string }) =>
      memoryPromptSection(p.availableTools, p.citationsMode);
    if (flavor === "capability") {
      api.registerMemoryCapability({ deterministicRecallToolName: "memory_search", promptBuilder,
        flushPlanResolver: buildMemoryFlushPlan, runtime });
    } else {
      api.registerMemoryPromptSection?.(promptBuilder);
      api.registerMemoryFlushPlan?.(buildMemoryFlushPlan);
      api.registerMemoryRuntime?.(runtime);
    }

    registerMemoryCli(api, client);

    // The child lives as long as the gateway: started with it (so the first search is warm), stopped with it.
    api.registerService?.({
      id: "memindex",
      start: async () => {
        client.keepAlive = true;
        try {
          await client.connect();
        } catch (err) {
          // Not fatal for the gateway: every tool call says "unavailable" with this reason until it starts.
          api.logger?.warn?.(`memindex: ${reasonOf(err)}`);
        }
      },
      stop: async () => {
        client.keepAlive = false;
        await client.close();
      },
    });
  }

  return { flavor, client, register, search, read, getMemorySearchManager };
}

export default {
  id: PLUGIN_ID,
  name: "memindex",
  description: "OpenClaw's memory_search and memory_get answered by memindex",
  kind: "memory" as const,
  register(api: Api) {
    createPlugin(api).register();
  },
};
