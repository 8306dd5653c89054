// Draws one of tlsprof's Grafana dashboards with Grafana's own panel components, from a real
// Prometheus, for the tests (tests/test_dashboards.py) and the docs' pictures. Not Grafana:
// what Grafana's core does around its panels (queries, variables, transformations, field
// configuration) is done here, as little as the dashboards need. The page writes, per panel,
// what it drew into <pre id="report"> (JSON) for the test to read.
import React from 'react';
import { createRoot } from 'react-dom/client';
import {
  applyFieldOverrides,
  createTheme,
  FieldConfigOptionsRegistry,
  FieldType,
  getDisplayProcessor,
  getFieldDisplayName,
  standardTransformers,
  standardTransformersRegistry,
  transformDataFrame,
  dateTime,
  ThemeContext,
} from '@grafana/data';
import { BigValue, BigValueColorMode, BigValueGraphMode, BigValueJustifyMode, BigValueTextMode, PanelChrome, TimeSeries } from '@grafana/ui';
import { TableNG } from '@grafana/ui/unstable';
import { firstValueFrom } from 'rxjs';

const params = new URLSearchParams(window.location.search);
const theme = createTheme({ colors: { mode: 'light' } });
const COLUMNS = 24;
const WIDTH = Number(params.get('width') || 1600);
const ROW_PX = 30; // Grafana's grid row height
const STEP = Number(params.get('step') || 2);
const RATE_INTERVAL = params.get('rate_interval') || '10s';
const report = [];

// Grafana's core registers its transformers with their editors; here, each once (some share
// an id or alias), without one.
standardTransformersRegistry.setInit(() => {
  const seen = new Set();
  const items = [];
  for (const t of Object.values(standardTransformers)) {
    if (!t?.id || seen.has(t.id)) continue;
    const aliasIds = (t.aliasIds || []).filter((a) => !seen.has(a));
    [t.id, ...aliasIds].forEach((k) => seen.add(k));
    items.push({ id: t.id, aliasIds, name: t.name, transformation: () => Promise.resolve(t), editor: () => null });
  }
  return items;
});

// Each custom.* key the dashboards set is an option whose value is taken as given.
function fieldRegistry(fieldConfig) {
  const keys = new Set();
  const walk = (o, prefix) => {
    for (const [k, v] of Object.entries(o || {})) {
      if (prefix === 'custom' || prefix.startsWith('custom.')) keys.add(`${prefix}.${k}`);
      if (v && typeof v === 'object' && !Array.isArray(v) && k === 'custom') walk(v, 'custom');
    }
  };
  walk(fieldConfig?.defaults, '');
  for (const o of fieldConfig?.overrides || []) for (const p of o.properties || []) if (p.id.startsWith('custom.')) keys.add(p.id);
  const reg = new FieldConfigOptionsRegistry();
  for (const id of keys) {
    reg.register({ id, path: id.slice('custom.'.length), isCustom: true, name: id, process: (v) => v, shouldApply: () => true, override: () => null, editor: () => null });
  }
  for (const id of ['unit', 'min', 'max', 'decimals', 'displayName', 'color', 'thresholds', 'mappings', 'links', 'noValue', 'filterable']) {
    reg.register({ id, path: id, name: id, process: (v) => v, shouldApply: () => true, override: () => null, editor: () => null });
  }
  return reg;
}

const vars = {
  instance: params.get('instance') || '.+',
  comm: params.get('comm') || '.+',
  port: params.get('port') || '.+',
  datasource: 'prometheus',
};

function substitute(expr, range) {
  return expr
    .replaceAll('$__rate_interval', RATE_INTERVAL)
    .replaceAll('$__interval', `${STEP}s`)
    .replaceAll('$__range', `${Math.max(1, Math.round(range))}s`)
    .replace(/\$(\w+)/g, (m, name) => (name in vars ? vars[name] : m));
}

function legend(format, labels) {
  if (!format || format === '__auto') {
    const l = Object.entries(labels).filter(([k]) => k !== '__name__');
    return l.length ? `{${l.map(([k, v]) => `${k}="${v}"`).join(', ')}}` : 'value';
  }
  return format.replace(/\{\{\s*(\w+)\s*\}\}/g, (m, k) => labels[k] ?? '');
}

async function prom(path, args) {
  const r = await fetch(`/api/v1/${path}?${new URLSearchParams(args)}`);
  const body = await r.json();
  if (body.status !== 'success') throw new Error(`${body.errorType}: ${body.error}`);
  return body.data;
}

