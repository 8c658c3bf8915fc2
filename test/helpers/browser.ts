import { type Browser, chromium } from 'playwright-core';

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
