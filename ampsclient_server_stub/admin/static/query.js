// The dashboard's query panel: read-only sow, subscribe and sow_and_subscribe on the server's
// own WebSocket transport, in AMPS' JSON-over-WebSocket frames. Plain JavaScript, no build step.
//
// Read-only by construction: the only commands this file ever sends are logon, sow, subscribe,
// sow_and_subscribe and unsubscribe (see COMMANDS and send()).
//
// Logon: POST /query/logon (with the admin token, as actions) answers the transport's URI and,
// when the admin interface authenticated a user, a single-use logon token for that user (the
// password never reaches the page). Without one, the user may type the transport's credentials.
"use strict";
(function () {
  const COMMANDS = ["sow", "subscribe", "sow_and_subscribe"];
  const SENT = new Set(["logon", "unsubscribe", ...COMMANDS]);
  const MAX_ROWS = 1000;
  const LOGON_TIMEOUT_MS = 20000;
  const ADMIN_TOKEN = document.querySelector('meta[name="amps-admin-token"]').content;
  const $ = id => document.getElementById(id);

  // one AMPS connection over WebSocket (protocol: "text" announcement; per command a 4-byte
  // little-endian count of the messages that follow, the header, the body; the server sends
  // each header as its own message, then a delivery's body, or a sow batch's bs record
  // header/data pairs)
  class AmpsSocket {
    constructor(uri, onMessage, onClose) {
      this.onMessage = onMessage;
      this.onClose = onClose;
      this.pending = null;  // {header, want, parts}
      this.ws = new WebSocket(uri);
      this.ws.binaryType = "arraybuffer";
      this.opened = new Promise((resolve, reject) => {
        this.ws.onopen = () => { this.ws.send("text"); resolve(); };
        this.ws.onerror = () => reject(new Error("cannot connect to " + uri));
      });
      this.ws.onclose = (e) => this.onClose(e);
      this.ws.onmessage = (e) => this.receive(e.data);
    }

    send(header, body) {
      if (!SENT.has(header.c)) throw new Error("the query panel never sends " + header.c);
      const count = new ArrayBuffer(4);
      new DataView(count).setUint32(0, body === undefined ? 1 : 2, true);
      this.ws.send(count);
      this.ws.send(JSON.stringify(header));
      if (body !== undefined) this.ws.send(body);
    }

    close() { this.ws.onclose = null; this.ws.close(); }

    receive(data) {
      const text = typeof data === "string" ? data : new TextDecoder().decode(data);
      const p = this.pending;
      if (p !== null) {
        p.parts.push(text);
        if (p.parts.length < p.want) return;
        this.pending = null;
        if (p.header.c === "sow") {
          const records = [];
          for (let i = 0; i < p.parts.length; i += 2) {
            records.push({header: parseHeader(p.parts[i]), body: p.parts[i + 1]});
          }
          this.onMessage(p.header, null, records);
        } else {
          this.onMessage(p.header, p.parts[0], null);
        }
        return;
      }
      const header = parseHeader(text);
      const c = header.c;
      if (c === "sow") {
        const n = Number(header.bs || 0);
        if (n > 0) { this.pending = {header, want: 2 * n, parts: []}; return; }
        this.onMessage(header, null, []);
      } else if ((c === "p" || c === "publish" || c === "oof") && String(header.l) !== "0") {
        this.pending = {header, want: 1, parts: []};
      } else {
        this.onMessage(header, null, null);
      }
    }
  }

  // AMPS headers are flat JSON, but may carry raw control characters inside strings
  function parseHeader(text) {
    try {
      return JSON.parse(text);
    } catch (e) {
      return JSON.parse(text.replace(/[\u0000-\u001f]/g,
        ch => "\\u" + ch.charCodeAt(0).toString(16).padStart(4, "0")));
    }
  }

  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
      c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  }

  function cell(value) {
    if (value === undefined) return "";
    return typeof value === "object" && value !== null ? JSON.stringify(value) : String(value);
  }

  // the results: rows in arrival order, keyed by SowKey where the server sends one
  const state = {
    socket: null, rows: new Map(), columns: [], seq: 0, keyed: false, updates: 0,
    drawScheduled: false, run: 0,
  };

  function addRow(key, body) {
    let fields = null;
    try {
      const parsed = JSON.parse(body);
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) fields = parsed;
    } catch (e) { /* not JSON: shown whole */ }
    const names = fields === null ? ["(data)"] : Object.keys(fields);
    for (const name of names) if (!state.columns.includes(name)) state.columns.push(name);
    const id = key !== undefined && key !== null && key !== "" && state.keyed ? "k:" + key : "n:" + state.seq++;
    state.rows.set(id, {key: key === undefined ? "" : key, body, fields});  // an update keeps its place
    while (state.rows.size > MAX_ROWS) state.rows.delete(state.rows.keys().next().value);
  }

  function schedule() {
    if (state.drawScheduled) return;
    state.drawScheduled = true;
    requestAnimationFrame(draw);
  }

  function draw() {
    state.drawScheduled = false;
    const cols = state.columns;
    $("query-head").innerHTML = "<tr><th class=n>#</th>" + cols.map(c => "<th>" + esc(c) + "</th>").join("") + "</tr>";
    const out = [];
    let i = 0;
    for (const row of state.rows.values()) {
      i += 1;
      const cells = cols.map(c => "<td>" + esc(row.fields === null ? (c === "(data)" ? row.body : "") : cell(row.fields[c])) + "</td>");
      out.push("<tr data-key=\"" + esc(row.key) + "\" data-body=\"" + esc(row.body) + "\"><td class=n>" + i + "</td>" + cells.join("") + "</tr>");
    }
    $("query-rows").innerHTML = out.join("") || "<tr><td class=empty>no records</td></tr>";
    const panel = $("query");
    panel.dataset.rows = String(state.rows.size);
    panel.dataset.updates = String(state.updates);
    if (panel.dataset.phase === "live" && state.updates > 0) {
      $("query-status").textContent = state.rows.size + " record(s), " + state.updates + " update(s)";
    }
  }

  function status(text, phase) {
    if (state.drawScheduled) draw();  // the table is up to date before the phase says so
    $("query-status").textContent = text;
    if (phase !== undefined) $("query").dataset.phase = phase;
  }

  function fail(text) {
    if (state.drawScheduled) draw();
    const err = $("query-error");
    err.textContent = text;  // replaced, never appended: an error is shown once
    err.hidden = false;
    $("query").dataset.phase = "error";
    stop(false);
  }

  function stop(announce) {
    if (state.socket !== null) {
      state.socket.close();
      state.socket = null;
    }
    $("query-stop").disabled = true;
    if (announce) status("stopped", "stopped");
  }

  async function logonInfo() {
    const r = await fetch("/query/logon", {method: "POST", cache: "no-store", credentials: "same-origin",
                                           headers: {"X-AMPS-Admin-Token": ADMIN_TOKEN},
                                           signal: AbortSignal.timeout(LOGON_TIMEOUT_MS)});
    const text = await r.text();
    if (!r.ok) throw new Error("query logon refused: " + r.status + " " + text.trim());
    return JSON.parse(text);
  }

  function dialUri(uri) {
    // a transport on every address answers on the host this page came from
    const u = new URL(uri);
    const loopback = ["127.0.0.1", "localhost", "[::1]"];
    if (loopback.includes(u.hostname) && !loopback.includes(location.hostname)) u.hostname = location.hostname;
    return u.toString();
  }

  async function run(event) {
    event.preventDefault();
    stop(false);
    const run = ++state.run;
    const command = $("query-command").value;
    if (!COMMANDS.includes(command)) return fail("unknown command " + command);
    const topic = $("query-topic").value.trim();
    if (!topic) return fail("a topic is required");
    Object.assign(state, {rows: new Map(), columns: [], seq: 0, updates: 0, keyed: command !== "subscribe"});
    $("query-error").hidden = true;
    $("query-error").textContent = "";
    draw();
    status("logging on…", "connecting");
    let info;
    try {
      info = await logonInfo();
    } catch (e) {
      return fail(e.message);
    }
    if (run !== state.run) return;
    const cid = "q" + run;
    const socket = new AmpsSocket(dialUri(info.uri), (h, body, records) => onMessage(socket, cid, h, body, records), (e) => {
      if (state.socket === socket) fail("the server closed the connection" + (e.reason ? ": " + e.reason : ""));
    });
    state.socket = socket;
    try {
      await socket.opened;
    } catch (e) {
      return fail(e.message);
    }
    if (state.socket !== socket) return;
    const user = info.user_id !== null ? info.user_id : $("query-user").value;
    const password = info.password !== null ? info.password : $("query-password").value;
    const logon = {c: "logon", cid: "logon", client_name: "admin-query-" + Math.random().toString(16).slice(2, 10),
                   a: "processed", version: "5.3.5.0:admin-query-panel"};
    if (user) logon.user_id = user;
    if (password) logon.pw = password;
    socket.send(logon);
    $("query-stop").disabled = false;
  }

  function querySpec(cid) {
    const command = $("query-command").value;
    const h = {c: command, cid: cid, t: $("query-topic").value.trim(), a: "processed"};
    const filter = $("query-filter").value.trim();
    const orderby = $("query-orderby").value.trim();
    const topN = $("query-topn").value.trim();
    const options = $("query-options").value.trim();
    if (filter) h.filter = filter;
    if (options) h.o = options;
    if (command !== "subscribe") {
      h.query_id = cid;
      h.a = "processed,completed";
      h.bs = 100;
      if (orderby) h.orderby = orderby;
      if (topN) h.top_n = Number(topN);
    }
    if (command !== "sow") h.sub_id = cid;
    return h;
  }

  function onMessage(socket, cid, h, body, records) {
    if (state.socket !== socket) return;
    const c = h.c;
    if (c === "ack") {
      if (h.status === "failure") {
        return fail((h.reason || "failure") + (h.reason_detail ? ": " + h.reason_detail : ""));
      }
      if (h.cid === "logon" && h.a === "processed") {
        socket.send(querySpec(cid));
        status("running " + $("query-command").value + "…", "running");
      } else if (h.a === "completed") {
        const command = $("query-command").value;
        if (command === "sow") {
          status(state.rows.size + " record(s)", "done");
          stop(false);
        } else {
          status(state.rows.size + " record(s), subscribed: updates follow", "live");
        }
      } else if (h.a === "processed" && $("query-command").value === "subscribe") {
        status("subscribed: messages follow", "live");
      }
    } else if (c === "sow") {
      for (const r of records) addRow(r.header.k, r.body);
      schedule();
    } else if (c === "p" || c === "publish") {
      state.updates += 1;
      addRow(h.k, body);
      schedule();
    } else if (c === "oof") {
      if (h.k !== undefined) state.rows.delete("k:" + h.k);
      state.updates += 1;
      schedule();
    }
  }

  $("query-form").addEventListener("submit", run);
  $("query-stop").addEventListener("click", () => stop(true));
  $("query-command").addEventListener("change", () => {
    const sow = $("query-command").value !== "subscribe";
    $("query-orderby").disabled = !sow;
    $("query-topn").disabled = !sow;
  });
})();
