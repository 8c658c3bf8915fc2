import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';
import type { ServerConfig } from '../../config.js';
import { SHARED_VALUES } from '../../domain/cluster.js';
import { presentAccount } from '../../domain/presenters.js';
import { hashSecret, sameText } from '../../ids.js';
import type { MqttCertificate } from '../app.js';
import { clearSessionCookie, setSessionCookie } from '../dashboardSession.js';

export interface SetupState {
  /** The one-time first-run token; null once used (or when accounts existed at start). */
  token: string | null;
}

type Credentials = { email?: string; password?: string };

/** Sign-in, sign-out, first-run setup and password change (docs/dashboard.md), under /ui/api. */
export async function dashboardAuthRoutes(
  app: FastifyInstance,
  {
    services,
    config,
    setup,
    mqttCertificate,
  }: { services: Services; config: ServerConfig; setup: SetupState; mqttCertificate: () => MqttCertificate | null },
) {
  /**
   * What the dashboard needs to render: who is signed in, the CSRF token, where devices connect.
   * Signed out is `{"account": null}`, not a 401: every signed-out visit asks, and a browser
   * logs each error status as a console error.
   */
  app.get('/session', { config: { dashboardPublic: true } }, async (request) => {
    const resolved = request.dashboard;
    if (!resolved) return { account: null };
    const mqttHost = new URL(config.publicUrl).hostname;
    const tlsListener = mqttCertificate();
    return {
      account: presentAccount(resolved.account),
      csrf_token: resolved.session.csrfToken,
      public_url: config.publicUrl,
      mqtt: {
        host: mqttHost,
        port: tlsListener?.port ?? config.mqttPort ?? 8883,
        enabled: config.mqttPort !== null,
        // For the device snippets: the PEM devices must trust, and whether telemetryd made it.
        certificate_pem: tlsListener?.pem ?? null,
        self_signed: tlsListener?.selfSigned ?? null,
      },
      // Whether alert email can go out from this server (--smtp-url): the alert form's default.
      email: { enabled: config.smtpUrl !== null },
    };
  });

  app.post<{ Body: Credentials }>('/sign-in', { config: { dashboardPublic: true } }, async (request, reply) => {
    const { email, password } = request.body ?? {};
    const { sessionId, session } = await services.sessions.signIn(String(email ?? ''), String(password ?? ''), request.ip);
    setSessionCookie(request, reply, sessionId, config.publicUrl);
    return { csrf_token: session.csrfToken };
  });

  app.post('/sign-out', { config: { dashboardPublic: true } }, async (request, reply) => {
    if (request.dashboard) await services.sessions.signOut(request.dashboard.session);
    clearSessionCookie(request, reply, config.publicUrl);
    return { signed_out: true };
  });

  /** Whether the setup link in the address bar can still be used (the page asks first). */
  app.get<{ Querystring: { token?: string } }>('/setup', { config: { dashboardPublic: true } }, async (request) => {
    // Compared as hashes in constant time, like every secret (docs/reliability.md "Security").
    const valid =
      !!setup.token &&
      sameText(hashSecret(String(request.query.token ?? '')), hashSecret(setup.token)) &&
      (await services.accounts.count()) === 0;
    return { valid };
  });

  app.post<{ Body: Credentials & { token?: string } }>('/setup', { config: { dashboardPublic: true } }, async (request, reply) => {
    const { token, email, password } = request.body ?? {};
    const { sessionId, session } = await services.sessions.completeSetup(
      setup.token,
      String(token ?? ''),
      String(email ?? ''),
      String(password ?? ''),
    );
    setup.token = null; // works once (docs/operations.md, "First run")
    // The cluster's copy too (other nodes refuse it anyway: an account exists now).
    await services.cluster
      .forgetSharedValue(SHARED_VALUES.setupToken)
      .catch((err: unknown) => request.log.warn({ err }, 'forgetting the setup token failed'));
    setSessionCookie(request, reply, sessionId, config.publicUrl);
    return { csrf_token: session.csrfToken };
  });

  app.post<{ Body: { current_password?: string; new_password?: string } }>('/account/password', async (request) => {
    const { current_password, new_password } = request.body ?? {};
    await services.sessions.changePassword(request.dashboard!, String(current_password ?? ''), String(new_password ?? ''));
    return { changed: true };
  });
}