// A target's result as data frames: one per series (time, value) for ranges; one table for
// instant queries with format "table" (a column per label, then the value: `Value`, or
// `Value #A`... where the panel has several queries, as Grafana names them).
async function query(target, from, to, single) {
  const expr = substitute(target.expr, to - from);
  if (target.instant) {
    const data = await prom('query', { query: expr, time: to });
    const rows = data.result;
    const labels = [...new Set(rows.flatMap((r) => Object.keys(r.metric)))].sort();
    const fields = [
      ...labels.map((l) => ({ name: l, type: FieldType.string, config: {}, values: rows.map((r) => r.metric[l] ?? '') })),
      { name: single ? 'Value' : `Value #${target.refId}`, type: FieldType.number, config: {}, values: rows.map((r) => Number(r.value[1])) },
    ];
    return [{ refId: target.refId, length: rows.length, fields }];
  }
  const data = await prom('query_range', { query: expr, start: from, end: to, step: STEP });
  return data.result.map((s) => ({
    refId: target.refId,
    name: legend(target.legendFormat, s.metric),
    length: s.values.length,
    fields: [
      { name: 'Time', type: FieldType.time, config: {}, values: s.values.map((v) => v[0] * 1000) },
      {
        name: 'Value',
        type: FieldType.number,
        labels: s.metric,
        config: { displayNameFromDS: legend(target.legendFormat, s.metric) },
        values: s.values.map((v) => Number(v[1])),
      },
    ],
  }));
}

// What each panel plugin sets for a field before the dashboard's own configuration (as
// Grafana's time series, stat and table panels do).
const PLUGIN_DEFAULTS = {
  timeseries: {
    color: { mode: 'palette-classic' },
    custom: {
      drawStyle: 'line',
      lineInterpolation: 'linear',
      barAlignment: 0,
      lineWidth: 1,
      fillOpacity: 0,
      gradientMode: 'none',
      spanNulls: false,
      insertNulls: false,
      showPoints: 'auto',
      pointSize: 5,
      stacking: { mode: 'none', group: 'A' },
      axisPlacement: 'auto',
      axisLabel: '',
      axisColorMode: 'text',
      axisBorderShow: false,
      scaleDistribution: { type: 'linear' },
      axisCenteredZero: false,
      hideFrom: { tooltip: false, viz: false, legend: false },
      thresholdsStyle: { mode: 'off' },
    },
  },
  stat: { color: { mode: 'thresholds' } },
  table: { custom: { align: 'auto', cellOptions: { type: 'auto' }, inspect: false } },
};
const THRESHOLDS = { mode: 'absolute', steps: [{ value: -Infinity, color: 'green' }, { value: 80, color: 'red' }] };

function merge(base, over) {
  if (!over || typeof over !== 'object' || Array.isArray(over)) return over === undefined ? base : over;
  const out = { ...(base || {}) };
  for (const [k, v] of Object.entries(over)) out[k] = merge(out[k], v);
  return out;
}

function fieldConfigOf(panel) {
  const fc = panel.fieldConfig || { defaults: {}, overrides: [] };
  const defaults = merge({ thresholds: THRESHOLDS, ...PLUGIN_DEFAULTS[panel.type] }, fc.defaults || {});
  if (defaults.thresholds?.steps?.[0]?.value === null) defaults.thresholds.steps[0].value = -Infinity;
  return { defaults, overrides: fc.overrides || [] };
}

async function panelData(panel, from, to) {
  let frames = [];
  const targets = panel.targets || [];
  for (const t of targets) frames.push(...(await query(t, from, to, targets.length === 1)));
  if (panel.transformations?.length) {
    frames = await firstValueFrom(transformDataFrame(panel.transformations, frames));
  }
  const timeRange = { from: dateTime(from * 1000), to: dateTime(to * 1000), raw: { from: '', to: '' } };
  const fieldConfig = fieldConfigOf(panel);
  return applyFieldOverrides({
    data: frames,
    fieldConfig,
    fieldConfigRegistry: fieldRegistry(fieldConfig),
    replaceVariables: (s) => s,
    theme,
    timeZone: 'utc',
    timeRange,
  });
}

function Stat({ frames, width, height }) {
  const field = frames.flatMap((f) => f.fields).find((f) => f.type === FieldType.number);
  if (!field) return <div>No data</div>;
  const times = frames[0].fields.find((f) => f.type === FieldType.time);
  const last = [...field.values].reverse().find((v) => v !== null && !Number.isNaN(v));
  const display = (field.display || getDisplayProcessor({ field, theme }))(last);
  const sparkline = times ? { y: field, x: times } : undefined;
  return (
    <BigValue
      theme={theme}
      width={width}
      height={height}
      value={display}
      sparkline={sparkline}
      colorMode={BigValueColorMode.Value}
      graphMode={BigValueGraphMode.Area}
      justifyMode={BigValueJustifyMode.Auto}
      textMode={BigValueTextMode.Auto}
    />
  );
}

