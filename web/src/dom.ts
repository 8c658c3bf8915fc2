/** Tiny DOM helpers: elements are built with textContent only, never innerHTML (no XSS path). */
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;
export type Child = Node | string | number | null | undefined | false | Child[];

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v as EventListener);
    else if (k === 'class') el.className = String(v);
    else if (k === 'value' && 'value' in el) (el as HTMLInputElement).value = String(v);
    else if (k === 'checked' && 'checked' in el) (el as HTMLInputElement).checked = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

let fieldSeq = 0;
/** A labelled form control: the label is tied to the control for screen readers and clicks. */
export function field(label: string, control: HTMLElement, hint?: string): HTMLElement {
  const id = control.id || `f${++fieldSeq}`;
  control.id = id;
  const hintEl = hint ? h('small', { class: 'hint', id: `${id}-hint` }, hint) : null;
  if (hintEl) control.setAttribute('aria-describedby', hintEl.id);
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl);
}

export function select(name: string, options: [string, string][], value?: string): HTMLSelectElement {
  return h('select', { name }, ...options.map(([v, text]) => h('option', { value: v, selected: v === value }, text)));
}

export function toast(message: string, kind: 'ok' | 'error' = 'ok'): void {
  const el = document.getElementById('toast')!;
  el.className = `toast ${kind}`;
  el.textContent = message;
  window.clearTimeout((el as unknown as { timer?: number }).timer);
  (el as unknown as { timer?: number }).timer = window.setTimeout(() => (el.className = ''), 5000);
}

export function errorBox(): HTMLElement {
  return h('p', { class: 'error', role: 'alert', hidden: true });
}

export function showError(box: HTMLElement, err: unknown): void {
  box.textContent = err instanceof Error ? err.message : String(err);
  box.hidden = false;
}

/** A read-only value with a copy button (ids, tokens, keys, code snippets). */
export function copyable(value: string, label: string, opts: { multiline?: boolean; testid?: string } = {}): HTMLElement {
  const code = opts.multiline
    ? h('pre', { class: 'code', tabindex: 0, 'data-testid': opts.testid }, h('code', {}, value))
    : h('code', { class: 'secret', 'data-testid': opts.testid }, value);
  const button = h('button', { type: 'button', class: 'small', 'aria-label': `Copy ${label}` }, 'Copy');
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(value);
      button.textContent = 'Copied';
    } catch {
      // Clipboard needs a secure context; select the text so Ctrl+C works instead.
      const range = document.createRange();
      range.selectNodeContents(code);
      const sel = window.getSelection();
      sel?.removeAllRanges();
      sel?.addRange(range);
      button.textContent = 'Selected: press Ctrl+C';
    }
    window.setTimeout(() => (button.textContent = 'Copy'), 2500);
  });
  return h('div', { class: opts.multiline ? 'copy multiline' : 'copy' }, code, button);
}

export const fmtTime = (isoTime: string | null | undefined): string => (isoTime ? new Date(isoTime).toLocaleString() : '—');

/**
 * A reading's value as shown on the device page: numbers rounded to 3 decimals (a value
 * under 0.001 to 3 significant digits, so a small reading never shows as 0), everything
 * else as JSON text, so a string is quoted and `"12"` never looks like the number `12`, nor
 * `"true"` like `true`.
 */
export function fmtValue(v: unknown): string {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) < 0.001 ? String(Number(v.toPrecision(3))) : String(Math.round(v * 1000) / 1000);
  }
  return JSON.stringify(v);
}

/**
 * A number on a chart's axis or in its legend, in about 7 characters: 2 decimals at most,
 * none from 100 on, and 3 significant digits in exponent form below 0.01 and from a million
 * on, where fixed decimals would show 0 or overflow the axis.
 */
export function fmtChartNumber(v: number): string {
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.01 || a >= 1e6)) return v.toExponential(2).replace(/\.?0+e/, 'e');
  return a >= 100 ? v.toFixed(0) : v.toFixed(2).replace(/\.?0+$/, '');
}

/** What the device was set up with (a device made in the dashboard); a device made elsewhere has nothing to show. */
export function connectivityText(settings: Record<string, unknown>): string {
  const parts = [
    settings.network,
    settings.protocol,
    settings.data_interval_seconds === undefined ? undefined : `every ${String(settings.data_interval_seconds)} s`,
    settings.data_direction === undefined ? undefined : String(settings.data_direction).replace(/_/g, ' '),
  ].filter((p) => p !== undefined && p !== null && p !== '');
  return parts.length > 0 ? parts.map(String).join(' · ') : 'not set';
}

export function ago(isoTime: string | null | undefined): string {
  if (!isoTime) return 'never';
  const s = Math.round((Date.now() - new Date(isoTime).getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** A modal dialog (native <dialog>: focus is trapped and Escape closes it). */
export function dialog(title: string, ...content: Child[]): HTMLDialogElement {
  const d = h('dialog', { 'aria-label': title }, h('h2', {}, title), ...content);
  d.addEventListener('close', () => d.remove());
  document.body.appendChild(d);
  d.showModal();
  return d;
}
