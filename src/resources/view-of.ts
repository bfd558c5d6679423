import type { TObject } from 'typebox'
import type { JsonValue } from '../store/index.js'

type Json = { [key: string]: JsonValue }
type Properties<S extends TObject> = keyof S['properties'] & string

/** The schema's properties the record cannot give as they are: missing from it, or not JSON. */
type Derived<S extends TObject, R> = {
  [K in Properties<S>]: K extends keyof R ? (R[K] extends JsonValue ? never : K) : K
}[Properties<S>]

/**
 * Renders records as a schema shows them, so a resource's fields are listed once, in its schema: each
 * of the schema's properties, in the schema's order, is `derive[name](record)` when `derive` has it and
 * the record's own property of that name otherwise. A property the record lacks (or has as something
 * other than JSON) and `derive` does not give is a type error.
 */
export function viewOf<R extends object, S extends TObject>(
  schema: S,
  derive: { [K in Derived<S, R>]: (record: R) => JsonValue } & { [K in Properties<S>]?: (record: R) => JsonValue },
): (record: R) => Json {
  const fields = Object.keys(schema.properties).map((name) => {
    const derived = (derive as { [name: string]: ((record: R) => JsonValue) | undefined })[name]
    return derived
      ? ([name, derived] as const)
      : ([name, (record: R) => (record as { [name: string]: JsonValue })[name] as JsonValue] as const)
  })
  return (record) => {
    const view: Json = {}
    for (const [name, value] of fields) view[name] = value(record)
    return view
  }
}
