//! The package plugin `skill-compact-resurrect` against a real `opencode serve` on 127.0.0.1 with
//! the scripted provider: a skill the agent loaded (OpenCode's `skill` tool) is appended again
//! after a compaction, for a manual compaction (`POST /session/{id}/summarize`) and an automatic
//! one (the same call with `"auto": true`: OpenCode then adds its "Continue…" turn), and again
//! at a later compaction after OpenCode restarted; a session that loaded no skill gets nothing.
//! Everything runs in a network namespace of the test's own with only `lo` (needs root).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::Netns;
use testkit::Proc;
use testkit::http::{basic, http};
use testkit::opencode::*;

const T: Duration = Duration::from_secs(60);
const BODY_LINE: &str = "ROLLBACK-WITH-FLAG-7";
const RESTORED: &str = "<restored-skill name=\"deploy-notes\">";
const CONTEXT_LINE: &str = "Skills loaded in this session";
const CONTINUE: &str = "Continue if you have next steps";
const SECRET: &str = "server-secret-456";

struct Server {
    dir: tempfile::TempDir,
    _provider: Proc,
    opencode: Option<Proc>,
    content: String,
    addr: SocketAddr,
    auth: String,
    /// Last: dropped after the processes in it were stopped.
    _ns: Netns,
}

fn plugin_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../opencode/plugins/skill-compact-resurrect.js")
        .canonicalize()
        .expect("opencode/plugins/skill-compact-resurrect.js")
}

