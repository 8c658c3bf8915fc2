import { chownSync, existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * Run as root (`sudo telemetryd …`) on a data dir that another user owns (the service's,
 * /var/lib/telemetryd), what a command creates there becomes that user's: root-owned files of
 * mode 0600 or folders of mode 0700 would stop the service from opening them. `paths` that
 * exist (folders with everything in them) get the owner of `reference`, unless that is root
 * too; not run as root, nothing changes.
 */
export function giveToOwnerOf(reference: string, paths: string[]): void {
  if (process.getuid?.() !== 0) return;
  const { uid, gid } = statSync(reference);
  if (uid === 0) return;
  const chownTree = (p: string) => {
    const st = statSync(p);
    if (st.uid !== uid || st.gid !== gid) chownSync(p, uid, gid);
    if (st.isDirectory()) for (const entry of readdirSync(p)) chownTree(path.join(p, entry));
  };
  for (const p of paths) if (existsSync(p)) chownTree(p);
}
