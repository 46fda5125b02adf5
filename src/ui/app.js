// foldgate dashboard: reads the admin API with the credential kept in this
// tab's sessionStorage (or none: key-less conversations from loopback).
// Everything from the server is inserted as text, never as HTML.
'use strict';

const KEY = 'foldgate.credential';
const SVG = 'http://www.w3.org/2000/svg'; // a namespace name, never fetched
const $ = (id) => document.getElementById(id);
let cursor = null;
let selected = null;
let listed = [];

class ApiFailure extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function credential() { return sessionStorage.getItem(KEY) || ''; }

// `#token=...` in the address: kept for this tab, then removed from the
// address bar and history (a fragment never reaches the server).
function takeFragmentToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
}

async function api(path) {
  const headers = {};
  const c = credential();
  if (c) headers.Authorization = 'Bearer ' + c;
  const r = await fetch(path, { headers, cache: 'no-store' });
  if (!r.ok) {
    let message = r.status + ' ' + r.statusText;
    try {
      const body = await r.json();
      if (body.error && body.error.message) message = body.error.message;
    } catch (_) { /* not JSON */ }
    throw new ApiFailure(r.status, message);
  }
  return r;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = el('tr');
  for (const c of cells) tr.append(c instanceof Node ? c : el('td', c));
  return tr;
}

const fmt = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));
const when = (unix) => (unix ? new Date(unix * 1000).toISOString().replace('T', ' ').slice(0, 19) : '—');

function status(text) { $('status').textContent = text || ''; }

// ---- totals ----------------------------------------------------------------

// Folds, failures and summarizer time come from the fold history the state
// store keeps (/foldgate/totals): the same conversations as the table, so
// a restart changes neither. Requests, reuses and tokens saved are this
// process's counters (/foldgate/metrics), and say so.

