/* quorum console: plain JavaScript (ES2017), no framework, nothing fetched
 * from anywhere but the cluster's own members.
 *
 * Every request goes to the member that served this page, through etcd's
 * JSON gateway (POST /v3/...) and /metrics, except that the cluster view
 * asks each member for its status at its own client URL (quorum, like
 * etcd, answers CORS requests from anywhere), and the metrics charts may be
 * switched to another member. Each panel refreshes on its own timer; a
 * failed request is shown in its panel and retried on the next tick, so
 * the page keeps working across a leader change, and says so when the
 * member that served it stops answering.
 *
 * Everything shown comes from the cluster and is put into the page as text
 * (textContent, never innerHTML): keys and values are arbitrary bytes.
 */
'use strict';

/* ---------- small helpers ---------- */

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
const utf8 = new TextEncoder();
const unutf8 = new TextDecoder('utf-8', { fatal: false });

/* h('td', {class: 'mono'}, 'text', node, ...): an element with text children */
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const k in attrs || {}) {
    const v = attrs[k];
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids) {
    if (c === undefined || c === null || c === false) continue;
    el.appendChild(typeof c === 'string' || typeof c === 'number'
      ? document.createTextNode(String(c)) : c);
  }
  return el;
}

function setText(id, text) {
  const el = typeof id === 'string' ? $(id) : id;
  if (el.textContent !== text) el.textContent = text;
}

function bytesToB64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i++) s += String.fromCharCode(bytes[i]);
  return btoa(s);
}
const b64 = (str) => bytesToB64(utf8.encode(str));
function unb64(s) {
  if (!s) return new Uint8Array(0);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
const b64text = (s) => unutf8.decode(unb64(s));

/* the end of a prefix range: the prefix with its last byte plus one (bytes
 * of 0xff dropped first); "\0" (to the end of the keyspace) for none */
function prefixEnd(bytes) {
  const b = Array.from(bytes);
  while (b.length && b[b.length - 1] === 0xff) b.pop();
  if (!b.length) return 'AA==';
  b[b.length - 1]++;
  return bytesToB64(Uint8Array.from(b));
}

/* a decimal uint64 (the gateway sends 64-bit integers as strings) in hex,
 * as etcdctl prints member, cluster and lease IDs */
function hex(dec) {
  if (dec === undefined || dec === null || dec === '') return '0';
  let digits = String(dec).split('').map(Number);
  if (digits.some((d) => isNaN(d))) return String(dec);
  let out = '';
  while (digits.length > 1 || digits[0] !== 0) {
    const q = [];
    let rem = 0;
    for (const d of digits) {
      const cur = rem * 10 + d;
      const qd = Math.floor(cur / 16);
      rem = cur % 16;
      if (q.length || qd) q.push(qd);
    }
    out = rem.toString(16) + out;
    digits = q.length ? q : [0];
  }
  return out || '0';
}

const num = (s) => (s === undefined || s === null || s === '' ? 0 : Number(s));

function fmtBytes(n) {
  n = num(n);
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

function fmtNum(v) {
  if (v === null || v === undefined || isNaN(v)) return '–';
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2).replace(/\.?0+$/, '') || '0';
}

/* a value for a table cell: its text, shortened, with control bytes shown */
function shortValue(b64v, max) {
  const bytes = unb64(b64v);
  let t = unutf8.decode(bytes).replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, '\ufffd')
    .replace(/\n/g, '\u21b5');
  max = max || 80;
  if (t.length > max) t = t.slice(0, max) + '… (' + bytes.length + ' bytes)';
  return t;
}

/* ---------- requests ---------- */

class ApiError extends Error {
  constructor(status, message, unreachable) {
    super(message);
    this.status = status;
    this.unreachable = !!unreachable;
  }
}

const auth = {
  token: sessionStorage.getItem('quorum-token') || '',
  user: sessionStorage.getItem('quorum-user') || '',
  needed: false,
};

function isAuthError(status, msg) {
  return status === 401 || (status === 400 && /user name is empty/.test(msg || ''));
}

function headers() {
  return auth.token ? { Authorization: auth.token } : {};
}

/* api('/v3/kv/range', {...}, {base, timeout}): POST a JSON request and
 * return the parsed answer, or throw an ApiError with the gateway's
 * message. |base| '' is the member that served the page. The body is sent
 * as text/plain (the gateway reads JSON whatever the type), so a request
 * to another member needs no CORS preflight unless it carries a token. */
