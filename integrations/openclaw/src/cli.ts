// `openclaw memory status|search|index` (and `openclaw memindex ...`, the same commands under the
// plugin's own name) answered by memindex.
//
// OpenClaw keeps memory-core's `memory` CLI whatever the memory slot says: memory-core stays loaded
// as the dreaming sidecar of another memory plugin, and its commands read its own index
// (extensions/memory-core/cli-metadata.js registers `memory`; cli.runtime's getMemorySearchManager is
// memory-core's builtin manager, never the slot's). A plugin may register the `memory` root itself
// when its manifest lists it in `cliCommands`: OpenClaw then loads both owners for `openclaw memory`
// and keeps the first registration (loader: "cli command already registered"), in discovery order,
// where a plugin from a configured path (`plugins install -l`) comes before the bundled ones and an
// installed package after them (memory-core's then wins unless `plugins.entries.memory-core.enabled`
// is false). `openclaw memindex` has no other owner, so it always works.
import type { MemindexClient } from "./client.js";
import type { Json } from "./shapes.js";

// The slice of commander's Command the registrar uses (OpenClaw passes its own program).
export type Command = {
  command(name: string): Command;
  description(text: string): Command;
  option(flags: string, description: string, parse?: (value: string) => unknown): Command;
  argument(name: string, description: string): Command;
  action(fn: (...args: any[]) => unknown): Command;
};

// How long `index` waits for memindex (a search's deadline is seconds; a full rebuild is not).
const INDEX_TIMEOUT_MS = 30 * 60_000;

type Out = { log: (line: string) => void; error: (line: string) => void };
const STDOUT: Out = { log: (l) => process.stdout.write(`${l}\n`), error: (l) => process.stderr.write(`${l}\n`) };

export const CLI_ROOTS = {
  memory: "Search, inspect, and reindex memory files (memindex)",
  memindex: "memindex: status, search and index of the memory it serves to OpenClaw",
} as const;

function positiveInt(flag: string) {
  return (value: string): number => {
    const n = Number(value.trim());
    if (!Number.isInteger(n) || n < 1) throw Object.assign(new Error(`${flag} must be a positive integer.`), {
      code: "commander.invalidArgument", exitCode: 1 });
    return n;
  };
}

function finite(flag: string) {
  return (value: string): number => {
    const n = Number(value.trim());
    if (!value.trim() || !Number.isFinite(n)) throw Object.assign(new Error(`${flag} must be a finite number.`), {
      code: "commander.invalidArgument", exitCode: 1 });
    return n;
  };
}

