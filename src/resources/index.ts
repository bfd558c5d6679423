/**
 * The API's resources: each one's JSON schema and the view that renders the store's record as it,
 * from one definition. Below the server (its routes and OpenAPI document), the run manager (the
 * `run.created` event) and webhooks (their payloads), and above nothing but the store's types.
 */
export { ModelParams, RequiredAction, Run, RunStatus, RunBudget, RunUsage, runView } from './run.js'
export { viewOf } from './view-of.js'
