// The HTTP API with the bearer token (kept in this tab's sessionStorage only).
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || problem?.message || `HTTP ${status}`)
    this.status = status
    this.code = problem?.code ?? (status === 0 ? 'network' : `http_${status}`)
    this.problem = problem
  }
}

export class Api {
  constructor(token, { onUnauthorized } = {}) {
    this.token = token
    this.onUnauthorized = onUnauthorized
  }

  async request(method, path, body, options = {}) {
    const headers = { Authorization: `Bearer ${options.token ?? this.token}`, ...options.headers }
    let payload
    if (body instanceof FormData) payload = body
    else if (body !== undefined) {
      headers['Content-Type'] = 'application/json'
      payload = JSON.stringify(body)
    }
    let response
    try {
      response = await fetch(path, { method, headers, body: payload })
    } catch {
      throw new ApiError(0, { detail: 'the server cannot be reached' })
    }
    if (response.status === 204) return null
    const type = response.headers.get('content-type') ?? ''
    const data = type.includes('json') ? await response.json().catch(() => null) : await response.text()
    if (!response.ok) {
      const error = new ApiError(response.status, typeof data === 'object' ? data : { detail: String(data).slice(0, 200) })
      // A wrong or revoked token: sign out once, with the reason (never a retry loop).
      if (response.status === 401 && !options.token) this.onUnauthorized?.(error)
      throw error
    }
    return data
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
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== null && value !== '') search.set(key, String(value))
  const text = search.toString()
  return text ? `?${text}` : ''
}
