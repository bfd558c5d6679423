import type { ToolParameters } from './model.js'

/** What providers receive for one tool, derived from a command's own JSON Schema. */
export interface ProjectedToolSchema {
  /** The tool's `parameters` / `input_schema`: root `type: "object"`, only keywords providers accept. */
  parameters: ToolParameters
  /**
   * The dropped constraints restated for the model, to append to the tool description after a blank line;
   * `''` when nothing was dropped.
   */
  descriptionSuffix: string
}

type SchemaObject = { [keyword: string]: unknown }

/** Keywords every provider accepts, copied as they are. */
const plainKeywords = new Set([
  'type',
  'enum',
  'const',
  'description',
  'title',
  'default',
  'format',
  'nullable',
  'minimum',
  'maximum',
  'exclusiveMinimum',
  'exclusiveMaximum',
  'multipleOf',
  'minLength',
  'maxLength',
  'pattern',
  'minItems',
  'maxItems',
  'uniqueItems',
  'required',
  'minProperties',
  'maxProperties',
])

/** Keywords with meaning only to tooling, dropped without a word (`x-*` extensions too). */
const silentKeywords = new Set([
  '$schema',
  '$id',
  '$comment',
  '$anchor',
  '$dynamicAnchor',
  '$vocabulary',
  'readOnly',
  'writeOnly',
  '$defs',
  'definitions',
])

/** Longest JSON restated for one dropped keyword. */
const maxRestatedLength = 400
/** Deeper than this (inlined references included) the schema is cut and restated. */
const maxDepth = 24

interface Projection {
  root: unknown
  restated: string[]
  /** The `$ref`s being inlined right now, to stop at recursion. */
  inlining: string[]
}

/**
 * Projects a command's JSON Schema (the source of truth, still enforced with ajv on every dispatch) to what
 * model providers accept as tool parameters (each rejects some JSON Schema features a command may use):
 * - the root is `type: "object"` with `properties`; root `allOf` members are merged into it, root
 *   `anyOf`/`oneOf` branches contribute their properties (required only when every branch requires them)
 *   and are restated; a root that cannot be an object becomes an empty object and is restated;
 * - local `$ref`s (`#`, `#/$defs/…`, any JSON pointer) are inlined; recursive or unresolvable ones become
 *   `{}` and are restated;
 * - keywords providers reject (`if`/`then`/`else`, `patternProperties`, `dependentSchemas`, `not`,
 *   `unevaluatedProperties`, tuple `items`, `examples`, …) are dropped at every depth and restated in the
 *   description suffix with where they applied; tooling-only keywords (`$schema`, `$id`, `$comment`,
 *   `x-*` extensions such as `x-sensitive`) are dropped silently.
 *
 * @example
 * const { parameters, descriptionSuffix } = projectToolSchema(command.paramsSchema)
 * const description = descriptionSuffix ? `${command.description}\n\n${descriptionSuffix}` : command.description
 */
export function projectToolSchema(schema: ToolParameters): ProjectedToolSchema {
  // Everything is inside the root, so `#` is recursive from the start.
  const projection: Projection = { root: schema, restated: [], inlining: ['#'] }
  const root = flattenRootCombinators(inlineRef(schema, projection), projection)
  let parameters: SchemaObject
  if (!canBeObject(root.type)) {
    restate(projection, '', 'the arguments must match', schema)
    parameters = { type: 'object', properties: {} }
  } else {
    parameters = projectNode(root, '', projection, 0)
    parameters.type = 'object'
    if (!isRecord(parameters.properties)) parameters.properties = {}
  }
  const descriptionSuffix =
    projection.restated.length > 0
      ? ['Argument constraints not expressed in the parameter schema (JSON Schema):', ...projection.restated].join('\n')
      : ''
  return { parameters, descriptionSuffix }
}

function projectNode(node: unknown, path: string, projection: Projection, depth: number): SchemaObject {
  if (node === false) {
    restate(projection, path, 'no value is allowed here')
    return {}
  }
  if (!isRecord(node)) return {}
  if (depth > maxDepth) {
    restate(projection, path, 'nested too deep to show; it must match', node)
    return {}
  }
  if (typeof node.$ref === 'string') {
    const ref = node.$ref
    const target = resolvePointer(projection.root, ref)
    const siblings = withoutKeys(node, ['$ref'])
    if (target === undefined) {
      restate(projection, path, `must match the schema at ${ref}`)
      return projectNode(siblings, path, projection, depth + 1)
    }
    if (projection.inlining.includes(ref)) {
      restate(projection, path, `has the same (recursive) schema as ${ref === '#' ? 'the arguments' : ref}`)
      return projectNode(siblings, path, projection, depth + 1)
    }
    projection.inlining.push(ref)
    try {
      return projectNode(mergeRef(target, siblings), path, projection, depth + 1)
    } finally {
      projection.inlining.pop()
    }
  }

  const result: SchemaObject = {}
  for (const [keyword, value] of Object.entries(node)) {
    if (plainKeywords.has(keyword)) {
      result[keyword] = structuredClone(value)
    } else if (silentKeywords.has(keyword) || keyword.startsWith('x-') || keyword === 'then' || keyword === 'else') {
      continue
    } else if (keyword === 'properties' && isRecord(value)) {
      const properties: SchemaObject = {}
      for (const [name, property] of Object.entries(value)) {
        const propertyPath = path ? `${path}.${name}` : name
        if (property === false) restate(projection, propertyPath, 'must not be given')
        else properties[name] = projectNode(property, propertyPath, projection, depth + 1)
      }
      result.properties = properties
    } else if (keyword === 'items' && !Array.isArray(value)) {
      result.items = projectNode(value, `${path}[]`, projection, depth + 1)
    } else if (keyword === 'additionalProperties') {
      result.additionalProperties =
        typeof value === 'boolean' ? value : projectNode(value, `${path}.*`, projection, depth + 1)
    } else if ((keyword === 'anyOf' || keyword === 'oneOf' || keyword === 'allOf') && Array.isArray(value)) {
      result[keyword] = value.map((branch, index) =>
        projectNode(branch, `${path}.${keyword}[${index}]`, projection, depth + 1),
      )
    } else if (keyword === 'if') {
      const parts = [`if ${json(value)}`]
      if (node.then !== undefined) parts.push(`then ${json(node.then)}`)
      if (node.else !== undefined) parts.push(`else ${json(node.else)}`)
      restate(projection, path, parts.join(' '))
    } else {
      restate(projection, path, keyword, value)
    }
  }
  return result
}

