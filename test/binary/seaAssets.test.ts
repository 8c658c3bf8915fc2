import { chownSync, existsSync, readdirSync, readFileSync, statSync, truncateSync, utimesSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { extractAssetFile, extractWebRoot, SEA_ASSET } from '../../src/sea.js';
import { tempDir } from '../helpers/server.js';

/**
 * The extraction of SEA assets (src/sea.ts) against an in-memory asset table shaped like
 * node:sea, so it runs in every `npm test`; the smoke test exercises the real executable.
 */
function fakeSea(assets: Record<string, string | Buffer>) {
  return {
    isSea: () => true,
    getRawAsset(name: string): ArrayBuffer {
      const value = assets[name];
      if (value === undefined) throw new Error(`No asset named ${name}`);
      const buf = Buffer.from(value);
      return buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer;
    },
  };
}

const webAssets = (hash: string, files: Record<string, string>) => {
  const table: Record<string, string> = { [SEA_ASSET.webManifest]: JSON.stringify({ hash, files: Object.keys(files) }) };
  for (const [rel, content] of Object.entries(files)) table[SEA_ASSET.webPrefix + rel] = content;
  return table;
};

describe('SEA asset extraction', () => {
  // sudo telemetryd … --data-dir /var/lib/telemetryd before the service's first start with this executable.
  it.skipIf(process.getuid?.() !== 0)("run as root in a data dir another user owns, the extracted files are that user's", () => {
    const dataDir = tempDir();
    chownSync(dataDir, 65534, 65534);
    const sea = fakeSea({ ...webAssets('cd'.repeat(32), { 'index.html': 'x', 'assets/app.js': 'y' }), addon: 'binary' });
    const file = extractAssetFile(sea, dataDir, 'addon', 'addon.node');
    const web = extractWebRoot(sea, dataDir)!;
    for (const p of [
      path.join(dataDir, '.cache'),
      path.dirname(file),
      file,
      web,
      path.join(web, 'assets'),
      path.join(web, 'assets', 'app.js'),
    ])
      expect(statSync(p).uid, p).toBe(65534);
    // In a data dir of root's own, nothing changes hands.
    const rootDir = tempDir();
    expect(statSync(extractAssetFile(sea, rootDir, 'addon', 'addon.node')).uid).toBe(0);
  });

  it('extracts the dashboard once into <data-dir>/.cache/web-<hash>/ with every file', () => {
    const dataDir = tempDir();
    const sea = fakeSea(webAssets('ab'.repeat(32), { 'index.html': '<html>one</html>', 'assets/app.js': 'run()' }));
    const dir = extractWebRoot(sea, dataDir)!;
    expect(dir).toBe(path.join(dataDir, '.cache', `web-${'ab'.repeat(8)}`));
    expect(readFileSync(path.join(dir, 'index.html'), 'utf8')).toBe('<html>one</html>');
    expect(readFileSync(path.join(dir, 'assets', 'app.js'), 'utf8')).toBe('run()');
    // No temp directory left behind.
    expect(readdirSync(path.join(dataDir, '.cache'))).toEqual([`web-${'ab'.repeat(8)}`]);
    // A second start reuses the files: nothing is rewritten.
    utimesSync(path.join(dir, 'index.html'), new Date(0), new Date(0));
    expect(extractWebRoot(sea, dataDir)).toBe(dir);
    expect(statSync(path.join(dir, 'index.html')).mtimeMs).toBe(0);
  });

  it('a new executable with other dashboard files gets its own directory', () => {
    const dataDir = tempDir();
    const first = extractWebRoot(fakeSea(webAssets('11'.repeat(32), { 'index.html': 'old' })), dataDir)!;
    const second = extractWebRoot(fakeSea(webAssets('22'.repeat(32), { 'index.html': 'new' })), dataDir)!;
    expect(second).not.toBe(first);
    expect(readFileSync(path.join(second, 'index.html'), 'utf8')).toBe('new');
  });

  it('returns null when the executable has no dashboard, and refuses paths escaping the directory', () => {
    const dataDir = tempDir();
    expect(extractWebRoot(fakeSea({}), dataDir)).toBeNull();
    expect(extractWebRoot(fakeSea(webAssets('33'.repeat(32), { 'app.js': 'x' })), dataDir)).toBeNull();
    const evil = fakeSea(webAssets('44'.repeat(32), { 'index.html': 'x', '../../escape.txt': 'x' }));
    expect(() => extractWebRoot(evil, dataDir)).toThrow(/bad dashboard asset path/);
    expect(existsSync(path.join(dataDir, 'escape.txt'))).toBe(false);
    expect(readdirSync(path.join(dataDir, '.cache'))).toEqual([]); // nothing half-written
  });

  it('extracts the addon once, by content hash, and replaces a truncated copy', () => {
    const dataDir = tempDir();
    const sea = fakeSea({ [SEA_ASSET.addon]: Buffer.alloc(4096, 7) });
    const file = extractAssetFile(sea, dataDir, SEA_ASSET.addon, 'better_sqlite3.node', 0o700);
    expect(path.dirname(path.dirname(file))).toBe(path.join(dataDir, '.cache'));
    expect(statSync(file).size).toBe(4096);
    expect(statSync(file).mode & 0o777).toBe(0o700);
    truncateSync(file, 10);
    expect(extractAssetFile(sea, dataDir, SEA_ASSET.addon, 'better_sqlite3.node', 0o700)).toBe(file);
    expect(readFileSync(file)).toEqual(Buffer.alloc(4096, 7));
    expect(readdirSync(path.dirname(file))).toEqual(['better_sqlite3.node']);
  });

  it('names the addon directory by the digest the build recorded, without hashing the asset', () => {
    const dataDir = tempDir();
    const bytes = Buffer.alloc(4096, 9);
    const digest = 'cd'.repeat(8);
    const sea = fakeSea({ [SEA_ASSET.addon]: bytes, [SEA_ASSET.addon + SEA_ASSET.digestSuffix]: `${digest}\n` });
    const file = extractAssetFile(sea, dataDir, SEA_ASSET.addon, 'better_sqlite3.node', 0o700);
    expect(file).toBe(path.join(dataDir, '.cache', digest, 'better_sqlite3.node'));
    expect(readFileSync(file)).toEqual(bytes);
    // A malformed recorded digest falls back to hashing the bytes.
    const other = fakeSea({ [SEA_ASSET.addon]: bytes, [SEA_ASSET.addon + SEA_ASSET.digestSuffix]: 'not a digest' });
    expect(path.basename(path.dirname(extractAssetFile(other, dataDir, SEA_ASSET.addon, 'better_sqlite3.node')))).toMatch(/^[0-9a-f]{16}$/);
    expect(path.basename(path.dirname(extractAssetFile(other, dataDir, SEA_ASSET.addon, 'better_sqlite3.node')))).not.toBe(digest);
  });
});