const str = (v: unknown): string | undefined => (typeof v === "string" && v ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

/** memindex's memory_status as memory-core's `openclaw memory status` lays it out. */
export function statusLines(s: Json, deep = false): string[] {
  const agent = str(s.agentId) ?? str(s.agent) ?? "main";
  const scan = (s.scan ?? {}) as Json;
  const total = num(scan.totalFiles);
  const files = num(s.files) ?? 0;
  const requested = str(s.requestedProvider);
  const vector = (s.vector ?? {}) as Json;
  const fts = (s.fts ?? {}) as Json;
  const lines = [
    `Memory Search (${agent}) · memindex`,
    `Provider: ${str(s.provider) ?? "none"}${requested ? ` (requested: ${requested})` : ""}`,
    `Model: ${str(s.model) ?? "fts-only"}`,
  ];
  if (Array.isArray(s.sources) && s.sources.length) lines.push(`Sources: ${s.sources.join(", ")}`);
  lines.push(`Indexed: ${total !== undefined ? `${files}/${total}` : files} files · ${num(s.chunks) ?? 0} chunks`);
  lines.push(`Dirty: ${s.dirty ? "yes" : "no"}`);
  const store = str(s.store) ?? str(s.dbPath);
  if (store) lines.push(`Store: ${store}`);
  const workspace = str(s.workspace) ?? str(s.workspaceDir);
  if (workspace) lines.push(`Workspace: ${workspace}`);
  if (vector.enabled !== undefined) lines.push(`Vector: ${vector.available ? "ready" : vector.enabled ? "unavailable" : "disabled"}`);
  if (fts.enabled !== undefined) lines.push(`FTS: ${fts.enabled === false ? "disabled" : fts.available === false ? "unavailable" : "ready"}`);
  const pending = num(s.pending);
  if (pending) lines.push(`Pending: ${pending} files`);
  const reason = str(s.providerReason);
  if (reason && (deep || s.provider === "none")) lines.push(`Embeddings: ${reason}`);
  const issues = [...(Array.isArray(s.problems) ? s.problems : []), ...(Array.isArray(scan.issues) ? scan.issues : [])]
    .map((p) => (typeof p === "string" ? p : JSON.stringify(p)));
  if (issues.length) lines.push("Issues:", ...issues.map((p) => `  ${p}`));
  return lines;
}

/** memindex's memory_search as memory-core's `openclaw memory search` prints it. */
export function searchLines(raw: Json): string[] {
  const results = Array.isArray(raw.results) ? (raw.results as Json[]) : [];
  if (!results.length) return ["No matches."];
  const lines: string[] = [];
  for (const r of results) {
    lines.push(`${(num(r.score) ?? 0).toFixed(3)} ${r.path}:${r.startLine}-${r.endLine}`, String(r.snippet ?? ""), "");
  }
  return lines.join("\n").trim().split("\n");
}

/** memindex's memory_index answer as one line per agent, as `openclaw memory index` says it. */
export function indexLines(raw: Json): string[] {
  const agent = str(raw.agentId) ?? "main";
  const indexed = (num(raw.to_index) ?? 0) + (num(raw.queued) ?? 0) - (num(raw.vanished) ?? 0);
  const line = `Memory index updated (${agent}): ${Math.max(0, indexed)} files indexed, ${num(raw.to_delete) ?? 0} removed, ` +
    `${num(raw.unchanged) ?? 0} unchanged.`;
  const failed = num(raw.failed);
  return failed ? [line, `Memory index WARNING (${agent}): ${failed} files not fully indexed; see \`openclaw memory status\`.`] : [line];
}

/** The subcommands, on `root` (`openclaw memory` or `openclaw memindex`). Each run ends the memindex
 *  child it started, so the CLI process exits when the command is done. */
export function addMemoryCommands(root: Command, client: MemindexClient, out: Out = STDOUT): void {
  const run = (what: string, fn: () => Promise<void>) => async () => {
    try {
      await fn();
    } catch (err) {
      out.error(`memindex ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
      process.exitCode = 1;
    } finally {
      await client.close();
    }
  };
  const agentArg = (opts: Json) => (str(opts.agent) ? { agent: opts.agent } : {});

  root.command("status").description("Show memindex's index and provider status")
    .option("--agent <id>", "Agent id (default: the default agent)")
    .option("--json", "Print JSON")
    .option("--deep", "Also say why embeddings are (un)available")
    .option("--verbose", "Verbose logging")
    .action((opts: Json) => run("status", async () => {
      const s = await client.call("memory_status", agentArg(opts));
      if (opts.json) out.log(JSON.stringify(s, null, 2));
      else out.log(statusLines(s, Boolean(opts.deep)).join("\n"));
    })());

  root.command("search").description("Search memory through memindex")
    .argument("[query]", "Search query")
    .option("--query <text>", "Search query (alternative to positional argument)")
    .option("--agent <id>", "Agent id (default: the default agent)")
    .option("--max-results <n>", "Max results", positiveInt("--max-results"))
    .option("--min-score <n>", "Minimum score", finite("--min-score"))
    .option("--json", "Print JSON")
    .action((queryArg: string | undefined, opts: Json) => run("search", async () => {
      const query = (str(opts.query) ?? queryArg ?? "").trim();
      if (!query) {
        out.error("Missing search query. Provide a positional query or use --query <text>.");
        process.exitCode = 1;
        return;
      }
      const args: Json = { query, ...agentArg(opts) };
      if (num(opts.maxResults) !== undefined) args.maxResults = opts.maxResults;
      if (num(opts.minScore) !== undefined) args.minScore = opts.minScore;
      let raw = await client.call("memory_search", args);
      // An agent never indexed: memindex schedules the build and answers at once, but this one-shot
      // process ends the child when it exits, so the build would never run. Build it here (waiting,
      // as `index` does) and ask once more.
      if (!(Array.isArray(raw.results) && raw.results.length) && raw.indexing === "pending") {
        await client.call("memory_index", agentArg(opts), undefined, [], INDEX_TIMEOUT_MS);
        raw = await client.call("memory_search", args);
      }
      if (opts.json) {
        out.log(JSON.stringify(raw, null, 2));
        return;
      }
      if (typeof raw.warning === "string") out.error(raw.warning);
      out.log(searchLines(raw).join("\n"));
    })());

  root.command("index").description("Sync memindex's index now and wait for it")
    .option("--agent <id>", "Agent id (default: the default agent)")
    .option("--force", "Rebuild the whole index")
    .option("--json", "Print JSON")
    .option("--verbose", "Verbose logging")
    .action((opts: Json) => run("index", async () => {
      const args: Json = { ...agentArg(opts), ...(opts.force ? { force: true } : {}) };
      // A first index of a large workspace takes minutes, not a search's seconds.
      const raw = await client.call("memory_index", args, undefined, [], INDEX_TIMEOUT_MS);
      out.log(opts.json ? JSON.stringify(raw, null, 2) : indexLines(raw).join("\n"));
    })());
}

type Api = Record<string, any>;

/** Registers `memory` and `memindex` as two registrations: OpenClaw refuses a registration whose
 *  roots another plugin already holds, so `memory` lost to memory-core must not take `memindex` with it. */
export function registerMemoryCli(api: Api, client: MemindexClient): void {
  if (typeof api.registerCli !== "function") return;  // a host without plugin CLI commands
  for (const [name, description] of Object.entries(CLI_ROOTS)) {
    api.registerCli(({ program }: { program: Command }) => {
      addMemoryCommands(program.command(name).description(description), client);
    }, { descriptors: [{ name, description, hasSubcommands: true }] });
  }
}
