/** Raised when the server cannot be reached or stopped during a call. */
export class McpUnavailableError extends Error {}

/** Raised when an OAuth server refuses the user's credentials (none, expired beyond refresh, revoked). */
export class McpAuthorizationError extends Error {}

/** A per-user connection request that cannot be served, with a stable code for the HTTP answer. */
export class McpConnectError extends Error {
  readonly code: 'not_found' | 'service_unavailable' | 'bad_request' | 'upstream'

  constructor(code: McpConnectError['code'], message: string) {
    super(message)
    this.code = code
  }
}