async function api(path, body, opts) {
  opts = opts || {};
  const base = opts.base || '';
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), opts.timeout || 5000);
  let resp, text;
  try {
    resp = await fetch(base + path, {
      method: opts.method || 'POST',
      body: opts.method === 'GET' ? undefined : JSON.stringify(body || {}),
      headers: opts.noAuth ? {} : headers(),
      signal: ctrl.signal,
      cache: 'no-store',
    });
    text = await resp.text();
  } catch (e) {
    const why = e.name === 'AbortError' ? 'no answer within ' + ((opts.timeout || 5000) / 1000) + ' s'
      : 'not reachable (' + e.message + ')';
    if (!base) serving.failed(why);
    throw new ApiError(0, why, true);
  } finally {
    clearTimeout(timer);
  }
  if (!base) serving.ok();
  if (opts.raw) {
    if (!resp.ok) throw new ApiError(resp.status, resp.status + ' ' + resp.statusText);
    return text;
  }
  let j = null;
  try { j = text ? JSON.parse(text) : {}; } catch (e) { j = null; }
  if (!resp.ok || j === null) {
    const msg = (j && (j.message || j.error)) || text || resp.statusText;
    if (!base && !opts.noAuth && isAuthError(resp.status, msg)) login.require(msg);
    throw new ApiError(resp.status, msg);
  }
  return j;
}

/* the member that served the page: is it answering? */
const serving = {
  down: false,
  since: 0,
  failed(why) {
    if (!this.down) { this.down = true; this.since = Date.now(); }
    const pill = $('conn');
    pill.className = 'pill bad';
    setText(pill, 'not answering');
    const b = $('banner');
    b.hidden = false;
    b.textContent = '';
    b.appendChild(h('strong', { text: 'The member that served this console (' + location.host +
      ') is not answering: ' + why + '.' }));
    b.appendChild(document.createTextNode(' Retrying every 2 s; the cluster view keeps asking' +
      ' the other members directly. Their consoles: '));
    for (const m of cluster.members) {
      if (m.ID === cluster.selfId || !m.clientURLs || !m.clientURLs.length) continue;
      b.appendChild(h('a', { href: m.clientURLs[0] + '/ui/', text: (m.name || hex(m.ID)) }));
    }
  },
  ok() {
    if (this.down) {
      this.down = false;
      $('banner').hidden = true;
    }
    const pill = $('conn');
    if (pill.className !== 'pill ok') {
      pill.className = 'pill ok';
      setText(pill, 'connected');
    }
  },
};

/* ---------- auth ---------- */

const login = {
  require(msg) {
    if (auth.token && /invalid auth token|token/.test(msg)) {
      auth.token = '';
      sessionStorage.removeItem('quorum-token');
    }
    auth.needed = true;
    $('login').hidden = false;
    if (msg && !/user name is empty/.test(msg)) setText('login-error', msg);
    showUser();
  },
  async submit(ev) {
    ev.preventDefault();
    setText('login-error', '');
    try {
      const r = await api('/v3/auth/authenticate', {
        name: $('login-user').value, password: $('login-password').value,
      }, { noAuth: true });
      auth.token = r.token;
      auth.user = $('login-user').value;
      sessionStorage.setItem('quorum-token', auth.token);
      sessionStorage.setItem('quorum-user', auth.user);
      auth.needed = false;
      $('login').hidden = true;
      $('login-password').value = '';
      showUser();
      refreshAll();
      browse(keys.prefix);
    } catch (e) {
      setText('login-error', e.message);
    }
  },
  logout() {
    auth.token = '';
    auth.user = '';
    sessionStorage.removeItem('quorum-token');
    sessionStorage.removeItem('quorum-user');
    showUser();
    refreshAll();
  },
};

function showUser() {
  $('auth-user').hidden = !auth.token;
  $('logout').hidden = !auth.token;
  setText('auth-user', auth.token ? 'user: ' + auth.user : '');
}

/* ---------- timers ---------- */

const loops = [];
/* every(ms, fn): run fn now and then ms after each run ends; fn's error is
 * its own to show (each panel has an error line) */
function every(ms, fn) {
  const loop = { fn, ms, timer: null };
  const run = async () => {
    clearTimeout(loop.timer);
    loop.timer = null;
    try { await fn(); } catch (e) { console.warn(e); }
    loop.timer = setTimeout(run, ms);
  };
  loop.run = run;
  loops.push(loop);
  run();
  return loop;
}
function refreshAll() {
  for (const l of loops) if (l.timer !== null) l.run();
}

/* ---------- the cluster ---------- */

const cluster = {
  members: [],        /* the last member list that came back */
  selfId: '',         /* the serving member's ID (decimal) */
  clusterId: '',
  status: {},         /* ID -> {st, err, at} */
};

function memberURL(m) {
  if (m.ID === cluster.selfId) return '';
  return m.clientURLs && m.clientURLs.length ? m.clientURLs[0].replace(/\/$/, '') : null;
}

