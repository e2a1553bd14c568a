//! The integration tests of `ocsb`, one test binary (one link of the launcher, one harness).
//!
//! Modules marked `host` need root, the test user, network namespaces or the tools that
//! tests/install-deps.sh installs; they are built only with `--features host-tests` (as
//! `make test` does). Without it, `cargo test` as an ordinary user runs the rest.
//! Shared helpers are in the `testkit` crate; `support` holds what only these suites use.
// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "host-tests")]
mod support {
    // The sandbox harness: a world owned by ocsb-test, `__sandbox-run`, the probe, scenarios.
    pub mod sandbox;
}

mod suite {
    // init, config, egress render/explain, completions, exit codes, against temp repositories.
    mod cli;
    // `ocsb wt add | rm | list` against real git repositories.
    mod worktree;

    // host: the agent's own repository and the import gate: commits imported within a second, held when they must be.
    #[cfg(feature = "host-tests")]
    mod agent_git;
    // host: attacks on the agent's repository, the import gate and the live watch, each checked on the host.
    #[cfg(feature = "host-tests")]
    mod agent_git_attacks;
    // host: the Docker gateway against the real daemon: each way out refused, the project's own used.
    #[cfg(feature = "host-tests")]
    mod docker_gateway;
    // host: the gateway with Docker's defaults (docker0, iptables rules), and a daemon without rules refused.
    #[cfg(feature = "host-tests")]
    mod docker_stock;
    // host: what containers still left is moved aside at a session's end; another user gains nothing.
    #[cfg(feature = "host-tests")]
    mod docker_sweep;
    // host: classic builds on a stock daemon: ADD of URLs and ONBUILD triggers refused, COPY and RUN built.
    #[cfg(feature = "host-tests")]
    mod docker_build;
    // host: pulls on a stock daemon: registries judged by the egress rules, no reply echoed to the agent.
    #[cfg(feature = "host-tests")]
    mod docker_pull;
    // host: a pull's token service and blob redirects judged hop by hop, blobs loaded only as their digests say.
    #[cfg(feature = "host-tests")]
    mod docker_pull_hops;
    // host: what a container leaves on the project and takes of the host, on a stock daemon.
    #[cfg(feature = "host-tests")]
    mod docker_files;
    // host: files host tools act on by themselves (direnv, rustup, editors) at any depth: read-only, moved aside or reported, held by the gate.
    #[cfg(feature = "host-tests")]
    mod tool_files;
    // host: the tool files the user has: a rename above one leaves nothing open; thousands held, up to a bound.
    #[cfg(feature = "host-tests")]
    mod tool_files_held;
    // host: attacks on the tool files' registry and its enforcement from inside, each checked with the real tool on the host.
    #[cfg(feature = "host-tests")]
    mod tool_files_attacks;
    // host: `ocsb doctor` on real machine states, each check made to fail in turn.
    #[cfg(feature = "host-tests")]
    mod doctor;
    // host: `egress up` captured or piped returns; `down` means the process is gone.
    #[cfg(feature = "host-tests")]
    mod egress_cli;
    // host: the checkout rule: agent-planted code never runs in host git or host tools.
    #[cfg(feature = "host-tests")]
    mod git_guard;
    // host: the launcher trusts nothing the agent can write (state, project choice, settings).
    #[cfg(feature = "host-tests")]
    mod launcher_trust;
    // host: the desktop notification plugin through xdg-dbus-proxy on a private session bus.
    #[cfg(feature = "host-tests")]
    mod notify_plugin;
    // host: the skill-compact-resurrect plugin against a real `opencode serve`.
    #[cfg(feature = "host-tests")]
    mod plugins;
    // host: `ocsb run` end to end as ocsb-test, with the netlock, the filter and OpenCode.
    #[cfg(feature = "host-tests")]
    mod run_e2e;
    // host: the web front against real OpenCode: auth, SSE, agent turns, PTY, Tokens panel.
    #[cfg(feature = "host-tests")]
    mod run_web;
    // host: the numbered escape attempts of docs/escape-tests.md, each with a control.
    #[cfg(feature = "host-tests")]
    mod sandbox_escape;
    // host: `ocsb exec` end to end: settings mapped, filter started, lock probed, exit status.
    #[cfg(feature = "host-tests")]
    mod sandbox_exec;
    // host: escape test e39: no background or double-forked daemon outlives the launcher.
    #[cfg(feature = "host-tests")]
    mod sandbox_lifecycle;
    // host: the home by allowlist: 80+ credential canaries absent in exec and shell, agents' sockets out of reach.
    #[cfg(feature = "host-tests")]
    mod home_allowlist;
    // host: the netlock gid: the sandbox runs locked, probed before and while the command runs.
    #[cfg(feature = "host-tests")]
    mod sandbox_netlock;
    // host: OCSB_NETWORK=isolated: the sandbox's own namespace, everything out through the launcher.
    #[cfg(feature = "host-tests")]
    mod network_isolated;
    // host: OCSB_PUBLISH: a server the agent starts, reached from the host's loopback only.
    #[cfg(feature = "host-tests")]
    mod network_publish;
    // host: the user's ssh-agent through the launcher's filter: lists and signs, never changes.
    #[cfg(feature = "host-tests")]
    mod ssh_agent;
    // host: the sandbox's global git config: the user's identity and aliases, none of its tokens.
    #[cfg(feature = "host-tests")]
    mod git_config;
    // host: packaging/uninstall.sh removes exactly what `make install` put.
    #[cfg(feature = "host-tests")]
    mod uninstall;
}
