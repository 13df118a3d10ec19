// One MCP session with memindex, shared by every tool call of this OpenClaw process: a long-lived
// `memindex mcp` child over stdio (the default), or a running `memindex mcp --http` endpoint.
// Every call carries a deadline: a child that never starts, hangs, or dies answers "unavailable"
// with the reason, never a hung tool call.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { StringDecoder } from "node:string_decoder";

export const DEFAULT_COMMAND = "memindex";
export const DEFAULT_ARGS = ["mcp"];
// OpenClaw's own memory_search deadline (memory-core's DEFAULT_MEMORY_SEARCH_TIMEOUT_MS).
export const DEFAULT_TIMEOUT_MS = 30_000;
// How long a starting memindex may take to answer the MCP handshake (a cold Python start on a busy
// machine takes seconds). Tool calls do not wait for it past their own deadline.
export const DEFAULT_START_TIMEOUT_MS = 60_000;
// How many of the child's stderr lines saying what went wrong a failure quotes (the last ones),
// and how long a line it keeps of each.
const STDERR_REASON_LINES = 4;
const STDERR_LINE_CHARS = 300;
// memindex's stderr lines that say something went wrong: a WARNING/ERROR/CRITICAL log line (text
// "<asctime> LEVEL logger: message", or JSON), an `error: ...` line (also argparse's
// "prog: error: ..."). Its INFO lines (sync progress) are not a reason.
const LOG_PROBLEM = /^(?:\S+\s+){0,3}(?:WARNING|ERROR|CRITICAL|FATAL)\b|"level(?:name)?"\s*:\s*"(?:WARNING|ERROR|CRITICAL|FATAL)"/;
const ERROR_LINE = /^(?:[\w.-]+(?: [\w.-]+)*: )?error:/i;

/** Picks the reason lines out of a child's stderr, whole lines only: problem log lines, `error:`
 *  lines, and a Python Traceback's last line (the exception), the last few of them. */
export class StderrReasons {
  private partial = "";
  private inTraceback = false;
  private lines: string[] = [];

  push(chunk: string): void {
    const parts = (this.partial + chunk).split(/\r?\n/);
    this.partial = parts.pop() ?? "";
    if (this.partial.length > 64 * 1024) this.partial = "";  // a runaway line: never quoted (not whole)
    for (const line of parts) this.line(line);
  }

  private line(line: string): void {
    if (this.inTraceback) {
      if (/^\s/.test(line) || !line.trim()) return;  // the frames
      this.inTraceback = false;
      // "During handling of the above exception..." chains into another traceback
      if (!/^(During handling|The above exception)/.test(line)) this.keep(line);
      return;
    }
    if (/^Traceback \(most recent call last\):/.test(line)) {
      this.inTraceback = true;
      return;
    }
    if (LOG_PROBLEM.test(line) || ERROR_LINE.test(line.trim())) this.keep(line);
  }

  private keep(line: string): void {
    const t = line.trim();
    if (!t) return;
    this.lines.push(t.length > STDERR_LINE_CHARS ? `${t.slice(0, STDERR_LINE_CHARS)}…` : t);
    if (this.lines.length > STDERR_REASON_LINES) this.lines.shift();
  }

  get reasons(): string[] {
    return [...this.lines];
  }
}

export type PluginConfig = {
  command: string;
  args: string[];
  url?: string;
  tokenEnv?: string;
  timeoutMs: number;
  startTimeoutMs: number;
};

export function parsePluginConfig(raw: unknown): PluginConfig {
  const cfg = raw && typeof raw === "object" && !Array.isArray(raw) ? (raw as Record<string, unknown>) : {};
  const str = (v: unknown) => (typeof v === "string" && v.trim() ? v.trim() : undefined);
  const ms = (v: unknown, fallback: number) => typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : fallback;
  return {
    command: str(cfg.command) ?? DEFAULT_COMMAND,
    args: Array.isArray(cfg.args) && cfg.args.every((a) => typeof a === "string") ? (cfg.args as string[]) : DEFAULT_ARGS,
    url: str(cfg.url),
    tokenEnv: str(cfg.tokenEnv),
    timeoutMs: ms(cfg.timeoutMs, DEFAULT_TIMEOUT_MS),
    startTimeoutMs: ms(cfg.startTimeoutMs, DEFAULT_START_TIMEOUT_MS),
  };
}

