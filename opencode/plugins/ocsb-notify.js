// ocsb-notify: desktop notifications when a session finishes or fails (OCSB_NOTIFICATIONS=1).
// ocsb gives the sandbox a session bus socket from xdg-dbus-proxy that may only talk to
// org.freedesktop.Notifications; nothing else of the desktop (no notify-send, no npm D-Bus
// library) is inside the sandbox, so this file carries its own minimal D-Bus client over
// node:net (works in Bun and Node): SASL EXTERNAL, Hello, one Notify call, close.
// EXTERNAL is tried with our uid first; if the bus refuses it (a uid that a user namespace
// maps to another one; xdg-dbus-proxy 0.1.4 passes the client's AUTH line through unchanged),
// once more without one ("AUTH EXTERNAL", "DATA"), so the bus uses the socket's credentials.
//
// Notifications (exact texts):
//   session.idle  -> summary "OpenCode: <basename of the project directory>",
//                    body    "<session title>: done"
//   session.error -> same summary, body "<session title>: error"
// The title comes from client.session.get; when that fails the title is "Session". Sessions
// with a parentID (subagents) are skipped, and so are user aborts (MessageAbortedError) and the
// session.idle that follows an error of the same session (the error already said it).
// Without DBUS_SESSION_BUS_ADDRESS the plugin does nothing. It never throws into OpenCode
// (which does not await event hooks): failures are logged once per plugin instance through
// client.app.log (service "ocsb-notify", level "warn").
//
// The default export is OpenCode's "v1" plugin object ({ id, server }). It is needed because
// the file also has named exports for the tests (notify, socketPath, methodCall): without a
// default export OpenCode calls EVERY exported function as a plugin factory.
import net from "node:net";
import path from "node:path";

const TIMEOUT_MS = 3000;

// --- D-Bus address -------------------------------------------------------------------------

// `unix:path=/run/user/1000/bus,guid=…` or `unix:abstract=…` (several addresses may be given,
// separated by ";"; the first unix one wins). Returns a path for net.connect, abstract
// sockets as "\0name". Other keys (guid) are ignored.
export function socketPath(address) {
  for (const entry of String(address || "").split(";")) {
    const colon = entry.indexOf(":");
    if (colon < 0 || entry.slice(0, colon) !== "unix") continue;
    const keys = {};
    for (const kv of entry.slice(colon + 1).split(",")) {
      const eq = kv.indexOf("=");
      if (eq > 0) keys[kv.slice(0, eq)] = decodeURIComponent(kv.slice(eq + 1));
    }
    if (keys.path) return keys.path;
    if (keys.abstract) return "\0" + keys.abstract;
  }
  throw new Error(`unsupported D-Bus address ${JSON.stringify(address)} (want unix:path=… or unix:abstract=…)`);
}

// --- Marshalling (little-endian) ----------------------------------------------------------

class Writer {
  constructor() {
    this.buf = Buffer.alloc(256);
    this.len = 0;
  }
  room(n) {
    if (this.len + n <= this.buf.length) return;
    const b = Buffer.alloc(Math.max(this.buf.length * 2, this.len + n));
    this.buf.copy(b, 0, 0, this.len);
    this.buf = b;
  }
  align(n) {
    const pad = (n - (this.len % n)) % n;
    this.room(pad);
    this.buf.fill(0, this.len, this.len + pad);
    this.len += pad;
  }
  byte(v) {
    this.room(1);
    this.buf.writeUInt8(v, this.len);
    this.len += 1;
  }
  u32(v) {
    this.align(4);
    this.room(4);
    this.buf.writeUInt32LE(v >>> 0, this.len);
    this.len += 4;
  }
  i32(v) {
    this.align(4);
    this.room(4);
    this.buf.writeInt32LE(v | 0, this.len);
    this.len += 4;
  }
  string(s) {
    // s and o: u32 byte length, bytes, NUL.
    const b = Buffer.from(String(s), "utf8");
    this.u32(b.length);
    this.room(b.length + 1);
    b.copy(this.buf, this.len);
    this.len += b.length;
    this.byte(0);
  }
  signature(s) {
    // g: byte length, ASCII, NUL.
    this.byte(s.length);
    this.room(s.length + 1);
    this.buf.write(s, this.len, "ascii");
    this.len += s.length;
    this.byte(0);
  }
  // An array: u32 byte length, padding to the element alignment (even when empty), elements.
  array(elementAlign, items, writeItem) {
    this.u32(0);
    const lenAt = this.len - 4;
    this.align(elementAlign);
    const start = this.len;
    for (const it of items) writeItem(it);
    this.buf.writeUInt32LE(this.len - start, lenAt);
  }
  done() {
    return this.buf.subarray(0, this.len);
  }
}

const METHOD_CALL = 1;
const METHOD_RETURN = 2;
const ERROR = 3;

