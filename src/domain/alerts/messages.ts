/**
 * What each alert action sends, as pure functions of the alert, its device and the event, so
 * the formats are testable without I/O and documented in one place (docs/alerts.md
 * "Message formats"). Texts are short: who (alert, device name and id), what (the value or
 * the silence), how bad (severity), when, and a link to the device's dashboard page.
 */
import { iso } from '../../time.js';
import { presentAlertEvent, presentReading } from '../presenters.js';
import type { Alert, AlertEvent, Device, StoredReading } from '../types.js';

export type NoticeType = 'triggered' | 'resolved';

export interface Notice {
  type: NoticeType;
  alert: Alert;
  device: Device;
  event: AlertEvent;
  /** The reading that met the condition or resolved it; null for a no_data trigger. */
  reading: StoredReading | null;
  /** The value at the field of a resolving threshold reading. */
  resolvedValue?: number | null;
  /** The server's public base URL (`--public-url`), without a trailing slash. */
  publicUrl: string;
}

/** The dashboard routes its pages by the URL fragment (web/src/main.ts). */
const deviceLink = (publicUrl: string, deviceId: string) => `${publicUrl.replace(/\/+$/, '')}/#/devices/${deviceId}`;

/** The seconds a no_data event's silence had lasted when it was resolved at `at`. */
const silenceSeconds = (event: AlertEvent, at: number) =>
  Math.max(event.conditionValue, Math.floor((at - (event.triggeredAt - event.conditionValue * 1000)) / 1000));

const silenceOf = (alert: Alert) => (alert.field === '*' ? 'no reading' : `no reading with ${alert.field}`);

/** "Freezer too warm: Kitchen freezer (dev_…)": the title line of every format. */
function noticeTitle(n: Notice): string {
  return `${n.type === 'resolved' ? 'Resolved: ' : ''}${n.alert.name}: ${n.device.name} (${n.device.id})`;
}

/** One sentence of what happened, without the title. */
function noticeSummary(n: Notice): string {
  const { alert, event } = n;
  if (n.type === 'triggered') {
    return alert.kind === 'no_data'
      ? `${silenceOf(alert)} for ${event.conditionValue} s (limit ${alert.value} s), since ${iso(event.triggeredAt - event.conditionValue * 1000)}`
      : `${alert.field} = ${event.conditionValue} (condition ${alert.operator} ${alert.value})`;
  }
  const at = event.resolvedAt ?? event.triggeredAt;
  if (alert.kind === 'no_data') return `sending again after ${silenceSeconds(event, at)} s of silence`;
  const clear = alert.clearValue !== null ? `, clear at ${alert.clearValue}` : '';
  return `${alert.field} = ${n.resolvedValue ?? '?'} (condition ${alert.operator} ${alert.value}${clear})`;
}

const noticeTime = (n: Notice) => iso(n.type === 'resolved' ? (n.event.resolvedAt ?? n.event.triggeredAt) : n.event.triggeredAt)!;

/** The chat text (slack, discord, ntfy body): two or three short lines. */
function chatText(n: Notice): string {
  return [`[${n.event.severity}] ${noticeTitle(n)}`, `${noticeSummary(n)} at ${noticeTime(n)}`, deviceLink(n.publicUrl, n.device.id)].join(
    '\n',
  );
}

/** Slack reads `&`, `<` and `>` as markup: names are escaped so they show as typed. */
const slackEscape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

export const slackBody = (n: Notice) => JSON.stringify({ text: slackEscape(chatText(n)) });
export const discordBody = (n: Notice) => JSON.stringify({ content: chatText(n) });

const NTFY_PRIORITY: Record<string, string> = { critical: '5', warning: '4', info: '3' };
const NTFY_TAG: Record<string, string> = { critical: 'rotating_light', warning: 'warning', info: 'information_source' };

/**
 * HTTP header values are Latin-1 at best: a non-ASCII title (a device named "Kühlraum") goes
 * as an RFC 2047 encoded word, which ntfy decodes.
 */
export function headerText(text: string): string {
  const flat = text.replace(/[\r\n]+/g, ' ');
  return /^[\x20-\x7e]*$/.test(flat) ? flat : `=?UTF-8?B?${Buffer.from(flat, 'utf8').toString('base64')}?=`;
}

/** ntfy: the text as the body; title, tags (emoji shortcodes), priority and a click link as headers. */
export function ntfyRequest(n: Notice): { body: string; headers: Record<string, string> } {
  const tags = n.type === 'resolved' ? ['white_check_mark', n.event.severity] : [NTFY_TAG[n.event.severity] ?? 'bell', n.event.severity];
  return {
    body: `${noticeSummary(n)} at ${noticeTime(n)}`,
    headers: {
      'content-type': 'text/plain; charset=utf-8',
      title: headerText(`[${n.event.severity}] ${noticeTitle(n)}`),
      tags: tags.join(','),
      priority: NTFY_PRIORITY[n.event.severity] ?? '3',
      click: deviceLink(n.publicUrl, n.device.id),
    },
  };
}

/** The webhook body (docs/alerts.md "webhook"); `reading` is null for a no_data trigger. */
export function webhookBody(n: Notice): string {
  return JSON.stringify({
    type: n.type,
    event: presentAlertEvent(n.event),
    alert: { id: n.alert.id, name: n.alert.name, device_id: n.alert.deviceId },
    reading: n.reading ? presentReading(n.reading) : null,
  });
}

export function alertEmail(n: Notice) {
  const { alert, device, event } = n;
  const condition =
    alert.kind === 'no_data' ? `${silenceOf(alert)} for ${alert.value} s` : `${alert.field} ${alert.operator} ${alert.value}`;
  if (n.type === 'resolved') {
    return {
      subject: `[telemetryd] resolved: alert "${alert.name}" on ${device.name}`,
      text: [
        `Alert "${alert.name}" (${alert.id}) on device "${device.name}" (${device.id}) is resolved: ${noticeSummary(n)}.`,
        '',
        `Condition: ${condition}`,
        `Severity: ${event.severity}`,
        `Triggered at: ${iso(event.triggeredAt)}`,
        `Resolved at: ${noticeTime(n)}`,
        `Event: ${event.id}`,
        `Device: ${deviceLink(n.publicUrl, device.id)}`,
      ].join('\n'),
    };
  }
  const what = alert.kind === 'no_data' ? `silent for ${event.conditionValue} s` : `${alert.field} = ${event.conditionValue}`;
  return {
    subject: `[telemetryd] ${event.severity}: alert "${alert.name}" on ${device.name} (${what})`,
    text: [
      `Alert "${alert.name}" (${alert.id}) was triggered on device "${device.name}" (${device.id}).`,
      '',
      `Condition: ${condition}`,
      alert.kind === 'no_data' ? `Silence: ${event.conditionValue} s` : `Value: ${event.conditionValue}`,
      `Severity: ${event.severity}`,
      `Triggered at: ${iso(event.triggeredAt)}`,
      `Event: ${event.id}`,
      `Device: ${deviceLink(n.publicUrl, device.id)}`,
      '',
      alert.kind === 'no_data'
        ? 'It triggers once per silence; the next reading resolves it.'
        : alert.cooldown > 0
          ? `Further matches within ${alert.cooldown} s of this trigger record nothing.`
          : 'Every matching reading triggers this alert (cooldown 0).',
    ].join('\n'),
  };
}
