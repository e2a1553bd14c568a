//! The web front against a real `opencode serve` on loopback, all of it (OpenCode, the provider,
//! the front, Chromium) in a network namespace of the test's own with only `lo`, so nothing any
//! of them tries can leave the machine. One OpenCode per test file keeps the suite fast; the
//! checks run in order:
//! authentication, HTML injection, SSE, a real agent turn through the scripted provider
//! (including OpenCode's own `sudo` denial with the launcher's permission config, the guard
//! plugin and the blanked secrets), the Tokens numbers, a WebSocket terminal, and the panel in
//! headless Chromium.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use testkit::browser::Browser;
use testkit::http::{Ws, b64, basic, http, stream_until};
use testkit::opencode::*;
use testkit::{Netns, Proc};

const OCSB: &str = env!("CARGO_BIN_EXE_ocsb");
const T: Duration = Duration::from_secs(30);

struct Setup {
    _dir: tempfile::TempDir,
    _provider: Proc,
    _opencode: Proc,
    _front: Proc,
    front: SocketAddr,
    upstream: SocketAddr,
    password: String,
    secret: String,
    project: String,
    /// Last: dropped after the processes in it were stopped.
    _ns: Netns,
}

/// `guard`: load the launcher's guard plugin (as `run` does); without it, OpenCode's permission
/// rules alone are tested. `project_permission`: the project's own `permission` block.
fn setup(guard: bool, project_permission: Option<Value>) -> Setup {
    let ns = loopback_only_netns("web");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let project = root.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let (provider, pport) = start_fake_provider(root);
    let mut pc: Value = serde_json::from_str(&provider_config(pport)).unwrap();
    if let Some(p) = project_permission {
        pc["permission"] = p;
    }
    std::fs::write(project.join("opencode.json"), pc.to_string()).unwrap();
    // The launcher's own permission config and guard plugin, exactly as `run` builds them.
    let out = Command::new(OCSB).arg("__opencode-config").arg(root.join("plugins")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut content: Value = serde_json::from_slice(&out.stdout).unwrap();
    if !guard {
        content.as_object_mut().unwrap().remove("plugin");
    }
    let content = content.to_string();
    let port = free_port();
    let front = SocketAddr::from(([127, 0, 0, 1], port));
    let upstream = SocketAddr::from(([127, 0, 0, 1], port + 1));
    let (password, secret) = ("user-pw-123".to_string(), "server-secret-456".to_string());
    std::fs::write(root.join("pw"), &password).unwrap();
    std::fs::write(root.join("secret"), &secret).unwrap();
    let opencode = opencode_serve(root, &project, upstream.port(), &content, &secret)
        .env("FAKE_API_KEY", "provider-key-789")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let opencode = Proc(opencode);
    wait_healthy(upstream, &basic("opencode", &secret), Duration::from_secs(90));
    let front_proc = Command::new(OCSB)
        .args(["__web-front", "--listen", &front.to_string(), "--upstream", &upstream.to_string()])
        .arg("--password-file")
        .arg(root.join("pw"))
        .arg("--upstream-password-file")
        .arg(root.join("secret"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let front_proc = Proc(front_proc);
    wait_healthy(front, &basic("opencode", &password), Duration::from_secs(20));
    Setup {
        _dir: dir,
        _provider: provider,
        _opencode: opencode,
        _front: front_proc,
        front,
        upstream,
        password,
        secret,
        project: project.display().to_string(),
        _ns: ns,
    }
}

#[test]
fn front_panel_and_agent_against_real_opencode() {
    let s = setup(true, None);
    let auth = basic("opencode", &s.password);

    eprintln!("step 1. Auth");
    // 1. Authentication: nothing without the user's password, and the passwords are separate.
    for path in ["/", "/global/health", "/__ocsb/panel.js", "/__ocsb/tokens?session=ses_x", "/session"] {
        let r = http(s.front, "GET", path, &[], None, T);
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert!(r.header("www-authenticate").unwrap_or_default().starts_with("Basic"), "{r:?}");
        let r = http(s.front, "GET", path, &[("Authorization", &basic("opencode", "wrong"))], None, T);
        assert_eq!(r.status, 401, "{path} with a wrong password");
    }
    let r =
        http(s.front, "GET", "/global/health", &[("Authorization", &basic("opencode", &s.secret))], None, T);
    assert_eq!(r.status, 401, "OpenCode's own secret is not a login for the front");
    let r = http(s.upstream, "GET", "/global/health", &[("Authorization", &auth)], None, T);
    assert_eq!(r.status, 401, "the user's password is not OpenCode's secret");

    eprintln!("step 2. The UI");
    // 2. The UI through the front: the panel's script tag, OpenCode's CSP unchanged, a login cookie.
    let page = http(s.front, "GET", "/", &[("Authorization", &auth)], None, T);
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    let tag = "<script src=\"/__ocsb/panel.js\" defer></script></head>";
    assert!(page.body.contains(tag), "panel tag missing: {}", &page.body[..page.body.len().min(2000)]);
    assert!(page.header("content-security-policy").unwrap_or_default().contains("script-src 'self'"));
    let cookie = page.header("set-cookie").expect("login cookie");
    let cookie = cookie.split(';').next().unwrap().to_string();
    assert!(cookie.starts_with(&format!("ocsb_auth_{}=", s.front.port())), "{cookie}");
    let js = http(s.front, "GET", "/__ocsb/panel.js", &[("Cookie", &cookie)], None, T);
    assert_eq!(js.status, 200);
    assert!(js.body.contains("ocsb-tokens-panel"));
    let token = format!("/global/health?auth_token={}", b64(&format!("opencode:{}", s.password)));
    assert_eq!(http(s.front, "GET", &token, &[], None, T).status, 200, "?auth_token= login");

    eprintln!("step 3. Server-sent");
    // 3. Server-sent events stream through the front without buffering.
    let ev = stream_until(
        s.front,
        "/global/event",
        &[("Authorization", &auth)],
        "server.connected",
        Duration::from_secs(10),
    );
    assert!(ev.contains("200 OK") && ev.contains("server.connected"), "{ev}");

    eprintln!("step 4. A real");
    // 4. A real agent turn: the scripted model asks the bash tool to run a command.
    let ses = http(s.front, "POST", "/session", &[("Authorization", &auth)], Some("{}"), T).json();
    let id = ses["id"].as_str().unwrap().to_string();
    let p = agent_runs(s.front, &auth, &id, "echo hi-from-agent");
    assert_eq!(p["state"]["status"], "completed", "{p:#}");
    assert!(p["state"]["output"].as_str().unwrap().contains("hi-from-agent"), "{p:#}");
    //    The guard plugin refuses sudo, also in wrappers the text rules miss (the rules alone:
    //    `permission_rules_alone_refuse_sudo_despite_project_rules`).
    let p = agent_runs(s.front, &auth, &id, "sudo true");
    assert_eq!(p["state"]["status"], "error", "{p:#}");
    let p = agent_runs(s.front, &auth, &id, "bash -c \"sudo true\"");
    assert_eq!(p["state"]["status"], "error", "{p:#}");
    assert!(p["state"]["error"].as_str().unwrap().contains("ocsb: sudo"), "{p:#}");
    //    The agent's shells do not see OpenCode's secret nor provider keys.
    let cmd =
        "echo \"pw=[$OPENCODE_SERVER_PASSWORD] key=[$FAKE_API_KEY] cfg=[${OPENCODE_CONFIG_CONTENT:0:5}]\"";
    let out = shell_runs(s.front, &auth, &id, cmd);
    assert!(out.contains("pw=[] key=[] cfg=[]"), "secrets blanked in the agent's shell: {out:?}");

    eprintln!("step 5. The Tokens");
    // 5. The Tokens numbers for that session.
    let q = format!("/__ocsb/tokens?session={id}&directory={}", s.project.replace('/', "%2F"));
    let t = http(s.front, "GET", &q, &[("Cookie", &cookie)], None, T).json();
    assert_eq!(t["session"], id.as_str());
    assert_eq!(t["model"], "fake/m1");
    assert_eq!(t["context"]["limit"], 100000);
    assert_eq!(t["context"]["used"], 1002, "input 802 + cache read 200: {t:#}");
    assert_eq!(t["context"]["cache_read"], 200);
    let c = &t["context"];
    assert_eq!(
        c["system"].as_u64().unwrap() + c["tools"].as_u64().unwrap() + c["messages"].as_u64().unwrap(),
        1002
    );
    assert!(c["tools"].as_u64().unwrap() > 0, "tool definitions are estimated: {t:#}");
    let n = t["assistant_messages"].as_u64().unwrap();
    assert!(n >= 6, "3 turns × (tool step + answer): {t:#}");
    let msgs =
        http(s.front, "GET", &format!("/session/{id}/message"), &[("Authorization", &auth)], None, T).json();
    let want: u64 = msgs
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["info"]["role"] == "assistant")
        .map(|m| m["info"]["tokens"]["output"].as_u64().unwrap_or(0))
        .sum();
    assert!(want >= 50 * 5, "the scripted replies report 50 output tokens each: {want}");
    assert_eq!(
        t["tokens"]["output"].as_u64().unwrap(),
        want,
        "the panel sums OpenCode's own per-message counts"
    );
    assert!(t["cost"].as_f64().unwrap() > 0.0);
    let speed = t["speed"]["last"].as_f64().unwrap();
    assert!(speed > 10.0 && speed < 100_000.0, "50 tokens streamed over ~0.5 s: {speed}");

    eprintln!("step 6. A WebSocket");
    // 6. A WebSocket terminal through the front (login cookie, as a browser sends it).
    let pty =
        http(s.front, "POST", "/pty", &[("Cookie", &cookie)], Some(r#"{"command":"/bin/sh"}"#), T).json();
    let pid = pty["id"].as_str().unwrap_or_else(|| panic!("{pty}")).to_string();
    // OpenCode's one-time ticket for the terminal's WebSocket, asked for as its UI does.
    let connect_ticket = || {
        let origin = format!("http://{}", s.front);
        let headers = [("Cookie", cookie.as_str()), ("x-opencode-ticket", "1"), ("Origin", origin.as_str())];
        let tk = http(s.front, "POST", &format!("/pty/{pid}/connect-token"), &headers, None, T).json();
        tk["ticket"].as_str().or(tk["token"].as_str()).unwrap_or_else(|| panic!("{tk}")).to_string()
    };
    let ticket = connect_ticket();
    let mut ws = Ws::connect(s.front, &format!("/pty/{pid}/connect?ticket={ticket}"), &[("Cookie", &cookie)]);
    assert!(ws.head.starts_with("HTTP/1.1 101"), "{}", ws.head);
    ws.send_text("echo ws-$((6*7))\n");
    let got = ws.read_until("ws-42", Duration::from_secs(15));
    assert!(got.contains("ws-42"), "terminal output through the front: {got:?}");
    // A browser that sends no credentials on the handshake: OpenCode's own one-time ticket is
    // forwarded without the front's credentials, and OpenCode checks it.
    let ticket = connect_ticket();
    let mut ws = Ws::connect(s.front, &format!("/pty/{pid}/connect?ticket={ticket}"), &[]);
    assert!(ws.head.starts_with("HTTP/1.1 101"), "ticket only: {}", ws.head);
    ws.send_text("echo tk-$((7*6))\n");
    assert!(ws.read_until("tk-42", Duration::from_secs(15)).contains("tk-42"));
    let ws = Ws::connect(s.front, &format!("/pty/{pid}/connect?ticket=forged"), &[]);
    assert!(!ws.head.starts_with("HTTP/1.1 101"), "a forged ticket is refused by OpenCode: {}", ws.head);
    let ws = Ws::connect(s.front, &format!("/pty/{pid}/connect"), &[]);
    assert!(ws.head.starts_with("HTTP/1.1 401"), "no ticket, no login: {}", ws.head);

    eprintln!("step 7. The panel");
    // 7. The panel in a real browser: headless Chromium, DOM values equal the endpoint's.
    let mut browser = Browser::open(&session_url(s.front, &s.project, &id, &s.password));
    let want_output = want.to_string();
    let panel = read_panel(&mut browser, &|v| v["output"] == want_output.as_str());
    assert_eq!(panel["model"], "fake/m1");
    assert_eq!(panel["context"], "1,002 / 100,000");
    assert_eq!(panel["cache_read"], "200");
    assert_eq!(panel["cost"], format!("${:.4}", t["cost"].as_f64().unwrap()).as_str());
    assert!(panel["speed_last"].as_str().unwrap().ends_with("tok/s"), "{panel}");
    // Live: another agent turn while the page is open changes the numbers without a reload.
    agent_runs(s.front, &auth, &id, "echo live-update");
    let live = read_panel(&mut browser, &|v| {
        v["output"].as_str().map(|o| o.replace(',', "").parse::<u64>().unwrap_or(0) > want).unwrap_or(false)
    });
    assert_ne!(live["cost"], panel["cost"], "spend follows the new messages: {live}");

    eprintln!("step 8. The panel's place");
    // 8. A laptop's window (1400×757): the panel covers neither the prompt nor any text of the
    //    page, collapsed (the default) or opened; the spend figures say whose they are.
    let viewport = json!({"width": 1400, "height": 757, "deviceScaleFactor": 1, "mobile": false});
    browser.call("Emulation.setDeviceMetricsOverride", viewport);
    let collapsed = settled_place(&mut browser);
    assert_eq!(collapsed["collapsed"], "1", "collapsed by default: {collapsed}");
    assert_clear(&collapsed);
    let shot = std::env::temp_dir().join(format!("ocsb-panel-{}-collapsed.png", std::process::id()));
    browser.screenshot(&shot);
    eprintln!("panel screenshot: {}", shot.display());
    browser.eval("document.querySelector('#ocsb-tokens-panel [data-toggle]').click(), ''");
    let open = settled_place(&mut browser);
    assert_eq!(open["collapsed"], "0", "opened on a click: {open}");
    assert_clear(&open);
    let w = |b: &Value| b[2].as_f64().unwrap() - b[0].as_f64().unwrap();
    let h = |b: &Value| b[3].as_f64().unwrap() - b[1].as_f64().unwrap();
    assert!(
        w(&open["panel"]) > w(&collapsed["panel"]) && h(&open["panel"]) > 3.0 * h(&collapsed["panel"]),
        "{collapsed} {open}"
    );
    let labels = open["labels"].clone();
    let label = |k: &str| labels[k].as_str().unwrap_or_default().to_string();
    assert!(label("cost").contains("session") && label("cost").contains("OpenCode est."), "{labels}");
    assert!(label("spend_today").contains("today") && label("spend_today").contains("broker"), "{labels}");
    assert!(label("spend_run").contains("this run") && label("spend_run").contains("broker"), "{labels}");
    assert!(label("spend_note").contains("OpenCode estimates this session"), "{labels}");
    let shot = std::env::temp_dir().join(format!("ocsb-panel-{}-open.png", std::process::id()));
    browser.screenshot(&shot);
    eprintln!("panel screenshot: {}", shot.display());
    // Opened stays opened on the next page load (the user chose it).
    browser.eval("location.reload(), ''");
    std::thread::sleep(Duration::from_secs(3));
    read_panel(&mut browser, &|_| true);
    assert_eq!(panel_place(&mut browser)["collapsed"], "0");
}

/// Where the Tokens panel is, and what of OpenCode's page it covers: the prompt's editor and
/// every visible element with text of its own (their tag and first words), the labels of its rows.
fn panel_place(b: &mut Browser) -> Value {
    const PLACE: &str = "(() => { const p = document.getElementById('ocsb-tokens-panel'); if (!p) return ''; \
        const r = p.getBoundingClientRect(); const box = b => [b.left, b.top, b.right, b.bottom]; \
        const hit = b => !(b.right <= r.left || b.left >= r.right || b.bottom <= r.top || b.top >= r.bottom); \
        const ed = document.querySelector('[contenteditable=\"true\"], textarea'); const covered = []; let texts = 0; \
        for (const e of document.body.querySelectorAll('*')) { if (p.contains(e)) continue; \
          if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue; \
          const b = e.getBoundingClientRect(); const st = getComputedStyle(e); \
          if (!b.width || !b.height || st.visibility === 'hidden' || st.display === 'none') continue; \
          texts++; if (hit(b)) covered.push(e.tagName + ': ' + e.textContent.trim().slice(0, 40)); } \
        const labels = {}; p.querySelectorAll('[data-label]').forEach(e => labels[e.dataset.label] = e.textContent); \
        return JSON.stringify({ panel: box(r), editor: ed && box(ed.getBoundingClientRect()), \
          editor_covered: !!ed && hit(ed.getBoundingClientRect()), covered, texts, labels, \
          collapsed: p.getAttribute('data-collapsed'), viewport: [innerWidth, innerHeight] }); })()";
    serde_json::from_str(&b.eval(PLACE)).unwrap_or(Value::Null)
}

/// The panel's place once the page's layout has settled: looked at again (up to 5 s) while
/// it covers something, since OpenCode lays its messages out again after a resize or a click
/// (on a busy machine, later).
fn settled_place(browser: &mut Browser) -> Value {
    let mut place = Value::Null;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(250));
        place = panel_place(browser);
        if place["covered"] == json!([]) && place["editor_covered"] == false {
            break;
        }
    }
    place
}

fn assert_clear(place: &Value) {
    assert_eq!(place["viewport"], json!([1400, 757]), "{place}");
    assert!(!place["editor"].is_null(), "the prompt's editor is on the page: {place}");
    assert!(place["texts"].as_u64().unwrap_or(0) > 5, "the page's texts were seen: {place}");
    assert_eq!(place["editor_covered"], false, "the panel covers the prompt: {place}");
    assert_eq!(place["covered"], json!([]), "the panel covers text of the page: {place}");
}

/// OpenCode's own permission rules, from the launcher's OPENCODE_CONFIG_CONTENT, refuse sudo and
/// systemd-run in the agent's bash tool even when the project has its own `*` and `bash` rules
/// (a top-level `"*"` in the launcher config would have let these run).
#[test]
fn permission_rules_alone_refuse_sudo_despite_project_rules() {
    let s = setup(false, Some(json!({"*": "allow", "bash": {"git push *": "ask"}})));
    let auth = basic("opencode", &s.password);
    let ses = http(s.front, "POST", "/session", &[("Authorization", &auth)], Some("{}"), T).json();
    let id = ses["id"].as_str().unwrap().to_string();
    for cmd in
        ["sudo true", "echo a && sudo true", "/usr/bin/systemd-run --version", "systemd-run --user true"]
    {
        let p = agent_runs(s.front, &auth, &id, cmd);
        assert_eq!(p["state"]["status"], "error", "{cmd}: {p:#}");
        let e = p["state"]["error"].as_str().unwrap();
        assert!(
            e.contains("rule") && !e.contains("ocsb:"),
            "{cmd}: refused by a permission rule, not the guard: {e}"
        );
    }
    let p = agent_runs(s.front, &auth, &id, "echo allowed");
    assert_eq!(p["state"]["status"], "completed", "{p:#}");
}