async function memberStatus(m) {
  const base = memberURL(m);
  if (base === null) return { err: 'not started (no client URL yet)' };
  try {
    return { st: await api('/v3/maintenance/status', {}, { base, timeout: 2500 }) };
  } catch (e) {
    if (base && isAuthError(e.status, e.message)) {
      /* another member may not know this member's (simple) token */
      try {
        return { st: await api('/v3/maintenance/status', {}, { base, timeout: 2500, noAuth: true }) };
      } catch (e2) { return { err: e2.message }; }
    }
    return { err: e.message };
  }
}

async function refreshCluster() {
  let listErr = '';
  try {
    const r = await api('/v3/cluster/member/list', {}, { timeout: 3000 });
    cluster.members = (r.members || []).slice().sort((a, b) =>
      (a.name || '').localeCompare(b.name || '') || a.ID.localeCompare(b.ID));
    cluster.selfId = r.header.member_id;
    cluster.clusterId = r.header.cluster_id;
  } catch (e) {
    listErr = 'member list: ' + e.message + (cluster.members.length ? ' (showing the last list)' : '');
  }
  const results = await Promise.all(cluster.members.map(memberStatus));
  cluster.members.forEach((m, i) => { cluster.status[m.ID] = results[i]; });
  renderCluster(listErr);
  updateMetricsChoices();
  if (!serving.down) {
    try {
      const a = await api('/v3/maintenance/alarm', { action: 'GET' }, { timeout: 3000 });
      const al = (a.alarms || []).map((x) => (x.alarm || 'NONE') + ' on ' + memberName(x.memberID));
      setText('alarms', al.length ? al.join(', ') : 'none');
      $('alarms').className = al.length ? 'st-bad' : '';
    } catch (e) {
      setText('alarms', '? (' + e.message + ')');
    }
  }
}

function memberName(id) {
  const m = cluster.members.find((x) => x.ID === id);
  return m ? (m.name || hex(id)) : hex(id);
}

function renderCluster(listErr) {
  /* the leader and term: the answer of the member with the highest term
   * that knows a leader (a member cut off may still name an old one) */
  let best = null;
  let rev = 0;
  for (const m of cluster.members) {
    const s = cluster.status[m.ID];
    if (!s || !s.st) continue;
    rev = Math.max(rev, num(s.st.header && s.st.header.revision));
    if (num(s.st.leader) !== 0 && (!best || num(s.st.raftTerm) > num(best.raftTerm))) best = s.st;
  }
  const leaderId = best ? best.leader : '';
  const leader = cluster.members.find((m) => m.ID === leaderId);
  setText('cluster-id', cluster.clusterId ? hex(cluster.clusterId) : '–');
  setText('leader', best ? (leader ? leader.name || hex(leaderId) : hex(leaderId)) : 'none');
  $('leader').setAttribute('data-id', best ? hex(leaderId) : '');
  setText('term', best ? String(num(best.raftTerm)) : '–');
  setText('revision', rev ? String(rev) : '–');
  const up = cluster.members.filter((m) => cluster.status[m.ID] && cluster.status[m.ID].st).length;
  setText('member-count', cluster.members.length ? up + ' of ' + cluster.members.length + ' answering' : '–');
  setText('cluster-note', 'refreshed ' + new Date().toLocaleTimeString());
  setText('cluster-error', listErr);

  const tb = $('members').tBodies[0];
  tb.textContent = '';
  for (const m of cluster.members) {
    const s = cluster.status[m.ID] || {};
    const st = s.st;
    const isLeader = m.ID === leaderId;
    const role = m.isLearner ? 'learner' : isLeader ? 'leader' : st ? 'follower' : '?';
    const url = (m.clientURLs && m.clientURLs[0]) || '';
    const tr = h('tr', {
      class: (isLeader ? 'leader' : '') + (st ? '' : ' down'),
      'data-name': m.name || '', 'data-role': role,
    },
    h('td', { text: (m.name || '(unstarted)') + (m.ID === cluster.selfId ? ' \u2605' : ''),
      title: m.ID === cluster.selfId ? 'serving this console' : '' }),
    h('td', { class: 'mono', text: hex(m.ID) }),
    h('td', { class: 'mono' }, url ? h('a', { href: url + '/ui/', text: url, title: 'its console' }) : '–'),
    h('td', { class: isLeader ? 'role-leader' : '', text: role }),
    h('td', { text: st ? String(num(st.raftTerm)) : '–' }),
    h('td', { text: st ? String(num(st.raftIndex)) : '–' }),
    h('td', { text: st ? String(num(st.raftAppliedIndex)) : '–' }),
    h('td', { text: st ? fmtBytes(st.dbSize) : '–' }),
    h('td', { text: st ? fmtBytes(st.dbSizeInUse) : '–' }),
    h('td', { text: st ? st.version || '' : '–' }),
    h('td', { class: st && !(st.errors && st.errors.length) ? 'st-ok' : 'st-bad',
      text: st ? (st.errors && st.errors.length ? st.errors.join('; ') : 'ok') : s.err || '…' }));
    tb.appendChild(tr);
  }
}

