// ocsb Tokens panel: injected by the ocsb web front into OpenCode's web UI.
// Numbers come from /__ocsb/tokens (computed by the front from OpenCode's API); refreshed live on
// OpenCode's server-sent events and every few seconds while a message is being generated.
(function () {
  "use strict";
  if (window.__ocsbPanel) return;
  window.__ocsbPanel = true;

  // Collapsed to a one-line badge unless the user opened it before: expanded, it would sit over
  // OpenCode's page on narrower windows.
  var OPEN_KEY = "ocsb-tokens-open";
  function wasOpen() {
    try {
      return window.localStorage.getItem(OPEN_KEY) === "1";
    } catch (e) {
      return false;
    }
  }
  var state = { session: null, directory: null, data: null, timer: null, collapsed: !wasOpen() };

  function b64urlDecode(s) {
    try {
      s = s.replace(/-/g, "+").replace(/_/g, "/");
      while (s.length % 4) s += "=";
      return decodeURIComponent(escape(atob(s)));
    } catch (e) {
      return null;
    }
  }

  // OpenCode's routes: /<base64url(dir)>/session/<id>
  function route() {
    var m = location.pathname.match(/^\/([^/]+)\/session\/(ses[A-Za-z0-9_]+)/);
    if (!m) {
      var n = location.pathname.match(/\/session\/(ses[A-Za-z0-9_]+)/);
      return { session: n ? n[1] : null, directory: null };
    }
    var dir = b64urlDecode(m[1]);
    return { session: m[2], directory: dir && dir.charAt(0) === "/" ? dir : null };
  }

  function fmtInt(n) {
    return (n || 0).toLocaleString("en-US");
  }
  function fmtCost(c) {
    return "$" + (c || 0).toFixed(4);
  }
  function fmtRate(r) {
    return r == null ? "–" : r.toFixed(1) + " tok/s";
  }

  var box = document.createElement("div");
  box.id = "ocsb-tokens-panel";
  box.setAttribute("role", "complementary");
  box.setAttribute("aria-label", "Tokens");
  box.style.cssText =
    "position:fixed;right:12px;bottom:12px;z-index:2147483647;max-width:320px;" +
    "font:12px/1.4 ui-monospace,monospace;background:rgba(20,20,24,.92);color:#e6e6e6;" +
    "border:1px solid #444;border-radius:6px;padding:3px 8px;box-shadow:0 2px 10px rgba(0,0,0,.4)";

  // A label that starts with two spaces is a part of the row above it: indented (HTML would
  // drop the spaces).
  function row(label, field, title) {
    var sub = label.indexOf("  ") === 0;
    return (
      '<div style="display:flex;justify-content:space-between;gap:12px"' +
      (title ? ' title="' + title + '"' : "") +
      '><span data-label="' + field + '"' + (sub ? ' style="padding-left:1.5ch"' : "") + ">" +
      label.replace(/^ +/, "") + '</span><span data-field="' + field + '">–</span></div>'
    );
  }

  box.innerHTML =
    '<div style="display:flex;justify-content:space-between;gap:8px;cursor:pointer" data-toggle ' +
    'title="Tokens and spend of this session: click to open or close">' +
    '<span style="font-weight:bold">Tokens</span><span data-field="summary" style="color:#9ab"></span>' +
    '<span data-field="status"></span></div>' +
    '<div data-body>' +
    '<div data-field="model" style="color:#9ab;margin:2px 0 4px"></div>' +
    row("context", "context", "prompt tokens of the last step / the model's context window") +
    '<div style="height:6px;background:#333;border-radius:3px;margin:3px 0 5px;overflow:hidden">' +
    '<div data-field="bar" style="height:100%;width:0;background:#6a9"></div></div>' +
    row("  system (est.)", "system", "estimated: the rest after tools and messages") +
    row("  tools (est.)", "tools", "estimated from the size of the tool definitions") +
    row("  messages (est.)", "messages", "estimated from the size of the conversation") +
    row("  cache read", "cache_read") +
    row("  cache write", "cache_write") +
    '<div style="margin-top:2px">spend</div>' +
    row("  session (OpenCode est.)", "cost", "OpenCode's estimate from its price list, for this session's messages only") +
    '<div data-field="limit_row" style="display:none">' +
    row("  today (broker)", "spend_today", "metered by ocsb's key broker on the wire: every model request of the project today (UTC), all sessions and title calls") +
    row("  this run (broker)", "spend_run", "metered by ocsb's key broker since `ocsb run` started: every model request, all sessions and title calls") +
    '<div data-label="spend_note" style="color:#9ab;width:0;min-width:100%;margin:1px 0 2px">OpenCode estimates this session; the broker (ocsb\'s, on the wire) counts every request of the project, title calls too.</div>' +
    '<div data-field="limit_note" style="color:#c65"></div></div>' +
    row("output", "output") +
    row("speed (last)", "speed_last", "output tokens per second of the last message") +
    row("speed (avg)", "speed_avg", "output tokens per second over the session") +
    '<div data-field="published_row" style="display:none;margin-top:2px" ' +
    'title="servers the agent started, served on your 127.0.0.1 while they listen (OCSB_PUBLISH)">' +
    '<div>published</div><div data-field="published"></div></div>' +
    "</div>";

  function set(field, text) {
    var el = box.querySelector('[data-field="' + field + '"]');
    if (el) el.textContent = text;
  }

  function applyCollapsed() {
    box.querySelector("[data-body]").style.display = state.collapsed ? "none" : "";
    box.style.minWidth = state.collapsed ? "" : "250px";
    box.style.padding = state.collapsed ? "3px 8px" : "8px 10px";
    box.querySelector('[data-field="summary"]').style.display = state.collapsed ? "" : "none";
    box.setAttribute("data-collapsed", state.collapsed ? "1" : "0");
  }

  function render() {
    var d = state.data;
    box.style.display = state.session ? "" : "none";
    if (!d) return;
    var c = d.context || {};
    set("summary", (c.limit ? Math.round((100 * (c.used || 0)) / c.limit) + "% · " : "") + fmtCost(d.cost));
    set("model", d.model || "no model reply yet");
    set("context", fmtInt(c.used) + (c.limit ? " / " + fmtInt(c.limit) : ""));
    var pct = c.limit ? Math.min(100, (100 * c.used) / c.limit) : 0;
    var bar = box.querySelector('[data-field="bar"]');
    bar.style.width = pct.toFixed(1) + "%";
    bar.style.background = pct > 80 ? "#c65" : pct > 60 ? "#cb6" : "#6a9";
    set("system", fmtInt(c.system));
    set("tools", fmtInt(c.tools));
    set("messages", fmtInt(c.messages));
    set("cache_read", fmtInt(c.cache_read));
    set("cache_write", fmtInt(c.cache_write));
    set("cost", fmtCost(d.cost));
    var pub = d.published || [];
    box.querySelector('[data-field="published_row"]').style.display = pub.length ? "" : "none";
    var list = box.querySelector('[data-field="published"]');
    list.textContent = "";
    pub.forEach(function (p) {
      var line = document.createElement("div");
      line.style.paddingLeft = "1.5ch";
      var a = document.createElement("a");
      a.href = "http://127.0.0.1:" + p.host + "/";
      a.target = "_blank";
      a.rel = "noopener";
      a.style.color = "#8bd";
      a.textContent = "127.0.0.1:" + p.host;
      line.appendChild(a);
      var who = p.by ? " " + p.by[0] + " (pid " + p.by[1] + ")" : "";
      line.appendChild(document.createTextNode(who + (p.host !== p.inside ? " ← " + p.inside + " inside" : "")));
      list.appendChild(line);
    });
    var sp = d.spend;
    box.querySelector('[data-field="limit_row"]').style.display = sp ? "" : "none";
    if (sp) {
      var of = function (v, l) {
        return fmtCost(v) + (l != null ? " / $" + l.toFixed(2) : "");
      };
      set("spend_today", of(sp.today, sp.limit_day));
      set("spend_run", of(sp.session, sp.limit_session));
      var over = (sp.limit_day != null && sp.today >= sp.limit_day) || (sp.limit_session != null && sp.session >= sp.limit_session);
      set("limit_note", over ? "spend limit reached: model requests are refused (OCSB_SPEND_LIMIT)" : "");
    }
    set("output", fmtInt((d.tokens || {}).output));
    set("speed_last", fmtRate((d.speed || {}).last));
    set("speed_avg", fmtRate((d.speed || {}).average));
    set("status", d.busy ? "●" : "");
    box.setAttribute("data-session", d.session || "");
    box.setAttribute("data-updated", String(Date.now()));
  }

  function refresh() {
    var r = route();
    state.session = r.session;
    state.directory = r.directory;
    if (!state.session) {
      state.data = null;
      render();
      return;
    }
    var q = "session=" + encodeURIComponent(state.session);
    if (state.directory) q += "&directory=" + encodeURIComponent(state.directory);
    fetch("/__ocsb/tokens?" + q, { credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        return res.ok ? res.json() : null;
      })
      .then(function (d) {
        if (d && d.session === state.session) {
          state.data = d;
          render();
          schedule(d.busy ? 1500 : 10000);
        }
      })
      .catch(function () {
        schedule(5000);
      });
  }

  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(refresh, ms);
  }

  var pending = null;
  function soon() {
    if (pending) return;
    pending = setTimeout(function () {
      pending = null;
      refresh();
    }, 250);
  }

  function listen() {
    try {
      var es = new EventSource("/global/event");
      es.onmessage = function (ev) {
        var t = "";
        try {
          var e = JSON.parse(ev.data);
          var p = e.payload || e;
          t = p.type || "";
          var sid = (p.properties && (p.properties.sessionID || (p.properties.info && (p.properties.info.sessionID || p.properties.info.id)) || (p.properties.part && p.properties.part.sessionID))) || null;
          if (sid && sid !== state.session) return;
        } catch (err) {
          return;
        }
        if (/^(message|session)\./.test(t)) soon();
      };
    } catch (e) {
      /* polling still works */
    }
  }

  function attach() {
    if (!document.body) return setTimeout(attach, 50);
    document.body.appendChild(box);
    applyCollapsed();
    box.querySelector("[data-toggle]").onclick = function () {
      state.collapsed = !state.collapsed;
      applyCollapsed();
      try {
        window.localStorage.setItem(OPEN_KEY, state.collapsed ? "0" : "1");
      } catch (e) {
        /* private mode: not remembered */
      }
    };
    refresh();
    listen();
    // The UI is a single-page app: follow its route changes.
    var last = location.pathname;
    setInterval(function () {
      if (location.pathname !== last) {
        last = location.pathname;
        state.data = null;
        refresh();
      }
    }, 500);
  }
  attach();
})();
