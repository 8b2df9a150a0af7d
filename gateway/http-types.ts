// The plain request and response that everything behind the uWS adapter works with, so the
// pipeline is a pure function tests can call without a socket (STYLE 2).

/**
 * The request headers anything behind the adapter reads, by their lower-cased names. The adapter
 * keeps these and no others (gateway/http.ts), so a header read anywhere must be named here.
 */
export interface RequestHeaders {
  authorization?: string;
  accept?: string;
  'accept-encoding'?: string;
  'accept-language'?: string;
  'content-type'?: string;
  'content-length'?: string;
  'content-encoding'?: string;
  'if-match'?: string;
  'if-none-match'?: string;
  'idempotency-key'?: string;
  traceparent?: string;
}

export interface GatewayRequest {
  method: string;
  /** Path without the query string, as received (not decoded). */
  path: string;
  /** Raw query string without the leading '?'. */
  query: string;
  /** The headers the gateway reads; repeated lines joined with ', '. */
  headers: RequestHeaders;
  body: Buffer | undefined;
  /**
   * The peer's address as uWS writes it: dotted IPv4, or IPv6 in full (8 groups of 4 hex
   * digits). Behind a proxy or balancer this is the proxy's address. Empty when the adapter
   * skipped reading it: the request bears a token the gateway has verified before, so it is
   * charged to that principal (Gateway.needsAddress).
   */
  remoteAddress: string;
}

export interface GatewayResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer | string | undefined;
}
