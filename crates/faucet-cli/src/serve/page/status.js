// The status page of `faucet serve` (GET /): reads GET /pipelines and GET /members every
// 2 s and shows them; the buttons call the API with the token, asked for once and kept in
// this tab's sessionStorage. Every value from the server goes into the page through
// textContent, never as HTML.
'use strict';

const TOKEN_KEY = 'faucet.apiToken';
const REFRESH_MS = 2000;

const $ = (id) => document.getElementById(id);

function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

/// An element with `text` (any value, shown as text) and a class.
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function cell(text, cls) {
  return el('td', text === null || text === undefined ? '—' : text, cls);
}

function seconds(s) {
  if (s === null || s === undefined) return null;
  if (!Number.isFinite(s)) return '∞';
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.floor(s % 60)}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

function bytes(n) {
  if (n === null || n === undefined) return null;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function retention(p) {
  const parts = [];
  if (p.retained_wal_bytes !== null && p.retained_wal_bytes !== undefined) {
    parts.push(`${bytes(p.retained_wal_bytes)} WAL retained`);
  }
  if (p.oplog_window_seconds !== null && p.oplog_window_seconds !== undefined) {
    parts.push(`oplog window ${seconds(p.oplog_window_seconds)}`);
  }
  if (p.retention_horizon_seconds !== null && p.retention_horizon_seconds !== undefined) {
    parts.push(`horizon ${seconds(p.retention_horizon_seconds)}`);
  } else if (p.retention) {
    parts.push('no horizon');
  }
  return parts.length ? parts.join(', ') : null;
}

// --- the token ------------------------------------------------------------------------

let asking = null;

/// Asks for the token in the dialog (`why` says what for); resolves to it, or null.
function askToken(why) {
  if (asking) return asking;
  asking = new Promise((resolve) => {
    const dialog = $('token-dialog');
    const input = $('token-input');
    $('token-why').textContent = why;
    input.value = '';
    const done = (value) => {
      $('token-ok').onclick = null;
      $('token-cancel').onclick = null;
      input.onkeydown = null;
      dialog.close();
      asking = null;
      if (value) sessionStorage.setItem(TOKEN_KEY, value);
      resolve(value || null);
    };
    $('token-ok').onclick = () => done(input.value.trim());
    $('token-cancel').onclick = () => done(null);
    input.onkeydown = (e) => {
      if (e.key === 'Enter') done(input.value.trim());
      if (e.key === 'Escape') done(null);
    };
    dialog.showModal();
    input.focus();
  });
  return asking;
}

// --- the API --------------------------------------------------------------------------

async function send(method, path) {
  const headers = {};
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { method, headers, cache: 'no-store' });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  return { status: response.status, body };
}

/// Shows `text` (or nothing) as the page's problem; `from` is `refresh` for one a good
/// refresh clears, else `action` (kept until the next action).
function problem(text, from = 'action') {
  const p = $('problem');
  p.textContent = text || '';
  p.hidden = !text;
  p.dataset.from = text ? from : '';
}

/// A change through the API (PUT or POST `path`), asking for the token when there is none
/// or it was refused.
async function change(method, path, what) {
  if (!storedToken() && !(await askToken(`${what} needs the API token of this server.`))) {
    return;
  }
  let answer = await send(method, path);
  if (answer.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    const why = answer.body && answer.body.error ? answer.body.error : 'refused';
    if (!(await askToken(`The token was refused (${why}); ${what} needs the API token.`))) {
      return;
    }
    answer = await send(method, path);
  }
  if (answer.status >= 400) {
    const why = answer.body && answer.body.error ? answer.body.error : `HTTP ${answer.status}`;
    problem(`${what}: ${why}`);
  } else {
    problem('');
  }
  refreshSoon();
}

// --- rendering ------------------------------------------------------------------------

function button(label, action, enabled, onclick) {
  const b = el('button', label);
  b.type = 'button';
  b.dataset.action = action;
  b.disabled = !enabled;
  b.onclick = onclick;
  return b;
}

// `37% (12,345 of ~33,000 rows), public.orders (3 of 12) 45%, ETA 1m 20s` (the table part
// only while a replicate copies); null (shown as —) where the source does not know its end.
function progress(pr) {
  if (!pr) return null;
  const units = {
    bytes: 'bytes', rows: 'rows', wal_bytes: 'WAL bytes', oplog_seconds: 'oplog seconds',
  };
  const tilde = pr.estimate ? '~' : '';
  let text = `${Math.floor(pr.percent)}% (${pr.done.toLocaleString('en')} of ${tilde}` +
    `${pr.total.toLocaleString('en')} ${units[pr.unit] || pr.unit})`;
  const part = pr.part;
  if (part) text += `, ${part.name} (${part.number} of ${part.count}) ${Math.floor(part.percent)}%`;
  if (pr.eta_seconds !== null) text += `, ETA ${seconds(pr.eta_seconds)}`;
  return text;
}

// The last schema change per source table, one line each: `public.items: column `w` added,
// text (lsn 0/16B3748)`, its time as the title; null (shown as —) before one.
function schemaChanges(cellEl, changes) {
  const tables = Object.keys(changes || {});
  if (tables.length === 0) {
    cellEl.textContent = '—';
    return;
  }
  for (const table of tables) {
    const c = changes[table];
    const where = c.position === null ? '' : ` (${c.position})`;
    const line = el('div', `${table}: ${c.changes.join('; ')}${where}`);
    line.title = `at ${c.at}`;
    cellEl.append(line);
  }
}

