import { type Browser, type ConsoleMessage, chromium, type Page } from 'playwright-core';

/**
 * Debian's headless Chromium, as every dashboard test drives it: without the sandbox (the
 * tests may run as root) and without background networking, whose connections this
 * machine's closed network refuses.
 */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
}

/** A page in a new browser context, and every console error or warning and page error it produces. */
export async function pageWithProblems(
  browser: Browser,
  viewport = { width: 1200, height: 800 },
): Promise<{ page: Page; problems: string[] }> {
  const page = await (await browser.newContext({ viewport })).newPage();
  page.setDefaultTimeout(8_000);
  const problems: string[] = [];
  page.on('console', (m: ConsoleMessage) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  return { page, problems };
}
