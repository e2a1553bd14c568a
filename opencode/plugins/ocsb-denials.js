// ocsb-denials: always loaded by ocsb (not selectable). When a command the agent ran with the
// bash tool was refused by the egress filter, the tool's output ends with one line per denied
// host: the request, the deciding rule and its file:line, and what to ask the user for. The
// launcher (outside the sandbox) follows the filter's log and appends each refusal as a JSON
// line to $XDG_RUNTIME_DIR/egress-denials.jsonl ({time, request, rule, source, suggest, why});
// this plugin reads the records whose time falls within the command's run.
//
// Once per session: a host already reported in this session is summarised on one line
// ("denied again: host (2x)") instead of repeating the advice.
//
// The launcher writes a record shortly after the filter logs the refusal (it polls the log),
// so the plugin waits SETTLE_MS after the command before reading. It never throws into
// OpenCode: a missing or unreadable file means nothing to report.
import fs from "node:fs";
import path from "node:path";

const SETTLE_MS = 300;
const SLACK_S = 1;

export function recordsFile(env) {
  const dir = env.XDG_RUNTIME_DIR;
  return dir ? path.join(dir, "egress-denials.jsonl") : null;
}

// The records in [from, to] (seconds), newest file content only.
export function readRecords(file, from, to) {
  let text = "";
  try {
    const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | fs.constants.O_NOFOLLOW);
    try {
      if (!fs.fstatSync(fd).isFile()) return [];
      text = fs.readFileSync(fd, "utf8");
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    try {
      const r = JSON.parse(line);
      if (typeof r.time === "number" && r.time >= from && r.time <= to && typeof r.request === "string") out.push(r);
    } catch {}
  }
  return out;
}

// The lines to append for `records`, given what this session was told before (`told`: key ->
// count, updated in place).
export function report(records, told) {
  const fresh = new Map();
  const again = new Map();
  for (const r of records) {
    const key = `${r.request} ${r.rule}`;
    if (told.has(key) && !fresh.has(key)) {
      again.set(key, (again.get(key) || 0) + 1);
      told.set(key, told.get(key) + 1);
    } else if (!fresh.has(key)) {
      fresh.set(key, r);
      told.set(key, 1);
    }
  }
  const lines = [];
  for (const r of fresh.values()) {
    const by = r.source ? `${r.rule} (${r.source})` : r.rule;
    const ask = r.suggest
      ? `ask the user to add \`${r.suggest}\` to .opencode-sandbox/local/egress.conf (${r.why})`
      : `no rule can allow it: ${r.why}`;
    lines.push(`ocsb egress: ${r.request} was denied by ${by}; ${ask}.`);
  }
  if (again.size) {
    const list = [...again].map(([k, n]) => `${k.split(" ").slice(0, 2).join(" ")} (${n}x)`);
    lines.push(`ocsb egress: denied again, as reported before: ${list.join(", ")}.`);
  }
  return lines;
}

export const OcsbDenials = async () => {
  const file = recordsFile(process.env);
  const started = new Map();
  const told = new Map(); // sessionID -> Map(key -> count)
  return {
    "tool.execute.before": async (input) => {
      if (input.tool === "bash") started.set(input.callID, Date.now() / 1000);
    },
    "tool.execute.after": async (input, output) => {
      if (input.tool !== "bash" || !file) return;
      const from = started.get(input.callID);
      started.delete(input.callID);
      if (from === undefined) return;
      try {
        await new Promise((r) => setTimeout(r, SETTLE_MS));
        const records = readRecords(file, from - SLACK_S, Date.now() / 1000);
        if (!records.length) return;
        if (!told.has(input.sessionID)) told.set(input.sessionID, new Map());
        const lines = report(records, told.get(input.sessionID));
        if (lines.length && output && typeof output.output === "string") {
          output.output = `${output.output.replace(/\n*$/, "")}\n\n${lines.join("\n")}\n`;
        }
      } catch {}
    },
  };
};

export default { id: "ocsb-denials", server: OcsbDenials };
