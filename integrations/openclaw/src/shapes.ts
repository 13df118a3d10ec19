// OpenClaw's builtin memory tool payloads (extensions/memory-core), field for field, built from
// memindex's answers. Two generations: late 2026.3 ("split" API: results carry path, startLine,
// endLine, score, snippet, source, citation; memory_get answers {text, path}) and 2026.5+ ("capability"
// API: results also carry `corpus`, memory_get answers with a `status` and a bounded excerpt).

export type Json = Record<string, unknown>;
export type Flavor = "split" | "capability";

// memory-core's default excerpt when memory_get is given no `lines` (DEFAULT_MEMORY_READ_LINES), 2026.5+.
export const DEFAULT_READ_LINES = 120;

// The builtin's hit fields in its order; 2026.5+ also shows the two partial scores when the search
// computed them, and 2026.9 the chunk's `provenance` ({originClass, sessionKind, observedAt}, after
// `source`); 2026.3's hits carried neither.
const RESULT_FIELDS = ["path", "startLine", "endLine", "score", "vectorScore", "textScore", "snippet", "source", "provenance"] as const;
const CAPABILITY_ONLY: Record<string, (v: unknown) => boolean> = {
  vectorScore: (v) => typeof v === "number",
  textScore: (v) => typeof v === "number",
  provenance: (v) => typeof v === "object" && v !== null && !Array.isArray(v),
};

/** One search hit as the builtin shows it: its fields only, in its order (memindex's own extras dropped). */
export function searchHit(raw: Json, flavor: Flavor): Json {
  const hit: Json = {};
  for (const k of RESULT_FIELDS) {
    const only = CAPABILITY_ONLY[k];
    if (!only) hit[k] = raw[k];
    else if (flavor === "capability" && only(raw[k])) hit[k] = raw[k];
  }
  if (flavor === "capability") hit.corpus = raw.source;
  if (typeof raw.citation === "string") hit.citation = raw.citation;
  return hit;
}

/** A memindex memory_search payload as the builtin's memory_search answer. */
export function searchPayload(raw: Json, flavor: Flavor): Json {
  const results = Array.isArray(raw.results) ? (raw.results as Json[]).map((r) => searchHit(r, flavor)) : [];
  const out: Json = {
    results,
    provider: raw.provider,
    model: raw.model,
    fallback: raw.fallback,
    citations: raw.citations,
    mode: raw.mode,
  };
  // A warning (index still being built, stale store) is surfaced as the builtin surfaces staleness.
  if (typeof raw.warning === "string") out.warning = raw.warning;
  if (typeof raw.action === "string") out.action = raw.action;
  return out;
}

const TIMEOUT_WARNING = "Memory search did not finish within its time limit.";
const UNAVAILABLE_WARNING = "Memory search is unavailable because memindex could not answer.";
const UNAVAILABLE_ACTION = "Check the memindex plugin (plugins.entries.memindex.config: command or url) and `memindex status`, then retry memory_search.";
const TIMEOUT_ACTION = "Retry memory_search after a short wait; if it keeps timing out, run `memindex status` for this agent.";

/** The builtin's failed-search answer (buildMemorySearchUnavailableResult): disabled + unavailable + the reason. */
export function unavailableSearch(reason: string, flavor: Flavor, timeout?: { timeoutMs: number }, base?: Json): Json {
  const error = reason.trim() || "memory search unavailable";
  const warning = typeof base?.warning === "string" ? base.warning : timeout ? TIMEOUT_WARNING : UNAVAILABLE_WARNING;
  const action = typeof base?.action === "string" ? base.action : timeout ? TIMEOUT_ACTION : UNAVAILABLE_ACTION;
  const out: Json = { results: [], disabled: true, unavailable: true };
  if (timeout && flavor === "capability") Object.assign(out, { timedOut: true, timeoutMs: timeout.timeoutMs });
  Object.assign(out, { error, warning, action });
  if (flavor === "capability") out.debug = { warning, action, error };
  return out;
}

/** The builtin's answer for a memory-disabled agent. */
export function disabledSearch(reason: string, flavor: Flavor): Json {
  const out: Json = { results: [], disabled: true, error: reason };
  if (flavor === "capability") out.warning = "Memory search is disabled for this agent.";
  return out;
}

/** A memindex memory_get payload as the builtin's memory_get answer. */
export function readPayload(raw: Json, req: { path: string; from?: number; lines?: number }, flavor: Flavor): Json {
  const text = typeof raw.text === "string" ? raw.text : "";
  const path = typeof raw.path === "string" ? raw.path : req.path;
  if (flavor === "split") return { text, path };
  const total = typeof raw.totalLines === "number" ? raw.totalLines : undefined;
  // memindex answers a missing memory file with empty text and no line count ("nothing recorded").
  if (total === undefined && !text) return { status: "not_found", text: "", path };
  const from = req.from ?? 1;
  const lines = total === undefined ? text.split("\n").length
    : Math.max(0, Math.min(req.lines ?? Infinity, total - from + 1));
  const out: Json = { status: "ok", text, path, from, lines };
  const next = from + lines;
  if (total !== undefined && next <= total) {
    out.text = `${text.replace(/\n$/, "")}\n\n[More content available. Use from=${next} to continue.]`;
    out.truncated = true;
    out.nextFrom = next;
  }
  return out;
}

/** The builtin's failed memory_get answer. */
export function failedRead(path: string, reason: string, flavor: Flavor, code = "MEMORY_READ_FAILED"): Json {
  if (flavor === "split") return { path, text: "", disabled: true, error: reason };
  return { path, text: "", status: "error", code, error: reason };
}

/** OpenClaw's tool result wrapper (jsonResult): the payload as pretty JSON text, and as details. */
export function jsonResult(payload: Json): { content: { type: "text"; text: string }[]; details: Json } {
  return { content: [{ type: "text", text: JSON.stringify(payload, null, 2) }], details: payload };
}

/** The memory section of the system prompt, as the builtin writes it for the tools the agent has. */
export function memoryPromptSection(availableTools: Set<string>, citationsMode?: string): string[] {
  const search = availableTools.has("memory_search");
  const get = availableTools.has("memory_get");
  if (!search && !get) return [];
  const guidance = search
    ? `Before answering anything about prior work, decisions, dates, people, preferences, or todos: run memory_search${get ? "; then use memory_get to pull only the needed lines" : ""}. If low confidence after search, say you checked.`
    : "Before answering anything about prior work, decisions, dates, people, preferences, or todos that point to a specific memory file: run memory_get to pull only the needed lines. If low confidence after reading, say you checked.";
  const citation = citationsMode === "off"
    ? "Citations are disabled: do not mention file paths or line numbers in replies unless the user explicitly asks."
    : "Citations: include Source: <path#line> when it helps the user verify memory snippets.";
  return ["## Memory Recall", guidance, "Report unavailable or stale recall to the user, including the returned warning and action.", citation, ""];
}
