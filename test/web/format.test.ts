/** The dashboard's pure formatters (web/src/dom.ts), without a browser. */
import { describe, expect, it } from 'vitest';
import { connectivityText, fmtChartNumber, fmtValue } from '../../web/src/dom.js';

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
    // Under 0.001, 3 significant digits: a small reading never shows as 0.
    expect(fmtValue(0.0000123456)).toBe('0.0000123');
    expect(fmtValue(-1.5e-9)).toBe('-1.5e-9');
    expect(fmtValue(0.0015)).toBe('0.002');
  });
});

describe('fmtChartNumber', () => {
  it('keeps axis labels short and tells small and huge values apart', () => {
    expect(fmtChartNumber(0)).toBe('0');
    expect(fmtChartNumber(21.5)).toBe('21.5');
    expect(fmtChartNumber(20)).toBe('20');
    expect(fmtChartNumber(1013.25)).toBe('1013');
    expect(fmtChartNumber(0.05)).toBe('0.05');
    expect(fmtChartNumber(0.0000123)).toBe('1.23e-5');
    expect(fmtChartNumber(0.000012)).toBe('1.2e-5');
    expect(fmtChartNumber(0.00001)).toBe('1e-5');
    expect(fmtChartNumber(1.2345e19)).toBe('1.23e+19');
    expect(fmtChartNumber(-2500000)).toBe('-2.5e+6');
  });
});
