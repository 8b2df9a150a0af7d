/**
 * Freezes a value and everything it holds, so it can be shared by every reader: the store's
 * cached records, a gateway's kept replay answers. Byte arrays cannot be frozen and are left as
 * they are.
 */
export function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value) || ArrayBuffer.isView(value)) return value;
  for (const member of Object.values(value)) deepFreeze(member);
  return Object.freeze(value);
}