function Panel({ panel, frames, error, from, to, width, height }) {
  const timeRange = { from: dateTime(from * 1000), to: dateTime(to * 1000), raw: { from: '', to: '' } };
  return (
    <PanelChrome title={panel.title} description={panel.description} width={width} height={height} statusMessage={error}>
      {(w, h) => {
        if (error || !frames) return null;
        if (!frames.length) return <div className="no-data">No data</div>;
        if (panel.type === 'timeseries') {
          return (
            <TimeSeries
              frames={frames}
              width={w}
              height={h}
              timeRange={timeRange}
              timeZone="utc"
              legend={{ showLegend: true, displayMode: 'list', placement: 'bottom', calcs: [] }}
              options={panel.options}
            />
          );
        }
        if (panel.type === 'stat') return <Stat frames={frames} width={w} height={h} />;
        if (panel.type === 'table') return <TableNG data={frames[0]} width={w} height={h} />;
        return <div>panel type {panel.type} not drawn</div>;
      }}
    </PanelChrome>
  );
}

async function main() {
  const name = params.get('dashboard');
  const to = Number(params.get('to') || Date.now() / 1000);
  const from = Number(params.get('from') || to - 300);
  const dash = await (await fetch(`/dashboards/${name}`)).json();
  const panels = dash.panels.filter((p) => p.type !== 'row');
  const drawn = await Promise.all(
    panels.map(async (p) => {
      try {
        return { panel: p, frames: await panelData(p, from, to) };
      } catch (e) {
        return { panel: p, error: String(e) };
      }
    })
  );
  const unit = WIDTH / COLUMNS;
  const height = Math.max(...dash.panels.map((p) => (p.gridPos.y + p.gridPos.h) * ROW_PX)) + 40;
  const root = createRoot(document.getElementById('root'));
  root.render(
    <ThemeContext.Provider value={theme}>
      <div style={{ position: 'relative', width: WIDTH, height, background: theme.colors.background.canvas }}>
        {dash.panels.map((p) =>
          p.type === 'row' ? (
            <div key={p.id} className="row" style={{ position: 'absolute', left: 0, top: p.gridPos.y * ROW_PX, width: WIDTH, height: ROW_PX, fontWeight: 600, padding: 4 }}>
              {p.title.replace(/\$(\w+)/g, (m, n) => (n in vars && n !== 'datasource' ? params.get(n) || m : m))}
            </div>
          ) : null
        )}
        {drawn.map(({ panel, frames, error }) => {
          const g = panel.gridPos;
          return (
            <div key={panel.id} style={{ position: 'absolute', left: g.x * unit + 4, top: g.y * ROW_PX + 4 }}>
              <Panel panel={panel} frames={frames} error={error} from={from} to={to} width={g.w * unit - 8} height={g.h * ROW_PX - 8} />
            </div>
          );
        })}
      </div>
    </ThemeContext.Provider>
  );
  for (const { panel, frames, error } of drawn) {
    const series = (frames || []).flatMap((f) =>
      f.fields.filter((x) => x.type === FieldType.number).map((x) => ({
        name: getFieldDisplayName(x, f, frames),
        points: x.values.filter((v) => Number.isFinite(v)).length,
        // an infinity (a division by zero) leaves the whole panel without an axis
        infinite: x.values.filter((v) => v === Infinity || v === -Infinity).length,
      }))
    );
    const table = panel.type === 'table' && frames?.[0];
    report.push({
      title: panel.title,
      type: panel.type,
      error: error || null,
      frames: (frames || []).length,
      series,
      rows: table ? frames[0].length : null,
      columns: table ? frames[0].fields.filter((f) => !f.config?.custom?.hidden).map((f) => getFieldDisplayName(f, frames[0], frames)) : null,
    });
  }
  // after the charts had a frame to draw in
  setTimeout(() => {
    const charts = document.querySelectorAll('.u-wrap canvas, canvas').length;
    document.getElementById('report').textContent = JSON.stringify({ dashboard: name, charts, height, panels: report });
  }, 1500);
}

main().catch((e) => {
  document.getElementById('report').textContent = JSON.stringify({ error: String(e.stack || e) });
});
