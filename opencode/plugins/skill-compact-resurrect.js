// skill-compact-resurrect: skills loaded in a session survive compaction.
// Tracks `skill` tool calls per session; after `session.compacted` it appends the skills' text
// again as a synthetic user message (no reply), so it is inside the post-compaction context.
const loaded = new Map(); // sessionID -> Map(skill name -> text)

export const SkillCompactResurrect = async ({ client }) => ({
  "tool.execute.after": async (input, output) => {
    if (input.tool !== "skill") return;
    const name = input.args && input.args.name;
    if (!name || !output || typeof output.output !== "string") return;
    if (!loaded.has(input.sessionID)) loaded.set(input.sessionID, new Map());
    loaded.get(input.sessionID).set(name, output.output);
  },
  "experimental.session.compacting": async (input, output) => {
    const skills = loaded.get(input.sessionID);
    if (skills && skills.size)
      output.context.push(`Skills loaded in this session (restored after compaction): ${[...skills.keys()].join(", ")}`);
  },
  event: async ({ event }) => {
    if (event.type !== "session.compacted") return;
    const id = event.properties && event.properties.sessionID;
    const skills = id && loaded.get(id);
    if (!skills || !skills.size) return;
    const text = [...skills].map(([n, t]) => `<restored-skill name="${n}">\n${t}\n</restored-skill>`).join("\n\n");
    await client.session.prompt({
      path: { id },
      body: { noReply: true, parts: [{ type: "text", text, synthetic: true }] },
    });
  },
});
