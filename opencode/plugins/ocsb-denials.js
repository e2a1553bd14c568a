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
//
// A connection the sandbox itself refused never reaches the filter, so it leaves no record: in
// the netlock mode a client that ignores the proxy variables gets a bare EACCES (landlock) or
// EHOSTUNREACH (the lock's firewall). For those, the command's output is searched for the
// texts clients print for a refused connect that name its address (Node's "connect EACCES
// 192.0.2.1:80", ssh's "connect to host h port 22: Permission denied", Go's "connect: permission
// denied"), and one line says why and what to do instead: outside, the filter; on loopback, the
// declared ports.
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

// The refused-connect texts, each with the address and port where the client prints them.
const REFUSED = [
  // Node (net, http, fetch's cause): "connect EACCES 192.0.2.1:80", IPv6 without brackets.
  { re: /\bconnect (EACCES|EHOSTUNREACH) (\S+):(\d+)\b/g, addr: 2, port: 3, errno: 1 },
  // ssh (and git over ssh without GIT_SSH_COMMAND): "connect to host h port 22: Permission denied".
  { re: /\bconnect to host (\S+) port (\d+): (Permission denied|No route to host)/g, addr: 1, port: 2, errno: 3 },
  // Go: "dial tcp 192.0.2.1:443: connect: permission denied".
  { re: /\bdial tcp[46]? (\S+):(\d+): connect: (permission denied|no route to host)/g, addr: 1, port: 2, errno: 3 },
];

const ERRNO = {
  "Permission denied": "EACCES",
  "permission denied": "EACCES",
  "No route to host": "EHOSTUNREACH",
  "no route to host": "EHOSTUNREACH",
};

function isLoopback(host) {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\./.test(h) || /^::ffff:127\./.test(h);
}

// The lines for the refused connects in `text` (a command's output). `told` (key -> count) is
// this session's memory: each kind of advice is given once, later ones are listed briefly.
export function netlockNotes(text, told, env = {}) {
  const proxy = env.HTTPS_PROXY || env.HTTP_PROXY || "the proxy in HTTP_PROXY/HTTPS_PROXY";
  const seen = new Map();
  for (const p of REFUSED) {
    for (const m of text.matchAll(p.re)) {
      const errno = ERRNO[m[p.errno]] || m[p.errno];
      const target = `${m[p.addr]}:${m[p.port]}`;
      if (!seen.has(target)) seen.set(target, { loop: isLoopback(m[p.addr]), port: m[p.port], errno });
    }
  }
  const lines = [];
  const again = [];
  for (const [target, c] of seen) {
    const kind = c.loop ? "loopback" : "outside";
    if (told.has(kind)) {
      told.set(kind, told.get(kind) + 1);
      again.push(target);
      continue;
    }
    told.set(kind, 1);
    const what = `the connection to ${target}`;
    if (c.loop) {
      lines.push(
        `ocsb netlock: ${what} was refused by the sandbox (${c.errno}), not by a server: the agent reaches only the loopback ports the user declared; ` +
          `ask the user to add it to .opencode-sandbox/local/sandbox.conf (\`OCSB_LOOPBACK_PORTS=(${c.port})\`) and restart ocsb run.`,
      );
    } else {
      lines.push(
        `ocsb netlock: ${what} was refused by the sandbox (${c.errno}): only the egress filter (${proxy}) leads out; ` +
          `use a client that honours HTTP_PROXY/HTTPS_PROXY (curl without --noproxy; Node 22.21+/24.5+, as NODE_USE_ENV_PROXY=1 is set; older Node does not), ` +
          `or for another protocol ask the user to add \`connect host:port\` to .opencode-sandbox/local/egress.conf and tunnel through the filter (ncat --proxy).`,
      );
    }
  }
  if (again.length) lines.push(`ocsb netlock: refused again, as explained before: ${again.join(", ")}.`);
  return lines;
}

export const OcsbDenials = async () => {
  const file = recordsFile(process.env);
  const started = new Map();
  const told = new Map(); // sessionID -> Map(key -> count)
  const toldNetlock = new Map(); // sessionID -> Map(kind -> count)
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
        if (!told.has(input.sessionID)) told.set(input.sessionID, new Map());
        if (!toldNetlock.has(input.sessionID)) toldNetlock.set(input.sessionID, new Map());
        const lines = report(records, told.get(input.sessionID));
        if (output && typeof output.output === "string") {
          lines.push(...netlockNotes(output.output, toldNetlock.get(input.sessionID), process.env));
        }
        if (lines.length && output && typeof output.output === "string") {
          output.output = `${output.output.replace(/\n*$/, "")}\n\n${lines.join("\n")}\n`;
        }
      } catch {}
    },
  };
};

export default { id: "ocsb-denials", server: OcsbDenials };
