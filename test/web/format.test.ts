/** The dashboard's pure formatters (web/src/dom.ts), without a browser. */
import { describe, expect, it } from 'vitest';
import { connectivityText, fmtValue } from '../../web/src/dom.js';

describe('connectivityText', () => {
  it('lists what the device was set up with, and says "not set" for a device made outside the dashboard', () => {
    expect(connectivityText({ network: 'wifi', protocol: 'mqtt', data_interval_seconds: 60, data_direction: 'device_to_cloud' })).toBe(
      'wifi · mqtt · every 60 s · device to cloud',
    );
    expect(connectivityText({ protocol: 'http' })).toBe('http');
    expect(connectivityText({})).toBe('not set');
  });
});

describe('fmtValue', () => {
  it('quotes text (JSON), so a string never looks like a number or a boolean; numbers are rounded', () => {
    expect(fmtValue(12)).toBe('12');
    expect(fmtValue('12')).toBe('"12"');
    expect(fmtValue(true)).toBe('true');
    expect(fmtValue('true')).toBe('"true"');
    expect(fmtValue('')).toBe('""');
    expect(fmtValue('say "hi"')).toBe('"say \\"hi\\""');
    expect(fmtValue(21.123456)).toBe('21.123');
    expect(fmtValue([1, 'a'])).toBe('[1,"a"]');
    expect(fmtValue(null)).toBe('—');
  });
});