/** Where memindex finds OpenClaw's config: passed as environment, never as secrets on a command line. */
export type OpenClawPaths = { stateDir?: string; configPath?: string };

/** A call memindex could not answer: `deadline` when it ran out of time. */
export class MemindexUnavailable extends Error {
  constructor(message: string, readonly deadline = false) {
    super(message);
    this.name = "MemindexUnavailable";
  }
}

/** A call memindex answered with a tool error (`isError`): its message, and a failed search's payload. */
export class MemindexToolError extends Error {
  constructor(message: string, readonly payload?: Record<string, unknown>) {
    super(message);
    this.name = "MemindexToolError";
  }
}

export type ToolSchema = { properties: Set<string> };

export class MemindexClient {
  private client: Client | null = null;
  private connecting: Promise<Client> | null = null;
  private stderr = new StderrReasons();
  private exitReason: string | null = null;
  private schemas = new Map<string, ToolSchema>();
  /** Set while a gateway runs the plugin's service: the child then serves every later call, and a
   *  runtime manager's close leaves it running. Here, not per plugin load: OpenClaw loads a plugin
   *  more than once per process, and every load shares this client. */
  keepAlive = false;

  constructor(readonly config: PluginConfig, private readonly paths: () => OpenClawPaths,
              private readonly log?: { warn?: (m: string) => void; info?: (m: string) => void }) {}

  /** Starts (or reconnects to) memindex; the gateway service calls it at start, tools on first use. */
  connect(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (!this.connecting) {
      this.connecting = this.open().then((c) => {
        this.client = c;
        return c;
      }).finally(() => {
        this.connecting = null;
      });
    }
    return this.connecting;
  }

  describe(): string {
    return this.config.url ? `memindex at ${this.config.url}` : `\`${[this.config.command, ...this.config.args].join(" ")}\``;
  }

