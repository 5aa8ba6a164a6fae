/* chorus transcript viewer: renders the run's messages embedded in this page (chorus/transcripts.py).
   No network: everything it reads is in the page's <script type="application/json"> elements; a
   chunk of questions is decoded only when one of its questions is shown. */
(function () {
  'use strict';
  var META = JSON.parse(document.getElementById('meta').textContent);
  var PAGE = 200;                 // questions per page of the list
  var chunkCache = new Map();
  var S = {sec: 0, id: null, c: '', r: '', a: '', f: '', only: '', page: 0};
  var t0 = performance.now();

  // -- DOM helpers (text goes in as text, never as markup) --------------------------------------
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (attrs[k] === null || attrs[k] === undefined) continue;
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'cls') e.className = attrs[k];
      else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) c.forEach(function (x) { if (x) e.appendChild(typeof x === 'string' ? document.createTextNode(x) : x); });
      else e.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }
  function tag(text, cls) { return el('span', {cls: 'tag' + (cls ? ' ' + cls : ''), text: text}); }
  function fmt(x) { return x === null || x === undefined ? '–' : (typeof x === 'number' ? String(+x.toFixed(3)) : String(x)); }
  function sec() { return META.sections[S.sec]; }
  function conds(t) { return Array.isArray(t.c) ? t.c : [t.c]; }

  // -- agents' names as the messages call them ---------------------------------------------------
  function agentName(s, a) {
    if (s.kind === 'debate') return a === null || a === undefined ? 'sample' : 'Agent ' + (a + 1);
    return String(a);
  }
  function shortName(s, a) { return s.kind === 'debate' ? 'A' + (a + 1) : String(a); }

  // -- data -----------------------------------------------------------------------------------
  function loadChunk(si, k) {
    var key = si + '-' + k;
    if (!chunkCache.has(key)) {
      chunkCache.set(key, (async function () {
        var node = document.getElementById('chunk-' + key);
        var txt = node.textContent;
        if (node.getAttribute('data-enc') === 'gzip') {
          var bin = Uint8Array.from(atob(txt), function (ch) { return ch.charCodeAt(0); });
          var stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream('gzip'));
          txt = await new Response(stream).text();
        }
        return JSON.parse(txt);
      })());
    }
    return chunkCache.get(key);
  }
  function col(s, name) { return s.index_cols.indexOf(name); }

  // -- state in the address (a view can be linked to) ----------------------------------------------
  function readHash() {
    var h = new URLSearchParams(location.hash.slice(1));
    S.sec = Math.min(+(h.get('s') || 0), META.sections.length - 1);
    S.id = h.get('q'); S.c = h.get('c') || ''; S.r = h.get('r') || ''; S.a = h.get('a') || '';
    S.f = h.get('f') || ''; S.only = h.get('only') || '';
  }
  function writeHash() {
    var h = new URLSearchParams();
    h.set('s', S.sec);
    if (S.id !== null) h.set('q', S.id);
    ['c', 'r', 'a', 'f', 'only'].forEach(function (k) { if (S[k] !== '') h.set(k, S[k]); });
    history.replaceState(null, '', '#' + h.toString());
  }

  // -- page frame -------------------------------------------------------------------------------
  var app = document.getElementById('app');
  var header, nav, info, listBox, countBox, pager, controls, view, search, only, selC, selR, selA;

  function frame() {
    header = el('header', null,
      el('h1', {text: META.title}),
      el('p', {cls: 'meta', text: 'run ' + META.run + ' · ' + META.what + ' · rendered by chorus ' + META.version +
        (META.encoding === 'gzip' ? ' · messages stored compressed, decoded per question' : '')}));
    nav = el('nav', {id: 'sections'});
    info = el('div', {id: 'sectionInfo'});
    header.appendChild(nav); header.appendChild(info);
    search = el('input', {id: 'search', type: 'search', placeholder: 'filter: id, family, domain, text',
                          'aria-label': 'filter the list'});
    only = el('select', {id: 'only', 'aria-label': 'show only'});
    countBox = el('div', {id: 'count'});
    listBox = el('ol', {id: 'list'});
    pager = el('div', {id: 'pager'});
    var side = el('aside', null, search, only, countBox, listBox, pager);
    selC = el('select', {id: 'cond'}); selR = el('select', {id: 'round'}); selA = el('select', {id: 'agent'});
    controls = el('div', {cls: 'controls'},
      el('label', null, 'condition ', selC), el('label', null, 'round ', selR), el('label', null, 'agent ', selA),
      el('button', {id: 'prevq', text: '◀ previous', onclick: function () { step(-1); }}),
      el('button', {id: 'nextq', text: 'next ▶', onclick: function () { step(1); }}));
    view = el('div', {id: 'view'});
    var main = el('main', {id: 'unit'}, controls, view);
    app.appendChild(header);
    app.appendChild(el('div', {cls: 'layout'}, side, main));
    var timer = null;
    search.addEventListener('input', function () {
      clearTimeout(timer);
      timer = setTimeout(function () { S.f = search.value; S.page = 0; renderList(); writeHash(); }, 120);
    });
    only.addEventListener('change', function () { S.only = only.value; S.page = 0; renderList(); writeHash(); });
    [[selC, 'c'], [selR, 'r'], [selA, 'a']].forEach(function (p) {
      p[0].addEventListener('change', function () { S[p[1]] = p[0].value; writeHash(); showUnit(); });
    });
    document.addEventListener('keydown', function (ev) {
      if (ev.target.tagName === 'INPUT' || ev.target.tagName === 'SELECT') return;
      if (ev.key === 'j') step(1); else if (ev.key === 'k') step(-1);
    });
  }

  function fill(sel, values, label, cur) {
    sel.textContent = '';
    sel.appendChild(el('option', {value: '', text: label}));
    values.forEach(function (v) { sel.appendChild(el('option', {value: String(v[0]), text: v[1]})); });
    sel.value = cur;
    if (sel.value !== cur) sel.value = '';
  }

  function renderSection() {
    var s = sec();
    nav.textContent = '';
    if (META.sections.length > 1) {
      META.sections.forEach(function (x, i) {
        nav.appendChild(el('button', {cls: i === S.sec ? 'on' : '', text: x.name + ' (' + x.kind + ', ' + x.n_units + ')',
          onclick: function () { S.sec = i; S.id = null; S.c = S.r = S.a = ''; S.page = 0; writeHash(); renderSection(); }}));
      });
    }
    info.textContent = '';
    info.appendChild(el('p', {cls: 'standing' + (s.standing.embedded ? '' : ' plain'), id: 'standing',
                              text: s.name + ': ' + s.standing.text}));
    if (s.record) info.appendChild(el('p', {cls: s.record.ok ? 'meta' : 'standing', id: 'record', text: 'record: ' + s.record.text}));
    info.appendChild(el('p', {cls: 'meta', text: s.kind + ' run ' + s.path + ' · ' + s.n_units +
      (s.kind === 'roleplay' ? ' groups · ' : s.kind === 'council' ? ' questions · ' : ' questions · ') +
      s.n_messages + (s.kind === 'council' ? ' moves' : ' messages') + ' · conditions: ' + s.conditions.join(', ')}));
    if (s.links.length) {
      info.appendChild(el('div', null, 'Influence measurements shown on the turns (runs that declare this run as their source):',
        el('ul', null, s.links.map(function (l, i) {
          var extra = [];
          if (l.n_rows !== undefined) extra.push(l.n_rows + ' rows');
          if (l.n_unmatched) extra.push(l.n_unmatched + ' rows match no turn');
          if (l.n_answer_mismatch) extra.push(l.n_answer_mismatch + ' rows whose answer differs from the turn\'s');
          if (l.shown) extra.push(l.shown);
          if (l.state) extra.push('record: ' + l.state);
          return el('li', null, '[' + (i + 1) + '] ' + l.kind + ': ' + l.path + ' (' + l.how + (extra.length ? '; ' + extra.join('; ') : '') + ')');
        }))));
    } else if (s.kind === 'debate') {
      info.appendChild(el('p', {cls: 'meta', text: 'No influence run (readout, knockout, ablation, counterfactual) declaring this run as its source was found beside it, in ../influence/ or inside it; chorus view RUN --with DIR adds one from elsewhere.'}));
    }
    s.notes.forEach(function (n) { info.appendChild(el('p', {cls: 'note', text: n})); });
    only.textContent = '';
    var opts = [['', 'all ' + (s.kind === 'roleplay' ? 'groups' : 'questions')]];
    if (s.kind !== 'roleplay') opts.push(['sw', 'with a switch'], ['peer', 'with a switch to a peer\'s answer']);
    if (s.links.length) opts.push(['meas', 'with influence measurements']);
    opts.forEach(function (o) { only.appendChild(el('option', {value: o[0], text: o[1]})); });
    only.value = S.only; if (only.value !== S.only) S.only = only.value = '';
    search.value = S.f;
    fill(selC, s.conditions.map(function (c) { return [c, c]; }), 'all conditions', S.c);
    fill(selR, s.rounds.map(function (r) { return [r, roundName(s, r)]; }), 'all rounds', S.r);
    fill(selA, s.agents.map(function (a) { return [a, agentName(s, a)]; }), 'all agents', S.a);
    S.c = selC.value; S.r = selR.value; S.a = selA.value;
    var rows = filtered();
    if (S.id === null || !s.index.some(function (r) { return r[0] === S.id; })) S.id = rows.length ? rows[0][0] : null;
    var at = rows.findIndex(function (r) { return r[0] === S.id; });
    if (at >= 0) S.page = Math.floor(at / PAGE);     // the list opens on the page of the question shown
    renderList();
    return showUnit();
  }

  function roundName(s, r) {
    if (s.kind === 'roleplay') {
      var last = Math.max.apply(null, s.rounds);
      return r === 0 ? 'initial opinion' : (r === last ? 'final opinion' : 'round ' + r);
    }
    return 'round ' + r;
  }

  // -- the list -------------------------------------------------------------------------------
  function filtered() {
    var s = sec(), f = S.f.trim().toLowerCase();
    var iSw = col(s, 'switches'), iPeer = col(s, 'to_peer'), iM = col(s, 'measures');
    return s.index.filter(function (r) {
      if (S.only === 'sw' && !(r[iSw] > 0)) return false;
      if (S.only === 'peer' && !(r[iPeer] > 0)) return false;
      if (S.only === 'meas' && !(r[iM] > 0)) return false;
      if (!f) return true;
      return [r[0], r[1], r[2], r[3]].some(function (x) { return x && String(x).toLowerCase().indexOf(f) >= 0; });
    });
  }

  function renderList() {
    var s = sec(), rows = filtered();
    var pages = Math.max(1, Math.ceil(rows.length / PAGE));
    S.page = Math.min(S.page, pages - 1);
    var from = S.page * PAGE, shown = rows.slice(from, from + PAGE);
    countBox.textContent = rows.length + ' of ' + s.index.length + ' match' +
      (rows.length > PAGE ? ' · showing ' + (from + 1) + '–' + (from + shown.length) : '');
    listBox.textContent = '';
    var iSw = col(s, 'switches'), iPeer = col(s, 'to_peer');
    shown.forEach(function (r) {
      var li = el('li', {cls: 'qitem' + (r[0] === S.id ? ' on' : ''), 'data-id': r[0],
                         onclick: function () { S.id = r[0]; writeHash(); markList(); showUnit(); }},
        el('span', {cls: 'qid', text: r[0]}), ' ', el('span', {cls: 'fam', text: r[1] && r[1] !== r[0] ? r[1] : ''}),
        r[iSw] > 0 ? el('span', {cls: 'sw', text: ' · ' + r[iSw] + ' switch' + (r[iSw] > 1 ? 'es' : '') +
                                 (r[iPeer] ? ' (' + r[iPeer] + ' to a peer)' : '')}) : null,
        r[3] ? el('div', {text: r[3]}) : null);
      listBox.appendChild(li);
    });
    pager.textContent = '';
    if (pages > 1) {
      pager.appendChild(el('button', {id: 'prevPage', text: '◀', onclick: function () { if (S.page > 0) { S.page--; renderList(); } }}));
      pager.appendChild(document.createTextNode('page ' + (S.page + 1) + ' of ' + pages + ' '));
      pager.appendChild(el('button', {id: 'nextPage', text: '▶', onclick: function () { if (S.page < pages - 1) { S.page++; renderList(); } }}));
    }
  }
  function markList() {
    Array.prototype.forEach.call(listBox.children, function (li) { li.classList.toggle('on', li.getAttribute('data-id') === S.id); });
  }
  function step(d) {
    var rows = filtered();
    var i = rows.findIndex(function (r) { return r[0] === S.id; });
    var j = Math.max(0, Math.min(rows.length - 1, (i < 0 ? 0 : i + d)));
    if (!rows.length) return;
    S.id = rows[j][0];
    var page = Math.floor(j / PAGE);
    if (page !== S.page) { S.page = page; renderList(); } else markList();
    writeHash(); showUnit();
  }

  // -- one question / council / group -----------------------------------------------------------
  var showing = 0;
  async function showUnit() {
    var s = sec(), my = ++showing;
    view.removeAttribute('data-unit');
    if (S.id === null) { view.textContent = ''; view.appendChild(el('p', {cls: 'empty', text: 'nothing matches'})); return; }
    var row = s.index.find(function (r) { return r[0] === S.id; });
    if (!row) return;
    var data = await loadChunk(S.sec, row[col(s, 'chunk')]);
    if (my !== showing) return;           // a later choice overtook this one
    var u = data[S.id];
    view.textContent = '';
    view.appendChild(renderUnit(s, u));
    view.setAttribute('data-unit', S.id);
    view.setAttribute('data-filter', [S.c, S.r, S.a].join('|'));
  }

  function visible(s, t) {
    if (S.c !== '' && conds(t).indexOf(S.c) < 0) return false;
    if (t.a === null || t.a === undefined) return S.a === '' && S.r === '';   // vote samples: no agent, no round
    if (S.r !== '' && String(t.r) !== S.r) return false;
    if (S.a !== '' && String(t.a) !== S.a) return false;
    return true;
  }

  function renderUnit(s, u) {
    var box = el('div', {cls: 'unitbox'});
    box.appendChild(el('h2', {text: (s.kind === 'roleplay' ? 'group ' : s.kind === 'council' ? 'council on ' : 'question ') + u.id}));
    box.appendChild(el('div', {cls: 'meta', text: [u.fam, u.dom, u.sub].filter(Boolean).join(' · ')}));
    if (u.sys) box.appendChild(el('details', null, el('summary', {text: 'system prompt'}), el('div', {cls: 'question', text: u.sys})));
    if (u.q) box.appendChild(el('div', {cls: 'question', text: (s.kind === 'roleplay' ? 'topic: ' : '') + u.q}));
    if (u.opts && u.opts.length) {
      box.appendChild(el('ol', {cls: 'opts'}, u.opts.map(function (o) {
        return el('li', {cls: o[0] === u.ref ? 'ref' : '', value: null}, o[0] + ') ' + o[1] + (o[0] === u.ref ? '  (reference)' : ''));
      })));
    } else if (u.cands && u.cands.length) {
      box.appendChild(el('p', {text: 'candidates: ' + u.cands.join(', ') + (u.ref ? ' · gold: ' + u.ref : '')}));
    }
    if (u.ref && !(u.opts && u.opts.length) && !(u.cands && u.cands.length)) box.appendChild(el('p', {text: 'reference: ' + u.ref}));
    box.appendChild(influence(s, u));
    var order = s.conditions.filter(function (c) { return S.c === '' || c === S.c; });
    var any = false;
    order.forEach(function (c) {
      var ts = u.turns.filter(function (t) { return conds(t).indexOf(c) >= 0 && visible(s, Object.assign({}, t, {c: c})); });
      if (!ts.length) return;
      any = true;
      box.appendChild(condBlock(s, u, c, ts));
    });
    if (!any) box.appendChild(el('p', {cls: 'empty', text: 'no message of this ' + (s.kind === 'roleplay' ? 'group' : 'question') + ' matches the condition, round and agent chosen'}));
    return box;
  }

  function condBlock(s, u, c, ts) {
    var peers = s.peers_read.indexOf(c) >= 0;
    var what = s.kind === 'debate' ? (c === 'vote' ? 'independent samples of the round-0 prompt (compute-matched vote)' :
      peers ? 'each agent reads every peer\'s previous-round message' : 'matched control: each agent reads only its own previous message')
      : s.kind === 'council' ? 'typed moves in the order of the trace' : (c === 'human' ? 'the human group' : 'simulated group');
    if (s.cf_from && s.cf_from[c] !== undefined) what += '; its rounds before ' + s.cf_from[c] + ' are the debate\'s own (shown under debate)';
    var block = el('section', {cls: 'cond', 'data-cond': c}, el('h3', null, c, el('span', {cls: 'meta', text: '  ' + what})));
    if (s.kind === 'council') {
      ts = ts.slice().sort(function (x, y) { return x.m - y.m; });
    }
    var byRound = new Map();
    ts.forEach(function (t) { var k = t.r === null || t.r === undefined ? 'vote' : t.r; if (!byRound.has(k)) byRound.set(k, []); byRound.get(k).push(t); });
    var keys = Array.from(byRound.keys()).sort(function (x, y) { return (x === 'vote' ? 1e9 : x) - (y === 'vote' ? 1e9 : y); });
    keys.forEach(function (r) {
      var list = byRound.get(r);
      if (s.kind === 'debate') list.sort(function (x, y) { return (x.a === null ? x.s : x.a) - (y.a === null ? y.s : y.a); });
      var shared = list.length && Array.isArray(list[0].c) && list[0].c.length > 1;
      var h = r === 'vote' ? 'samples' : roundName(s, r) + (shared ? ' (shared by ' + list[0].c.join(' and ') + ': one generation)' : '');
      block.appendChild(el('div', {cls: 'round', 'data-round': String(r)}, el('h4', {text: h}),
        el('div', {cls: 'grid'}, list.map(function (t) { return turnCard(s, u, c, t); })), roundMeasures(s, u, c, list)));
    });
    return block;
  }

  function switchTags(s, t, c) {
    var out = [];
    if (t.sw === true) {
      out.push(tag('switched ' + fmt(t.prev) + ' → ' + fmt(t.ans), 'sw'));
      if (s.peers_read.indexOf(c) < 0) out.push(tag('read no peer', ''));
      else if (t.to && t.to.length) out.push(tag('to ' + t.to.map(function (j) { return agentName(s, j); }).join(' and ') + '\'s answer', 'peer'));
      else out.push(tag('to an answer no peer held before', ''));
    } else if (t.sw === false) out.push(tag('kept ' + fmt(t.ans)));
    else if (t.r > 0 && s.kind === 'debate' && t.a !== null) out.push(tag('switch unknown (an answer is unparsed)', 'warn'));
    return out;
  }

  function turnCard(s, u, c, t) {
    var card = el('div', {cls: 'turn' + (t.sw ? ' switched' : ''), 'data-c': c, 'data-r': String(t.r), 'data-a': String(t.a)});
    var head = el('div', {cls: 'head'});
    if (s.kind === 'debate') {
      head.appendChild(el('span', {cls: 'who', text: t.a === null || t.a === undefined ? 'sample ' + t.s : agentName(s, t.a)}));
      head.appendChild(tag(t.ans === null || t.ans === undefined ? 'unparsed' : 'answer ' + fmt(t.ans),
        t.ok === true ? 'good' : t.ok === false ? 'bad' : t.ans === null ? 'warn' : ''));
      if (t.ok === true) head.appendChild(tag('correct', 'good'));
      else if (t.ok === false) head.appendChild(tag('wrong', 'bad'));
      if (t.tr) head.appendChild(tag('truncated', 'warn'));
      switchTags(s, t, c).forEach(function (x) { head.appendChild(x); });
      if (t.tok !== null && t.tok !== undefined) head.appendChild(tag(t.tok + ' tokens'));
    } else if (s.kind === 'council') {
      head.appendChild(el('span', {cls: 'who', text: t.a + (t.adv ? ' (adversary)' : '')}));
      head.appendChild(tag('#' + t.m + ' ' + t.force + (t.tgt ? ' → ' + t.tgt + (t.tgt_ans ? ' (' + t.tgt_ans + ')' : '') : '')));
      if (t.ans !== null && t.ans !== undefined) head.appendChild(tag('answer ' + t.ans, u.ref ? (t.ans === u.ref ? 'good' : 'bad') : ''));
      if (t.conf !== null && t.conf !== undefined) head.appendChild(tag('confidence ' + fmt(t.conf)));
      switchTags(s, t, c).forEach(function (x) { head.appendChild(x); });
      if (t.why) head.appendChild(tag(t.why, 'warn'));
    } else {
      head.appendChild(el('span', {cls: 'who', text: t.a}));
      head.appendChild(tag(t.kind + (t.kind === 'chat' ? ' with ' + t.with + ', utterance ' + t.k : '')));
      if (t.stance !== undefined && t.stance !== null) head.appendChild(tag('stance ' + fmt(t.stance) + ' (agreement 1–6, classifier)'));
      if (t.on_topic === false) head.appendChild(tag('off topic', 'warn'));
      if (t.fin === 'length') head.appendChild(tag('truncated', 'warn'));
    }
    card.appendChild(head);
    card.appendChild(el('div', {cls: 'msg', text: t.t}));
    if (t.ev) card.appendChild(el('div', {cls: 'overlay'}, el('b', {text: 'evidence: '}), t.ev));
    if (t.att && t.att.length) {
      card.appendChild(el('details', null, el('summary', {text: t.att.length + ' raw repl' + (t.att.length > 1 ? 'ies' : 'y') +
        ' (' + (t.att[0].prof || '') + (t.att[0].per ? ', ' + t.att[0].per : '') + ')'}),
        t.att.map(function (x) {
          return el('div', {cls: 'overlay'}, el('div', null, tag('attempt ' + x.n), tag(x.legal ? 'accepted' : 'rejected', x.legal ? 'good' : 'bad'),
            x.why ? tag(x.why, 'warn') : null), el('div', {cls: 'msg raw', text: x.t}));
        })));
    }
    var sum = cardSummary(s, u, c, t);
    if (sum) card.appendChild(sum);
    return card;
  }

  // -- influence measurements: one line on the turn, the full tables under the round -----------------
  function yes(x) { return x === null || x === undefined ? '–' : x ? 'yes' : 'no'; }
  function koRemoved(k) {   // share of the peer's effect on the margin that the cut removed
    var eff = k[5] !== null && k[6] !== null ? k[5] - k[6] : null;
    return eff && k[7] !== null ? (k[5] - k[7]) / eff : null;
  }
  function pct(x) { return x === null ? '–' : (100 * x).toFixed(0) + '%'; }
  function cfLinks(s, t) {
    return s.links.map(function (l, i) { return [l, i]; }).filter(function (p) {
      return p[0].kind === 'counterfactual' && p[0].receiver === t.a && p[0].round === t.r;
    });
  }
  function kos(u, c, t) { return c === 'debate' && t.r === 1 ? (u.ko || []).filter(function (k) { return k[1] === t.a; }) : []; }
  function abs(u, c, t) { return c === 'debate' && t.r === 1 ? (u.ab || []).filter(function (k) { return k[1] === t.a; }) : []; }

  function cardSummary(s, u, c, t) {
    if (s.kind !== 'debate' || t.a === null || t.a === undefined) return null;
    var lines = [];
    var byCtx = new Map();
    (t.ro || []).forEach(function (x) { var k = '[' + (x[0] + 1) + '] ' + x[1]; if (!byCtx.has(k)) byCtx.set(k, []); byCtx.get(k).push(x); });
    byCtx.forEach(function (rows, k) {
      rows.sort(function (x, y) { return x[2] - y[2]; });
      lines.push('readout ' + k + ': ' + rows.map(function (x) { return 'f=' + fmt(x[2]) + ' → ' + fmt(x[3]); }).join(' · '));
    });
    kos(u, c, t).forEach(function (k) {
      lines.push('knockout [' + (k[0] + 1) + '] of ' + agentName(s, k[2]) + '\'s message (' + fmt(k[3]) + '): ' + pct(koRemoved(k)) + ' of its effect removed');
    });
    var ab = abs(u, c, t);
    if (ab.length) lines.push('ablations/cues: ' + ab.length + ' contexts (table below)');
    if (c === 'debate') cfLinks(s, t).forEach(function (p) {
      var rows = (u.cf || []).filter(function (x) { return x[0] === p[1]; });
      if (rows.length) lines.push('counterfactual [' + (p[1] + 1) + '] ' + p[0].tag + ': ' + rows.map(function (x) {
        return x[1] + ' → ' + fmt(x[4]) + ' here, ' + fmt(x[5]) + ' at the end';
      }).join('; '));
    });
    return lines.length ? el('div', {cls: 'overlay sum'}, lines.map(function (l) { return el('div', {text: l}); })) : null;
  }

  function table(heads, rows) {
    return el('table', {cls: 'small'}, el('tr', null, heads.map(function (h) { return el('th', {text: h}); })),
      rows.map(function (r) { return el('tr', null, r.map(function (x) { return el('td', {text: x}); })); }));
  }

  function roundMeasures(s, u, c, list) {
    if (s.kind !== 'debate') return null;
    var parts = [];
    var ro = [];
    list.forEach(function (t) { (t.ro || []).forEach(function (x) { ro.push([t, x]); }); });
    if (ro.length) {
      ro.sort(function (p, q) { return p[0].a - q[0].a || (p[1][1] < q[1][1] ? -1 : p[1][1] > q[1][1] ? 1 : 0) || p[1][2] - q[1][2]; });
      var labs = ro[0][1][7] || (u.opts || []).map(function (o) { return o[0]; });  // a row names its labels only when they are not the question's
      parts.push(el('div', {cls: 'ro'}, el('b', {text: 'forced-choice readouts'}),
        ' (log-probabilities of the options read after the fraction f of the reply; f = 0: right after reading; margin: peer\'s answer − own previous)',
        table(['agent', 'run', 'context', 'f', 'argmax'].concat(labs.map(function (l) { return 'log p(' + l + ')'; })).concat(['margin']),
          ro.map(function (p) {
            var x = p[1];
            return [agentName(s, p[0].a), '[' + (x[0] + 1) + ']', x[1], fmt(x[2]), fmt(x[3])].concat(x[4].map(fmt))
              .concat([x[6] ? fmt(x[5]) + ' (peer answer ' + x[6] + ')' : '–']);
          }))));
    }
    var ko = [], ab = [], cf = [];
    list.forEach(function (t) {
      kos(u, c, t).forEach(function (k) { ko.push([t, k]); });
      abs(u, c, t).forEach(function (k) { ab.push([t, k]); });
      if (c === 'debate') cfLinks(s, t).forEach(function (p) {
        (u.cf || []).filter(function (x) { return x[0] === p[1]; }).forEach(function (x) { cf.push([t, p, x]); });
      });
    });
    if (ko.length) parts.push(el('div', {cls: 'pairs'}, el('b', {text: 'knockout'}),
      ' (all layers; single-peer context built from round 0; margin = log p(peer\'s answer) − log p(own answer))',
      table(['receiver', 'run', 'peer', 'queries', 'mixer', 'with the message', 'no message', 'attention cut', 'effect removed'],
        ko.map(function (p) {
          var k = p[1];
          return [agentName(s, p[0].a), '[' + (k[0] + 1) + ']', agentName(s, k[2]) + ' (' + fmt(k[9]) + ' vs own ' + fmt(k[8]) + ')',
            fmt(k[3]), fmt(k[4]), fmt(k[5]), fmt(k[6]), fmt(k[7]), pct(koRemoved(k))];
        }))));
    if (ab.length) parts.push(el('div', {cls: 'pairs'}, el('b', {text: 'ablations / cues'}),
      ' (margin = log p(peer\'s answer) − log p(own answer) in each context; round-0 messages)',
      table(['receiver', 'run', 'peer', 'context', 'margin'], ab.map(function (p) {
        var k = p[1];
        return [agentName(s, p[0].a), '[' + (k[0] + 1) + ']', agentName(s, k[2]) + ' (' + fmt(k[6]) + ' vs own ' + fmt(k[5]) + ')', fmt(k[3]), fmt(k[4])];
      }))));
    if (cf.length) parts.push(el('div', {cls: 'pairs'}, el('b', {text: 'counterfactual debates'}),
      ' (the receiver\'s attention to one peer\'s message cut at this round; its replayed and cut arms are conditions of their own)',
      table(['receiver', 'run', 'cut', 'arm', 'before', 'peer before', 'at this round', 'final', 'took the peer\'s answer here', 'at the end'],
        cf.map(function (p) {
          var l = p[1][0], x = p[2];
          return [agentName(s, p[0].a), '[' + (p[1][1] + 1) + '] ' + l.tag, agentName(s, l.peer) + '\'s message, layers ' + fmt(l.layers),
            x[1], fmt(x[2]), fmt(x[3]), fmt(x[4]), fmt(x[5]), yes(x[6]), yes(x[7])];
        }))));
    return parts.length ? el('details', {cls: 'measures', open: ''}, el('summary', {text: 'influence measurements of this round'}), parts) : null;
  }

  // -- who moved whom -------------------------------------------------------------------------
  var SVGNS = 'http://www.w3.org/2000/svg', svgN = 0;
  function sv(tagName, attrs, text) {
    var e = document.createElementNS(SVGNS, tagName);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function influence(s, u) {
    var box = el('div', {cls: 'influence'});
    var cs = s.conditions.filter(function (c) { return (S.c === '' || c === S.c) && (s.peers_read.indexOf(c) >= 0 || s.kind === 'roleplay'); });
    cs.forEach(function (c) {
      var ts = u.turns.filter(function (t) { return conds(t).indexOf(c) >= 0; });
      if (!ts.length) return;
      box.appendChild(graph(s, u, c, ts));
    });
    return box;
  }
  function graph(s, u, c, ts) {
    var W = 260, H = 230, cx = W / 2, cy = H / 2, R = 66;
    var agents = s.agents;
    var pos = {};
    agents.forEach(function (a, i) {
      var ang = -Math.PI / 2 + 2 * Math.PI * i / agents.length;
      pos[String(a)] = [cx + R * Math.cos(ang), cy + R * Math.sin(ang)];
    });
    var id = 'arrow' + (++svgN);
    var svg = sv('svg', {width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, role: 'img'});
    svg.setAttribute('class', 'wmw');
    svg.setAttribute('data-cond', c);
    var defs = sv('defs', {});
    var mk = sv('marker', {id: id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'});
    mk.appendChild(sv('path', {d: 'M0,0 L10,5 L0,10 z', fill: '#6a4bc4'}));
    defs.appendChild(mk); svg.appendChild(defs);
    var edges = [], caption;
    if (s.kind === 'roleplay') {
      var pairs = {};
      ts.forEach(function (t) { if (t.kind === 'chat' && t.with) { var k = [String(t.a), String(t.with)].sort().join('|'); pairs[k] = (pairs[k] || new Set()).add(t.r); } });
      Object.keys(pairs).forEach(function (k) {
        var ab = k.split('|'); if (!pos[ab[0]] || !pos[ab[1]]) return;
        var p = pos[ab[0]], q = pos[ab[1]];
        svg.appendChild(sv('line', {x1: p[0], y1: p[1], x2: q[0], y2: q[1], stroke: '#999', 'stroke-width': 1.5}));
        svg.appendChild(sv('text', {x: p[0] + 0.4 * (q[0] - p[0]), y: p[1] + 0.4 * (q[1] - p[1]) - 3, 'font-size': 10, fill: '#555', 'text-anchor': 'middle'},
          'r' + Array.from(pairs[k]).sort().join(',')));
      });
      caption = c + ': who chatted with whom (rounds on the lines); under each name its stance, initial → final, where the classifier labelled it';
    } else {
      ts.forEach(function (t) { (t.to || []).forEach(function (j) { if (t.sw) edges.push([String(j), String(t.a), t.r]); }); });
      var seen = {};
      edges.forEach(function (e) {
        var p = pos[e[0]], q = pos[e[1]];
        if (!p || !q) return;
        var key = e[0] + '>' + e[1], n = seen[key] = (seen[key] || 0) + 1;
        var dx = q[0] - p[0], dy = q[1] - p[1], L = Math.sqrt(dx * dx + dy * dy) || 1;
        var sx = p[0] + dx / L * 17, sy = p[1] + dy / L * 17, tx = q[0] - dx / L * 19, ty = q[1] - dy / L * 19;
        var bend = 10 + 16 * (n - 1), mx = (sx + tx) / 2 - dy / L * bend, my = (sy + ty) / 2 + dx / L * bend;
        svg.appendChild(sv('path', {d: 'M' + sx + ',' + sy + ' Q' + mx + ',' + my + ' ' + tx + ',' + ty, fill: 'none', stroke: '#6a4bc4',
          'stroke-width': 1.6, 'marker-end': 'url(#' + id + ')', 'class': 'edge', 'data-from': e[0], 'data-to': e[1], 'data-round': e[2]}));
        svg.appendChild(sv('text', {x: mx, y: my, 'font-size': 10, fill: '#6a4bc4', 'text-anchor': 'middle'}, 'r' + e[2]));
      });
      caption = c + ': an arrow from a peer to an agent that switched to that peer\'s ' +
        (s.kind === 'council' ? 'answer (a concession names its target)' : 'previous answer') + ' (label: the round); ' +
        'beside each agent its first → last answer' + (u.ref ? ' (green: the last is the ' + (s.kind === 'council' ? 'gold' : 'reference') + ')' : '') +
        (edges.length ? '' : ' · no agent took a peer\'s answer here');
    }
    agents.forEach(function (a) {
      var p = pos[String(a)];
      var mine = ts.filter(function (t) { return String(t.a) === String(a); });
      var last = null, first = null;
      if (s.kind === 'roleplay') {
        var st = mine.filter(function (t) { return t.stance !== undefined && t.stance !== null; });
        if (st.length) { first = st[0].stance; last = st[st.length - 1].stance; }
      } else {
        var byR = mine.filter(function (t) { return t.ans !== undefined && t.ans !== null; }).sort(function (x, y) { return s.kind === 'council' ? x.m - y.m : x.r - y.r; });
        if (byR.length) { first = byR[0].ans; last = byR[byR.length - 1]; }
      }
      var fill = '#eef';
      if (s.kind !== 'roleplay' && last && u.ref) fill = last.ans === u.ref ? '#dff3e4' : '#fdecea';
      svg.appendChild(sv('circle', {cx: p[0], cy: p[1], r: 16, fill: fill, stroke: '#345', 'stroke-width': 1.2}));
      svg.appendChild(sv('text', {x: p[0], y: p[1] + 4, 'font-size': 11, 'text-anchor': 'middle', 'font-weight': 'bold'}, shortName(s, a)));
      var sub = s.kind === 'roleplay' ? (first === null ? '' : first.toFixed(2) + '→' + last.toFixed(2))
        : (first === null || first === undefined ? '' : fmt(first) + '→' + fmt(last && last.ans));
      // its answers (stance), first → last, outside the circle of agents
      var dx = p[0] - cx, dy = p[1] - cy, L = Math.sqrt(dx * dx + dy * dy) || 1;
      var side = Math.abs(dx) > Math.abs(dy);   // a node at the side: its label under it, inside the picture
      if (sub) svg.appendChild(sv('text', {x: side ? p[0] : p[0] + dx / L * 27, y: side ? p[1] + 29 : p[1] + dy / L * 27 + 4,
                                           'font-size': 10, 'text-anchor': 'middle', fill: '#333'}, sub));
    });
    return el('figure', {'data-cond': c}, svg, el('figcaption', {text: caption}));
  }

  // -- start -----------------------------------------------------------------------------------
  frame();
  readHash();
  window.addEventListener('hashchange', function () { /* state is written by the page itself */ });
  if (!META.sections.length) {
    view.appendChild(el('p', {cls: 'empty', text: 'this run stored no messages'}));
    document.body.setAttribute('data-ready', '1');
    return;
  }
  renderSection().then(function () {
    document.body.setAttribute('data-ready', '1');
    document.body.setAttribute('data-ready-ms', String(Math.round(performance.now() - t0)));
  }, function (err) {
    view.appendChild(el('p', {cls: 'note', text: 'could not render: ' + err}));
    document.body.setAttribute('data-ready', 'error');
  });
})();
