// A two-method router (add, match) over path templates like /v1/orders/{orderId}. Static
// segments win over parameters, so /v1/orders/batch is never read as an order id.

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

interface Node<R> {
  /**
   * Static segments by their length: a request's segment is compared in place with the few of
   * its length, so matching makes no substring and hashes no string for a static segment, and
   * an id (a parameter) is passed over without a lookup when no static has its length.
   */
  byLength: ([string, Node<R>][] | undefined)[];
  param: { name: string; node: Node<R> } | undefined;
  handlers: Map<string, R>;
  template: string | undefined;
}

export type Match<R> =
  | { kind: 'found'; route: R; params: Record<string, string>; template: string }
  | { kind: 'method-not-allowed'; allow: string[] }
  | { kind: 'not-found' };

function node<R>(): Node<R> {
  return { byLength: [], param: undefined, handlers: new Map(), template: undefined };
}

export class Router<R> {
  private readonly root: Node<R> = node();

  add(method: Method, template: string, route: R): void {
    let at = this.root;
    for (const seg of template.split('/').filter(Boolean)) {
      const m = /^\{(\w+)\}$/.exec(seg);
      if (m) {
        const name = m[1]!;
        if (at.param && at.param.name !== name) throw new Error(`conflicting parameter names at ${template}`);
        at.param ??= { name, node: node() };
        at = at.param.node;
      } else {
        const sameLength = (at.byLength[seg.length] ??= []);
        let next = sameLength.find(([s]) => s === seg)?.[1];
        if (!next) sameLength.push([seg, (next = node())]);
        at = next;
      }
    }
    if (at.handlers.has(method)) throw new Error(`duplicate route ${method} ${template}`);
    at.handlers.set(method, route);
    at.template = template;
  }

  match(method: string, path: string): Match<R> {
    const params: Record<string, string> = {};
    let at: Node<R> | undefined = this.root;
    // Only origin-form paths (RFC 9112 §3.2.1); '/' is the root itself, not root + ''.
    if (!path.startsWith('/')) return { kind: 'not-found' };
    // decodeURIComponent changes only %XX escapes: without a '%' in the path each parameter is
    // its segment as it stands, and an id, the usual parameter, is read without the call.
    const escaped = path.includes('%');
    // Segment by segment after the leading '/', without an array of them. A trailing slash
    // names a different resource: its empty last segment matches nothing.
    for (let start = 1; path !== '/' && start <= path.length && at; ) {
      let end = path.indexOf('/', start);
      if (end === -1) end = path.length;
      if (end === start) return { kind: 'not-found' };
      let next: Node<R> | undefined;
      const sameLength = at.byLength[end - start];
      if (sameLength !== undefined) {
        for (const [seg, n] of sameLength) {
          if (path.startsWith(seg, start)) {
            next = n;
            break;
          }
        }
      }
      if (next) {
        at = next;
      } else if (at.param) {
        let value = path.slice(start, end);
        if (escaped) {
          try {
            value = decodeURIComponent(value);
          } catch {
            return { kind: 'not-found' };
          }
        }
        params[at.param.name] = value;
        at = at.param.node;
      } else {
        at = undefined;
      }
      start = end + 1;
    }
    if (!at || at.handlers.size === 0 || !at.template) return { kind: 'not-found' };
    const route = at.handlers.get(method === 'HEAD' ? 'GET' : method);
    if (route) return { kind: 'found', route, params, template: at.template };
    const allow = [...at.handlers.keys()];
    if (allow.includes('GET')) allow.push('HEAD');
    return { kind: 'method-not-allowed', allow };
  }
}