  private async open(): Promise<Client> {
    this.stderr = new StderrReasons();
    this.exitReason = null;
    const transport = this.transport();
    const client = new Client({ name: "openclaw-memindex", version: "0.1.0" });
    transport.onclose = () => this.dropped(client, "memindex closed the connection");
    // A child that starts but never completes the handshake is closed (killed) at the deadline, so
    // the next call starts afresh instead of waiting on it forever.
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new MemindexUnavailable(
        this.failure(`${this.describe()} did not complete the MCP handshake within ${this.config.startTimeoutMs} ms`), true)),
      this.config.startTimeoutMs);
    });
    try {
      await Promise.race([(async () => {
        await client.connect(transport, { timeout: this.config.startTimeoutMs });
        const listed = await client.listTools(undefined, { timeout: this.config.startTimeoutMs });
        this.schemas = new Map(listed.tools.map((t) => [t.name, {
          properties: new Set(Object.keys((t.inputSchema?.properties ?? {}) as Record<string, unknown>)),
        }]));
      })(), expired]);
    } catch (err) {
      await client.close().catch(() => {});
      if (err instanceof MemindexUnavailable) throw err;
      throw new MemindexUnavailable(this.failure(`could not start ${this.describe()}`, err));
    } finally {
      clearTimeout(timer);
    }
    this.log?.info?.(`memindex: connected (${this.describe()})`);
    return client;
  }

  private transport(): Transport {
    if (this.config.url) {
      const token = this.config.tokenEnv ? process.env[this.config.tokenEnv] : undefined;
      return new StreamableHTTPClientTransport(new URL(this.config.url), {
        requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : undefined,
      });
    }
    const { stateDir, configPath } = this.paths();
    const env: Record<string, string> = { ...getDefaultEnvironment() };
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined) env[k] = v;
    // memindex reads OpenClaw's own config and state; the gateway's, not a default guessed twice.
    if (stateDir) env.OPENCLAW_STATE_DIR = stateDir;
    if (configPath) env.OPENCLAW_CONFIG_PATH = configPath;
    const stdio = new StdioClientTransport({ command: this.config.command, args: this.config.args, env, stderr: "pipe" });
    const reasons = this.stderr;
    const decoder = new StringDecoder("utf8");  // a character split across chunks stays whole
    stdio.stderr?.on("data", (chunk: Buffer) => reasons.push(decoder.write(chunk)));
    stdio.onerror = (err) => {
      this.exitReason = err.message;
    };
    return stdio;
  }

  /** Drops a session that stopped answering and closes it (ending a stdio child) in the background. */
  private abandon(client: Client, why: string): void {
    if (this.client !== client) return;  // already dropped (it exited, or another call's deadline)
    this.client = null;
    this.log?.warn?.(`memindex: ${why}; closed it, the next call starts it again`);
    void client.close().catch(() => {});
  }

  private dropped(client: Client, why: string): void {
    if (this.client === client) {
      this.client = null;
      this.log?.warn?.(`memindex: ${this.failure(why)}; the next call restarts it`);
    }
  }

  /** "<what>: <error>: stderr: <its last lines saying what went wrong>" — the reason a user can act on. */
  private failure(what: string, err?: unknown): string {
    const parts = [what];
    const msg = err instanceof Error ? err.message : err !== undefined ? String(err) : this.exitReason;
    if (msg) parts.push(msg);
    const reasons = this.stderr.reasons;
    if (reasons.length) parts.push(`stderr: ${reasons.join(" | ")}`);
    return parts.join(": ");
  }

  /** Whether memindex's tool `name` takes argument `arg` (e.g. memory_search's `corpus`). */
  accepts(name: string, arg: string): boolean {
    return this.schemas.get(name)?.properties.has(arg) ?? false;
  }

  /** Calls memindex's tool `name`; its structured payload, within `timeoutMs` (connecting included).
   *  `optional` arguments are passed only if memindex's schema for the tool lists them (a newer
   *  OpenClaw argument an older memindex would refuse as unknown). */
  async call(name: string, args: Record<string, unknown>, signal?: AbortSignal,
             optional: string[] = [], deadline = this.config.timeoutMs): Promise<Record<string, unknown>> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    const used: { client?: Client } = {};
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const why = this.failure(`${this.describe()} did not answer ${name} within ${deadline} ms`);
        controller.abort();
        // A memindex that is alive but not answering (hung, stopped) would time out every later call
        // too: drop it, so the next call starts a fresh one. Closing ends a stdio child; calls still
        // waiting on it fail over once to the new one, as when memindex exits. (A call still waiting
        // for the start leaves that to the start's own deadline.)
        if (used.client) this.abandon(used.client, why);
        reject(new MemindexUnavailable(why, true));
      }, deadline);
    });
    try {
      return await Promise.race([this.callOnce(name, args, controller.signal, optional, deadline, used), expired]);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  private async callOnce(name: string, args: Record<string, unknown>, signal: AbortSignal, optional: string[],
                         deadline: number, used: { client?: Client }, retried = false): Promise<Record<string, unknown>> {
    const client = await this.connect();
    used.client = client;
    const sent = { ...args };
    for (const arg of optional) if (!this.accepts(name, arg)) delete sent[arg];
    let result;
    try {
      result = await client.callTool({ name, arguments: sent }, undefined, { signal, timeout: deadline });
    } catch (err) {
      if (signal.aborted) throw new MemindexUnavailable(this.failure(`${name} was cancelled`), true);
      // The session ended under the call (memindex exited): once, on a fresh one (still within the deadline).
      if (!retried && this.client !== client) return this.callOnce(name, args, signal, optional, deadline, used, true);
      throw new MemindexUnavailable(this.failure(`${this.describe()} failed ${name}`, err));
    }
    const structured = result.structuredContent as Record<string, unknown> | undefined;
    const text = Array.isArray(result.content)
      ? result.content.map((c) => (c && typeof c === "object" && "text" in c ? String(c.text) : "")).join("\n") : "";
    if (result.isError) throw new MemindexToolError(text || `${name} failed`, structured);
    if (structured) return structured;
    try {
      return JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw new MemindexUnavailable(`memindex answered ${name} without a JSON payload: ${text.slice(0, 200)}`);
    }
  }

  async close(): Promise<void> {
    const client = this.client;
    this.client = null;
    await client?.close().catch(() => {});
  }
}
