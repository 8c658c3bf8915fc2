import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tempDir } from './server.js';

/**
 * Whether this process may mount a tmpfs (Linux, as root: how CI runs), so tests of a small
 * or full file system can use a real one. Probed once by mounting and unmounting a tiny one.
 */
export function canMountTmpfs(): boolean {
  if (process.platform !== 'linux' || process.getuid?.() !== 0) return false;
  const probe = tempDir('telemetryd-mount-probe-');
  try {
    if (spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probe]).status !== 0) return false;
    spawnSync('umount', [probe]);
    return true;
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
}
