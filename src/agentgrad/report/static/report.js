"use strict";
// agentgrad report: show one episode at a time, switch the edge weight and the heat map, and draw a
// node's messages with its sources' spans and per-token gradient scores. Run text is only ever set
// with textContent: nothing from a run is parsed as HTML.
(function () {
  var state = { weight: "mean_l1", heat: "l1", open: null };
  var COLORS = ["#1f77b4", "#17becf", "#8c564b", "#7f7f7f", "#e377c2", "#bcbd22", "#393b79", "#d62728"];
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(v) { return (typeof v === "number") ? Number(v.toPrecision(4)).toString() : "-"; }
  function showEpisode(i) {
    document.querySelectorAll("section.episode").forEach(function (s) { s.hidden = s.id !== "ep-" + i; });
    document.querySelectorAll("[data-ep]").forEach(function (r) { r.classList.toggle("current", r.dataset.ep === String(i)); });
  }
  function setWeight(w) {
    state.weight = w;
    document.querySelectorAll("path.edge").forEach(function (p) {
      p.style.strokeWidth = p.getAttribute("data-px-" + w) || "1";
      p.classList.toggle("neg", p.getAttribute("data-neg-" + w) === "1");
    });
  }
  function heatColor(v, top) {
    if (typeof v !== "number" || !(top > 0)) return "transparent";
    var a = Math.min(1, Math.abs(v) / top) * 0.85;
    if (state.heat === "l1") return "rgba(230,85,13," + a.toFixed(3) + ")";
    return v >= 0 ? "rgba(44,160,44," + a.toFixed(3) + ")" : "rgba(148,103,189," + a.toFixed(3) + ")";
  }
  function legend(top) {
    var box = el("div", "legend");
    box.appendChild(el("span", null, state.heat === "l1" ? "\u2016g\u2016\u2081 per token: 0 " : "g\u00b7e per token: \u2212" + fmt(top) + " "));
    var bar = el("span", "bar " + state.heat);
    box.appendChild(bar);
    box.appendChild(el("span", null, " " + fmt(top)));
    return box;
  }
  function drawMessage(content, spans, tokens, labels, top, idx) {
    var pre = el("pre", "content");
    var pos = 0;
    spans.sort(function (a, b) { return a[2] - b[2]; });
    spans.forEach(function (s) {
      if (s[2] < pos) return;
      pre.appendChild(document.createTextNode(content.slice(pos, s[2])));
      var span = el("span", "span");
      span.style.borderColor = COLORS[s[0] % COLORS.length];
      var tag = el("span", "srctag", "n" + s[0] + " " + (labels[s[0]] || ""));
      tag.style.background = COLORS[s[0] % COLORS.length];
      span.appendChild(tag);
      var p = s[2];
      tokens.filter(function (t) { return t[1] >= s[2] && t[2] <= s[3]; })
        .sort(function (a, b) { return a[1] - b[1]; })
        .forEach(function (t) {
          if (t[1] < p) return;
          span.appendChild(document.createTextNode(content.slice(p, t[1])));
          var tok = el("span", "tok", content.slice(t[1], t[2]));
          tok.style.background = heatColor(state.heat === "l1" ? t[3] : t[4], top);
          tok.title = "n" + s[0] + "  \u2016g\u2016\u2081 \u2248 " + fmt(t[3]) + "   g\u00b7e \u2248 " + fmt(t[4]);
          span.appendChild(tok);
          p = t[2];
        });
      span.appendChild(document.createTextNode(content.slice(p, s[3])));
      pre.appendChild(span);
      pos = s[3];
    });
    pre.appendChild(document.createTextNode(content.slice(pos)));
    return pre;
  }
  var parsed = {};
  function episodeData(ep) {
    if (!parsed[ep]) parsed[ep] = JSON.parse(document.getElementById("ep-data-" + ep).textContent);
    return parsed[ep];
  }
  function tokensOf(d) {
    // runs of adjacent tokens: [message, start, lengths, l1 * q / scale, gxi * q / scale]
    var out = [];
    if (!d.tokens) return out;
    var s1 = d.tokens.scale[0], s2 = d.tokens.scale[1], q = d.tokens.q;
    d.tokens.runs.forEach(function (r) {
      var pos = r[1];
      for (var i = 0; i < r[2].length; i++) {
        out.push([r[0], pos, pos + r[2][i], r[3][i] * s1 / q, r[4][i] * s2 / q]);
        pos += r[2][i];
      }
    });
    return out;
  }
  function drawNode(view, ep, id) {
    var data = episodeData(ep);
    var d = data.nodes[String(id)];
    state.open = { view: view, ep: ep, id: id };
    while (view.firstChild) view.removeChild(view.firstChild);
    if (!d) return;
    view.appendChild(el("h3", null, "n" + d.id + " " + d.kind + " " + (d.name || "") + (d.model ? "  (model " + d.model + ")" : "")));
    if (d.skipped) view.appendChild(el("p", "warn", "not attributed: " + d.skipped));
    if (d.note) view.appendChild(el("p", "warn", d.note));
    if (d.weights) {
      var tb = el("table", "weights");
      var hr = el("tr");
      ["source", "mean_l1", "max_l1", "mean_gxi", "max_gxi"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
      tb.appendChild(hr);
      Object.keys(d.weights).forEach(function (src) {
        var tr = el("tr");
        tr.appendChild(el("td", null, src === "prompt" ? "its own prompt" : "n" + src + " " + (data.labels[src] || "")));
        ["mean_l1", "max_l1", "mean_gxi", "max_gxi"].forEach(function (k) { tr.appendChild(el("td", "num", fmt(d.weights[src][k]))); });
        tb.appendChild(tr);
      });
      view.appendChild(tb);
    }
    if (d.kind === "call") {
      var tokens = tokensOf(d);
      var top = 0;
      tokens.forEach(function (t) { top = Math.max(top, Math.abs(state.heat === "l1" ? t[3] : t[4])); });
      if (tokens.length) view.appendChild(legend(top));
      (d.messages || []).forEach(function (m, i) {
        var content = data.strings[m.content] || "";
        var spans = d.spans.filter(function (s) { return s[1] === i; }).map(function (s) { return [s[0], s[1], s[2], s[3]]; });
        var box = el("div", "msg");
        box.appendChild(el("div", "role", m.role));
        var body = drawMessage(content, spans, tokens.filter(function (t) { return t[0] === i; }), data.labels, top, i);
        if (!spans.length && content.length > 600) {  // a long prompt with no source in it: folded
          var det = el("details");
          det.appendChild(el("summary", null, content.length + " characters, no source text in it"));
          det.appendChild(body);
          box.appendChild(det);
        } else {
          box.appendChild(body);
        }
        (m.tool_calls || []).forEach(function (c) { box.appendChild(el("pre", "toolcall", "tool call " + JSON.stringify(c))); });
        view.appendChild(box);
      });
    } else if (d.arguments) {
      view.appendChild(el("pre", "toolcall", "arguments " + JSON.stringify(d.arguments)));
    }
    var out = el("div", "msg output");
    out.appendChild(el("div", "role", d.kind === "call" ? "output" : "text"));
    out.appendChild(el("pre", "content", data.strings[d.output]));
    (d.tool_calls || []).forEach(function (c) { out.appendChild(el("pre", "toolcall", "tool call " + c.name + " " + JSON.stringify(c.arguments))); });
    view.appendChild(out);
    if (typeof d.target === "number") {
      var tg = el("div", "msg target");
      tg.appendChild(el("div", "role", "target: what this call should have produced (target back-propagation)"));
      tg.appendChild(el("pre", "content", data.strings[d.target]));
      view.appendChild(tg);
    }
    document.querySelectorAll("#ep-" + ep + " g.node").forEach(function (g) { g.classList.toggle("selected", g.dataset.node === String(id)); });
  }
  document.addEventListener("click", function (ev) {
    var t = ev.target;
    var row = t.closest ? t.closest("[data-ep]") : null;
    var node = t.closest ? t.closest("g.node") : null;
    if (node) {
      var sec = node.closest("section.episode");
      drawNode(sec.querySelector(".callview"), sec.dataset.index, node.dataset.node);
    } else if (row && !t.closest("a[href^='#']")) {
      showEpisode(row.dataset.ep);
    }
  });
  document.querySelectorAll("a.eplink").forEach(function (a) {
    a.addEventListener("click", function () { showEpisode(a.dataset.target); });
  });
  var ws = document.getElementById("weight");
  if (ws) ws.addEventListener("change", function () { setWeight(ws.value); });
  var hs = document.getElementById("heat");
  if (hs) hs.addEventListener("change", function () {
    state.heat = hs.value;
    if (state.open) drawNode(state.open.view, state.open.ep, state.open.id);
  });
  setWeight(ws ? ws.value : "mean_l1");
  var first = document.querySelector("section.episode");
  if (first) {
    showEpisode(first.dataset.index);
    var start = first.querySelector("g.node.target") || first.querySelector("g.node.call");
    if (start) drawNode(first.querySelector(".callview"), first.dataset.index, start.dataset.node);
  }
  document.body.dataset.ready = "1";
})();
