// Module hooks registered by map-cap.ts: `lmdb` resolves to the wrapper, except from the wrapper.
const WRAPPER = new URL('./map-cap-lmdb.js', import.meta.url).href;

interface ResolveContext {
  parentURL?: string;
}
type NextResolve = (specifier: string, context: ResolveContext) => Promise<{ url: string }>;

export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string; shortCircuit?: boolean }> {
  if (specifier === 'lmdb' && context.parentURL !== WRAPPER) return { url: WRAPPER, shortCircuit: true };
  return next(specifier, context);
}