function parseMetrics(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

function total(m, name) {
  let sum = null;
  for (const [k, v] of m) {
    if (k === name || k.startsWith(name + '{')) sum = (sum || 0) + v;
  }
  return sum;
}

async function loadTotals() {
  const t = await (await api('/foldgate/totals')).json();
  const m = parseMetrics(await (await api('/foldgate/metrics')).text());
  const atLeast = (n) => (t.complete ? n : '≥ ' + fmt(n));
  const mean = t.summarizer.mean_ms_per_fold;
  const cards = [
    [atLeast(t.folds), 'folds'],
    [atLeast(t.failed_folds), 'fold failures'],
    [atLeast(t.conversations), 'conversations'],
    [mean === null ? '—' : fmt(mean) + ' ms', 'summarizer time per fold (mean)'],
    [total(m, 'foldgate_requests_total'), 'requests since start'],
    [total(m, 'foldgate_folds_reused_total'), 'reused summaries since start'],
    [total(m, 'foldgate_tokens_saved_total'), 'tokens saved since start'],
  ];
  const box = $('totals');
  box.replaceChildren();
  for (const [value, label] of cards) {
    const card = el('div', null, 'card');
    card.append(el('b', typeof value === 'string' ? value : fmt(value)), el('span', label));
    box.append(card);
  }
}

// ---- model windows, from /foldgate/windows --------------------------------

// Models without a known window go upstream unfolded until their first
// context-length error (or get tokens.default_context_window when it is
// set): say which, and the config line that fixes it, as the WARN does.
async function loadWindows() {
  const w = await (await api('/foldgate/windows')).json();
  const box = $('windows');
  box.replaceChildren();
  box.hidden = !w.missing.length;
  if (!w.missing.length) return;
  const assumed = w.default_context_window
    ? 'foldgate assumes ' + fmt(w.default_context_window) + ' tokens (tokens.default_context_window)'
    : 'their requests go upstream unfolded';
  box.append(el('p', 'No context window known for ' + w.missing.length + ' model(s): ' + assumed
    + ' until the upstream\'s first context-length error names the window. Add to the config:'));
  for (const m of w.missing) {
    box.append(el('pre', m.config + '   # provider ' + m.provider + '; N = the model\'s context window'));
  }
}

// ---- conversations no API claimed, from /foldgate/unclaimed ---------------

// A conversation POSTed to a path no API claims went upstream unfolded:
// say where, and what foldgate claims instead.
async function loadUnclaimed() {
  const u = await (await api('/foldgate/unclaimed')).json();
  const box = $('unclaimed');
  box.replaceChildren();
  box.hidden = !u.paths.length;
  if (!u.paths.length) return;
  box.append(el('p', 'Conversations were sent to paths no API claims and went upstream unfolded. '
    + 'foldgate folds paths ending in /chat/completions, /messages, /responses or '
    + '/models/{model}:generateContent; point the client\'s base URL so its SDK calls one of them:'));
  for (const p of u.paths) {
    box.append(el('pre', 'POST ' + p.path + '   × ' + fmt(p.count)));
  }
}

// ---- the conversation list ------------------------------------------------

async function loadList(more) {
  const q = new URLSearchParams({ limit: '50' });
  if (more && cursor) q.set('after', cursor);
  const page = await (await api('/foldgate/conversations?' + q)).json();
  const body = $('conversations').tBodies[0];
  if (!more) { body.replaceChildren(); listed = []; }
  for (const c of page.conversations) {
    listed.push(c);
    const tr = row([
      el('td', c.conversation, 'id'),
      el('td', c.tenant, 'id'),
      fmt(c.folds),
      (c.reason || '—') + ' · ' + when(c.last_fold_at),
      fmt(c.tokens_before) + ' → ' + fmt(c.tokens_after),
      failuresCell(c),
    ]);
    tr.dataset.tenant = c.tenant;
    tr.dataset.conversation = c.conversation;
    tr.addEventListener('click', () => loadDetail(c.tenant, c.conversation));
    body.append(tr);
  }
  cursor = page.next;
  $('more').hidden = !cursor;
  if (!more) tenantHint(page.hidden);
  if (!listed.length && !(page.hidden && page.hidden.conversations)) {
    status('No folded conversation this credential may read yet.');
  }
}

// Failed folds in a row now (backing off), else every failure recorded:
// a later success does not hide that folds failed.
function failuresCell(c) {
  if (c.failures) return el('td', c.failures.in_a_row + ' in a row', 'failed');
  if (c.failed_folds) return el('td', c.failed_folds + ' (last ' + when(c.last_failure_at) + ')', 'failed');
  return '0';
}

// Conversations exist that this credential may not read: say so, and how.
function tenantHint(hidden) {
  const p = $('tenants');
  const n = hidden ? hidden.conversations : 0;
  p.hidden = !n;
  if (!n) { p.textContent = ''; return; }
  const ways = ['enter the admin token (server.admin_token)', 'or the API key their client sent'];
  let text = (hidden.more ? 'More than ' : '') + n + ' conversation' + (n === 1 ? '' : 's')
    + ' belong' + (n === 1 ? 's' : '') + ' to other credentials: foldgate keys conversations by the API key'
    + ' the client sent, so each key (even a placeholder) is a tenant of its own. To read them, '
    + ways.join(' ') + ' above.';
  if (hidden.placeholder_keys.length) {
    text += ' Some were sent with the placeholder key ' + hidden.placeholder_keys.map((k) => '"' + k + '"').join(', ')
      + ': enter it above.';
  }
  if (hidden.keyless) text += ' Some were sent without a key: Forget the credential to read them from this machine.';
  p.textContent = text;
}

// ---- one conversation -----------------------------------------------------

async function loadDetail(tenant, conversation) {
  selected = { tenant, conversation };
  for (const tr of $('conversations').tBodies[0].rows) {
    tr.classList.toggle('selected', tr.dataset.tenant === tenant && tr.dataset.conversation === conversation);
  }
  const data = await (await api('/foldgate/conversations/' + encodeURIComponent(conversation))).json();
  const state = data.states.find((s) => s.tenant === tenant) || data.states[0];
  $('detail').hidden = false;
  const latest = state.folds[state.folds.length - 1];
  const speaks = latest && latest.api ? ', ' + latest.api + ' API' : '';
  $('detail-title').textContent = 'Conversation ' + conversation + ' (tenant ' + state.tenant + speaks + ')';
  const f = state.failures;
  const failed = state.fold_failures || [];
  const last = failed[failed.length - 1];
  $('failures').textContent = f
    ? 'Last ' + f.in_a_row + ' fold(s) failed; the next non-emergency fold waits ' + Math.ceil(f.retry_in_ms / 1000) + ' s.'
    : last
      ? 'Last fold failure: ' + when(last.at) + ' (' + last.reason + (last.background ? ', background' : '') + '): '
        + last.error + '. ' + state.failed_folds + ' failed fold(s) in all'
        + (latest && latest.created_at >= last.at ? '; a later fold succeeded.' : '.')
      : 'No fold failure recorded.';
  $('failures').className = f || last ? 'failed' : '';
  // Prompt-cache economy: requests whose forwarded prefix was unchanged,
  // and pins the pin budget had to fold.
  const cs = state.cache_stable;
  const pins = state.pins_folded
    ? ' Warning: ' + state.pins_folded + ' pinned message(s) over the pin budget (policy.pin_ratio) were folded.'
    : '';
  $('economy').textContent = (cs && cs.requests
    ? 'Cache-stable requests: ' + cs.stable + ' of ' + cs.requests + ' (' + Math.round(100 * cs.share) + '%).'
    : 'Cache-stable requests: none compared yet.') + pins;
  $('economy').className = state.pins_folded ? 'failed' : '';
  const body = $('timeline').tBodies[0];
  body.replaceChildren();
  // The audit keeps the newest records (restubs among them); number them
  // among all made.
  const made = (state.folds_made || 0) + (state.restubs_made || 0);
  const first = Math.max(made, state.folds.length) - state.folds.length;
  // Folds and failed folds, in the order they happened.
  const events = state.folds.map((s, i) => ({ at: s.created_at, fold: s, n: first + i + 1 }))
    .concat(failed.map((x) => ({ at: x.at, failure: x })))
    // Times are in seconds: within one, a failure came before the fold
    // that followed it (a success makes the next fold wait for growth).
    .sort((a, b) => a.at - b.at || (a.failure ? 0 : 1) - (b.failure ? 0 : 1));
  for (const e of events) {
    const s = e.fold;
    if (s) {
      const run = s.summarizer;
      body.append(row([
        String(e.n), when(s.created_at), s.reason + (s.restub ? ' · restub' : '') + (s.background ? ' · background' : ''), fmt(s.depth), fmt(s.covered),
        fmt(s.tokens_before) + ' → ' + fmt(s.tokens_after),
        run ? run.model + (run.calls > 1 ? ' (' + run.calls + ' calls)' : '') : '—',
        run ? fmt(run.latency_ms) + ' ms' : '—',
      ]));
    } else {
      const x = e.failure;
      const tr = row([
        'failed', when(x.at), x.reason + (x.background ? ' · background' : ''), '—', '—',
        fmt(x.tokens_before) + ' → not folded', x.error, '—',
      ]);
      tr.className = 'failed';
      body.append(tr);
    }
  }
  $('summary').textContent = state.current || '';
  $('ledger').textContent = state.ledger || '(empty: the summary kept every specific)';
  chart(state.turns, state.folds, failed);
}

// Full-history tokens against forwarded tokens, turn by turn (the turns
// this process recorded), or fold by fold when none were recorded.
function chart(turns, folds, failed) {
  const svg = $('chart');
  svg.replaceChildren();
  const points = turns.length
    ? turns.map((t) => ({ full: t.tokens_in, sent: t.tokens_out, at: t.at }))
    : folds.map((s) => ({ full: s.tokens_before, sent: s.tokens_after, at: s.created_at * 1000 }));
  const W = 640, H = 220, L = 50, B = 20, T = 10;
  const max = Math.max(1, ...points.map((p) => Math.max(p.full, p.sent)));
  const x = (i) => L + (points.length > 1 ? (i * (W - L - 10)) / (points.length - 1) : (W - L) / 2);
  const y = (v) => H - B - (v * (H - B - T)) / max;
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text) e.textContent = text;
    svg.append(e);
    return e;
  };
  add('line', { x1: L, y1: H - B, x2: W, y2: H - B, class: 'axis' });
  add('line', { x1: L, y1: T, x2: L, y2: H - B, class: 'axis' });
  add('text', { x: 2, y: T + 8 }, fmt(max));
  add('text', { x: 2, y: H - B }, '0');
  add('text', { x: L, y: H - 4 }, turns.length ? 'turns recorded by this process →' : 'folds →');
  for (const key of ['full', 'sent']) {
    add('polyline', { class: key, points: points.map((p, i) => x(i) + ',' + y(p[key])).join(' ') });
  }
  // One marker per fold (and per failed fold), at the first point at or
  // after it: a background fold lands before the turn that reused it.
  // Markers at the same point stack upwards, so three folds show three.
  const slot = (unixSeconds) => {
    const i = points.findIndex((p) => p.at >= unixSeconds * 1000);
    return i < 0 ? points.length - 1 : i;
  };
  const stacked = new Map();
  const mark = (unixSeconds) => markAt(slot(unixSeconds));
  if (!points.length) return;
  // A fold a request waited for is at the turn that says `new`: the
  // newest such folds and turns pair up from the end (timestamps have
  // whole seconds, too coarse for turns that come fast). Others, and
  // background folds, go by time.
  const newTurns = turns.map((t, i) => (t.fold === 'new' ? i : -1)).filter((i) => i >= 0);
  const waited = folds.filter((s) => !s.background);
  const atTurn = new Map();
  waited.slice(-newTurns.length || waited.length).forEach((s, k, list) => {
    const turn = newTurns[newTurns.length - list.length + k];
    if (turn !== undefined) atTurn.set(s, turn);
  });
  const markAt = (i) => {
    const k = stacked.get(i) || 0;
    stacked.set(i, k + 1);
    return { cx: x(i), cy: Math.max(T + 4, y(points[i].sent) - 10 * k) };
  };
  for (const s of folds) {
    const m = atTurn.has(s) ? markAt(atTurn.get(s)) : mark(s.created_at);
    if (s.background) add('rect', { x: m.cx - 4, y: m.cy - 4, width: 8, height: 8, class: 'fold background' });
    else add('circle', { cx: m.cx, cy: m.cy, r: 4, class: 'fold' });
  }
  for (const f of failed) {
    const m = mark(f.at);
    add('path', { d: 'M' + (m.cx - 4) + ' ' + (m.cy - 4) + 'l8 8m0 -8l-8 8', class: 'failure' });
  }
}

