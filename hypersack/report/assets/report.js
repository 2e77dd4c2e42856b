/* HyperSack report: draws the payloads of hypersack.report.data with plotly.js.
   HyperSack.render(root, payloads)  -- a static report (one study, or two side by side)
   HyperSack.live(root, options)     -- the dashboard: polls the JSON API and redraws in place */
(function () {
  "use strict";
  var OUTCOME_COLORS = {finished: "#2f855a", paused: "#805ad5", preempted: "#dd6b20", resized: "#3182ce",
    pruned: "#b7791f", failed: "#e53e3e", lost: "#718096", interrupted: "#a0aec0", running: "#63b3ed"};
  var STATE_COLORS = {complete: "rgba(47,133,90,0.45)", pruned: "rgba(183,121,31,0.35)",
    paused: "rgba(128,90,213,0.45)", running: "rgba(28,100,242,0.9)", failed: "rgba(229,62,62,0.5)",
    pending: "rgba(113,128,150,0.5)"};
  var CONFIG = {displaylogo: false, responsive: true};
  // WebGL only where SVG would be slow: it costs seconds to start in a browser without a GPU.
  function scatterType(n) { return n > 20000 ? "scattergl" : "scatter"; }

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") { e.textContent = attrs[k]; } else { e.setAttribute(k, attrs[k]); }
    });
    (children || []).forEach(function (c) { if (c) { e.appendChild(c); } });
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "-"; }
    if (typeof v === "number") { return Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : String(+v.toPrecision(5)); }
    return String(v);
  }
  function dur(s) {
    if (s === null || s === undefined) { return "-"; }
    if (s >= 3600) { return (s / 3600).toFixed(2) + " h"; }
    if (s >= 60) { return (s / 60).toFixed(1) + " min"; }
    return s.toFixed(1) + " s";
  }
  // A chart's title is its figure's caption, above the plot (never under plotly's toolbar, which
  // sits in the top margin); legends stand right of the plot, clear of both axis titles.
  function layout(title, extra) {
    var base = {title: title, margin: {l: 64, r: 20, t: 30, b: 48}, paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      legend: {orientation: "v", x: 1.02, xanchor: "left", y: 1, yanchor: "top"}, hovermode: "closest"};
    Object.keys(extra || {}).forEach(function (k) { base[k] = extra[k]; });
    return base;
  }
  function draw(div, traces, lay) {
    var points = traces.reduce(function (n, t) { return n + ((t.x || t.dimensions || []).length || 0); }, 0);
    if (!points) {
      lay.annotations = [{text: "nothing to draw yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: {size: 14, color: "#829ab1"}}];
      lay.xaxis = {visible: false}; lay.yaxis = {visible: false};
    }
    var caption = div.parentNode && div.parentNode.querySelector("figcaption");
    if (caption) { caption.textContent = lay.title || ""; }
    delete lay.title;
    div.style.display = "";
    if (div.getAttribute("data-drawn")) { Plotly.react(div, traces, lay, CONFIG); }
    else { Plotly.newPlot(div, traces, lay, CONFIG); div.setAttribute("data-drawn", "1"); }
    div.setAttribute("data-traces", String(traces.length));
  }
  function chart(box, key, tall) {
    var div = box.querySelector("[data-chart='" + key + "']");
    if (!div) {
      div = el("div", {"class": "chart" + (tall ? " tall" : ""), "data-chart": key});
      box.appendChild(el("figure", {"class": "fig", "data-figure": key},
        [el("figcaption", {}), el("p", {"class": "note", "data-note": key, hidden: "hidden"}), div]));
    }
    return div;
  }
  // A note above a chart (a caveat), or in its place: ``hide`` puts the chart away (and its title).
  function note(div, text, hide, title) {
    var n = div.parentNode.querySelector("[data-note]");
    n.textContent = text || "";
    if (text) { n.removeAttribute("hidden"); } else { n.setAttribute("hidden", "hidden"); }
    if (hide) {
      div.style.display = "none";
      div.parentNode.querySelector("figcaption").textContent = title || "";
      div.setAttribute("data-traces", "0");
    }
  }

  // Check boxes above a chart (log y, exclude pruned, x by trial number...): each is kept on the
  // chart's div as data-<key>="1", so a live redraw keeps them; a change redraws with ``redraw``.
  function toggles(div, items, redraw) {
    var fig = div.parentNode, bar = fig.querySelector("[data-toggles]");
    if (!bar) {
      bar = el("div", {"class": "note toggles", "data-toggles": "1"}, items.map(function (it) {
        var box = el("input", {type: "checkbox", "data-toggle": it[0]});
        box.addEventListener("change", function () {
          if (box.checked) { div.setAttribute("data-" + it[0], "1"); } else { div.removeAttribute("data-" + it[0]); }
          redraw();
        });
        return el("label", {}, [box, document.createTextNode(" " + it[1] + " ")]);
      }));
      fig.insertBefore(bar, div);
    }
    return function (key) { return div.getAttribute("data-" + key) === "1"; };
  }
  // A log axis over ``values``: ticks at 1-2-5 within three decades, at decades beyond (never
  // every digit "3 4 5 ... 9" of plotly's default).
  function logAxis(values, extra) {
    var pos = values.filter(function (v) { return v !== null && v > 0; });
    var span = pos.length ? Math.log10(Math.max.apply(null, pos)) - Math.log10(Math.min.apply(null, pos)) : 0;
    var out = {type: "log", dtick: span > 3 ? 1 : "D2", exponentformat: "power"};
    Object.keys(extra || {}).forEach(function (k) { out[k] = extra[k]; });
    return out;
  }
  function keepIf(list, test) { var out = []; list.forEach(function (x, i) { if (test(i)) { out.push(x); } }); return out; }

  // ---- the views ------------------------------------------------------------------------------

  function summary(p) {
    var s = p.summary, counts = Object.keys(s.counts).map(function (k) { return s.counts[k] + " " + k; }).join(", ");
    var cards = [["finished", progress(s)], ["states", counts || "-"], ["best " + p.metric + " (" + p.mode + ")", s.best ? fmt(s.best.value) : "-"],
      ["best trial", s.best ? s.best.trial_id : "-"], ["duration", dur(s.duration_s)], [deviceWords(p).many, s.devices],
      ["mean occupancy", s.mean_occupancy === null ? "-" : fmt(s.mean_occupancy) + "%"], ["status", p.status]];
    if ((p.devices || {}).kind === "cpu" && !(p.devices || {}).measured) {     // 100% of a slot says nothing
      cards = cards.filter(function (c) { return c[0] !== "mean occupancy"; });
    }
    if (s.eta_s !== null && s.eta_s !== undefined) { cards.splice(1, 0, ["eta", "~" + dur(s.eta_s)]); }
    var full = s.best_complete;
    if (s.best && s.best.state !== "complete") {    // the best was stopped early: name the best trained to its end
      cards.splice(4, 0, ["best complete", full ? fmt(full.value) + " (trial " + full.trial_id + ")" : "-"]);
      cards[3] = ["best trial", s.best.trial_id + " (" + s.best.state + ")"];
    }
    if (s.front) {          // several objectives: the Pareto front, not one best
      cards = cards.filter(function (c) { return c[0].indexOf("best") !== 0; });
      cards.splice(2, 0, ["Pareto front", s.front.length + " trial" + (s.front.length === 1 ? "" : "s")],
        ["front trials", s.front.length ? s.front.map(function (t) { return t.trial_id; }).join(", ") : "-"]);
    }
    var box = el("div", {"class": "cards"}, cards.map(function (c) {
      return el("div", {"class": "card"}, [el("div", {"class": "k", text: c[0]}), el("div", {"class": "v", text: String(c[1])})]);
    }));
    var cfg = s.best ? el("div", {"class": "best-config", text: "best config: " + JSON.stringify(s.best.config)}) : null;
    if (s.front) {
      cfg = el("div", {"class": "best-config", "data-view": "front"}, s.front.map(function (t) {
        var vals = Object.keys(t.values).map(function (m) { return m + " " + fmt(t.values[m]); }).join(", ");
        return el("div", {text: "trial " + t.trial_id + ": " + vals + "; config " + JSON.stringify(t.config)});
      }));
    }
    var decisions = ((p.extra || {}).decisions || []).map(function (d) {
      return el("div", {"class": "best-config", "data-view": "decision", text: d.kind + ": " + d.reason});
    });
    return el("div", {"data-view": "summary"}, [box, cfg].concat(decisions, [executionAuto(p)]));
  }

  // execution: auto's fused-or-separate choices with the probe's figures (member-steps per second).
  function executionAuto(p) {
    var rows = (p.extra || {}).execution_auto || [];
    if (!rows.length) { return null; }
    var head = ["model", "choice", "fused member-steps/s", "separate member-steps/s", "pack width", "device"];
    var cells = function (tag, values) { return el("tr", {}, values.map(function (v) { return el(tag, {text: fmt(v)}); })); };
    return el("div", {"data-view": "execution-auto"}, [
      el("h3", {text: "execution: auto"}),
      el("table", {}, [cells("th", head)].concat(rows.map(function (r) {
        return cells("td", [r.subject, r.mode, r.fused_rate, r.separate_rate, r.width, r.device]);
      })))]);
  }

  // "6 of 8" (of the trial budget), or "6 of 7 trials" without one; running trials are not finished.
  function progress(s) {
    var f = s.finished === undefined ? s.trials : s.finished;
    return s.target ? f + " of " + s.target : f + " of " + s.trials + " trials";
  }

  // The objective of each trial and the best so far, by time or by trial number (optuna-dashboard's
  // history); log y and pruned trials left out on demand.
  function bestChart(div, p) {
    var on = toggles(div, [["by-number", "x: trial number"], ["log", "log y"], ["no-pruned", "exclude pruned"]],
      function () { bestChart(div, div._payload); });
    div._payload = p;
    var pts = p.points, byNumber = on("by-number"), sign = p.mode === "max" ? -1 : 1;
    var keep = function (i) { return !(on("no-pruned") && pts.state[i] === "pruned") && !(on("log") && !(pts.v[i] > 0)); };
    var idx = keepIf(pts.id.map(function (_, i) { return i; }), keep);
    var xs = idx.map(function (i) { return byNumber ? pts.id[i] : pts.t[i]; });
    var order = idx.map(function (_, k) { return k; }).sort(function (a, b) { return xs[a] - xs[b] || pts.id[idx[a]] - pts.id[idx[b]]; });
    var bx = [], bv = [], bt = [];
    order.forEach(function (k) {
      var v = pts.v[idx[k]];
      if (v === null) { return; }
      if (!bv.length || sign * v < sign * bv[bv.length - 1]) { bx.push(xs[k]); bv.push(v); bt.push("trial " + pts.id[idx[k]]); }
    });
    var end = byNumber ? Math.max.apply(null, xs.concat([0])) : Math.max(p.now || 0, bx.length ? bx[bx.length - 1] : 0);
    var traces = [
      {type: scatterType(idx.length), mode: "markers", name: "trial value", x: xs, y: idx.map(function (i) { return pts.v[i]; }),
        text: idx.map(function (i) { return "trial " + pts.id[i] + " (" + pts.state[i] + ")"; }),
        marker: {size: 5, color: "rgba(49,130,206,0.45)"}},
      {type: "scatter", mode: "lines+markers", name: "best so far", x: bx.concat(bx.length ? [end] : []),
        y: bv.concat(bv.length ? [bv[bv.length - 1]] : []), line: {shape: "hv", color: "#c53030", width: 2},
        text: bt.concat(bt.length ? [bt[bt.length - 1]] : []), marker: {size: 6}}];
    var y = on("log") ? logAxis(traces[0].y, {title: {text: p.metric + " (log)"}}) : {title: {text: p.metric}};
    draw(div, traces, layout("Best " + p.metric + " so far" + (on("no-pruned") ? " (pruned trials left out)" : ""),
      {xaxis: {title: {text: byNumber ? "trial number" : "seconds since the first launch"}}, yaxis: y}));
  }

  // Every trial's objective by step; outliers do not squash the others (the y-range leaves out
  // values an order of magnitude beyond the others' spread: ``curves_range``); log y and pruned trials left out on demand.
  function curvesChart(div, p) {
    var on = toggles(div, [["log", "log y"], ["no-pruned", "exclude pruned"]], function () { curvesChart(div, div._payload); });
    div._payload = p;
    var groups = {}, ends = {}, shown = 0;
    p.curves.forEach(function (c) {
      if (on("no-pruned") && c.state === "pruned") { return; }
      shown++;
      var g = groups[c.state] || (groups[c.state] = {x: [], y: [], text: []});
      g.x.push.apply(g.x, c.x); g.y.push.apply(g.y, c.y);
      c.x.forEach(function () { g.text.push("trial " + c.id); });
      g.x.push(null); g.y.push(null); g.text.push("");
      if ((c.state === "pruned" || c.state === "paused") && c.x.length) {
        var e = ends[c.state] || (ends[c.state] = {x: [], y: [], text: []});
        e.x.push(c.x[c.x.length - 1]); e.y.push(c.y[c.y.length - 1]); e.text.push("trial " + c.id + " " + c.state);
      }
    });
    var order = ["complete", "pruned", "paused", "failed", "pending", "running"], traces = [];
    order.concat(Object.keys(groups).filter(function (k) { return order.indexOf(k) < 0; })).forEach(function (state) {
      var g = groups[state];
      if (!g) { return; }
      traces.push({type: scatterType(g.x.length), mode: "lines", name: state, x: g.x, y: g.y, text: g.text, connectgaps: false,
        line: {width: state === "running" ? 2.5 : 1, color: STATE_COLORS[state] || "#888"}});
    });
    Object.keys(ends).forEach(function (state) {
      var e = ends[state];
      traces.push({type: scatterType(e.x.length), mode: "markers", name: state + " here", x: e.x, y: e.y, text: e.text,
        marker: {symbol: state === "pruned" ? "x" : "diamond", size: 7, color: OUTCOME_COLORS[state]}});
    });
    var r = p.curves_range, log = on("log") && r && r.log, y = {title: {text: p.metric}};
    if (log) { y = logAxis(traces.reduce(function (a, t) { return a.concat(t.y); }, []), {title: {text: p.metric + " (log)"}, range: r.log}); }
    else if (r && !on("log")) { y.range = r.linear; }
    note(div, r && r.clipped ? r.clipped + " value(s) far outside the others (an order of magnitude beyond their spread) are off the chart (zoom out to see them)." :
      on("log") && r && !r.log ? "Not on a log axis: some values are 0 or negative." : "", false);
    draw(div, traces, layout("Learning curves (" + shown + " trials" + (on("no-pruned") ? ", pruned left out" : "") + ")",
      {xaxis: {title: {text: "step"}}, yaxis: y}));
  }

  function parallelChart(div, p) {
    var dims = p.parallel;
    if (!dims.length || !dims[0].values.length) { draw(div, [], layout("Parallel coordinates: no trial with a value yet")); return; }
    var d = dims.map(function (x) {
      var o = {label: x.label, values: x.values};
      if (x.ticktext) { o.ticktext = x.ticktext; o.tickvals = x.tickvals; }
      return o;
    });
    draw(div, [{type: "parcoords", dimensions: d, line: {color: dims[0].values, colorscale: "Viridis", reversescale: p.mode === "min", showscale: true}}],
      layout("Parallel coordinates" + (dims.some(function (x) { return x.log; }) ? " (log-sampled parameters on log axes)" : ""),
        {margin: {l: 70, r: 90, t: 50, b: 30}}));
  }

  function importanceChart(div, p) {
    var s = p.importance.scores, names = Object.keys(s).sort(function (a, b) { return s[a] - s[b]; });
    if (!names.length) { note(div, p.importance.note || "No parameter importance yet.", true, "Parameter importance"); return; }
    note(div, p.importance.note, false);
    draw(div, [{type: "bar", orientation: "h", x: names.map(function (n) { return s[n]; }), y: names, marker: {color: "#3182ce"}}],
      layout("Parameter importance from " + p.importance.n + " trials (" + p.importance.method + ")",
        {margin: {l: 120, r: 20, t: 30, b: 40}, xaxis: {range: [0, 1]}, showlegend: false}));
  }

  // The objective against each parameter that varies, one small plot each (4 to a row).
  function sliceChart(div, p) {
    var sl = p.slices || {}, names = Object.keys(sl), shown = names.slice(0, 16), cols = Math.min(4, Math.max(1, shown.length));
    var rows = Math.max(1, Math.ceil(shown.length / cols)), traces = [], extra = {grid: {rows: rows, columns: cols, pattern: "independent",
      xgap: 0.12, ygap: 0.35}, showlegend: false, height: 60 + 240 * rows, margin: {l: 64, r: 20, t: 30, b: 50}};
    note(div, names.length > shown.length ? "showing the first " + shown.length + " of " + names.length + " parameters" : "", false);
    shown.forEach(function (name, k) {
      var v = sl[name], ax = k ? String(k + 1) : "";
      traces.push({type: scatterType(v.x.length), mode: "markers", x: v.x, y: v.v, xaxis: "x" + ax, yaxis: "y" + ax, name: name,
        text: v.id.map(function (i) { return "trial " + i; }), marker: {size: 6, color: v.v, colorscale: "Viridis", reversescale: p.mode === "min", opacity: 0.8}});
      extra["xaxis" + ax] = v.log ? logAxis(v.x, {title: {text: name + " (log)", standoff: 4}}) :
        {title: {text: name, standoff: 4}, type: v.categorical ? "category" : "linear"};
      extra["yaxis" + ax] = {title: {text: k % cols === 0 ? p.metric : ""}};
    });
    draw(div, traces, layout("Slice: " + p.metric + " against each parameter", extra));
  }

  // The objective over a pair of numeric parameters (Optuna's plot_contour): an interpolated
  // surface with the trials as dots; a selector picks the pair (the two most important first).
  function contourChart(div, p) {
    var c = p.contour || {pairs: []}, fig = div.parentNode, pick = fig.querySelector("select[data-select='contour-pair']");
    if (!c.pairs.length) {
      if (pick) { pick.parentNode.remove(); }
      note(div, c.note || "No contour plot yet.", true, "Contour: " + p.metric + " over two parameters");
      return;
    }
    note(div, c.note, false);
    // Options are the pairs' names; the pick is kept by name, so a live redraw that reorders
    // the pairs (importance changed) keeps showing the same pair.
    var names = c.pairs.map(function (q) { return q.x + " \u00D7 " + q.y; });
    if (!pick || pick.getAttribute("data-names") !== names.join("|")) {
      if (pick) { pick.parentNode.remove(); }
      pick = el("select", {"data-select": "contour-pair", "data-names": names.join("|")},
        names.map(function (n) { return el("option", {value: n, text: n}); }));
      pick.addEventListener("change", function () { div.setAttribute("data-pair", pick.value); contourChart(div, div._payload); });
      fig.insertBefore(el("label", {"class": "note pick"}, [document.createTextNode("pair "), pick]), div);
    }
    div._payload = p;
    var k = Math.max(0, names.indexOf(div.getAttribute("data-pair"))), q = c.pairs[k], T = c.trials;
    pick.value = names[k];
    function axis(name) { return c.log[name] ? logAxis(T.x[name], {title: {text: name + " (log)"}}) : {title: {text: name}, type: "linear"}; }
    draw(div, [
      {type: "contour", x: q.grid.x, y: q.grid.y, z: q.grid.z, colorscale: "Viridis", reversescale: p.mode === "min", connectgaps: true,
        contours: {coloring: "heatmap"}, line: {width: 0.5, color: "rgba(255,255,255,0.5)"}, colorbar: {title: {text: p.metric}, thickness: 14},
        hovertemplate: q.x + " %{x:.4g}<br>" + q.y + " %{y:.4g}<br>" + p.metric + " ~%{z:.4g}<extra>interpolated</extra>"},
      {type: scatterType(T.id.length), mode: "markers", x: T.x[q.x], y: T.x[q.y], showlegend: false,
        text: T.id.map(function (i, j) { return "trial " + i + ": " + fmt(T.v[j]); }), hoverinfo: "text",
        marker: {size: 5, color: "#1f2933", line: {width: 1, color: "#fff"}}}],
      layout("Contour: " + p.metric + " over " + q.x + " and " + q.y + " (interpolated; dots: " + c.n + " trials)",
        {xaxis: axis(q.x), yaxis: axis(q.y), showlegend: false, margin: {l: 64, r: 20, t: 30, b: 48}}));
  }

  // The trials over the two most important numeric parameters, coloured by the rank of their
  // objective (Optuna's plot_rank): 0 the best, 1 the worst, whatever the values' scale.
  function rankChart(div, p) {
    var c = p.contour || {pairs: []}, T = c.trials;
    if (!c.pairs.length) { note(div, c.note || "No rank plot yet.", true, "Rank: trials over two parameters"); return; }
    note(div, "", false);
    var q = c.pairs[0], n = T.v.length, sign = p.mode === "max" ? -1 : 1;
    var order = T.v.map(function (_, i) { return i; }).sort(function (a, b) { return sign * (T.v[a] - T.v[b]); });
    var rank = new Array(n);
    order.forEach(function (i, k) { rank[i] = n > 1 ? k / (n - 1) : 0; });
    function axis(name) { return c.log[name] ? logAxis(T.x[name], {title: {text: name + " (log)"}}) : {title: {text: name}, type: "linear"}; }
    draw(div, [{type: scatterType(n), mode: "markers", x: T.x[q.x], y: T.x[q.y], showlegend: false,
      text: T.id.map(function (id, i) { return "trial " + id + ": " + p.metric + " " + fmt(T.v[i]) + ", rank " + (order.indexOf(i) + 1) + " of " + n; }),
      hoverinfo: "text", marker: {size: 9, color: rank, colorscale: "RdYlBu", cmin: 0, cmax: 1,
        colorbar: {title: {text: "rank (0: best)"}, thickness: 14}, line: {width: 0.5, color: "#333"}}}],
      layout("Rank: " + n + " trials over " + q.x + " and " + q.y + ", coloured by the rank of " + p.metric,
        {xaxis: axis(q.x), yaxis: axis(q.y), showlegend: false}));
  }

  // An EDF line starts at 0 at its least value (so a line of one value is a visible rise).
  function rise(xs, vs, zero) { return xs.length ? [zero === undefined ? vs[0] : zero].concat(vs) : vs; }
  var EDF_COLORS = {complete: "#2f855a", pruned: "#b7791f", paused: "#805ad5", running: "#3182ce"};

  // The empirical distribution of the objective (Optuna's plot_edf), one step line per state.
  function edfChart(div, p) {
    var e = p.edf || {lines: []};
    if (!e.lines.length) { note(div, e.note || "No distribution yet.", true, "Empirical distribution of " + p.metric); return; }
    note(div, e.note, false);
    draw(div, e.lines.map(function (l) {
      return {type: "scatter", mode: "lines", name: l.name + " (" + l.n + ")", x: rise(l.x, l.x), y: rise(l.x, l.y, 0),
        line: {shape: "hv", width: 2, color: EDF_COLORS[l.name] || "#718096"}};
    }), layout("Empirical distribution of " + p.metric + " by state (stopped trials at the value they reached)",
      {xaxis: {title: {text: p.metric}}, yaxis: {title: {text: "fraction of trials \u2264 x"}, range: [0, 1.02]}}));
  }

  // A multi-objective study: its complete trials by the first two objectives, the Pareto front
  // (which weighs every objective) in red and joined by a line; dominated trials grey.
  function paretoChart(div, p) {
    var f = p.pareto, m = f.metrics, on = {x: [], y: [], text: []}, off = {x: [], y: [], text: []};
    f.id.forEach(function (id, i) {
      var g = f.front[i] ? on : off;
      g.x.push(f.x[i]); g.y.push(f.y[i]); g.text.push("trial " + id);
    });
    var order = on.x.map(function (_, i) { return i; }).sort(function (a, b) { return on.x[a] - on.x[b]; });
    var traces = [
      {type: scatterType(off.x.length), mode: "markers", name: "dominated", x: off.x, y: off.y, text: off.text,
        marker: {size: 6, color: "rgba(113,128,150,0.5)"}},
      {type: "scatter", mode: "lines+markers", name: "Pareto front", x: order.map(function (i) { return on.x[i]; }),
        y: order.map(function (i) { return on.y[i]; }), text: order.map(function (i) { return on.text[i]; }),
        line: {color: "#c53030", width: 1, dash: "dot"}, marker: {size: 9, color: "#c53030"}}];
    note(div, m.length > 2 ? "The front weighs all " + m.length + " objectives (" + m.join(", ") +
      "); the axes show the first two." : "", false);
    draw(div, traces, layout("Pareto front: " + on.x.length + " of " + f.id.length + " complete trials (" +
      m[0] + " " + f.modes[0] + ", " + m[1] + " " + f.modes[1] + ")",
      {xaxis: {title: {text: m[0] + " (" + f.modes[0] + ")"}}, yaxis: {title: {text: m[1] + " (" + f.modes[1] + ")"}}}));
  }

  // In a multi-objective study the single-metric charts draw the first objective: say so.
  function firstObjectiveNotes(views, p) {
    if (!p.pareto) { return; }
    var says = "Multi-objective study: this chart shows the first objective, " + p.metric +
      " (the Pareto front chart weighs all).";
    ["best", "curves", "parallel", "importance", "slice", "contour", "edf", "rank"].forEach(function (k) {
      var n = views[k].parentNode.querySelector("[data-note]"), had = n.hidden ? "" : n.textContent;
      note(views[k], had && had.indexOf(says) < 0 ? says + " " + had : says, false);
    });
  }

  function deviceWords(p) {
    var k = (p.devices || {}).kind;
    return k === "cpu" ? {one: "CPU slot", many: "CPU slots", title: "CPU-slot timeline"} : k === "mixed" ?
      {one: "device", many: "devices", title: "Device timeline (GPUs and CPU slots)"} : {one: "GPU", many: "GPUs", title: "GPU timeline"};
  }

  // One row per device; co-located stays share the row, each on its own band (lane).
  function timelineChart(div, p) {
    var L = p.lanes, lanesOf = {}, byOutcome = {}, i, boot = {x: [], base: [], y: [], hover: [], width: [], offset: []};
    for (i = 0; i < L.trial.length; i++) { lanesOf[L.device[i]] = Math.max(lanesOf[L.device[i]] || 0, L.lane[i] + 1); }
    for (i = 0; i < L.trial.length; i++) {
      var o = L.outcome[i], g = byOutcome[o] || (byOutcome[o] = {x: [], base: [], y: [], text: [], hover: [], width: [], offset: []});
      var w = 0.84 / lanesOf[L.device[i]], began = (L.began || [])[i], from = L.start[i];
      if (began !== null && began !== undefined && began > L.start[i]) {    // the worker's start-up: its own segment
        from = began;
        boot.base.push(L.start[i]); boot.x.push(began - L.start[i]); boot.y.push(L.device[i]);
        boot.width.push(w * 0.92); boot.offset.push(0.42 - (L.lane[i] + 1) * w + 0.04 * w);
        boot.hover.push("worker start-up before trial " + L.trial[i] + " (attempt " + L.attempt[i] + "): " +
          dur(began - L.start[i]) + ", not counted as the trial's running time");
      }
      g.base.push(from); g.x.push(Math.max(L.end[i] - from, 1e-9)); g.y.push(L.device[i]);
      g.width.push(w * 0.92); g.offset.push(0.42 - (L.lane[i] + 1) * w + 0.04 * w);   // lane 0 on top
      var members = (L.members || [])[i];
      if (members) {          // a fused pack: one stay, its members on hover
        g.text.push("pack " + L.pack[i] + " (" + members.length + " trial" + (members.length === 1 ? "" : "s") + ")");
        g.hover.push("pack " + L.pack[i] + ": trials " + members.join(", ") + " · " + fmt(L.share[i]) + "% of the device · " + o +
          " · " + dur(L.start[i]) + " to " + dur(L.end[i]));
      } else {
        g.text.push((L.pack[i] !== null ? "p" + L.pack[i] + ":" : "") + "t" + L.trial[i]);
        g.hover.push("trial " + L.trial[i] + " attempt " + L.attempt[i] + " · " + fmt(L.share[i]) + "% of the device · " + o +
          (L.pack[i] !== null ? " · pack " + L.pack[i] : "") + " · " + dur(L.start[i]) + " to " + dur(L.end[i]));
      }
    }
    var names = Object.keys(lanesOf).sort(), most = 1;
    names.forEach(function (d) { most = Math.max(most, lanesOf[d]); });
    var traces = Object.keys(byOutcome).map(function (o) {
      var g = byOutcome[o];
      return {type: "bar", orientation: "h", name: o, x: g.x, base: g.base, y: g.y, width: g.width, offset: g.offset,
        text: L.trial.length <= 3000 ? g.text : null, hovertext: g.hover, hoverinfo: "text", textposition: "inside",
        insidetextanchor: "middle", textfont: {size: 9, color: "#fff"}, constraintext: "both",
        marker: {color: OUTCOME_COLORS[o] || "#999", line: {width: 0.5, color: "#fff"}}};
    });
    if (boot.x.length) {
      traces.push({type: "bar", orientation: "h", name: "worker start-up", x: boot.x, base: boot.base, y: boot.y,
        width: boot.width, offset: boot.offset, hovertext: boot.hover, hoverinfo: "text",
        marker: {color: "#cbd2d9", pattern: {shape: "/", fgcolor: "#9aa5b1"}, line: {width: 0.5, color: "#fff"}}});
    }
    var words = deviceWords(p), h = Math.max(300, Math.min(1400, 110 + names.length * Math.max(26, 9 * most)));
    draw(div, traces, layout(words.title + ": each trial's stays, one row per " + words.one +
      " (co-located trials side by side; drag to zoom in time, double-click to reset)", {barmode: "overlay", height: h,
      yaxis: {categoryorder: "array", categoryarray: names.slice().reverse(), automargin: true, tickfont: {size: 10}, fixedrange: true},
      xaxis: {title: {text: "seconds since the first launch"}}, dragmode: "zoom"}));
  }

  function occupancyChart(div, p) {
    var dev = p.devices || {}, words = deviceWords(p);
    if (dev.kind === "cpu" && !dev.measured) {
      note(div, "Not drawn: the trials ran on CPU slots (one trial per slot at a time) and no GPU utilisation was measured.",
        true, "Occupancy");
      return;
    }
    note(div, dev.measured ? "" : "No utilisation was measured (no NVML): the lines are the compute allocated to trials, not the measured use.", false);
    var traces = [];
    Object.keys(p.occupancy).forEach(function (d) {
      traces.push({type: "scatter", mode: "lines", name: d + " allocated", x: p.occupancy[d][0], y: p.occupancy[d][1], line: {shape: "hv", width: 1.5}});
    });
    Object.keys(p.utilization).forEach(function (d) {
      traces.push({type: "scatter", mode: "lines", name: d + " measured (NVML)", x: p.utilization[d][0], y: p.utilization[d][1], line: {dash: "dot", width: 1.5}});
    });
    draw(div, traces, layout("Allocated compute per " + words.one + " (%)" + (dev.measured ? " and measured utilisation" : ""),
      {yaxis: {title: {text: "% of the " + words.one}, rangemode: "tozero"},
      xaxis: {title: {text: "seconds since the first launch"}}, showlegend: traces.length <= 16}));
  }

  var TABLE_HEAD = ["id", "state", "value", "step", "attempts", "resumes", "start", "running", "waiting"];

  function tableView(box, p) {
    var t = p.table, order = [], want = box.getAttribute("data-state") || "", sortKey = box.getAttribute("data-sort") || "id", desc = box.getAttribute("data-desc") === "1";
    var packed = (t.pack || []).some(function (v) { return v !== null; });
    var params = Object.keys(t.params || {}), columns = TABLE_HEAD.concat(packed ? ["pack", "seat"] : [], params, ["error"]);
    function column(c) { return t[c] !== undefined && params.indexOf(c) < 0 ? t[c] : t.params[c]; }
    var keys = column(sortKey) || t.id;
    var inRange = paramTest(box, t);
    for (var i = 0; i < t.id.length; i++) { if ((!want || t.state[i] === want) && inRange(i)) { order.push(i); } }
    var n = order.length;
    order.sort(function (a, b) {
      var x = keys[a], y = keys[b];
      if (x === y) { return 0; } if (x === null) { return 1; } if (y === null) { return -1; }
      return (x < y ? -1 : 1) * (desc ? -1 : 1);
    });
    var limit = box.getAttribute("data-all") ? n : Math.min(n, 1000);
    var head = el("tr", {}, columns.map(function (c) {
      var th = el("th", {text: c + (c === sortKey ? (desc ? " \u25BC" : " \u25B2") : ""), "data-col": c});
      th.addEventListener("click", function () {
        box.setAttribute("data-desc", c === sortKey && !desc ? "1" : "0"); box.setAttribute("data-sort", c); tableView(box, p);
      });
      return th;
    }));
    var cols = columns.map(column), body = el("tbody");
    for (var k = 0; k < limit; k++) {
      var r = order[k], tr = el("tr", {"data-trial": String(t.id[r]), title: "click: this trial's details"});
      tr.addEventListener("click", select(box, p, t.id[r]));
      columns.forEach(function (c, j) {
        var v = cols[j][r], td = el("td", {"class": c === "state" ? "state-" + v : params.indexOf(c) >= 0 ? "cfg" : ""});
        if (c === "error" && v) {
          if (t.traceback[r]) {
            td.appendChild(el("details", {}, [el("summary", {text: v}), el("pre", {text: t.traceback[r]})]));
          } else { td.textContent = v; }
        } else { td.textContent = c === "running" || c === "waiting" || c === "start" ? (v === null ? "-" : dur(v)) : fmt(v); }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    box.innerHTML = "";
    box.appendChild(el("div", {"class": "filters"}, [stateFilter(box, p, want), paramFilter(box, p)]));
    box.appendChild(el("div", {"class": "tablebox"}, [el("table", {"class": "trials"}, [el("thead", {}, [head]), body])]));
    if (limit < n) {
      var more = el("button", {text: "show all " + n + " trials"});
      more.addEventListener("click", function () { box.setAttribute("data-all", "1"); tableView(box, p); });
      box.appendChild(el("p", {"class": "note", text: "showing " + limit + " of " + n + " trials (sorted by " + sortKey + ") "}, [more]));
    }
  }

  function select(box, p, id) {
    return function (ev) {
      if (ev.target.closest("details")) { return; }        // opening a traceback is not a pick
      box.setAttribute("data-selected", String(id));
      trialView(box.parentNode.querySelector("[data-view='trial']"), p, id);
    };
  }

  // One trial: every metric by step, its stays, its config and its failure.
  function trialView(box, p, id) {
    var t = p.table, r = t.id.indexOf(id), L = p.lanes;
    if (!box || r < 0) { return; }
    box.innerHTML = "";
    box.appendChild(el("h3", {text: "Trial " + id + " (" + t.state[r] + "), " + p.metric + " " + fmt(t.value[r]) +
      " at step " + fmt(t.step[r]) + ", " + t.attempts[r] + " attempt(s), " + t.resumes[r] + " resume(s)"}));
    var cfg = {};
    Object.keys(t.params).forEach(function (k) { if (t.params[k][r] !== null) { cfg[k] = t.params[k][r]; } });
    box.appendChild(el("div", {"class": "best-config", text: "config: " + JSON.stringify(cfg)}));
    if (t.error[r]) { box.appendChild(el("pre", {"class": "failure", text: t.error[r] + (t.traceback[r] ? "\n" + t.traceback[r] : "")})); }
    var rows = [el("tr", {}, ["attempt", "device", "from", "to", "outcome", "share", "pack"].map(function (h) { return el("th", {text: h}); }))];
    for (var i = 0; i < L.trial.length; i++) {
      if (L.trial[i] !== id && ((L.members || [])[i] || []).indexOf(id) < 0) { continue; }
      rows.push(el("tr", {}, [L.attempt[i], L.device[i], dur(L.start[i]), dur(L.end[i]), L.outcome[i], fmt(L.share[i]) + "%",
        L.pack[i] === null ? "-" : L.pack[i]].map(function (v) { return el("td", {text: String(v)}); })));
    }
    box.appendChild(el("table", {"class": "compare", "data-view": "stays"}, rows));
    var div = chart(box, "trial-metrics"), mine = (p.metrics || {})[String(id)], traces = [];
    if (mine) {
      Object.keys(mine).forEach(function (m) { traces.push({type: "scatter", mode: "lines+markers", name: m, x: mine[m][0], y: mine[m][1]}); });
    } else {
      p.curves.forEach(function (c) { if (c.id === id) { traces.push({type: "scatter", mode: "lines+markers", name: p.metric, x: c.x, y: c.y}); } });
    }
    draw(div, traces, layout("Trial " + id + ": " + (mine ? "every metric" : p.metric) + " by step (click a legend entry to hide a metric)",
      {xaxis: {title: {text: "step"}}, yaxis: {title: {text: "value"}}}));
  }

  // Whether row i passes the parameter filter (box's data-param with data-lo/data-hi for a
  // number, data-pick for a category); rows without the parameter fail an active filter.
  function paramTest(box, t) {
    var name = box.getAttribute("data-param"), col = name ? (t.params || {})[name] : null;
    if (!col) { return function () { return true; }; }
    var lo = box.getAttribute("data-lo"), hi = box.getAttribute("data-hi"), pick = box.getAttribute("data-pick");
    if (!numericColumn(col)) { return function (i) { return !pick || String(col[i]) === pick; }; }
    lo = lo === null || lo === "" ? -Infinity : +lo; hi = hi === null || hi === "" ? Infinity : +hi;
    return function (i) { return col[i] !== null && col[i] >= lo && col[i] <= hi; };
  }
  function numericColumn(col) { return col.every(function (v) { return v === null || typeof v === "number"; }); }

  // Filter by a parameter's range (a number: from, to) or value (a category).
  function paramFilter(box, p) {
    var params = Object.keys(p.table.params || {}), name = box.getAttribute("data-param") || "";
    function redraw() { tableView(box, p); }
    var sel = el("select", {"data-filter": "param"}, [el("option", {value: "", text: "any parameter"})]
      .concat(params.map(function (k) { return el("option", {value: k, text: k}); })));
    sel.value = params.indexOf(name) >= 0 ? name : "";
    sel.addEventListener("change", function () {
      ["data-lo", "data-hi", "data-pick"].forEach(function (a) { box.removeAttribute(a); });
      box.setAttribute("data-param", sel.value); redraw();
    });
    var parts = [document.createTextNode(" where "), sel], col = sel.value ? p.table.params[sel.value] : null;
    if (col && numericColumn(col)) {
      var known = col.filter(function (v) { return v !== null; });
      ["lo", "hi"].forEach(function (end) {
        var input = el("input", {type: "number", step: "any", "data-filter": end, placeholder: fmt(end === "lo" ? Math.min.apply(null, known) : Math.max.apply(null, known))});
        input.value = box.getAttribute("data-" + end) || "";
        input.addEventListener("change", function () { box.setAttribute("data-" + end, input.value); redraw(); });
        parts.push(document.createTextNode(end === "lo" ? " from " : " to "), input);
      });
    } else if (col) {
      var seen = {};
      col.forEach(function (v) { if (v !== null) { seen[String(v)] = true; } });
      var values = Object.keys(seen).sort();
      var pick = el("select", {"data-filter": "pick"}, [el("option", {value: "", text: "any value"})]
        .concat(values.map(function (v) { return el("option", {value: v, text: v}); })));
      pick.value = box.getAttribute("data-pick") || "";
      pick.addEventListener("change", function () { box.setAttribute("data-pick", pick.value); redraw(); });
      parts.push(document.createTextNode(" is "), pick);
    }
    return el("label", {"class": "note"}, parts);
  }

  function stateFilter(box, p, want) {
    var counts = {};
    p.table.state.forEach(function (s) { counts[s] = (counts[s] || 0) + 1; });
    var sel = el("select", {"data-filter": "state"}, [el("option", {value: "", text: "all states (" + p.table.state.length + ")"})]
      .concat(Object.keys(counts).sort().map(function (s) { return el("option", {value: s, text: s + " (" + counts[s] + ")"}); })));
    sel.value = want;
    sel.addEventListener("change", function () { box.setAttribute("data-state", sel.value); tableView(box, p); });
    return el("label", {"class": "note"}, [document.createTextNode("show "), sel]);
  }

  // ---- one study ------------------------------------------------------------------------------

  function studySection(section, p) {
    section.innerHTML = "";
    var sub = p.source === "simulation" ? " (simulated: " + (p.extra.algorithm || "") + ", " + (p.extra.policy || "") + ")" : "";
    section.appendChild(el("h2", {text: p.name + sub}));
    section.appendChild(summary(p));
    var g1 = el("div", {"class": "grid2"}), g2 = el("div", {"class": "grid2"});
    section.appendChild(g1); section.appendChild(g2);
    var g3 = el("div"), g4 = el("div", {"class": "grid2"}), g5 = el("div", {"class": "grid2"});
    section.appendChild(g3); section.appendChild(g4); section.appendChild(g5);
    var front = p.pareto ? el("div") : null;
    if (front) { section.appendChild(front); }
    var charts = el("div");
    section.appendChild(charts);
    section.appendChild(el("h3", {text: "Trials"}));
    var tbl = el("div", {"data-view": "table"});
    section.appendChild(tbl);
    section.appendChild(el("div", {"data-view": "trial"}));
    return {best: chart(g1, "best"), curves: chart(g1, "curves"), parallel: chart(g2, "parallel"),
      importance: chart(g2, "importance"), slice: chart(g3, "slice"),
      contour: chart(g4, "contour"), edf: chart(g4, "edf"), rank: chart(g5, "rank"), timeline: chart(charts, "timeline"), occupancy: chart(charts, "occupancy"),
      table: tbl, summary: section.querySelector("[data-view='summary']"), section: section,
      pareto: front ? chart(front, "pareto") : null};
  }

  function drawStudy(views, p) {
    var fresh = summary(p);
    views.summary.replaceWith(fresh); views.summary = fresh;
    bestChart(views.best, p); curvesChart(views.curves, p); parallelChart(views.parallel, p);
    importanceChart(views.importance, p); sliceChart(views.slice, p);
    contourChart(views.contour, p); edfChart(views.edf, p); rankChart(views.rank, p); timelineChart(views.timeline, p); occupancyChart(views.occupancy, p);
    if (views.pareto && p.pareto) { paretoChart(views.pareto, p); }
    firstObjectiveNotes(views, p);
    tableView(views.table, p);
    var picked = views.table.getAttribute("data-selected");
    if (picked !== null) { trialView(views.section.querySelector("[data-view='trial']"), p, +picked); }
  }

  function compareSection(root, ps) {
    var sec = el("section", {"class": "study", "data-view": "compare"});
    sec.appendChild(el("h2", {text: "Comparison: " + ps.map(function (p) { return p.name; }).join(" vs ")}));
    var rows = [["trials", function (p) { return p.summary.trials; }], ["best " + ps[0].metric, function (p) { return p.summary.best ? fmt(p.summary.best.value) : "-"; }],
      ["time to best", function (p) { return p.best.t.length ? dur(p.best.t[p.best.t.length - 1]) : "-"; }],
      ["duration", function (p) { return dur(p.summary.duration_s); }], ["devices", function (p) { return p.summary.devices; }],
      ["mean occupancy", function (p) { return p.summary.mean_occupancy === null ? "-" : fmt(p.summary.mean_occupancy) + "%"; }]];
    var table = el("table", {"class": "compare"}, [el("tr", {}, [el("th", {text: ""})].concat(ps.map(function (p) { return el("th", {text: p.name}); })))]
      .concat(rows.map(function (r) { return el("tr", {}, [el("td", {text: r[0]})].concat(ps.map(function (p) { return el("td", {text: String(r[1](p))}); }))); })));
    sec.appendChild(table);
    var g = el("div", {"class": "grid2"});
    sec.appendChild(g);
    root.appendChild(sec);
    draw(chart(g, "compare-best"), ps.map(function (p) {
      return {type: "scatter", mode: "lines+markers", name: p.name, x: p.best.t.concat(p.best.t.length ? [Math.max(p.now || 0, p.best.t[p.best.t.length - 1])] : []),
        y: p.best.v.concat(p.best.v.length ? [p.best.v[p.best.v.length - 1]] : []), line: {shape: "hv"}};
    }), layout("Best " + ps[0].metric + " so far", {xaxis: {title: {text: "seconds since the first launch"}}}));
    draw(chart(g, "compare-occupancy"), [{type: "bar", x: ps.map(function (p) { return p.name; }), y: ps.map(function (p) { return p.summary.mean_occupancy; }), marker: {color: "#3182ce"}}],
      layout("Mean occupancy of the devices (% allocated)", {yaxis: {rangemode: "tozero"}}));
    compareEdf(chart(g, "compare-edf"), ps);
  }

  // One line per study: the distribution of its complete trials' values.
  function compareEdf(div, ps) {
    var traces = [];
    ps.forEach(function (p) {
      ((p.edf || {}).lines || []).forEach(function (l) {
        if (l.name === "complete") { traces.push({type: "scatter", mode: "lines", name: p.name + " (" + l.n + ")", x: rise(l.x, l.x), y: rise(l.x, l.y, 0), line: {shape: "hv", width: 2}}); }
      });
    });
    draw(div, traces, layout("Empirical distribution of " + ps[0].metric + " (complete trials)",
      {xaxis: {title: {text: ps[0].metric}}, yaxis: {title: {text: "fraction of trials \u2264 x"}, range: [0, 1.02]}}));
  }

  function render(root, payloads) {
    if (payloads.length > 1) { compareSection(root, payloads); }
    payloads.forEach(function (p) {
      var sec = el("section", {"class": "study", "data-study": p.name});
      root.appendChild(sec);
      drawStudy(studySection(sec, p), p);
    });
  }

  // ---- the dashboard --------------------------------------------------------------------------

  function live(root, opts) {
    var nav = el("nav", {"class": "studies"}), mainBox = el("main", {style: "flex:1"}), views = null, current = opts.study || null, known = {};
    root.appendChild(el("div", {"class": "layout"}, [nav, mainBox]));
    var status = el("p", {"class": "note", "data-view": "status"});
    mainBox.appendChild(status);
    var sec = el("section", {"class": "study"});
    mainBox.appendChild(sec);
    function get(url) {
      return fetch(url, {cache: "no-store"}).then(function (r) {
        if (!r.ok) { return r.text().then(function (t) { throw new Error(t || r.statusText); }); }
        return r.json();
      });
    }
    function listStudies() {
      return get("api/studies").then(function (studies) {
        nav.innerHTML = "";
        nav.appendChild(el("div", {"class": "k", text: "studies"}));
        known = {};
        studies.forEach(function (s) {
          known[s.name] = true;
          var a = el("a", {href: "?study=" + encodeURIComponent(s.name) + (opts.poll ? "&poll=" + opts.poll : ""), "class": s.name === current ? "on" : ""},
            [document.createTextNode(s.name + " "), el("span", {"class": "st", text: s.status})]);
          nav.appendChild(a);
        });
        if (!current && studies.length) { current = studies[studies.length - 1].name; }
      });
    }
    var ticks = 0, busy = false;
    function tick() {
      if (busy) { return; }
      busy = true;
      var listing = ticks % 10 === 0 || !known[current] ? listStudies() : Promise.resolve();
      ticks++;
      listing.then(function () {
        if (!current) { status.textContent = "no study in this store yet"; return null; }
        if (!known[current]) { status.textContent = "waiting for study " + current + " to start"; return null; }
        return get("api/study?name=" + encodeURIComponent(current)).then(function (p) {
          if (!views) { views = studySection(sec, p); }
          drawStudy(views, p);
          var s = p.summary, eta = s.eta_s !== null && s.eta_s !== undefined ? ", ETA ~" + dur(s.eta_s) : "";
          status.textContent = "study " + p.name + " (" + p.status + "): " + progress(s) + " finished" + eta +
            ", updated " + new Date().toLocaleTimeString();
        });
      }).catch(function (e) { status.textContent = "cannot read the store: " + e.message; })
        .then(function () { busy = false; });
    }
    tick();
    return setInterval(tick, opts.poll || 2000);
  }

  window.HyperSack = {render: render, live: live};
})();
