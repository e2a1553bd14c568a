// skill-compact-resurrect: skills loaded in a session survive compaction.
//
// A compaction replaces the conversation with a summary, so the text of skills the agent loaded
// with OpenCode's `skill` tool is gone afterwards. This plugin appends that text again, as one
// synthetic user message (noReply) right after the summary:
//   <restored-skill name="NAME">
//   …the skill tool's output…
//   </restored-skill>
//
// Which skills: the completed `skill` tool parts in the session's whole history
// (client.session.messages, which still lists the messages before a compaction; OpenCode never
// prunes skill outputs), the newest output per name. Reading the history instead of recording
// tool calls in memory keeps this working for a session continued after OpenCode restarted,
// and for skills that were loaded before an earlier compaction.
//
// Hooks (checked against OpenCode 1.18.33; launcher/tests/suite/plugins.rs tests both kinds of
// compaction):
// - experimental.session.compacting: runs (awaited) before the summary is generated. It
//   collects the skills, remembers them for this compaction, and adds one line naming them to
//   the compaction prompt (OpenCode appends `context` after its summary template), so the
//   summary can say which skills were in use.
// - experimental.compaction.autocontinue: runs only for automatic compactions, after the
//   summary and just before OpenCode adds its synthetic "Continue if you have next steps…" user
//   message and runs that turn. Appending the skills here puts them after the summary and
//   before that message, so the continuation turn already sees them.
// - event session.compacted, then session.idle: for manual compactions (/compact, POST
//   /session/{id}/summarize) and those that replay the user's message, the skills are appended
//   once the session is idle. Earlier (e.g. right at session.compacted, while OpenCode's loop
//   still runs) a new user message would become the loop's latest one and OpenCode would answer
//   it with an extra model turn, noReply notwithstanding; in an automatic compaction it would
//   also land after the "Continue…" turn had started without it.
// If another plugin disables the auto-continue turn after this one ran, OpenCode answers the
// restored message instead (one model turn). Failures are logged as warnings starting with
// "skill-compact-resurrect: " (client.app.log) and never thrown into OpenCode.
const SERVICE = "skill-compact-resurrect";

export const SkillCompactResurrect = async ({ client }) => {
  // sessionID -> { skills: Map(name -> text), last: {agent, providerID, modelID, variant?} | undefined,
  //               compacted: bool } for a compaction in progress (set by the compacting hook)
  const pending = new Map();

  const warn = (message, error) =>
    client.app
      .log({ body: { service: SERVICE, level: "warn", message: `${SERVICE}: ${message}: ${error && (error.stack || error)}` } })
      .catch(() => {});

  async function collect(sessionID) {
    const res = await client.session.messages({ path: { id: sessionID } });
    if (!res || !Array.isArray(res.data)) throw new Error(`messages of ${sessionID}: ${JSON.stringify(res && res.error)}`);
    const skills = new Map();
    let last;
    for (const { info, parts } of res.data) {
      if (info.role === "user" && info.model) last = { agent: info.agent, ...info.model };
      for (const p of parts || []) {
        if (p.type !== "tool" || p.tool !== "skill" || !p.state || p.state.status !== "completed") continue;
        const name = (p.state.input && p.state.input.name) || (p.state.metadata && p.state.metadata.name);
        if (name && typeof p.state.output === "string") {
          skills.delete(name);
          skills.set(name, p.state.output);
        }
      }
    }
    return { skills, last };
  }

  async function restore(sessionID, { skills, last }) {
    const text = [...skills].map(([n, t]) => `<restored-skill name="${n}">\n${t}\n</restored-skill>`).join("\n\n");
    const body = { noReply: true, parts: [{ type: "text", text, synthetic: true }] };
    // The agent and model of the latest user message (the compaction's), as OpenCode's own
    // "Continue…" message has them; otherwise the message would name the default agent.
    if (last) {
      Object.assign(body, { agent: last.agent, model: { providerID: last.providerID, modelID: last.modelID } });
      if (last.variant) body.variant = last.variant;
    }
    const res = await client.session.prompt({ path: { id: sessionID }, body });
    if (res && res.error) throw new Error(JSON.stringify(res.error));
  }

  return {
    "experimental.session.compacting": async (input, output) => {
      pending.delete(input.sessionID);
      try {
        const found = await collect(input.sessionID);
        if (!found.skills.size) return;
        pending.set(input.sessionID, { ...found, compacted: false });
        output.context.push(
          `Skills loaded in this session (their full text is restored after this summary): ${[...found.skills.keys()].join(", ")}`,
        );
      } catch (e) {
        await warn("reading the session's skills failed", e);
      }
    },
    "experimental.compaction.autocontinue": async (input, output) => {
      const p = pending.get(input.sessionID);
      if (!p || !output.enabled) return;
      pending.delete(input.sessionID);
      try {
        await restore(input.sessionID, p);
      } catch (e) {
        await warn("restoring skills failed", e);
      }
    },
    event: async ({ event }) => {
      const id = event.properties && event.properties.sessionID;
      const p = id && pending.get(id);
      if (!p) return;
      if (event.type === "session.compacted") {
        p.compacted = true;
        return;
      }
      const idle =
        event.type === "session.idle" ||
        (event.type === "session.status" && event.properties.status && event.properties.status.type === "idle");
      if (!idle || !p.compacted) return;
      pending.delete(id);
      try {
        await restore(id, p);
      } catch (e) {
        await warn("restoring skills failed", e);
      }
    },
  };
};