/* ---------- metrics ---------- */

/* parse the Prometheus text format: [{name, labels, value}] for the
 * families asked for */
function parseMetrics(text, wanted) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/.exec(line);
    if (!m || !wanted(m[1])) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2];
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

/* the q-quantile of a histogram given by cumulative bucket counts
 * [[le, count]...] sorted by le, as Prometheus's histogram_quantile */
function histogramQuantile(q, buckets) {
  if (!buckets.length) return null;
  const total = buckets[buckets.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      if (count === prevCount) return le;
      return prevLe + (le - prevLe) * (rank - prevCount) / (count - prevCount);
    }
    prevLe = le;
    prevCount = count;
  }
  return prevLe;
}

const POINTS = 90;
const metrics = {
  target: '',     /* a member ID, '' for the serving member */
  prev: null,     /* the previous scrape */
  series: { proposals: [], fsync: [], watchers: [] },
};

function updateMetricsChoices() {
  const sel = $('metrics-member');
  const want = [['', 'this member (' + (memberName(cluster.selfId) || location.host) + ')']];
  for (const m of cluster.members) {
    if (m.ID !== cluster.selfId && m.clientURLs && m.clientURLs.length) {
      want.push([m.ID, m.name || hex(m.ID)]);
    }
  }
  const have = Array.from(sel.options).map((o) => o.value + '|' + o.textContent).join(',');
  if (have === want.map((w) => w[0] + '|' + w[1]).join(',')) return;
  sel.textContent = '';
  for (const [v, t] of want) sel.appendChild(h('option', { value: v, text: t }));
  sel.value = metrics.target;
}

function scrapeFigures(text) {
  const fams = parseMetrics(text, (n) => n === 'etcd_server_proposals_committed_total' ||
    n === 'etcd_debugging_mvcc_watcher_total' ||
    n.startsWith('etcd_disk_wal_fsync_duration_seconds_'));
  const f = { committed: null, watchers: null, buckets: [] };
  for (const s of fams) {
    if (s.name === 'etcd_server_proposals_committed_total') f.committed = s.value;
    else if (s.name === 'etcd_debugging_mvcc_watcher_total') f.watchers = s.value;
    else if (s.name === 'etcd_disk_wal_fsync_duration_seconds_bucket') {
      f.buckets.push([s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), s.value]);
    }
  }
  f.buckets.sort((a, b) => a[0] - b[0]);
  return f;
}

async function refreshMetrics() {
  let base = '';
  if (metrics.target) {
    const m = cluster.members.find((x) => x.ID === metrics.target);
    base = m ? memberURL(m) || '' : '';
  }
  let f;
  try {
    f = scrapeFigures(await api('/metrics', null, { base, method: 'GET', raw: true, timeout: 3000 }));
    f.t = Date.now();
    setText('metrics-error', '');
  } catch (e) {
    setText('metrics-error', '/metrics: ' + e.message + ' (retrying)');
    pushPoint(NaN, NaN, NaN); /* a gap, shown as unknown */
    return;
  }
  const p = metrics.prev;
  metrics.prev = f;
  if (!p) {
    setText('metrics-note', 'collecting…');
    return;
  }
  const dt = (f.t - p.t) / 1000;
  const rate = f.committed !== null && p.committed !== null && dt > 0
    ? Math.max(0, (f.committed - p.committed) / dt) : null;
  let p99 = null;
  if (f.buckets.length && f.buckets.length === p.buckets.length) {
    const delta = f.buckets.map((b, i) => [b[0], b[1] - p.buckets[i][1]]);
    const q = histogramQuantile(0.99, delta);
    p99 = q === null ? null : q * 1000;
  }
  pushPoint(rate, p99, f.watchers);
  setText('metrics-note', 'every 2 s, the last ' + chartSpan(metrics.series.watchers.length) * 2 + ' s');
}

function pushPoint(rate, p99, watchers) {
  const s = metrics.series;
  for (const [k, v] of [['proposals', rate], ['fsync', p99], ['watchers', watchers]]) {
    s[k].push(v);
    if (s[k].length > POINTS) s[k].shift();
  }
  drawChart('chart-proposals', s.proposals, '');
  drawChart('chart-fsync', s.fsync, ' ms', 'no fsync in the interval');
  drawChart('chart-watchers', s.watchers, '');
}

const chartSpan = (n) => Math.min(POINTS, Math.max(30, n));

const SVGNS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const el = document.createElementNS(SVGNS, tag);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  return el;
}

