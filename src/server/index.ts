/** The HTTP face of Plinth: routes, auth, SSE, problem+json errors, OpenAPI. */
export { buildServer, type ServerOptions } from './build-server.js'
export { problemCatalogue, HttpProblem, type ProblemCode, type ProblemBody } from './problem.js'
export type { App } from './server-deps.js'