// ---- start ----------------------------------------------------------------

async function refresh() {
  status('');
  try {
    await loadList(false);
    await loadTotals();
    await loadWindows();
    await loadUnclaimed();
    const first = listed[0];
    const keep = selected && listed.find((c) => c.tenant === selected.tenant && c.conversation === selected.conversation);
    const pick = keep || first;
    if (pick) await loadDetail(pick.tenant, pick.conversation);
  } catch (e) {
    status(e instanceof ApiFailure && e.status === 401
      ? 'Unauthorized: enter the admin token or your API key above. ' + e.message
      : String(e.message || e));
  }
}

function showWho() {
  $('who').textContent = credential() ? 'credential set for this tab' : 'no credential (key-less, loopback only)';
}

document.addEventListener('DOMContentLoaded', () => {
  takeFragmentToken();
  showWho();
  $('credential').addEventListener('submit', (event) => {
    event.preventDefault();
    const v = $('token').value.trim();
    if (v) sessionStorage.setItem(KEY, v);
    $('token').value = '';
    showWho();
    refresh();
  });
  $('forget').addEventListener('click', () => { sessionStorage.removeItem(KEY); showWho(); refresh(); });
  $('more').addEventListener('click', () => loadList(true).catch((e) => status(e.message)));
  refresh();
  setInterval(refresh, 15000);
});