/* a line chart of the last POINTS values (null: a gap) */
function drawChart(id, values, unit, nullText) {
  const fig = $(id);
  const el = fig.querySelector('svg');
  const W = 300, H = 100, top = 8, bottom = H - 4;
  el.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
  el.setAttribute('preserveAspectRatio', 'none');
  el.textContent = '';
  const vals = values.filter((v) => v !== null && v !== undefined && !isNaN(v));
  let max = Math.max(1, ...vals);
  const mag = Math.pow(10, Math.floor(Math.log10(max)));
  max = Math.ceil(max / mag) * mag;
  for (const frac of [0, 0.5, 1]) {
    const y = bottom - (bottom - top) * frac;
    el.appendChild(svg('line', { class: 'grid', x1: 0, x2: W, y1: y, y2: y }));
  }
  el.appendChild(svg('text', { x: 3, y: top + 8 })).textContent = fmtNum(max) + unit;
  /* the time axis spans at least a minute, growing to POINTS samples */
  const span = chartSpan(values.length);
  const x = (i) => W - (values.length - 1 - i) * (W / (span - 1));
  const y = (v) => bottom - (bottom - top) * (v / max);
  let seg = [];
  const flush = () => {
    if (seg.length > 1) {
      el.appendChild(svg('polyline', { class: 'line', points: seg.join(' ') }));
    } else if (seg.length === 1) {
      const [px, py] = seg[0].split(',');
      el.appendChild(svg('circle', { cx: px, cy: py, r: 1.5, class: 'area' }));
    }
    seg = [];
  };
  values.forEach((v, i) => {
    if (v === null || v === undefined || isNaN(v)) { flush(); return; }
    seg.push(x(i).toFixed(1) + ',' + y(v).toFixed(1));
  });
  flush();
  const last = values.length ? values[values.length - 1] : null;
  const cap = fig.querySelector('figcaption');
  let b = cap.querySelector('b');
  if (!b) { b = h('b'); cap.appendChild(b); }
  /* null: nothing to measure (no fsync in the interval); NaN: no scrape */
  const known = last !== null && last !== undefined && !isNaN(last);
  setText(b, known ? fmtNum(last) + unit : last === null ? nullText || '–' : '–');
  fig.setAttribute('data-last', known ? String(last) : '');
}

/* ---------- keys: browse, history, diff ---------- */

const keys = { prefix: '', selected: null, history: [] };

async function browse(prefix) {
  keys.prefix = prefix;
  localStorage.setItem('quorum-prefix', prefix);
  const pb = utf8.encode(prefix);
  const req = { key: prefix ? bytesToB64(pb) : 'AA==', range_end: prefixEnd(pb),
    keys_only: true, limit: '500' };
  try {
    const r = await api('/v3/kv/range', req);
    const list = $('key-list');
    list.textContent = '';
    const kvs = r.kvs || [];
    for (const kv of kvs) {
      const k = b64text(kv.key);
      list.appendChild(h('button', {
        type: 'button', text: k, 'data-key': kv.key,
        class: keys.selected === kv.key ? 'sel' : '',
        onclick: () => selectKey(kv.key),
      }));
    }
    const count = num(r.count);
    setText('key-count', count === 0 ? 'no keys' + (prefix ? ' under "' + prefix + '"' : '')
      : count + ' key' + (count === 1 ? '' : 's') + (count > kvs.length ? ', the first ' + kvs.length + ' shown' : '') +
        ' at revision ' + r.header.revision);
    setText('keys-error', '');
  } catch (e) {
    setText('keys-error', 'browse: ' + e.message);
  }
}

/* a key's history: the current value, then each earlier version found by
 * reading the key at (mod_revision - 1), down to the revision that created
 * it (one Range per version; the walk stops at a compacted revision). The
 * versions of an earlier life of the key (before a delete) are not
 * reachable this way and are not shown. */
const HISTORY_MAX = 50;
async function loadHistory(key) {
  const r = await api('/v3/kv/range', { key });
  const kvs = r.kvs || [];
  if (!kvs.length) return { versions: [], note: 'not found at revision ' + r.header.revision + ' (deleted?)' };
  const versions = [kvs[0]];
  let note = '';
  let cur = kvs[0];
  while (num(cur.version) > 1 && versions.length < HISTORY_MAX) {
    let prev;
    try {
      prev = await api('/v3/kv/range', { key, revision: String(num(cur.mod_revision) - 1) });
    } catch (e) {
      note = /compacted/.test(e.message) ? 'versions before revision ' + cur.mod_revision +
        ' are compacted' : 'stopped: ' + e.message;
      break;
    }
    if (!prev.kvs || !prev.kvs.length) break;
    cur = prev.kvs[0];
    versions.push(cur);
  }
  if (!note && num(cur.version) > 1) note = 'the last ' + HISTORY_MAX + ' versions';
  if (!note) note = versions.length + ' version' + (versions.length === 1 ? '' : 's') +
    ' since its creation at revision ' + cur.create_revision;
  return { versions, note };
}

