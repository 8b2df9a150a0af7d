// Webhook settings from the configuration (CONTRACT §1), for whichever process hosts actors:
// `npm start` in embedded mode, or an actor node in cluster mode.

import type { Bus } from '../common/bus.js';
import type { Config } from '../common/config.js';
import type { Logger } from '../common/log.js';
import type { DispatchOptions } from '../actors/dispatcher.js';
import type { Resolver } from '../actors/webhook-target.js';

/** Seams for tests: DNS answers of their choosing, and a test CA the dispatcher trusts. */
export interface WebhookHooks {
  resolver?: Resolver;
  ca?: string | Buffer;
}

/** Says at start that the SSRF guard is off (every process that registers or sends webhooks). */
export function warnIfPrivateTargets(config: Config, log: Logger): void {
  if (config.webhookAllowPrivateTargets) {
    log.warn('WEBHOOK_ALLOW_PRIVATE_TARGETS=1: webhooks may target http:// and private or loopback addresses. Development and tests only.');
  }
}

export function dispatchOptions(config: Config, log: Logger, hooks: WebhookHooks = {}, remote?: Bus): { eventRetentionMs: number; webhooks: DispatchOptions } {
  warnIfPrivateTargets(config, log);
  return {
    eventRetentionMs: config.eventRetentionDays * 24 * 3600_000,
    webhooks: {
      retrySchedule: config.webhookRetrySchedule,
      timeoutMs: config.webhookTimeoutMs,
      disableAfterMs: config.webhookDisableAfterHours * 3600_000,
      allowPrivateTargets: config.webhookAllowPrivateTargets,
      resolver: hooks.resolver,
      ca: hooks.ca,
      remote,
    },
  };
}
