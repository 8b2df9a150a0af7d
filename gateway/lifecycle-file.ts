// DEPRECATIONS_FILE: read at start (a bad file stops the process, naming the entry and field;
// an entry answering 410 without a successor is taken with a warning),
// polled for changes afterwards (a bad new file is refused with a log line and the previous
// entries stay), and rewritten atomically when the operator plane changes an entry, so every
// other gateway watching the same file picks the change up.

import { readFileSync, unwatchFile, watchFile, writeFileSync, existsSync, statSync, unlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomUUID } from 'node:crypto';
import { basename, dirname, join } from 'node:path';
import { replaceFile } from '../common/atomic-file.js';
import type { Logger } from '../common/log.js';
import { LifecycleError, type LifecycleEntry, type LifecycleRegistry } from './lifecycle.js';

/** A lock file older than this was left by a gateway that died holding it. */
const STALE_LOCK_MS = 10_000;

export class LifecycleFile {
  private lastText: string | undefined;
  private watching = false;

  constructor(
    readonly path: string,
    private readonly registry: LifecycleRegistry,
    private readonly log: Logger,
  ) {}

  /** Loads the file into the registry; throws a LifecycleError naming the file, entry and field. */
  load(): void {
    if (!existsSync(this.path)) throw new LifecycleError(`DEPRECATIONS_FILE ${this.path} does not exist (write [] into it for no entries)`);
    const text = readFileSync(this.path, 'utf8');
    this.apply(text);
  }

  /** Polls the file (a rename replaces the inode, which fs.watch would lose) and reloads on change. */
  watch(intervalMs = 1000): void {
    if (this.watching) return;
    this.watching = true;
    watchFile(this.path, { interval: intervalMs, persistent: false }, () => this.reload());
  }

  /** Re-reads the file; a refused file leaves the registry as it was. Returns whether it changed. */
  reload(): boolean {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (err) {
      this.log.error({ file: this.path, err: (err as Error).message }, 'lifecycle file unreadable; keeping the previous entries');
      return false;
    }
    if (text === this.lastText) return false;
    try {
      this.apply(text);
      this.log.info({ file: this.path, entries: this.registry.entries().length }, 'lifecycle entries reloaded');
      return true;
    } catch (err) {
      this.log.error({ file: this.path, err: (err as Error).message }, 'lifecycle file refused; keeping the previous entries');
      // Not remembered: fixing the file back to the same text as before is still a change to load.
      return false;
    }
  }

  /** Writes the entries beside the file and renames over it: readers see the old or the new file, never half. */
  write(entries: LifecycleEntry[]): void {
    const text = `${JSON.stringify(entries, null, 2)}\n`;
    replaceFile(this.path, text, join(dirname(this.path), `.${basename(this.path)}.${process.pid}.tmp`));
    this.lastText = text;
  }

  /**
   * Takes the lock file beside DEPRECATIONS_FILE, so one gateway at a time reads, changes and
   * writes it: a change made through another gateway a moment before is read, not overwritten.
   * Resolves to its release; throws when another holds it past `timeoutMs`. The file holds a
   * token of this holder: a release removes only its own lock.
   */
  async lock(timeoutMs = 5000): Promise<() => void> {
    const lockPath = `${this.path}.lock`;
    const token = `${process.pid}-${randomUUID()}`;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        writeFileSync(lockPath, token, { flag: 'wx' });
        return () => {
          try {
            if (readFileSync(lockPath, 'utf8') === token) unlinkSync(lockPath);
          } catch {
            // Gone already (taken as stale by another gateway): nothing to release.
          }
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      breakIfStale(lockPath);
      if (Date.now() >= deadline) throw new Error(`${lockPath} is held by another gateway`);
      await sleep(20);
    }
  }

  close(): void {
    if (this.watching) unwatchFile(this.path);
    this.watching = false;
  }

  private apply(text: string): void {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      throw new LifecycleError(`DEPRECATIONS_FILE ${this.path} is not valid JSON: ${(err as Error).message}`);
    }
    let unnamed: string[];
    try {
      unnamed = this.registry.replace(raw);
    } catch (err) {
      if (err instanceof LifecycleError) throw new LifecycleError(`DEPRECATIONS_FILE ${this.path}: ${err.message}`);
      throw err;
    }
    this.lastText = text;
    // Taken, not refused: the operator plane of earlier releases wrote such entries, and a file
    // the previous release ran with must not stop this one. Their 410s name no successor.
    if (unnamed.length > 0) this.log.warn({ file: this.path, entries: unnamed }, 'lifecycle entries answer 410 without naming a successor; give each a successor');
  }
}

/**
 * Removes a lock older than STALE_LOCK_MS (its gateway died holding it). One breaker at a time,
 * through a second exclusive file, and only the very lock seen stale (same inode and time): a
 * breaker that decided late cannot remove a lock taken meanwhile.
 */
function breakIfStale(lockPath: string): void {
  let seen;
  try {
    seen = statSync(lockPath);
  } catch {
    return; // released meanwhile
  }
  if (Date.now() - seen.mtimeMs <= STALE_LOCK_MS) return;
  const breaker = `${lockPath}.break`;
  try {
    writeFileSync(breaker, '', { flag: 'wx' });
  } catch {
    // Another breaker is at it, or died at it (then its file goes once stale itself).
    try {
      if (Date.now() - statSync(breaker).mtimeMs > STALE_LOCK_MS) unlinkSync(breaker);
    } catch {
      // Gone meanwhile.
    }
    return;
  }
  try {
    const now = statSync(lockPath);
    if (now.ino === seen.ino && now.mtimeMs === seen.mtimeMs) unlinkSync(lockPath);
  } catch {
    // Released meanwhile.
  } finally {
    unlinkSync(breaker);
  }
}
