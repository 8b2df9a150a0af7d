// Every setting the service reads from its environment (CONTRACT §1), parsed and checked in one
// place so a bad value stops the process at start with a message naming the variable.

import { Buffer } from 'node:buffer';
import { LOG_LEVELS } from './log.js';

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  natsUrl: string | undefined;
  jwtSecret: string | undefined;
  maxBodyBytes: number;
  maxBatch: number;
  rateLimitPerSecond: number;
  rateLimitBurst: number;
  idempotencyTtlHours: number;
  operationRetentionHours: number;
  /** Latency of the stand-in payment processor that refunds go through. */
  refundProcessingMs: number;
  eventRetentionDays: number;
  webhookRetrySchedule: number[];
  webhookTimeoutMs: number;
  webhookDisableAfterHours: number;
  webhookAllowPrivateTargets: boolean;
  deprecationsFile: string | undefined;
  /** Operator plane (gRPC): port, or undefined when it is off (ADMIN_GRPC_PORT unset); 0 picks one. */
  adminGrpcPort: number | undefined;
  adminGrpcHost: string;
  /** Deadline for one bus request before the gateway answers 503 (ARCHITECTURE property 7). */
  busTimeoutMs: number;
  /** Most commands one key's mailbox may hold before the actor host refuses with 503. */
  mailboxLimit: number;
  /** Most MB of the LMDB file's pages mapped into an actor process before they are unmapped; 0: no limit. */
  storageMappedMb: number;
  storageReserveMb: number;
  logLevel: string;
  /** Cluster mode: this actor node's stable name and the partitions it serves. */
  nodeId: string | undefined;
  actorPartitions: string | undefined;
}

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

/**
 * A variable's value, or undefined when it is unset. Set but empty is refused: `PORT=` or a
 * template that left `ACTOR_PARTITIONS=` blank would otherwise start on the default, and for
 * ACTOR_PARTITIONS that default is every partition, owned twice beside another node's.
 */
function read(env: Env, name: string): string | undefined {
  const raw = env[name];
  if (raw === '') throw new ConfigError(`${name} is set but empty: give it a value, or unset it for the default`);
  return raw;
}

/** A switch: unset, '' or 0 is off, 1 is on. `true` or `yes` are refused rather than read as off. */
function flag(env: Env, name: string): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '' || raw === '0') return false;
  if (raw === '1') return true;
  throw new ConfigError(`${name} must be 1 (on) or 0 (off), got '${raw}'`);
}

/**
 * A listening address. An IPv6 literal may come in brackets, as it is written in a URL (RFC 3986
 * §3.2.2); the sockets want it bare, and originOf puts the brackets back.
 */
function address(env: Env, name: string): string {
  const raw = read(env, name) ?? '127.0.0.1';
  if (!raw.startsWith('[') && !raw.endsWith(']')) return raw;
  const bare = raw.slice(1, -1);
  if (!raw.startsWith('[') || !raw.endsWith(']') || !bare.includes(':')) throw new ConfigError(`${name}: brackets may only hold an IPv6 address, as in [::1], got '${raw}'`);
  return bare;
}

// RFC 7518 §3.2: an HS256 key must be at least as long as the hash output, 256 bits.
export const MIN_SECRET_BYTES = 32;

