import type { FastifyInstance, FastifyRequest } from 'fastify'
import { HttpProblem } from './problem.js'

/** JSON nested deeper than this is refused before it is parsed. */
export const maxJsonDepth = 64

const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Why a string cannot be stored or compared safely (Postgres text rejects NUL; lone surrogates are not UTF-8). */
export function stringProblem(value: string): string | null {
  if (value.includes('\u0000')) return 'must not contain NUL characters'
  if (loneSurrogate.test(value)) return 'must be well-formed Unicode (no lone surrogates)'
  return null
}

/** The deepest nesting of arrays and objects in a JSON text, scanned without parsing it. */
export function jsonDepth(text: string, limit: number): number {
  let depth = 0
  let deepest = 0
  let inString = false
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index)
    if (inString) {
      if (code === 92)
        index++ // backslash: skip the escaped character
      else if (code === 34) inString = false
      continue
    }
    if (code === 34) inString = true
    else if (code === 91 || code === 123) {
      depth++
      if (depth > deepest) {
        deepest = depth
        if (deepest > limit) return deepest
      }
    } else if (code === 93 || code === 125) depth--
  }
  return deepest
}

/**
 * The first value of a parsed document a client may not send: a string (or key) with NUL or a lone
 * surrogate, or a number that is not finite (`1e309` parses to Infinity). Walked iteratively, so
 * no input can exhaust the stack.
 */
export function findHostileValue(root: unknown, rootPath: string): { path: string; message: string } | null {
  const stack: Array<[unknown, string]> = [[root, rootPath]]
  while (stack.length > 0) {
    const [value, path] = stack.pop()!
    if (typeof value === 'string') {
      const problem = stringProblem(value)
      if (problem) return { path, message: problem }
    } else if (typeof value === 'number') {
      if (!Number.isFinite(value)) return { path, message: 'must be a finite number' }
    } else if (Array.isArray(value)) {
      for (let index = value.length - 1; index >= 0; index--) stack.push([value[index], `${path}.${index}`])
    } else if (value !== null && typeof value === 'object') {
      for (const [key, child] of Object.entries(value)) {
        const keyProblem = stringProblem(key)
        if (keyProblem) return { path: `${path}.${safeKey(key)}`, message: `key ${keyProblem}` }
        stack.push([child, `${path}.${key}`])
      }
    }
  }
  return null
}

function safeKey(key: string): string {
  // eslint-disable-next-line no-control-regex -- NUL is exactly what is replaced
  return key.replace(/[\u0000\uD800-\uDFFF]/g, '\uFFFD')
}

function rejection(found: { path: string; message: string }): HttpProblem {
  const path = safeKey(found.path)
  return new HttpProblem('validation_failed', `${path}: ${found.message}`, {
    errors: [{ path, message: found.message }],
  })
}

/**
 * Bodies are JSON only (`text/plain` and other types answer 415), parsed by Fastify's own secure
 * parser after a depth check, and refused with 400 `validation_failed` when they hold a value no
 * route can accept (see findHostileValue). Path parameters and query strings get the same check.
 */
export function guardHostileInput(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error')
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (jsonDepth(text, maxJsonDepth) > maxJsonDepth) {
      done(
        new HttpProblem('validation_failed', `body: JSON is nested deeper than ${maxJsonDepth} levels`, {
          errors: [{ path: 'body', message: `nested deeper than ${maxJsonDepth} levels` }],
        }),
        undefined,
      )
      return
    }
    parse(request, text, (error, value) => {
      if (error) return done(error, undefined)
      const found = findHostileValue(value, 'body')
      done(found ? rejection(found) : null, found ? undefined : value)
    })
  })
  app.addHook('preValidation', async (request: FastifyRequest) => {
    const found = findHostileValue(request.params, 'params') ?? findHostileValue(request.query, 'query')
    if (found) throw rejection(found)
  })
}
