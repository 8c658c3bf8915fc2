import { existsSync, mkdirSync, statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';

const alreadyThere = (err: unknown) => (err as NodeJS.ErrnoException).code === 'EEXIST';

/**
 * `mkdir -p`, one level at a time, with `mode` for each folder it makes; like it, a file in
 * the way is EEXIST. Node's recursive mkdir retries for ever where a file system answers
 * ENOENT for a folder it will never make (under /proc): a command given such a path would
 * hang instead of failing with that error.
 */
export function makeDirs(dir: string, mode: number): void {
  const missing: string[] = [];
  let at = path.resolve(dir);
  while (!existsSync(at)) {
    missing.push(at);
    if (path.dirname(at) === at) break;
    at = path.dirname(at);
  }
  if (missing.length === 0) {
    if (!statSync(at).isDirectory()) mkdirSync(at, { mode });
    return;
  }
  for (const level of missing.reverse()) {
    try {
      mkdirSync(level, { mode });
    } catch (err) {
      if (!alreadyThere(err)) throw err;
      // Made meanwhile by another process, or a name that only looked missing: a dangling
      // symlink or a loop, which stat reports as ENOENT or ELOOP, as Node's mkdir does.
      if (!statSync(level).isDirectory()) throw err;
    }
  }
}

/**
 * makeDirs for a request that writes a file: the common case, the folder already there, is
 * one stat off the event loop; only a folder still to make (a device's first snapshot) is
 * made by makeDirs, a few system calls.
 */
export async function makeDirsAsync(dir: string, mode: number): Promise<void> {
  const isFolder = await stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!isFolder) makeDirs(dir, mode);
}