/** AUTH_JWT_SECRET, checked for length and never echoed: a short HS256 key can be guessed offline from one token. */
function jwtSecret(env: Env): string | undefined {
  const secret = read(env, 'AUTH_JWT_SECRET');
  if (secret === undefined) return undefined;
  const bytes = Buffer.byteLength(secret, 'utf8');
  if (bytes < MIN_SECRET_BYTES) throw new ConfigError(`AUTH_JWT_SECRET must be at least ${MIN_SECRET_BYTES} bytes (256 bits, RFC 7518 §3.2), got ${bytes}`);
  return secret;
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = read(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got '${raw}'`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function loadConfig(env: Env = process.env): Config {
  const schedule = (read(env, 'WEBHOOK_RETRY_SCHEDULE') ?? '5,30,120,600,3600,21600,43200,86400,86400')
    .split(',')
    .map((s) => s.trim());
  if (schedule.some((s) => !/^\d+$/.test(s))) {
    throw new ConfigError('WEBHOOK_RETRY_SCHEDULE must be comma-separated whole seconds');
  }
  // An event must outlive its deliveries' retries: a retry reads the event it delivers.
  const eventRetentionDays = int(env, 'EVENT_RETENTION_DAYS', 30, 1, 3650);
  const retrying = schedule.map(Number).reduce((a, b) => a + b, 0);
  if (eventRetentionDays * 86_400 < retrying) {
    throw new ConfigError(`EVENT_RETENTION_DAYS (${eventRetentionDays}) must cover WEBHOOK_RETRY_SCHEDULE, which retries for ${(retrying / 86_400).toFixed(1)} days`);
  }
  const logLevel = read(env, 'LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, got '${logLevel}'`);
  return {
    host: address(env, 'HOST'),
    port: int(env, 'PORT', 8080, 0, 65535),
    dataDir: read(env, 'DATA_DIR') ?? './data',
    natsUrl: read(env, 'NATS_URL'),
    jwtSecret: jwtSecret(env),
    maxBodyBytes: int(env, 'MAX_BODY_BYTES', 1048576, 1024, 64 * 1048576),
    maxBatch: int(env, 'MAX_BATCH', 100, 1, 10000),
    rateLimitPerSecond: int(env, 'RATE_LIMIT_PER_SECOND', 1000, 1, 10_000_000),
    rateLimitBurst: int(env, 'RATE_LIMIT_BURST', 2000, 1, 10_000_000),
    idempotencyTtlHours: int(env, 'IDEMPOTENCY_TTL_HOURS', 24, 1, 24 * 365),
    operationRetentionHours: int(env, 'OPERATION_RETENTION_HOURS', 24, 1, 24 * 365),
    refundProcessingMs: int(env, 'REFUND_PROCESSING_MS', 500, 0, 600_000),
    eventRetentionDays,
    webhookRetrySchedule: schedule.map(Number),
    webhookTimeoutMs: int(env, 'WEBHOOK_TIMEOUT_MS', 10000, 100, 120000),
    webhookDisableAfterHours: int(env, 'WEBHOOK_DISABLE_AFTER_HOURS', 120, 1, 24 * 365),
    webhookAllowPrivateTargets: flag(env, 'WEBHOOK_ALLOW_PRIVATE_TARGETS'),
    deprecationsFile: read(env, 'DEPRECATIONS_FILE'),
    adminGrpcPort: env.ADMIN_GRPC_PORT === undefined ? undefined : int(env, 'ADMIN_GRPC_PORT', 0, 0, 65535),
    adminGrpcHost: address(env, 'ADMIN_GRPC_HOST'),
    busTimeoutMs: int(env, 'BUS_TIMEOUT_MS', 5000, 10, 120000),
    mailboxLimit: int(env, 'MAILBOX_LIMIT', 1000, 1, 1_000_000),
    storageMappedMb: int(env, 'STORAGE_MAPPED_MB', 32, 0, 1_048_576),
    storageReserveMb: int(env, 'STORAGE_RESERVE_MB', 64, 0, 1_048_576),
    logLevel,
    nodeId: read(env, 'NODE_ID'),
    actorPartitions: read(env, 'ACTOR_PARTITIONS'),
  };
}

/**
 * The `host:port` of a server listening on `host` and `port`. An IPv6 address goes in brackets
 * (RFC 3986 §3.2.2), once, whether HOST had them or not, and a zone id's `%` is written `%25`
 * (RFC 6874 §2): `fe80::1%eth0` is `[fe80::1%25eth0]:port`.
 */
export function authorityOf(host: string, port: number): string {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  return `${bare.includes(':') ? `[${bare.replace('%', '%25')}]` : bare}:${port}`;
}

/** The http origin of a server listening on `host` and `port`: `http://` and its authorityOf. */
export function originOf(host: string, port: number): string {
  return `http://${authorityOf(host, port)}`;
}
