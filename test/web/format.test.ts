/** The dashboard's pure formatters (web/src/dom.ts), without a browser. */
import { describe, expect, it } from 'vitest';
import { connectivityText } from '../../web/src/dom.js';

describe('connectivityText', () => {
  it('lists what the device was set up with, and says "not set" for a device made outside the dashboard', () => {
    expect(connectivityText({ network: 'wifi', protocol: 'mqtt', data_interval_seconds: 60, data_direction: 'device_to_cloud' })).toBe(
      'wifi · mqtt · every 60 s · device to cloud',
    );
    expect(connectivityText({ protocol: 'http' })).toBe('http');
    expect(connectivityText({})).toBe('not set');
  });
});
