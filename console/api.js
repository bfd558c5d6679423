// The HTTP API through plinth/client (the token is kept in this tab's sessionStorage only).
// `api.client` is the typed client; `get`/`post`/… are its `request` for the console's plain paths.
import { createClient, PlinthError } from '/console/client/index.js'

export { PlinthError as ApiError }

export class Api {
  constructor(token, { onUnauthorized } = {}) {
    this.token = token
    this.onUnauthorized = onUnauthorized
    // Same origin; streams open with single-use stream tickets (no token in any URL).
    this.client = createClient({ baseUrl: '', token })
  }

  async request(method, path, body, options = {}) {
    const client = options.token ? createClient({ baseUrl: '', token: options.token }) : this.client
    try {
      return (
        (await client.request(method, path, {
          ...(body !== undefined && { body }),
          ...(options.headers && { headers: options.headers }),
        })) ?? null
      )
    } catch (error) {
      // A wrong or revoked token: sign out once, with the reason (never a retry loop).
      if (error instanceof PlinthError && error.status === 401 && !options.token) this.onUnauthorized?.(error)
      throw error
    }
  }

  /** The client's calls and streams, with the same sign-out on a refused token. */
  async call(fn) {
    try {
      return await fn(this.client)
    } catch (error) {
      if (error instanceof PlinthError && error.status === 401) this.onUnauthorized?.(error)
      throw error
    }
  }

  get(path) {
    return this.request('GET', path)
  }
  post(path, body, options) {
    return this.request('POST', path, body ?? {}, options)
  }
  patch(path, body, options) {
    return this.request('PATCH', path, body, options)
  }
  delete(path) {
    return this.request('DELETE', path)
  }
}

export function query(params) {
  const search = new URLSearchParams()
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== null && value !== '') search.set(key, String(value))
  const text = search.toString()
  return text ? `?${text}` : ''
}