// A METHOD_CALL message. `writeBody(w)` marshals the body (which starts 8-aligned, so the
// alignment inside it is relative to its own start).
export function methodCall(serial, { destination, path: objPath, iface, member, signature = "", writeBody }) {
  const body = new Writer();
  if (writeBody) writeBody(body);
  const bodyBuf = body.done();
  const w = new Writer();
  w.byte(0x6c); // 'l': little-endian
  w.byte(METHOD_CALL);
  w.byte(0); // flags
  w.byte(1); // protocol version
  w.u32(bodyBuf.length);
  w.u32(serial);
  const fields = [
    [1, "o", objPath],
    [2, "s", iface],
    [3, "s", member],
    [6, "s", destination],
  ];
  if (signature) fields.push([8, "g", signature]);
  // Header fields: a(yv), structs aligned to 8.
  w.array(8, fields, ([code, sig, value]) => {
    w.align(8);
    w.byte(code);
    w.signature(sig);
    if (sig === "g") w.signature(value);
    else w.string(value);
  });
  w.align(8);
  return Buffer.concat([w.done(), bodyBuf]);
}

function notifyCall(serial, summary, body) {
  return methodCall(serial, {
    destination: "org.freedesktop.Notifications",
    path: "/org/freedesktop/Notifications",
    iface: "org.freedesktop.Notifications",
    member: "Notify",
    signature: "susssasa{sv}i",
    writeBody: (w) => {
      w.string("OpenCode"); // app_name
      w.u32(0); // replaces_id
      w.string(""); // app_icon
      w.string(summary);
      w.string(body);
      w.array(4, [], () => {}); // actions: as
      w.array(8, [], () => {}); // hints: a{sv} (dict entries align to 8)
      w.i32(-1); // expire_timeout: server default
    },
  });
}

// --- Unmarshalling (just what replies need) -----------------------------------------------

const pad = (n, a) => (n + a - 1) & ~(a - 1);

// One whole message at the start of `buf`, or null if more bytes are needed.
function parseMessage(buf) {
  if (buf.length < 16) return null;
  const le = buf[0] === 0x6c;
  if (!le && buf[0] !== 0x42) throw new Error("D-Bus: bad endianness byte");
  const u32 = (o) => (le ? buf.readUInt32LE(o) : buf.readUInt32BE(o));
  const bodyLen = u32(4);
  const fieldsLen = u32(12);
  const bodyAt = pad(16 + fieldsLen, 8);
  const total = bodyAt + bodyLen;
  if (buf.length < total) return null;
  const msg = { type: buf[1], serial: u32(8), total, fields: {}, body: buf.subarray(bodyAt, total), le };
  // Header fields: (code y, variant). Only plain types appear in header fields.
  let o = 16;
  const end = 16 + fieldsLen;
  while (o < end) {
    o = pad(o, 8);
    if (o >= end) break;
    const code = buf[o];
    const sigLen = buf[o + 1];
    const sig = buf.toString("ascii", o + 2, o + 2 + sigLen);
    o += 3 + sigLen;
    if (sig === "s" || sig === "o") {
      o = pad(o, 4);
      const n = u32(o);
      msg.fields[code] = buf.toString("utf8", o + 4, o + 4 + n);
      o += 5 + n;
    } else if (sig === "g") {
      const n = buf[o];
      msg.fields[code] = buf.toString("ascii", o + 1, o + 1 + n);
      o += 2 + n;
    } else if (sig === "u") {
      o = pad(o, 4);
      msg.fields[code] = u32(o);
      o += 4;
    } else {
      break; // unknown field type: stop (the fields we need come as s/o/g/u)
    }
  }
  return msg;
}

function firstU32(msg) {
  return msg.body.length >= 4 ? (msg.le ? msg.body.readUInt32LE(0) : msg.body.readUInt32BE(0)) : undefined;
}

function firstString(msg) {
  if (msg.fields[8] !== undefined && !String(msg.fields[8]).startsWith("s")) return "";
  const n = firstU32(msg);
  return n === undefined ? "" : msg.body.toString("utf8", 4, 4 + n);
}

// --- The client -----------------------------------------------------------------------------

