/**
 * Moves every schema of the OpenAPI document that carries a `title` into `components.schemas` under that
 * title and refers to it there, so generated clients get named types (`components['schemas']['Project']`)
 * while Fastify validates and serializes with the inline schemas. Two different schemas with one title
 * are a bug: it throws.
 */
export function hoistTitledSchemas<T extends { components?: { schemas?: Record<string, unknown> }; paths?: unknown }>(
  document: T,
): T {
  const components = (document.components ??= {})
  const schemas = (components.schemas ??= {})
  const seen = new Map<string, string>()
  const named = Object.keys(schemas)
  for (const name of named) seen.set(name, JSON.stringify(schemas[name]))

  const visit = (node: unknown, isSchema: boolean, hoist = true): unknown => {
    if (Array.isArray(node)) return node.map((item) => visit(item, isSchema))
    if (node === null || typeof node !== 'object') return node
    const out: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(node)) {
      // Inside a schema, `properties` maps names to schemas (a property may be called "title").
      out[key] =
        key === 'properties' && isSchema
          ? mapValues(value, (property) => visit(property, true))
          : visit(
              value,
              isSchema ||
                key === 'schema' ||
                key === 'items' ||
                key === 'anyOf' ||
                key === 'oneOf' ||
                key === 'allOf' ||
                key === 'additionalProperties' ||
                key === 'not',
            )
    }
    const title = out.title
    if (!hoist || !isSchema || typeof title !== 'string' || !/^[A-Z][A-Za-z0-9]*$/.test(title)) return out
    const text = JSON.stringify(out)
    const existing = seen.get(title)
    if (existing !== undefined && existing !== text)
      throw new Error(`OpenAPI: two different schemas are titled ${title}`)
    seen.set(title, text)
    schemas[title] = out
    return { $ref: `#/components/schemas/${title}` }
  }

  document.paths = visit(document.paths, false) as T['paths']
  // Named schemas (addSchema) may hold titled ones too.
  for (const name of named) schemas[name] = visit(schemas[name], true, false)
  return document
}

function mapValues(value: unknown, fn: (item: unknown) => unknown): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, fn(item)]))
}
