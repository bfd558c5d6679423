import FindMyWay from 'find-my-way'

/**
 * The methods each registered route answers, to tell a method the path does not take (405 with
 * `Allow`) from a path that does not exist (404). Fed by Fastify's `onRoute` hook.
 */
export class AllowedMethods {
  readonly #router = FindMyWay({ ignoreTrailingSlash: true })
  readonly #methods = new Set<string>()

  /** A route; `bodyLimit` when it takes larger (or smaller) bodies than the server's. */
  add(method: string | string[], url: string, bodyLimit?: number): void {
    for (const one of Array.isArray(method) ? method : [method]) {
      if (this.#methods.has(`${one} ${url}`)) continue
      this.#methods.add(`${one} ${url}`)
      this.#router.on(one as FindMyWay.HTTPMethod, url, () => undefined, { bodyLimit })
    }
  }

  /** The body limit of the route `method` `path` names, when it set its own. */
  bodyLimit(method: string, path: string): number | undefined {
    const found = this.#router.find(method as FindMyWay.HTTPMethod, path)
    const limit = (found?.store as { bodyLimit?: number } | undefined)?.bodyLimit
    return typeof limit === 'number' ? limit : undefined
  }

  /** The methods some route answers at `path` (empty: no route has it). */
  at(path: string): string[] {
    const methods = new Set([...this.#methods].map((entry) => entry.split(' ')[0]!))
    return [...methods].filter((method) => this.#router.find(method as FindMyWay.HTTPMethod, path) !== null).sort()
  }
}
