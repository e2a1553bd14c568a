// ocsb-guard: always loaded by ocsb (not selectable). Two jobs:
// 1. shell.env: the agent's shells (bash tool and /shell) inherit OpenCode's environment; blank
//    the secrets OpenCode holds (its server password, its config, model-provider keys) so the
//    agent's commands do not see them. This cannot hide the server's own environment
//    (/proc/<pid>/environ): the sandbox is the boundary, this only keeps secrets out of
//    ordinary command output and logs.
// 2. tool.execute.before: refuse sudo and systemd-run in the model's bash tool even when they
//    are wrapped (bash -c "sudo ...", env sudo, /usr/bin/sudo), which text permission rules miss.
//    They would fail anyway (no_new_privs, no system bus); refusing early gives the model a
//    clear reason instead of a confusing failure.
const PROVIDER_KEYS = /(_API_KEY|_API_TOKEN)$|^AWS_(SECRET_ACCESS_KEY|SESSION_TOKEN|ACCESS_KEY_ID)$/;
const DENIED = /(^|[\s;&|(`'"\/=$])(sudo|systemd-run|doas|pkexec|run0)(?=$|[\s;&|)`'"])/;

export const OcsbGuard = async () => {
  const blank = new Set(["OPENCODE_SERVER_PASSWORD", "OPENCODE_CONFIG_CONTENT", "OCSB_BLANK_ENV"]);
  for (const k of (process.env.OCSB_BLANK_ENV || "").split(",")) if (k) blank.add(k);
  for (const k of Object.keys(process.env)) if (PROVIDER_KEYS.test(k)) blank.add(k);
  return {
    "shell.env": async (_input, output) => {
      for (const k of blank) output.env[k] = "";
    },
    "tool.execute.before": async (input, output) => {
      const cmd = output && output.args && output.args.command;
      if (input.tool === "bash" && typeof cmd === "string" && DENIED.test(cmd)) {
        throw new Error(
          "ocsb: sudo, systemd-run, doas, pkexec and run0 are not available in this sandbox " +
            "(no_new_privs, no system bus). Ask the user to run this command outside the sandbox.",
        );
      }
    },
  };
};
