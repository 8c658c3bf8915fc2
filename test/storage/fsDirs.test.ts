import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeDirs, makeDirsAsync } from '../../src/fsDirs.js';

/** makeDirs against what `mkdir -p` (Node's recursive mkdirSync) does, sync and async alike. */
describe('makeDirs', () => {
  const roots: string[] = [];
  afterEach(() => {
    for (const r of roots.splice(0)) rmSync(r, { recursive: true, force: true });
  });
  const root = () => {
    const r = mkdtempSync(path.join(tmpdir(), 'telemetryd-dirs-'));
    roots.push(r);
    return r;
  };
  const variants = [
    ['sync', async (dir: string, mode: number) => makeDirs(dir, mode)],
    ['async', makeDirsAsync],
  ] as const;

  for (const [name, make] of variants) {
    it(`${name}: makes every missing level with the mode, and accepts a folder that is there`, async () => {
      const r = root();
      const deep = path.join(r, 'a', 'b', 'c');
      await make(deep, 0o700);
      for (const level of ['a', 'a/b', 'a/b/c']) {
        const st = statSync(path.join(r, level));
        expect(st.isDirectory(), level).toBe(true);
        expect(st.mode & 0o777, level).toBe(0o700);
      }
      await make(deep, 0o700);
      // Through a symlink to a folder, as the OS resolves it.
      symlinkSync(path.join(r, 'a'), path.join(r, 'link'));
      await make(path.join(r, 'link', 'b', 'd'), 0o700);
      expect(statSync(path.join(r, 'a', 'b', 'd')).isDirectory()).toBe(true);
    });

    it(`${name}: fails as mkdir -p does on a file in the way, a dangling symlink and a loop`, async () => {
      const r = root();
      writeFileSync(path.join(r, 'file'), '');
      await expect(make(path.join(r, 'file'), 0o700)).rejects.toMatchObject({ code: 'EEXIST' });
      await expect(make(path.join(r, 'file', 'below'), 0o700)).rejects.toMatchObject({ code: 'ENOTDIR' });
      symlinkSync(path.join(r, 'nowhere'), path.join(r, 'dangling'));
      await expect(make(path.join(r, 'dangling'), 0o700)).rejects.toMatchObject({ code: 'ENOENT' });
      await expect(make(path.join(r, 'dangling', 'below'), 0o700)).rejects.toMatchObject({ code: 'ENOENT' });
      symlinkSync(path.join(r, 'loop'), path.join(r, 'loop'));
      await expect(make(path.join(r, 'loop', 'below'), 0o700)).rejects.toMatchObject({ code: 'ELOOP' });
      // Nothing was made through them.
      mkdirSync(path.join(r, 'ok'));
      expect(statSync(path.join(r, 'ok')).isDirectory()).toBe(true);
    });

    // Node's own recursive mkdir retries for ever there (procfs answers ENOENT).
    it.skipIf(process.platform !== 'linux')(`${name}: fails at once under /proc instead of retrying for ever`, async () => {
      await expect(make(`/proc/telemetryd-${process.pid}/x`, 0o700)).rejects.toMatchObject({ code: 'ENOENT' });
    });
  }
});