function pipelineRow(p) {
  const tr = el('tr');
  tr.dataset.key = p.key;
  const name = el('td');
  name.append(el('div', p.key), el('div', p.file, 'quiet'));
  tr.append(name);
  const state = cell(p.state, `state state-${p.state}`);
  state.dataset.field = 'state';
  if (p.running) state.append(el('span', ' · running', 'quiet'));
  tr.append(state);
  const owner = cell(p.owner === null ? null : `${p.owner}${p.here ? ' (here)' : ''}`);
  owner.dataset.field = 'owner';
  tr.append(owner);
  tr.append(cell(seconds(p.lag_seconds), 'num'));
  tr.append(cell(seconds(p.bookmark_age_seconds), 'num'));
  tr.append(cell(p.records.toLocaleString('en'), 'num'));
  tr.append(cell(
    p.rate_records_per_second === null ? null : `${p.rate_records_per_second.toFixed(1)}/s`,
    'num',
  ));
  const share = cell(progress(p.progress), 'num');
  share.dataset.field = 'progress';
  tr.append(share);
  const schema = el('td');
  schema.dataset.field = 'schema_changes';
  schemaChanges(schema, p.schema_changes);
  tr.append(schema);
  tr.append(cell(retention(p)));
  const error = p.error || (p.last_error && p.last_error.message);
  const errorCell = cell(error, 'error');
  errorCell.dataset.field = 'error';
  if (p.last_error) errorCell.title = `at ${p.last_error.at}`;
  tr.append(errorCell);
  const actions = el('td');
  const path = (verb) => `/pipelines/${encodeURIComponent(p.key)}/${verb}`;
  const paused = p.state === 'PAUSED' || p.state === 'STOPPED';
  actions.append(
    button('Pause', 'pause', p.state !== 'PAUSED', () => change('PUT', path('pause'), `Pausing ${p.key}`)),
    button('Resume', 'resume', paused, () => change('PUT', path('resume'), `Resuming ${p.key}`)),
    button('Stop', 'stop', p.state !== 'STOPPED', () => change('PUT', path('stop'), `Stopping ${p.key}`)),
    button('Run now', 'run', !p.continuous && !paused && !p.running,
      () => change('POST', path('run'), `Starting a run of ${p.key}`)),
  );
  tr.append(actions);
  return tr;
}

function memberRow(m) {
  const tr = el('tr');
  tr.dataset.member = m.name;
  tr.append(cell(`${m.name}${m.this ? ' (this)' : ''}`));
  tr.append(cell(m.alive === undefined ? 'yes' : (m.alive ? 'yes' : 'no')));
  const draining = cell(m.draining ? 'yes' : 'no');
  draining.dataset.field = 'draining';
  tr.append(draining);
  tr.append(cell(m.leaving ? 'yes' : 'no'));
  tr.append(cell(m.pipelines, 'num'));
  tr.append(cell(seconds(m.heartbeat_age_seconds), 'num'));
  const actions = el('td');
  if (m.alive !== undefined) {
    const path = (verb) => `/members/${encodeURIComponent(m.name)}/${verb}`;
    actions.append(
      button('Drain', 'drain', !m.draining, () => change('PUT', path('drain'), `Draining ${m.name}`)),
      button('Undrain', 'undrain', m.draining, () => change('PUT', path('undrain'), `Undraining ${m.name}`)),
    );
  }
  tr.append(actions);
  return tr;
}

function fill(tableId, rows) {
  $(tableId).tBodies[0].replaceChildren(...rows);
}

// --- the refresh loop -------------------------------------------------------------------

let timer = null;
let refreshes = 0;

function refreshSoon() {
  clearTimeout(timer);
  timer = setTimeout(refresh, 0);
}

async function refresh() {
  clearTimeout(timer);
  try {
    const [pipelines, members] = await Promise.all([send('GET', '/pipelines'), send('GET', '/members')]);
    if (pipelines.status === 401 || members.status === 401) {
      problem('This server shows its pipelines only with the API token: press “API token…”.', 'refresh');
    } else if (pipelines.status !== 200) {
      const why = pipelines.body && pipelines.body.error ? pipelines.body.error : `HTTP ${pipelines.status}`;
      problem(`GET /pipelines: ${why}`, 'refresh');
    } else {
      $('member').textContent = pipelines.body.member;
      fill('pipelines', pipelines.body.pipelines.map(pipelineRow));
      if (members.status === 200) fill('members', members.body.members.map(memberRow));
      if ($('problem').dataset.from === 'refresh') problem('');
      $('updated').textContent = `updated ${new Date().toLocaleTimeString('en-GB')}`;
      refreshes += 1;
      document.body.dataset.refreshes = String(refreshes);
    }
  } catch (e) {
    problem(`Cannot reach faucet serve: ${e.message}`, 'refresh');
  } finally {
    timer = setTimeout(refresh, REFRESH_MS);
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('token-button').onclick = async () => {
    await askToken('The API token of this server (for changes, and off loopback for reading).');
    refreshSoon();
  };
  refresh();
});