/**
 * Root `allOf` members are merged (properties and required); root `anyOf`/`oneOf` branches lend their
 * properties and are restated, since providers want a plain object at the root.
 */
function flattenRootCombinators(root: SchemaObject, projection: Projection): SchemaObject {
  const result = withoutKeys(root, ['allOf', 'anyOf', 'oneOf'])
  const properties: SchemaObject = isRecord(root.properties) ? { ...root.properties } : {}
  const required = new Set(stringsOf(root.required))
  const addProperties = (branch: SchemaObject): void => {
    if (!isRecord(branch.properties)) return
    for (const [name, property] of Object.entries(branch.properties))
      if (!(name in properties)) properties[name] = property
  }

  if (Array.isArray(root.allOf)) {
    root.allOf.forEach((member: unknown) => {
      const branch = inlineRef(member, projection)
      addProperties(branch)
      for (const name of stringsOf(branch.required)) required.add(name)
      const rest = withoutKeys(branch, ['type', 'properties', 'required', 'description', 'title'])
      if (Object.keys(rest).length > 0) restate(projection, '', 'must also match', rest)
    })
  }
  for (const keyword of ['anyOf', 'oneOf'] as const) {
    const branches = root[keyword]
    if (!Array.isArray(branches)) continue
    const resolved = branches.map((branch: unknown) => inlineRef(branch, projection))
    resolved.forEach(addProperties)
    const requiredByAll = resolved.map((branch) => new Set(stringsOf(branch.required)))
    for (const name of requiredByAll[0] ?? []) if (requiredByAll.every((names) => names.has(name))) required.add(name)
    restate(projection, '', keyword === 'oneOf' ? 'must match exactly one of' : 'must match at least one of', branches)
  }

  if (Object.keys(properties).length > 0 || isRecord(root.properties)) result.properties = properties
  if (required.size > 0) result.required = [...required]
  return result
}

/** A schema with a local `$ref` at its top replaced by the referenced schema (siblings win). */
function inlineRef(node: unknown, projection: Projection): SchemaObject {
  if (!isRecord(node)) return {}
  if (typeof node.$ref !== 'string') return node
  const target = resolvePointer(projection.root, node.$ref)
  const siblings = withoutKeys(node, ['$ref'])
  // Left in place: projectNode restates what cannot be inlined.
  if (!isRecord(target) || target === node) return node
  return mergeRef(target, siblings)
}

function mergeRef(target: unknown, siblings: SchemaObject): SchemaObject {
  return isRecord(target)
    ? { ...withoutKeys(target, ['$defs', 'definitions', '$id', '$schema']), ...siblings }
    : siblings
}

/** The schema a local reference (`#` or `#/a/b` JSON pointer) names; undefined for anything else. */
function resolvePointer(root: unknown, ref: string): unknown {
  if (ref === '#') return root
  if (!ref.startsWith('#/')) return undefined
  let current: unknown = root
  for (const raw of ref.slice(2).split('/')) {
    let segment: string
    try {
      segment = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~')
    } catch {
      return undefined
    }
    if (Array.isArray(current)) current = current[Number(segment)]
    else if (isRecord(current)) current = Object.hasOwn(current, segment) ? current[segment] : undefined
    else return undefined
    if (current === undefined) return undefined
  }
  return current
}

function canBeObject(type: unknown): boolean {
  return type === undefined || type === 'object' || (Array.isArray(type) && type.includes('object'))
}

function restate(projection: Projection, path: string, text: string, value?: unknown): void {
  const where = path ? `\`${path}\`` : 'arguments'
  projection.restated.push(`- ${where}: ${text}${value === undefined ? '' : ` ${json(value)}`}`)
}

function json(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value)
  return text.length > maxRestatedLength ? `${text.slice(0, maxRestatedLength)}…` : text
}

function withoutKeys(node: SchemaObject, keys: readonly string[]): SchemaObject {
  const result: SchemaObject = {}
  for (const [key, value] of Object.entries(node)) if (!keys.includes(key)) result[key] = value
  return result
}

function stringsOf(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((item): item is string => typeof item === 'string') : []
}

function isRecord(value: unknown): value is SchemaObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}
