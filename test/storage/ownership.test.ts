import { chownSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { giveToOwnerOf } from '../../src/storage/ownership.js';

const SERVICE = 65534;

/**
 * `sudo telemetryd …` on a data dir another user owns: what root made there becomes that
 * user's, and nothing outside it does, whatever links that user left in the data dir.
 */
describe.skipIf(process.getuid?.() !== 0)('giveToOwnerOf, run as root', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  function setup() {
    const root = mkdtempSync(path.join(os.tmpdir(), 'tlm-owner-'));
    dirs.push(root);
    const dataDir = path.join(root, 'data');
    mkdirSync(dataDir);
    chownSync(dataDir, SERVICE, SERVICE);
    // Root's own files outside the data dir, which a link in it may point at.
    const outside = path.join(root, 'outside');
    mkdirSync(outside);
    writeFileSync(path.join(outside, 'secret'), 'root only');
    return { root, dataDir, outside };
  }
  const owner = (p: string) => statSync(p).uid;

  it("gives the data dir's owner what root made in it, folders with everything in them", () => {
    const { dataDir } = setup();
    writeFileSync(path.join(dataDir, 'telemetryd.db'), '');
    mkdirSync(path.join(dataDir, 'snapshots', 'dev_a'), { recursive: true });
    writeFileSync(path.join(dataDir, 'snapshots', 'dev_a', '1.jpg'), 'x');
    giveToOwnerOf(dataDir, [path.join(dataDir, 'telemetryd.db'), path.join(dataDir, 'snapshots'), path.join(dataDir, 'absent')]);
    for (const p of ['telemetryd.db', 'snapshots', 'snapshots/dev_a', 'snapshots/dev_a/1.jpg'])
      expect(owner(path.join(dataDir, p))).toBe(SERVICE);
  });

  it('follows no link the data dir holds to something of root’s', () => {
    const { dataDir, outside } = setup();
    // A link named as a file root is told to hand over, and links inside a folder it walks.
    symlinkSync(path.join(outside, 'secret'), path.join(dataDir, 'telemetryd.db-wal'));
    mkdirSync(path.join(dataDir, 'snapshots'));
    symlinkSync(outside, path.join(dataDir, 'snapshots', 'dev_b'));
    symlinkSync(path.join(outside, 'secret'), path.join(dataDir, 'snapshots', 'x.jpg'));
    // A top-level link to a folder of root's.
    symlinkSync(outside, path.join(dataDir, 'cache'));
    giveToOwnerOf(dataDir, [path.join(dataDir, 'telemetryd.db-wal'), path.join(dataDir, 'snapshots'), path.join(dataDir, 'cache')]);
    expect(owner(outside)).toBe(0);
    expect(owner(path.join(outside, 'secret'))).toBe(0);
    expect(owner(path.join(dataDir, 'snapshots'))).toBe(SERVICE);
  });

  it('walks a top-level link to a folder the owner already has (snapshots on another disk)', () => {
    const { root, dataDir } = setup();
    const elsewhere = path.join(root, 'big-disk');
    mkdirSync(path.join(elsewhere, 'dev_c'), { recursive: true });
    writeFileSync(path.join(elsewhere, 'dev_c', '2.jpg'), 'x');
    chownSync(elsewhere, SERVICE, SERVICE);
    symlinkSync(elsewhere, path.join(dataDir, 'snapshots'));
    giveToOwnerOf(dataDir, [path.join(dataDir, 'snapshots')]);
    expect(owner(path.join(elsewhere, 'dev_c'))).toBe(SERVICE);
    expect(owner(path.join(elsewhere, 'dev_c', '2.jpg'))).toBe(SERVICE);
  });
});
