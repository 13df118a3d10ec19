// The pre-compaction memory flush plan: the memory slot supplies it, so selecting memindex must not
// drop it. The same plan memory-core builds (extensions/memory-core/src/flush-plan.ts, 2026.9): when a
// session nears compaction the agent writes durable notes to memory/<today>.md, which memindex indexes.

const SILENT_REPLY_TOKEN = "NO_REPLY";
const DEFAULT_SOFT_TOKENS = 4000;
const DEFAULT_FORCE_TRANSCRIPT_BYTES = 2 * 1024 * 1024;
const DEFAULT_RESERVE_TOKENS_FLOOR = 20_000;
const MAX_RESERVE_RATIO = 0.25; // compaction headroom keeps three quarters of the model window

const TARGET_HINT = "Store durable memories only in memory/YYYY-MM-DD.md (create memory/ if needed).";
const APPEND_ONLY_HINT = "If memory/YYYY-MM-DD.md already exists, APPEND new content only and do not overwrite existing entries.";
const READ_ONLY_HINT = "Treat workspace bootstrap/reference files such as MEMORY.md, DREAMS.md, SOUL.md, and AGENTS.md as read-only during this flush; never overwrite, replace, or edit them.";
const NO_REPLY_HINT = `\n\nIf no user-visible reply is needed, start with ${SILENT_REPLY_TOKEN}.`;

const PROMPT = ["Pre-compaction memory flush.", TARGET_HINT, READ_ONLY_HINT, APPEND_ONLY_HINT,
  "Do NOT create timestamped variant files (e.g., YYYY-MM-DD-HHMM.md); always use the canonical YYYY-MM-DD.md filename.",
  `If nothing to store, reply with ${SILENT_REPLY_TOKEN}.`].join(" ");
const SYSTEM_PROMPT = ["Pre-compaction memory flush turn.",
  "The session is near auto-compaction; capture durable memories to disk.", TARGET_HINT, READ_ONLY_HINT,
  APPEND_ONLY_HINT, `You may reply, but usually ${SILENT_REPLY_TOKEN} is correct.`].join(" ");

type Cfg = { agents?: { defaults?: { userTimezone?: unknown; compaction?: { memoryFlush?: Record<string, unknown> } } } };

function nonNegativeInt(v: unknown): number | null {
  return typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.floor(v) : null;
}

const BYTE_UNITS: Record<string, number> = { b: 1, kb: 1024, k: 1024, mb: 1024 ** 2, m: 1024 ** 2, gb: 1024 ** 3, g: 1024 ** 3 };

/** "2mb", "512k", 1048576 -> bytes (OpenClaw's byte-size settings); null when unreadable. */
function byteSize(v: unknown): number | null {
  if (typeof v === "number") return nonNegativeInt(v);
  const m = typeof v === "string" ? /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(v) : null;
  const unit = m ? BYTE_UNITS[(m[2] || "b").toLowerCase()] : undefined;
  return m && unit ? Math.floor(Number(m[1]) * unit) : null;
}

function timezone(cfg: Cfg): string {
  const tz = cfg.agents?.defaults?.userTimezone;
  if (typeof tz === "string" && tz.trim()) {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone: tz.trim() });
      return tz.trim();
    } catch {
      // an unknown zone: the host's, as OpenClaw falls back
    }
  }
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

function dateStamp(now: Date, tz: string): string {
  const parts = new Intl.DateTimeFormat("en-US", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit" })
    .formatToParts(now);
  const get = (t: string) => parts.find((p) => p.type === t)?.value;
  return get("year") && get("month") && get("day") ? `${get("year")}-${get("month")}-${get("day")}` : now.toISOString().slice(0, 10);
}

export function buildMemoryFlushPlan(params: { cfg?: Cfg; nowMs?: number; contextWindowTokens?: number } = {}) {
  const cfg = params.cfg ?? {};
  const flush = cfg.agents?.defaults?.compaction?.memoryFlush ?? {};
  if (flush.enabled === false) return null;
  let softThresholdTokens = nonNegativeInt(flush.softThresholdTokens) ?? DEFAULT_SOFT_TOKENS;
  const forceFlushTranscriptBytes = byteSize(flush.forceFlushTranscriptBytes) ?? DEFAULT_FORCE_TRANSCRIPT_BYTES;
  let reserveTokensFloor = DEFAULT_RESERVE_TOKENS_FLOOR;
  const window = nonNegativeInt(params.contextWindowTokens);
  if (window) {
    reserveTokensFloor = Math.min(reserveTokensFloor, Math.floor(window * MAX_RESERVE_RATIO));
    softThresholdTokens = Math.min(softThresholdTokens, Math.floor((window - reserveTokensFloor) / 2));
  }
  const now = new Date(typeof params.nowMs === "number" && Number.isFinite(params.nowMs) ? params.nowMs : Date.now());
  const tz = timezone(cfg);
  const stamp = dateStamp(now, tz);
  const local = new Intl.DateTimeFormat("en-US", { timeZone: tz, dateStyle: "full", timeStyle: "short" }).format(now);
  const timeLine = `Current time: ${local} (${tz})\nReference UTC: ${now.toISOString().replace("T", " ").slice(0, 16)} UTC`;
  const model = typeof flush.model === "string" && flush.model.trim() ? flush.model.trim() : undefined;
  return {
    softThresholdTokens,
    forceFlushTranscriptBytes,
    reserveTokensFloor,
    model,
    prompt: `${(PROMPT + NO_REPLY_HINT).replaceAll("YYYY-MM-DD", stamp)}\n${timeLine}`,
    systemPrompt: (SYSTEM_PROMPT + NO_REPLY_HINT).replaceAll("YYYY-MM-DD", stamp),
    relativePath: `memory/${stamp}.md`,
  };
}
