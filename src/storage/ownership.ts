import { lchownSync, lstatSync, readdirSync, type Stats, statSync } from 'node:fs';
import path from 'node:path';

/**
 * Run as root (`sudo telemetryd …`) on a data dir that another user owns (the service's,
 * /var/lib/telemetryd), what a command creates there becomes that user's: root-owned files of
 * mode 0600 or folders of mode 0700 would stop the service from opening them. `paths` that
 * exist (folders with everything in them) get the owner of `reference`, unless that is root
 * too; not run as root, nothing changes.
 *
 * Symbolic links are never followed below `paths`, and changed with lchown: whoever owns the
 * data dir can plant a link in it, and root following it would hand them the link's target
 * (`snapshots/x -> /etc`). A path of `paths` that is itself a link (snapshots kept on another
 * disk) is followed only to a folder the data dir's owner already owns.
 */
export function giveToOwnerOf(reference: string, paths: string[]): void {
  if (process.getuid?.() !== 0) return;
  const { uid, gid } = statSync(reference);
  if (uid === 0) return;
  const chownTree = (p: string, st: Stats) => {
    if (st.isSymbolicLink()) return;
    if (st.uid !== uid || st.gid !== gid) lchownSync(p, uid, gid);
    if (st.isDirectory()) chownEntries(p);
  };
  const chownEntries = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const p = path.join(dir, entry);
      chownTree(p, lstatSync(p));
    }
  };
  for (const p of paths) {
    const st = lstatIfAny(p);
    if (st === null) continue;
    if (!st.isSymbolicLink()) chownTree(p, st);
    else {
      const target = statIfAny(p);
      if (target?.isDirectory() && target.uid === uid) chownEntries(p);
    }
  }
}

function lstatIfAny(p: string): Stats | null {
  return lstatSync(p, { throwIfNoEntry: false }) ?? null;
}

function statIfAny(p: string): Stats | null {
  try {
    return statSync(p);
  } catch {
    return null; // a dangling link or a loop
  }
}