// Send one notification on the bus at `address`; resolves to the id the server assigned.
// Rejects (never hangs: TIMEOUT_MS) on any failure.
export function notify(address, summary, body, { timeoutMs = TIMEOUT_MS } = {}) {
  return new Promise((resolve, reject) => {
    let sock;
    let settled = false;
    const finish = (err, value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try {
        if (sock) sock.destroy();
      } catch {}
      if (err) reject(err);
      else resolve(value);
    };
    const timer = setTimeout(() => finish(new Error(`D-Bus: no answer within ${timeoutMs} ms`)), timeoutMs);
    let target;
    try {
      target = socketPath(address);
    } catch (e) {
      return finish(e);
    }

    let phase = "auth";
    let pending = Buffer.alloc(0);
    let serial = 0;
    let waitingFor = 0; // serial whose reply moves us on
    let anonymous = false; // retried as "AUTH EXTERNAL" without a uid
    const uid = typeof process.getuid === "function" ? process.getuid() : 0;

    const send = (msg) => sock.write(msg);
    const onMessage = (msg) => {
      if ((msg.type !== METHOD_RETURN && msg.type !== ERROR) || msg.fields[5] !== waitingFor) return; // signals etc.
      if (msg.type === ERROR) {
        const text = firstString(msg);
        return finish(new Error(`D-Bus ${phase}: ${msg.fields[4] || "error"}${text ? `: ${text}` : ""}`));
      }
      if (phase === "hello") {
        phase = "notify";
        waitingFor = ++serial;
        send(notifyCall(serial, summary, body));
      } else if (phase === "notify") {
        finish(null, firstU32(msg));
      }
    };

    try {
      sock = net.createConnection({ path: target });
    } catch (e) {
      return finish(e);
    }
    sock.on("error", (e) => finish(new Error(`D-Bus ${target.replace("\0", "@")}: ${e.message}`)));
    sock.on("close", () => finish(new Error(`D-Bus: connection closed during ${phase}`)));
    sock.on("connect", () => {
      const hex = Buffer.from(String(uid), "ascii").toString("hex");
      sock.write(Buffer.concat([Buffer.from([0]), Buffer.from(`AUTH EXTERNAL ${hex}\r\n`, "ascii")]));
    });
    sock.on("data", (chunk) => {
      try {
        pending = Buffer.concat([pending, chunk]);
        while (phase === "auth") {
          const nl = pending.indexOf("\r\n");
          if (nl < 0) return;
          const line = pending.toString("ascii", 0, nl);
          pending = pending.subarray(nl + 2);
          if (line.startsWith("REJECTED") && !anonymous) {
            // Our uid is not the one the bus sees (a user namespace that maps it elsewhere,
            // or a proxy that does not rewrite it): let the bus take the socket's credentials.
            anonymous = true;
            sock.write(Buffer.from("AUTH EXTERNAL\r\n", "ascii"));
            continue;
          }
          if (line === "DATA" && anonymous) {
            sock.write(Buffer.from("DATA\r\n", "ascii"));
            continue;
          }
          if (!line.startsWith("OK ")) return finish(new Error(`D-Bus authentication refused: ${line}`));
          phase = "hello";
          waitingFor = ++serial;
          sock.write(Buffer.from("BEGIN\r\n", "ascii"));
          send(
            methodCall(serial, {
              destination: "org.freedesktop.DBus",
              path: "/org/freedesktop/DBus",
              iface: "org.freedesktop.DBus",
              member: "Hello",
            }),
          );
        }
        for (;;) {
          const msg = parseMessage(pending);
          if (!msg) break;
          pending = pending.subarray(msg.total);
          onMessage(msg);
          if (settled) return;
        }
      } catch (e) {
        finish(e);
      }
    });
  });
}

// --- The plugin -----------------------------------------------------------------------------

export const OcsbNotify = async ({ client, directory }) => {
  const address = process.env.DBUS_SESSION_BUS_ADDRESS;
  const project = path.basename(String(directory || "")) || String(directory || "") || "OpenCode";
  const errored = new Set(); // sessions whose error was notified; their next idle is skipped
  let warned = false;

  const warn = async (message) => {
    if (warned) return;
    warned = true;
    try {
      await client.app.log({ body: { service: "ocsb-notify", level: "warn", message } });
    } catch {}
  };

  // The session, or null when it cannot be read.
  const session = async (id) => {
    try {
      const res = await client.session.get({ path: { id } });
      return (res && res.data) || null;
    } catch {
      return null;
    }
  };

  const send = async (id, what) => {
    const info = id ? await session(id) : null;
    if (info && info.parentID) return; // subagent
    const title = (info && info.title) || "Session";
    try {
      await notify(address, `OpenCode: ${project}`, `${title}: ${what}`);
    } catch (e) {
      await warn(`desktop notification failed: ${(e && e.message) || e}`);
    }
  };

  return {
    event: async ({ event }) => {
      try {
        if (!address || !event) return;
        const props = event.properties || {};
        if (event.type === "session.idle") {
          if (errored.delete(props.sessionID)) return;
          await send(props.sessionID, "done");
        } else if (event.type === "session.error") {
          if (props.error && props.error.name === "MessageAbortedError") return;
          if (props.sessionID) errored.add(props.sessionID);
          await send(props.sessionID, "error");
        }
      } catch (e) {
        await warn(`notification plugin error: ${(e && e.message) || e}`);
      }
    },
  };
};

export default { id: "ocsb-notify", server: OcsbNotify };
