import { ApiError, api, clearSession, loadSession, type StorageStatus, session, setUnauthorizedHandler } from './api';
import { h, toast } from './dom';
import { Live, POLL_MS } from './live';
import { renderAlerts } from './pages/alerts';
import { renderSetup, renderSignIn } from './pages/auth';
import { renderDevice } from './pages/device';
import { renderDevices, renderNewDevice } from './pages/devices';
import { renderSettings } from './pages/settings';

export interface PageContext {
  /** Runs when the user leaves the page (timers, live subscriptions). */
  onLeave(fn: () => void): void;
  live: Live;
  navigate(hash: string): void;
}

type Page = (main: HTMLElement, params: string[], ctx: PageContext) => Promise<void> | void;

const ROUTES: [RegExp, Page, string][] = [
  [/^\/devices\/new$/, renderNewDevice, 'New device'],
  [/^\/devices\/([^/]+)$/, renderDevice, 'Device'],
  [/^\/devices$/, renderDevices, 'Devices'],
  [/^\/alerts$/, renderAlerts, 'Alerts'],
  [/^\/settings$/, renderSettings, 'Settings'],
];

const main = document.getElementById('main')!;
const top = document.getElementById('top')!;
const storageBanner = document.getElementById('storage-banner')!;
const live = new Live();
let leaving: (() => void)[] = [];
let renderSeq = 0;

function navigate(hash: string): void {
  if (location.hash === hash) void route();
  else location.hash = hash;
}

function renderHeader(current: string): void {
  top.hidden = false;
  top.replaceChildren(
    h('a', { class: 'brand', href: '#/devices' }, 'telemetryd'),
    h(
      'nav',
      { 'aria-label': 'Main' },
      ...[
        ['#/devices', 'Devices'],
        ['#/alerts', 'Alerts'],
        ['#/settings', 'Settings'],
      ].map(([href, text]) => h('a', { href, 'aria-current': current.startsWith(href!.slice(1)) ? 'page' : null }, text!)),
    ),
    h('span', { class: 'who' }, session?.account.email ?? ''),
    h('button', { type: 'button', class: 'small secondary', onclick: signOut }, 'Sign out'),
  );
}

const megabytes = (bytes: number) => `${(bytes / 1_048_576).toFixed(1)} MB`;

/**
 * The banner over every page while the server refuses new readings: the reason (low disk
 * space, disk full, I/O error) and the free space, refreshed with the pages' 15 s poll.
 */
async function refreshStorageBanner(): Promise<void> {
  if (!session) {
    storageBanner.hidden = true;
    return;
  }
  let status: StorageStatus;
  try {
    status = await api<StorageStatus>('GET', '/storage');
  } catch {
    return; // the next poll tries again; the page shows its own errors
  }
  if (status.writable) {
    storageBanner.hidden = true;
    storageBanner.replaceChildren();
    return;
  }
  storageBanner.replaceChildren(
    h('strong', {}, 'New readings and snapshots are being refused. '),
    `Storage unavailable: ${status.reason}. `,
    status.free_bytes === null ? '' : `Free disk space: ${megabytes(status.free_bytes)}. `,
    'Devices are told to retry later and nothing stored is lost; writes resume by themselves once there is room.',
  );
  storageBanner.hidden = false;
}

async function signOut(): Promise<void> {
  try {
    await api('POST', '/sign-out');
  } finally {
    live.stop();
    clearSession();
    location.hash = '';
    await route();
  }
}

async function route(): Promise<void> {
  const seq = ++renderSeq;
  for (const fn of leaving) fn();
  leaving = [];
  // A dialog belongs to the page it was opened on (it lives in <body>, outside #main).
  for (const d of document.querySelectorAll('dialog')) d.close();
  const ctx: PageContext = { onLeave: (fn) => leaving.push(fn), live, navigate };

  if (location.pathname === '/setup' && !session) {
    top.hidden = true;
    await renderSetup(main, async () => {
      history.replaceState(null, '', '/#/devices');
      await start();
    });
    return;
  }
  if (!session) {
    top.hidden = true;
    storageBanner.hidden = true;
    renderSignIn(main, start);
    return;
  }
  live.start();
  void refreshStorageBanner();
  const path = location.hash.replace(/^#/, '') || '/devices';
  const match = ROUTES.map(([re, page, title]) => [re.exec(path), page, title] as const).find(([m]) => m);
  renderHeader(path);
  main.replaceChildren();
  const notFound = (reason?: string) =>
    main.replaceChildren(
      h('h1', {}, 'Not found'),
      reason ? h('p', { class: 'error', role: 'alert' }, reason) : '',
      h('p', {}, h('a', { href: '#/devices' }, 'Back to devices')),
    );
  if (!match) {
    notFound();
    return;
  }
  const [m, page, title] = match;
  document.title = `${title} · telemetryd`;
  try {
    await page(main, m!.slice(1).map(decodeURIComponent), ctx);
  } catch (err) {
    // A link to something that is not there (deleted, or another account's) gets a page of its own.
    if (seq === renderSeq && err instanceof ApiError && err.status === 404) notFound(err.message);
    else if (seq === renderSeq) main.append(h('p', { class: 'error', role: 'alert' }, err instanceof Error ? err.message : String(err)));
  }
  // The heading takes focus (a screen reader announces the new page) unless the page put it
  // somewhere itself, such as the first box of a form.
  if (seq === renderSeq && !main.contains(document.activeElement)) {
    const heading = main.querySelector('h1');
    if (heading) {
      heading.setAttribute('tabindex', '-1');
      heading.focus({ preventScroll: true });
    }
  }
}

async function start(): Promise<void> {
  await loadSession();
  await route();
}

setUnauthorizedHandler(() => {
  live.stop();
  clearSession();
  toast('Your session ended; please sign in again.', 'error');
  void route();
});
window.addEventListener('hashchange', () => void route());
window.setInterval(() => void refreshStorageBanner(), POLL_MS);
void start().catch((err) => main.replaceChildren(h('p', { class: 'error', role: 'alert' }, String(err))));