async function selectKey(key) {
  keys.selected = key;
  for (const b of $('key-list').querySelectorAll('button')) {
    b.className = b.getAttribute('data-key') === key ? 'sel' : '';
  }
  $('key-detail').hidden = false;
  setText('detail-key', b64text(key));
  setText('history-note', 'loading…');
  let hist;
  try {
    hist = await loadHistory(key);
    setText('keys-error', '');
  } catch (e) {
    setText('keys-error', 'history: ' + e.message);
    setText('history-note', '');
    return;
  }
  if (keys.selected !== key) return;
  keys.history = hist.versions;
  setText('history-note', hist.note);
  const meta = $('detail-meta');
  meta.textContent = '';
  const cur = hist.versions[0];
  if (cur) {
    const pairs = [['version', cur.version], ['created', cur.create_revision],
      ['modified', cur.mod_revision], ['lease', num(cur.lease) ? hex(cur.lease) : 'none'],
      ['size', fmtBytes(unb64(cur.value).length)]];
    for (const [k, v] of pairs) { meta.appendChild(h('dt', { text: k })); meta.appendChild(h('dd', { text: String(v) })); }
  }
  const tb = $('history').tBodies[0];
  tb.textContent = '';
  hist.versions.forEach((kv, i) => {
    tb.appendChild(h('tr', { 'data-revision': kv.mod_revision },
      h('td', {}, h('input', { type: 'radio', name: 'diff-a', value: String(i), checked: i === 1 || hist.versions.length === 1, onchange: renderDiff })),
      h('td', {}, h('input', { type: 'radio', name: 'diff-b', value: String(i), checked: i === 0, onchange: renderDiff })),
      h('td', { text: kv.mod_revision }),
      h('td', { text: kv.version }),
      h('td', { class: 'mono wrap', text: shortValue(kv.value, 120) })));
  });
  renderDiff();
}

/* a line diff (longest common subsequence), as [op, line] with op ' ',
 * '-' or '+' */
function lineDiff(a, b) {
  const A = a.split('\n'), B = b.split('\n');
  if (A.length * B.length > 4e6) return null;
  const n = A.length, m = B.length;
  const L = new Array(n + 1);
  for (let i = 0; i <= n; i++) L[i] = new Uint32Array(m + 1);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (A[i] === B[j]) { out.push([' ', A[i]]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push(['-', A[i++]]);
    else out.push(['+', B[j++]]);
  }
  while (i < n) out.push(['-', A[i++]]);
  while (j < m) out.push(['+', B[j++]]);
  return out;
}

function renderDiff() {
  const pre = $('diff');
  pre.textContent = '';
  const ai = document.querySelector('input[name=diff-a]:checked');
  const bi = document.querySelector('input[name=diff-b]:checked');
  if (!ai || !bi) { setText('diff-note', ''); return; }
  const a = keys.history[Number(ai.value)], b = keys.history[Number(bi.value)];
  setText('diff-note', 'revision ' + a.mod_revision + ' \u2192 ' + b.mod_revision);
  const d = lineDiff(b64text(a.value), b64text(b.value));
  if (d === null) { pre.appendChild(h('span', { text: '(values too large to diff here)' })); return; }
  let changed = 0;
  for (const [op, line] of d) {
    if (op !== ' ') changed++;
    pre.appendChild(h('span', { class: op === '+' ? 'add' : op === '-' ? 'del' : '', text: op + ' ' + line }));
  }
  if (!changed) pre.insertBefore(h('span', { class: 'note', text: '(the same value)' }), pre.firstChild);
}

/* ---------- watch ---------- */

const watch = { gen: 0, ctrl: null, next: 0, key: '', prefix: true, count: 0 };
const WATCH_KEEP = 200;

function watchState(text) { setText('watch-state', text); }

function startWatch(ev) {
  if (ev) ev.preventDefault();
  stopWatch();
  watch.gen++;
  watch.key = $('watch-key').value;
  watch.prefix = $('watch-prefix').checked;
  watch.next = 0;
  watch.count = 0;
  $('watch-events').textContent = '';
  $('watch-stop').disabled = false;
  watchLoop(watch.gen);
}

function stopWatch() {
  watch.gen++;
  if (watch.ctrl) watch.ctrl.abort();
  watch.ctrl = null;
  $('watch-stop').disabled = true;
  watchState(watch.count ? 'stopped after ' + watch.count + ' events' : 'not watching');
}

function showEvent(ev, revision) {
  const kv = ev.kv || {};
  const type = ev.type || 'PUT';
  const li = h('li', { class: 'fresh', 'data-key': b64text(kv.key), 'data-type': type },
    h('span', { text: '@' + (kv.mod_revision || revision) + ' ' }),
    h('span', { class: type, text: type }), ' ',
    h('span', { text: b64text(kv.key) }),
    type === 'PUT' ? h('span', { text: ' = ' + shortValue(kv.value, 100) }) : null);
  const ol = $('watch-events');
  ol.insertBefore(li, ol.firstChild);
  while (ol.children.length > WATCH_KEEP) ol.removeChild(ol.lastChild);
  watch.count++;
}

/* one Watch stream at a time, read as it arrives (fetch's body stream of
 * {"result":...} lines); when it breaks it is opened again from the
 * revision after the last event seen, so no event is lost or repeated */
async function watchLoop(gen) {
  const what = (watch.key ? '"' + watch.key + '"' : 'all keys') + (watch.prefix && watch.key ? ' (prefix)' : '');
  while (watch.gen === gen) {
    const kb = utf8.encode(watch.key);
    const req = { key: kb.length ? bytesToB64(kb) : 'AA==' };
    if (watch.prefix || !kb.length) req.range_end = prefixEnd(kb);
    if (watch.next) req.start_revision = String(watch.next);
    const ctrl = new AbortController();
    watch.ctrl = ctrl;
    try {
      const resp = await fetch('/v3/watch', {
        method: 'POST', body: JSON.stringify({ create_request: req }), headers: headers(),
        signal: ctrl.signal, cache: 'no-store',
      });
      if (!resp.ok) {
        const t = await resp.text();
        let msg = t;
        try { const j = JSON.parse(t); msg = j.message || j.error || t; } catch (e) { /* text */ }
        if (isAuthError(resp.status, msg)) login.require(msg);
        throw new Error(msg || resp.statusText);
      }
      serving.ok();
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line || watch.gen !== gen) continue;
          const msg = JSON.parse(line);
          if (msg.error) throw new Error(msg.error.message || JSON.stringify(msg.error));
          const res = msg.result || {};
          const hdrRev = num(res.header && res.header.revision);
          if (res.created) {
            if (!watch.next) watch.next = hdrRev + 1;
            watchState('watching ' + what + ' from revision ' + watch.next + ' (live)');
          }
          if (res.canceled) {
            if (num(res.compact_revision)) {
              watch.next = num(res.compact_revision);
              throw new Error('revisions before ' + res.compact_revision + ' were compacted');
            }
            throw new Error('canceled: ' + (res.cancel_reason || ''));
          }
          for (const ev of res.events || []) {
            showEvent(ev, hdrRev);
            watch.next = Math.max(watch.next, num(ev.kv && ev.kv.mod_revision) + 1);
          }
        }
      }
      throw new Error('the stream ended');
    } catch (e) {
      if (watch.gen !== gen) return;
      if (e.name !== 'AbortError') {
        watchState('watch of ' + what + ' broke: ' + e.message + '; reopening from revision ' +
          (watch.next || 'now') + ' in 1 s');
      }
      await sleep(1000);
    }
  }
}

