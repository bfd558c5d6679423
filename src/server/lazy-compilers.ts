import SerializerSelector from '@fastify/fast-json-stringify-compiler'
import type { Ajv, ValidateFunction } from 'ajv'

// Compiling every route's request validators and response serialisers took about 0.9 s of a 2.7 s
// start (CPU profile of `plinth serve`); most routes are not called soon after a start, so each is
// compiled on its first use instead. The result is the same code, only later.

type Factory = ReturnType<typeof SerializerSelector>

/** Fastify's default serialiser factory (fast-json-stringify), compiling each schema on first use. */
export function lazySerializerFactory(): Factory {
  const build = SerializerSelector()
  return (externalSchemas, options) => {
    const compile = build(externalSchemas, options)
    return (route) => {
      let serialize: ((doc: unknown) => string) | undefined
      return (doc: unknown) => (serialize ??= compile(route))(doc)
    }
  }
}

/** A validator compiled by `ajv` on first use, with `errors` as Fastify reads them. */
export function lazyValidator(ajv: Ajv, schema: object): (data: unknown) => boolean {
  let validate: ValidateFunction | undefined
  const check = (data: unknown): boolean => {
    validate ??= ajv.compile(schema)
    const ok = validate(data)
    check.errors = validate.errors
    return ok
  }
  check.errors = null as ValidateFunction['errors']
  return check
}
