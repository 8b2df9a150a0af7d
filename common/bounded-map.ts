/**
 * A Map that forgets its oldest entries first once their weights add up to more than a budget:
 * weight 1 per entry bounds the count, a size in bytes or characters bounds the memory
 * (ARCHITECTURE property 7). Replacing a key makes it the newest.
 *
 * Eviction costs O(1). The obvious way, `map.keys().next()` and then `delete`, is not: V8 leaves a
 * deleted entry's slot in place until the table fills and is rebuilt, and an iterator steps over
 * every one of them, so once a cache of 20,000 entries is full each insertion paid about 8 µs
 * to find the oldest key. Here the keys also sit in a queue in insertion order, each with the
 * sequence number of its entry, so a key deleted or replaced since it was queued is skipped when
 * it comes up, and nothing else is scanned.
 */
export class BoundedMap<K, V> {
  private readonly map = new Map<K, { value: V; weight: number; seq: number }>();
  private queueKeys: K[] = [];
  private queueSeqs: number[] = [];
  private head = 0;
  private seq = 0;
  private weights = 0;

  constructor(private readonly budget: number) {}

  get size(): number {
    return this.map.size;
  }

  /** The weights of the entries held, at most the budget. */
  get weight(): number {
    return this.weights;
  }

  get(key: K): V | undefined {
    return this.map.get(key)?.value;
  }

  /**
   * Adds or replaces `key` as the newest entry, then drops the oldest ones until the weights fit
   * the budget. An entry heavier than the whole budget is not kept.
   */
  set(key: K, value: V, weight = 1): void {
    this.delete(key);
    if (weight > this.budget) return;
    const seq = ++this.seq;
    this.map.set(key, { value, weight, seq });
    this.queueKeys.push(key);
    this.queueSeqs.push(seq);
    this.weights += weight;
    while (this.weights > this.budget) this.dropOldest();
    this.compact();
  }

  delete(key: K): boolean {
    const entry = this.map.get(key);
    if (entry === undefined) return false;
    this.map.delete(key);
    this.weights -= entry.weight;
    return true;
  }

  /** The oldest entry still held, or undefined when empty. */
  oldest(): [K, V] | undefined {
    while (this.head < this.queueKeys.length) {
      const key = this.queueKeys[this.head]!;
      const entry = this.map.get(key);
      if (entry !== undefined && entry.seq === this.queueSeqs[this.head]) return [key, entry.value];
      this.head++;
    }
    return undefined;
  }

  /** Every entry, oldest first. */
  *entries(): IterableIterator<[K, V]> {
    for (const [key, entry] of this.map) yield [key, entry.value];
  }

  clear(): void {
    this.map.clear();
    this.queueKeys = [];
    this.queueSeqs = [];
    this.head = 0;
    this.weights = 0;
  }

  private dropOldest(): void {
    const oldest = this.oldest();
    if (oldest === undefined) return;
    this.delete(oldest[0]);
    this.head++;
  }

  /**
   * Keeps the queue near the size of the map: the consumed front is cut off once it is the
   * larger half, and when deletes have left more stale keys than live ones the queue is rebuilt
   * from the map, whose order is the queue's order. Each costs O(n) after n cheaper operations.
   */
  private compact(): void {
    const queued = this.queueKeys.length - this.head;
    if (queued > 2 * this.map.size + 1024) {
      this.queueKeys = [];
      this.queueSeqs = [];
      for (const [key, entry] of this.map) {
        this.queueKeys.push(key);
        this.queueSeqs.push(entry.seq);
      }
      this.head = 0;
    } else if (this.head > 1024 && this.head > queued) {
      this.queueKeys = this.queueKeys.slice(this.head);
      this.queueSeqs = this.queueSeqs.slice(this.head);
      this.head = 0;
    }
  }
}
