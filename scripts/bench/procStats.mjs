// What the benchmark reads of processes from /proc (Linux): CPU time, RSS, and which other
// processes are busy, so a run can tell whether the machine was quiet.
import { readdirSync, readFileSync } from 'node:fs';

// USER_HZ: clock ticks per second of /proc/<pid>/stat times; 100 on every Linux this runs on.
const TICKS_PER_S = 100;

/** CPU seconds (user + system) a process has used so far; null when it is gone. */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name (which may hold spaces): utime is field 14.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_S;
  } catch {
    return null;
  }
}

function statFields(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * CPU seconds of a process tree one level deep, as PostgreSQL runs (a postmaster forking one
 * backend per connection and its helpers): the parent's own time, the time of children it
 * has already reaped (cutime, cstime), and that of its living children. Null when it is gone.
 */
export function treeCpuSeconds(parentPid) {
  const parent = statFields(parentPid);
  if (!parent) return null;
  let ticks = Number(parent[11]) + Number(parent[12]) + Number(parent[13]) + Number(parent[14]);
  for (const pid of pids()) {
    const f = statFields(pid);
    // Field 4 of stat (index 1 after the command name) is the parent pid.
    if (f && f[1] === String(parentPid)) ticks += Number(f[11]) + Number(f[12]);
  }
  return ticks / TICKS_PER_S;
}

export function rssMb(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) / 1024;
}

function commandOf(pid) {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ').slice(0, 80);
  } catch {
    return '?';
  }
}

const pids = () => readdirSync('/proc').filter((d) => /^\d+$/.test(d));

/**
 * Processes other than `exclude` (pids) that used more than 5 % of a core over `ms`: what
 * shares the machine with the benchmark. Returns [{pid, cpu_pct, command}].
 */
export async function busyProcesses(ms = 1000, exclude = new Set([String(process.pid)])) {
  const before = new Map(pids().map((p) => [p, cpuSeconds(p)]));
  await new Promise((r) => setTimeout(r, ms));
  const busy = [];
  for (const [pid, t0] of before) {
    if (exclude.has(pid) || t0 == null) continue;
    const t1 = cpuSeconds(pid);
    if (t1 == null) continue;
    const pct = ((t1 - t0) / (ms / 1000)) * 100;
    if (pct > 5) busy.push({ pid: Number(pid), cpu_pct: Math.round(pct), command: commandOf(pid) });
  }
  return busy.sort((a, b) => b.cpu_pct - a.cpu_pct);
}