/* ---------- leases ---------- */

const LEASES_MAX = 100;
async function refreshLeases() {
  let r;
  try {
    r = await api('/v3/lease/leases', {});
  } catch (e) {
    setText('leases-error', 'leases: ' + e.message + ' (retrying)');
    return;
  }
  const ids = (r.leases || []).map((l) => l.ID).sort((a, b) => num(a) - num(b));
  const shown = ids.slice(0, LEASES_MAX);
  const ttls = await Promise.all(shown.map((id) =>
    api('/v3/lease/timetolive', { ID: id, keys: true }).catch((e) => ({ err: e.message }))));
  const tb = $('leases').tBodies[0];
  tb.textContent = '';
  shown.forEach((id, i) => {
    const t = ttls[i];
    const ks = (t.keys || []).map(b64text);
    const ttl = num(t.TTL);
    tb.appendChild(h('tr', { 'data-id': hex(id) },
      h('td', { class: 'mono', text: hex(id) }),
      h('td', { text: t.err ? t.err : ttl < 0 ? 'expired' : ttl + ' s' }),
      h('td', { text: t.err ? '' : num(t.grantedTTL) + ' s' }),
      h('td', { class: 'mono wrap', text: ks.length ? ks.slice(0, 10).join(', ') +
        (ks.length > 10 ? ' … (' + ks.length + ')' : '') : '—' })));
  });
  if (!ids.length) tb.appendChild(h('tr', {}, h('td', { colspan: '4', class: 'note', text: 'no leases' })));
  setText('lease-count', ids.length + (ids.length > LEASES_MAX ? ' (the first ' + LEASES_MAX + ' shown)' : ''));
  setText('leases-error', '');
}

/* ---------- locks and elections ---------- */

function lockNames() {
  return $('lock-names').value.split(/[\s,]+/).filter(Boolean);
}

/* the keys of etcd's lock and election recipes: NAME/LEASE-IN-HEX, each
 * owned by its lease; the lowest create revision holds the lock (or is
 * the elected leader, whose value is what it proclaimed) */
