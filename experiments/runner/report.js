// The interactive parts of attnlab's reports, inlined into every report.html (no network, no build step:
// experiments/CMakeLists.txt embeds this file as a string). The pages read without it; it adds:
// - a tooltip on every attention heatmap cell (query and key token with positions, the weight), and on
//   every element that carries data-tip (analysis table cells, chart points);
// - the token view under each layer's heads: hover a token to see where it attends in every head;
// - a click on a head: the pattern enlarged in an overlay, with the same tooltip;
// - for images (ViT): hover a patch of the probe's image to see its attention over the image, per head;
// - in comparisons: check boxes that show and hide variants and seeds on the charts.
// A pattern grid's data sits in <script type="application/json" class="attn-data"> beside its panels:
// labels, per-head scale, and the weights as base64 little-endian uint16 (report_svg.cpp writes them).
(function () {
  "use strict";
  var colours = JSON.parse(document.getElementById("attnlab-colours").textContent);
  var tip = document.createElement("div");
  tip.id = "attnlab-tip";
  document.body.appendChild(tip);

  function showTip(text, event) {
    tip.textContent = text;
    tip.style.display = "block";
    var x = event.clientX + 14, y = event.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 4) x = Math.max(4, event.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, event.clientY - h - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() { tip.style.display = "none"; }
  function number(v) {
    if (!isFinite(v)) return "-";
    var a = Math.abs(v);
    if (a !== 0 && (a < 1e-4 || a >= 1e6)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  // ---- pattern grids ----
  function decode(grid) {
    if (grid.values) return grid;
    var bytes = atob(grid.w), n = bytes.length / 2, q = new Float64Array(n);
    for (var i = 0; i < n; ++i) q[i] = (bytes.charCodeAt(2 * i) | (bytes.charCodeAt(2 * i + 1) << 8)) / 65535;
    grid.values = q;
    return grid;
  }
  function weight(g, l, h, i, j) {
    var head = l * g.heads + h, q = g.values[((head * g.tq) + i) * g.tk + j], m = g.magnitude[head];
    return g.signed[head] ? (2 * q - 1) * m : q * m;
  }
  // The heatmap's colour of a weight (image.cpp's pattern_colour): viridis of sqrt(w / m), or the
  // diverging scale of sign(w) sqrt(|w| / m) for signed mixing.
  function colour(g, l, h, v) {
    var head = l * g.heads + h, m = g.magnitude[head], rgb;
    if (!isFinite(v)) return "rgb(190,190,190)";
    if (g.signed[head]) {
      var t = (v < 0 ? -1 : 1) * Math.sqrt(Math.min(1, Math.abs(v) / m));
      rgb = colours.diverging[Math.round((t + 1) / 2 * 255)];
    } else {
      rgb = colours.viridis[Math.round(Math.sqrt(Math.max(0, Math.min(1, v / m))) * 255)];
    }
    return "rgb(" + rgb[0] + "," + rgb[1] + "," + rgb[2] + ")";
  }
  function ink(css) {  // black or white text on a background colour
    var p = css.match(/\d+/g);
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2] < 110 ? "#fff" : "#000";
  }
  function cellText(g, l, h, i, j) {
    return g.title + ": layer " + l + " head " + h + "\nquery " + i + " " + JSON.stringify(g.queries[i]) + " \u2192 key " + j + " " +
      JSON.stringify(g.keys[j]) + "\nweight " + number(weight(g, l, h, i, j));
  }
  function gridOf(el) {
    var box = el.closest(".attn");
    if (!box.grid) box.grid = JSON.parse(box.querySelector("script.attn-data").textContent);
    return decode(box.grid);
  }
  // The cell under the mouse in a rectangle that draws rows x cols cells.
  function cellAt(rect, event, rows, cols) {
    var j = Math.floor((event.clientX - rect.left) / rect.width * cols), i = Math.floor((event.clientY - rect.top) / rect.height * rows);
    return i >= 0 && j >= 0 && i < rows && j < cols ? [i, j] : null;
  }

  function wirePanel(svg) {
    var cells = svg.querySelector(".cells"), l = +svg.dataset.layer, h = +svg.dataset.head;
    cells.addEventListener("mousemove", function (e) {
      var g = gridOf(svg), c = cellAt(cells.getBoundingClientRect(), e, g.tq, g.tk);
      if (c) showTip(cellText(g, l, h, c[0], c[1]), e); else hideTip();
    });
    cells.addEventListener("mouseleave", hideTip);
    svg.addEventListener("click", function () { enlarge(gridOf(svg), l, h); });
  }

  // The token view of one layer: the queries as a line of tokens; hovering one colours the keys by its
  // weights, one line per head.
  function wireTokens(box) {
    var l = +box.dataset.layer, g = gridOf(box), line = document.createElement("div"), heads = document.createElement("div");
    line.className = "toks";
    heads.className = "tokheads";
    for (var i = 0; i < g.tq; ++i) {
      var s = document.createElement("span");
      s.className = "tok";
      s.textContent = g.queries[i];
      s.dataset.i = i;
      line.appendChild(s);
    }
    line.addEventListener("mouseover", function (e) {
      if (!e.target.dataset || e.target.dataset.i === undefined) return;
      var q = +e.target.dataset.i;
      Array.prototype.forEach.call(line.children, function (c) { c.classList.toggle("on", +c.dataset.i === q); });
      heads.textContent = "";
      for (var h = 0; h < g.heads; ++h) {
        var row = document.createElement("div"), name = document.createElement("span");
        name.className = "headname";
        name.textContent = "head " + h;
        row.appendChild(name);
        for (var j = 0; j < g.tk; ++j) {
          var k = document.createElement("span"), v = weight(g, l, h, q, j), bg = colour(g, l, h, v);
          k.className = "tok";
          k.textContent = g.keys[j];
          k.style.background = bg;
          k.style.color = ink(bg);
          k.dataset.tip = cellText(g, l, h, q, j);
          row.appendChild(k);
        }
        heads.appendChild(row);
      }
    });
    box.appendChild(line);
    box.appendChild(heads);
  }

  // One head drawn large in an overlay: cells of up to 24 px, labels thinned to fit, the same tooltip.
  function enlarge(g, l, h) {
    var overlay = document.createElement("div"), canvas = document.createElement("canvas"), title = document.createElement("div");
    overlay.id = "attnlab-overlay";
    title.textContent = g.title + ": layer " + l + " head " + h + " (click outside or press Esc to close)";
    var room = Math.min(window.innerWidth, window.innerHeight) - 160, n = Math.max(g.tq, g.tk);
    var cell = Math.max(2, Math.min(24, Math.floor(room / n))), margin = 70, font = Math.min(12, Math.max(8, cell - 2));
    var step = Math.ceil((font + 2) / cell);
    canvas.width = margin + cell * g.tk + 8;
    canvas.height = margin + cell * g.tq + 8;
    var cx = canvas.getContext("2d");
    cx.font = font + "px monospace";
    for (var i = 0; i < g.tq; ++i)
      for (var j = 0; j < g.tk; ++j) {
        cx.fillStyle = colour(g, l, h, weight(g, l, h, i, j));
        cx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
      }
    cx.fillStyle = "#222";
    cx.textAlign = "right";
    for (i = 0; i < g.tq; i += step) cx.fillText(g.queries[i].slice(0, 8), margin - 3, margin + (i + 0.5) * cell + font * 0.35);
    for (j = 0; j < g.tk; j += step) {
      cx.save();
      cx.translate(margin + (j + 0.5) * cell + font * 0.35, margin - 3);
      cx.rotate(-Math.PI / 2);
      cx.textAlign = "left";
      cx.fillText(g.keys[j].slice(0, 8), 0, 0);
      cx.restore();
    }
    canvas.addEventListener("mousemove", function (e) {
      var r = canvas.getBoundingClientRect(), sx = r.width / canvas.width;
      var inner = { left: r.left + margin * sx, top: r.top + margin * sx, width: cell * g.tk * sx, height: cell * g.tq * sx };
      var c = cellAt(inner, e, g.tq, g.tk);
      if (c) showTip(cellText(g, l, h, c[0], c[1]), e); else hideTip();
    });
    canvas.addEventListener("mouseleave", hideTip);
    overlay.appendChild(title);
    overlay.appendChild(canvas);
    overlay.addEventListener("click", function (e) { if (e.target === overlay) close(); });
    function close() { hideTip(); overlay.remove(); document.removeEventListener("keydown", key); }
    function key(e) { if (e.key === "Escape") close(); }
    document.addEventListener("keydown", key);
    document.body.appendChild(overlay);
  }

  // ViT: the probe's image once per layer to point at, and each head's attention from the patch under the
  // mouse drawn over the image (the CLS token's, or the first patch's, until the mouse moves).
  function wireImage(box) {
    var l = +box.dataset.layer, g = gridOf(box), im = g.image, scale = im.scale;
    var side = im.patch * scale, pick = document.createElement("canvas"), views = document.createElement("div"), img = new Image();
    views.className = "heads";
    pick.width = im.width * scale;
    pick.height = im.height * scale;
    pick.className = "pick";
    var canvases = [];
    for (var h = 0; h < g.heads; ++h) {
      var fig = document.createElement("figure"), c = document.createElement("canvas"), cap = document.createElement("figcaption");
      c.width = pick.width;
      c.height = pick.height;
      cap.textContent = "head " + h;
      fig.appendChild(c);
      fig.appendChild(cap);
      views.appendChild(fig);
      canvases.push(c);
    }
    var cols = im.width / im.patch;
    function draw(q) {
      var p = pick.getContext("2d");
      p.imageSmoothingEnabled = false;
      p.drawImage(img, 0, 0, pick.width, pick.height);
      if (q >= im.leading) {
        p.strokeStyle = "#ff0";
        p.lineWidth = 2;
        p.strokeRect(((q - im.leading) % cols) * side + 1, Math.floor((q - im.leading) / cols) * side + 1, side - 2, side - 2);
      }
      canvases.forEach(function (c, h) {
        var x = c.getContext("2d");
        x.imageSmoothingEnabled = false;
        x.drawImage(img, 0, 0, c.width, c.height);
        x.globalAlpha = 0.65;
        for (var j = im.leading; j < g.tk; ++j) {
          x.fillStyle = colour(g, l, h, weight(g, l, h, q, j));
          x.fillRect(((j - im.leading) % cols) * side, Math.floor((j - im.leading) / cols) * side, side, side);
        }
        x.globalAlpha = 1;
        c.parentNode.querySelector("figcaption").textContent = "head " + h + ": from " + g.queries[q];
        c.dataset.query = q;
      });
    }
    pick.addEventListener("mousemove", function (e) {
      var c = cellAt(pick.getBoundingClientRect(), e, im.height / im.patch, cols);
      if (!c) return;
      var q = im.leading + c[0] * cols + c[1];
      draw(q);
      showTip("layer " + l + ": attention from patch " + g.queries[q] + " (row " + c[0] + ", column " + c[1] + ")", e);
    });
    pick.addEventListener("mouseleave", hideTip);  // the views keep the last patch, to be read in turn
    views.addEventListener("mousemove", function (e) {
      if (e.target.tagName !== "CANVAS") return hideTip();
      var c = cellAt(e.target.getBoundingClientRect(), e, im.height / im.patch, cols), h = canvases.indexOf(e.target);
      if (c) showTip(cellText(g, l, h, +e.target.dataset.query, im.leading + c[0] * cols + c[1]), e);
    });
    views.addEventListener("mouseleave", hideTip);
    img.onload = function () { draw(0); };
    img.src = im.src;
    box.appendChild(pick);
    box.appendChild(views);
  }

  // ---- comparisons: show and hide series ----
  function wireSeriesPicker(form) {
    function apply() {
      var off = {};
      form.querySelectorAll("input").forEach(function (c) { if (!c.checked) off[c.name + "=" + c.value] = true; });
      document.querySelectorAll("[data-variant]").forEach(function (el) {
        var d = el.dataset;
        var hide = off["variant=" + d.variant] || (d.seed !== undefined && off["seed=" + d.seed]) || (d.curve !== undefined && off["curves=" + d.curve]);
        el.style.display = hide ? "none" : "";
      });
    }
    form.addEventListener("change", apply);
    apply();
  }

  document.querySelectorAll("svg.heatmap").forEach(wirePanel);
  document.querySelectorAll(".attn .tokenview").forEach(wireTokens);
  document.querySelectorAll(".attn .imageview").forEach(wireImage);
  document.querySelectorAll("form.series").forEach(wireSeriesPicker);
  var byTip = false;  // the tooltip shows an element's data-tip (not a heatmap cell's)
  document.addEventListener("mousemove", function (e) {
    var el = e.target.closest ? e.target.closest("[data-tip]") : null;
    if (el) {
      showTip(el.dataset.tip, e);
      byTip = true;
    } else if (byTip) {
      hideTip();
      byTip = false;
    }
  });
})();
