import type { components, operations } from 'plinth/openapi'

/** The JSON schemas of the API (OpenAPI `components.schemas`), e.g. `Schemas['Run']`. */
export type Schemas = components['schemas']

type Json<T> = T extends { content: { 'application/json': infer B } } ? B : never
/** The JSON body an operation takes, e.g. `RequestBody<'createRun'>`. */
export type RequestBody<Op extends keyof operations> = operations[Op] extends { requestBody?: infer R }
  ? Json<NonNullable<R>>
  : never
/** The query parameters an operation takes. */
export type QueryOf<Op extends keyof operations> = operations[Op] extends { parameters: { query?: infer Q } }
  ? NonNullable<Q>
  : never
/** The JSON answer of an operation's success status (200 or 201). */
export type Answer<Op extends keyof operations> = operations[Op]['responses'] extends infer R
  ? R extends { 200: infer A }
    ? Json<A>
    : R extends { 201: infer A }
      ? Json<A>
      : never
  : never

export type Run = Schemas['Run']
export type Project = Schemas['Project']
export type Conversation = Schemas['Conversation']
export type Message = Schemas['Message']
export type Decision = Schemas['Decision']
export type KnowledgeItem = Schemas['KnowledgeItem']
export type SearchHit = Schemas['SearchHit']
export type RequiredAction = Schemas['RequiredAction']
/** A page of a list: `items`, and `nextCursor` to pass as `cursor` for the next page (null at the end). */
export interface Page<T> {
  items: T[]
  nextCursor: string | null
}