async function refreshLocks() {
  const names = lockNames();
  const box = $('locks');
  if (!names.length) {
    box.textContent = '';
    box.appendChild(h('p', { class: 'note', text: 'Type the names of locks or elections (etcdctl lock NAME, elect NAME), or discover them.' }));
    return;
  }
  const results = await Promise.all(names.map(async (name) => {
    const pfx = utf8.encode(name.endsWith('/') ? name : name + '/');
    try {
      const r = await api('/v3/kv/range', { key: bytesToB64(pfx), range_end: prefixEnd(pfx), limit: '1000' });
      return { name, kvs: (r.kvs || []).slice().sort((a, b) => num(a.create_revision) - num(b.create_revision)) };
    } catch (e) {
      return { name, err: e.message };
    }
  }));
  box.textContent = '';
  let err = '';
  for (const res of results) {
    const div = h('div', { class: 'lock', 'data-name': res.name });
    div.appendChild(h('h3', { text: res.name }));
    if (res.err) {
      err = res.name + ': ' + res.err + ' (retrying)';
      div.appendChild(h('p', { class: 'error', text: res.err }));
    } else if (!res.kvs.length) {
      div.appendChild(h('p', { class: 'free', text: 'free: no holder, nobody waiting' }));
    } else {
      const holder = res.kvs[0];
      div.appendChild(h('p', {},
        h('span', { class: 'tag holder', text: 'held' }), ' by lease ',
        h('span', { class: 'mono', text: hex(holder.lease) }), ', fencing token ',
        h('strong', { class: 'fencing', text: holder.create_revision }),
        res.kvs.length > 1 ? ', ' + (res.kvs.length - 1) + ' waiting' : ', nobody waiting'));
      const tb = h('tbody');
      res.kvs.forEach((kv, i) => {
        tb.appendChild(h('tr', { class: i === 0 ? 'holder' : 'waiter' },
          h('td', {}, h('span', { class: 'tag' + (i === 0 ? ' holder' : ''), text: i === 0 ? 'holder' : 'waiter ' + i })),
          h('td', { class: 'mono wrap', text: b64text(kv.key) }),
          h('td', { class: 'mono', text: num(kv.lease) ? hex(kv.lease) : 'none' }),
          h('td', { text: kv.create_revision }),
          h('td', { class: 'mono wrap', text: shortValue(kv.value, 60) || '—' })));
      });
      div.appendChild(h('div', { class: 'scroll' }, h('table', {},
        h('thead', {}, h('tr', {}, h('th', { text: 'role' }), h('th', { text: 'key' }),
          h('th', { text: 'lease' }), h('th', { text: 'create rev (token)' }), h('th', { text: 'value' }))),
        tb)));
    }
    box.appendChild(div);
  }
  setText('locks-error', err);
}

/* discover: the keys whose last path element is their own lease in hex */
async function discoverLocks() {
  setText('locks-error', '');
  try {
    const r = await api('/v3/kv/range', { key: 'AA==', range_end: 'AA==', keys_only: true, limit: '10000' });
    const found = new Set(lockNames());
    for (const kv of r.kvs || []) {
      if (!num(kv.lease)) continue;
      const k = b64text(kv.key);
      const slash = k.lastIndexOf('/');
      if (slash > 0 && k.slice(slash + 1) === hex(kv.lease)) found.add(k.slice(0, slash));
    }
    $('lock-names').value = Array.from(found).join(' ');
    localStorage.setItem('quorum-locks', $('lock-names').value);
    if (!found.size) setText('locks-error', 'no lock or election keys found');
    refreshLocks();
  } catch (e) {
    setText('locks-error', 'discover: ' + e.message);
  }
}

/* ---------- start ---------- */

function start() {
  setText('served-by', location.host);
  showUser();
  $('login-form').addEventListener('submit', login.submit);
  $('logout').addEventListener('click', login.logout);
  $('browse-form').addEventListener('submit', (ev) => { ev.preventDefault(); browse($('prefix').value); });
  $('watch-form').addEventListener('submit', startWatch);
  $('watch-stop').addEventListener('click', stopWatch);
  $('locks-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    localStorage.setItem('quorum-locks', $('lock-names').value);
    refreshLocks();
  });
  $('locks-discover').addEventListener('click', discoverLocks);
  $('metrics-member').addEventListener('change', () => {
    metrics.target = $('metrics-member').value;
    metrics.prev = null;
    metrics.series = { proposals: [], fsync: [], watchers: [] };
    refreshMetrics();
  });
  $('prefix').value = localStorage.getItem('quorum-prefix') || '';
  $('lock-names').value = localStorage.getItem('quorum-locks') || '';
  every(2000, refreshCluster);
  every(2000, refreshMetrics);
  every(3000, refreshLeases);
  every(3000, refreshLocks);
  browse($('prefix').value);
}

start();