fn start() -> Server {
    let ns = loopback_only_netns("plugins");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let skill = root.join("skills/deploy-notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        format!(
            "---\nname: deploy-notes\ndescription: How to roll back a deploy of the billing service.\n---\n\
             # Deploy notes\n\nTo roll back, run the deploy again with {BODY_LINE}.\n"
        ),
    )
    .unwrap();
    let project = root.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let (provider, pport) = start_fake_provider(root);
    std::fs::write(project.join("opencode.json"), provider_config(pport)).unwrap();
    // OpenCode's global config directory looks installed, so it does not run npm (the launcher's
    // seed_config_dir; without it the first request waits ~70 s for npm).
    let config = root.join("config/opencode");
    std::fs::create_dir_all(config.join("node_modules")).unwrap();
    std::fs::write(
        config.join("package-lock.json"),
        "{\"packages\":{\"\":{\"dependencies\":{\"@opencode-ai/plugin\":\"*\"}}}}\n",
    )
    .unwrap();
    // The skill tool lists the skill's directory with ripgrep: `rg` on PATH, else
    // $XDG_CACHE_HOME/opencode/bin/rg, else OpenCode downloads it from github.com (and the tool
    // fails without network). Where no rg is installed, a stand-in for `rg --files` keeps the
    // test offline.
    if Command::new("sh")
        .args(["-c", "command -v rg"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| !s.success())
    {
        let bin = root.join("cache/opencode/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let rg = bin.join("rg");
        std::fs::write(
            &rg,
            "#!/bin/sh\n# stand-in for `rg --files …`\nexec find . -type f ! -name SKILL.md\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&rg, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let content = json!({
        "skills": {"paths": [root.join("skills").display().to_string()]},
        "plugin": [format!("file://{}", plugin_file().display())],
    })
    .to_string();
    let mut s = Server {
        dir,
        _provider: provider,
        opencode: None,
        content,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        auth: basic("opencode", SECRET),
        _ns: ns,
    };
    s.launch();
    s
}

impl Server {
    /// (Re)start `opencode serve` on a free port, with the same directories (and so the same
    /// sessions).
    fn launch(&mut self) {
        drop(self.opencode.take());
        let root = self.dir.path();
        self.addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let opencode = opencode_serve(root, &root.join("proj"), self.addr.port(), &self.content, SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.opencode = Some(Proc(opencode));
        wait_healthy(self.addr, &self.auth, Duration::from_secs(60));
    }

    fn call(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let r = http(self.addr, method, path, &[("Authorization", &self.auth)], body, T);
        assert_eq!(r.status, 200, "{method} {path}: {r:?}");
        r.json()
    }

    fn new_session(&self) -> String {
        self.call("POST", "/session", Some("{}"))["id"].as_str().unwrap().to_string()
    }

    fn prompt(&self, id: &str, text: &str) {
        let body = json!({"parts": [{"type": "text", "text": text}],
            "model": {"providerID": "fake", "modelID": "m1"}});
        self.call("POST", &format!("/session/{id}/message"), Some(&body.to_string()));
    }

    /// Compact through OpenCode's API (what /compact does; `auto` as after a context overflow).
    fn compact(&self, id: &str, auto: bool) {
        let body = json!({"providerID": "fake", "modelID": "m1", "auto": auto}).to_string();
        let r = self.call("POST", &format!("/session/{id}/summarize"), Some(&body));
        assert_eq!(r, json!(true), "summarize {id}");
    }

    fn messages(&self, id: &str) -> Vec<Value> {
        self.call("GET", &format!("/session/{id}/message"), None).as_array().unwrap().clone()
    }

    fn wait_idle(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.call("GET", "/session/status", None)[id]["type"] == "busy" {
            assert!(Instant::now() < deadline, "session {id} still busy");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The scripted provider's requests so far (one JSON body each).
    fn requests(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(self.dir.path().join("requests.jsonl")).unwrap_or_default();
        log.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// Warnings the plugin logged through OpenCode (client.app.log).
    fn plugin_warnings(&self) -> Vec<String> {
        let dir = self.dir.path().join("data/opencode/log");
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            out.extend(text.lines().filter(|l| l.contains("skill-compact-resurrect:")).map(String::from));
        }
        out
    }
}

fn text_of(m: &Value) -> String {
    m["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .map(|p| p["text"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_summary(m: &Value) -> bool {
    m["info"]["role"] == "assistant" && m["info"]["summary"] == true
}

/// Index of the (single) compaction summary in a session's messages.
fn summary_index(msgs: &[Value]) -> usize {
    let found: Vec<usize> = msgs.iter().enumerate().filter(|(_, m)| is_summary(m)).map(|(i, _)| i).collect();
    assert_eq!(found.len(), 1, "one compaction summary: {msgs:#?}");
    let m = &msgs[found[0]];
    assert!(m["info"]["error"].is_null() && m["info"]["finish"].is_string(), "summary finished: {m:#}");
    found[0]
}

fn restored_indices(msgs: &[Value]) -> Vec<usize> {
    msgs.iter()
        .enumerate()
        .filter(|(_, m)| m["info"]["role"] == "user" && text_of(m).contains("<restored-skill"))
        .map(|(i, _)| i)
        .collect()
}

/// Poll until the session has `n` restored-skill messages (the plugin adds one once the session
/// is idle after a manual compaction), then until it is idle.
fn wait_restored(s: &Server, id: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let msgs = s.messages(id);
        if restored_indices(&msgs).len() >= n {
            break;
        }
        assert!(Instant::now() < deadline, "no restored skill #{n} after a compaction of {id}: {msgs:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    s.wait_idle(id);
}

/// The restored message: after the summary, synthetic, the skill's text, nothing answered it.
fn check_restored(msgs: &[Value], i: usize, summary: usize) {
    let m = &msgs[i];
    assert!(i > summary, "the restored skill comes after the compaction summary: {msgs:#?}");
    assert!(
        m["info"]["time"]["created"].as_u64() >= msgs[summary]["info"]["time"]["completed"].as_u64(),
        "created after the summary was complete: {msgs:#?}"
    );
    let text = text_of(m);
    assert!(text.contains(RESTORED) && text.contains(BODY_LINE), "the skill's text: {text}");
    assert!(m["parts"].as_array().unwrap().iter().all(|p| p["synthetic"] == true), "synthetic: {m:#}");
    assert_eq!(restored_indices(msgs).len(), 1, "restored once: {msgs:#?}");
    let answered =
        msgs.iter().any(|a| a["info"]["role"] == "assistant" && a["info"]["parentID"] == m["info"]["id"]);
    assert!(!answered, "noReply: no model turn answers the restored skill: {msgs:#?}");
}

/// The summarization request among `reqs` (OpenCode's compaction prompt) whose conversation
/// has `marker`.
fn compaction_request(reqs: &[Value], marker: &str) -> Value {
    let found: Vec<&Value> = reqs
        .iter()
        .filter(|r| {
            let s = r["messages"].to_string();
            s.contains("<conversation>") && s.contains(marker)
        })
        .collect();
    assert_eq!(found.len(), 1, "one compaction request with {marker:?}: {reqs:#?}");
    found[0].clone()
}

#[test]
fn skills_survive_compaction() {
    let started = Instant::now();
    let mut s = start();

    eprintln!("step 1. A session loads the skill; a manual compaction");
    let a = s.new_session();
    s.prompt(&a, "SKILL: deploy-notes (session A)");
    let tools = tool_parts(&Value::Array(s.messages(&a)));
    let skill =
        tools.iter().find(|p| p["tool"] == "skill").unwrap_or_else(|| panic!("no skill call: {tools:#?}"));
    assert_eq!(skill["state"]["status"], "completed", "{skill:#}");
    assert_eq!(skill["state"]["input"]["name"], "deploy-notes");
    assert!(skill["state"]["output"].as_str().unwrap().contains(BODY_LINE), "{skill:#}");
    let before = s.requests().len();
    s.compact(&a, false);
    wait_restored(&s, &a, 1);
    let msgs = s.messages(&a);
    let i = restored_indices(&msgs)[0];
    let summary = summary_index(&msgs);
    check_restored(&msgs, i, summary);
    //    The summarizer was told which skills come back.
    let req = compaction_request(&s.requests()[before..], "session A");
    let prompt = req["messages"].to_string();
    assert!(prompt.contains(CONTEXT_LINE) && prompt.contains("deploy-notes"), "{prompt}");

    eprintln!("step 2. A session without skills: nothing restored");
    let b = s.new_session();
    s.prompt(&b, "Just chat (session B)");
    let before = s.requests().len();
    s.compact(&b, false);
    s.wait_idle(&b);
    let req = compaction_request(&s.requests()[before..], "session B");
    assert!(!req["messages"].to_string().contains(CONTEXT_LINE), "{req:#}");

    eprintln!("step 3. An automatic compaction: the skill comes before OpenCode's Continue turn");
    let c = s.new_session();
    s.prompt(&c, "SKILL: deploy-notes (session C)");
    let before = s.requests().len();
    s.compact(&c, true);
    s.wait_idle(&c);
    let msgs = s.messages(&c);
    let summary = summary_index(&msgs);
    let i = *restored_indices(&msgs).first().unwrap_or_else(|| panic!("no restored skill: {msgs:#?}"));
    check_restored(&msgs, i, summary);
    let cont = msgs
        .iter()
        .position(|m| m["info"]["role"] == "user" && text_of(m).contains(CONTINUE))
        .unwrap_or_else(|| panic!("OpenCode's Continue message: {msgs:#?}"));
    assert!(i < cont, "restored before the Continue message: {msgs:#?}");
    //    The Continue turn's model request already had the skill.
    let reqs = s.requests();
    let turn = reqs[before..]
        .iter()
        .find(|r| {
            r["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m.to_string().contains(CONTINUE))
        })
        .unwrap_or_else(|| panic!("no Continue turn request: {:#?}", &reqs[before..]));
    let sent = turn["messages"].to_string();
    assert!(sent.contains("restored-skill") && sent.contains(BODY_LINE), "{sent}");

    eprintln!("step 4. An automatic compaction without skills; session B still has nothing");
    let d = s.new_session();
    s.prompt(&d, "Just chat (session D)");
    s.compact(&d, true);
    s.wait_idle(&d);
    std::thread::sleep(Duration::from_millis(500));
    for id in [&b, &d] {
        let msgs = s.messages(id);
        summary_index(&msgs);
        assert!(restored_indices(&msgs).is_empty(), "no skill, nothing restored in {id}: {msgs:#?}");
    }

    eprintln!("step 5. After OpenCode restarted, a second compaction of session A restores the skill again");
    //    (loaded before the first compaction, known only from the session's history now)
    s.launch();
    s.compact(&a, false);
    wait_restored(&s, &a, 2);
    let msgs = s.messages(&a);
    let summaries: Vec<usize> =
        msgs.iter().enumerate().filter(|(_, m)| is_summary(m)).map(|(i, _)| i).collect();
    let restored = restored_indices(&msgs);
    assert_eq!(summaries.len(), 2, "{msgs:#?}");
    assert_eq!(restored.len(), 2, "{msgs:#?}");
    assert!(restored[1] > summaries[1], "the new restore follows the new summary: {msgs:#?}");
    let text = text_of(&msgs[restored[1]]);
    assert!(text.contains(RESTORED) && text.contains(BODY_LINE), "{text}");
    assert_eq!(
        msgs.last().unwrap()["info"]["id"],
        msgs[restored[1]]["info"]["id"],
        "nothing answered it: {msgs:#?}"
    );

    let warnings = s.plugin_warnings();
    assert!(warnings.is_empty(), "the plugin logged warnings: {warnings:#?}");
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}
