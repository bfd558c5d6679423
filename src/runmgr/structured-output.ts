import { Ajv, type ValidateFunction } from 'ajv'
import type { JsonValue } from '../extension/index.js'
import type { ModelMessage } from '../llm/index.js'
import type { OutputSpec } from '../store/index.js'
import { RunRequestError } from './run-errors.js'

/**
 * Structured output (docs/guides/agent-runs.md#structured-output): tools run as usual; the schema
 * applies to the final answer only. An answer that does not parse or validate is answered with what
 * failed, and the next turn asks again — natively (`response_format`) where the provider has it, and
 * without tools — up to `maxRepairs` times; then the run fails `output_invalid`.
 */

const maxSchemaBytes = 64 * 1024
// No logger: a schema's unknown `format` would otherwise print the client's text to stderr.
const ajv = new Ajv({ allErrors: true, strict: false, logger: false })
// Compiled once per schema text: a run's turns (and its resumes) reuse it.
const compiled = new Map<string, ValidateFunction>()

function validatorOf(schema: OutputSpec['schema']): ValidateFunction {
  const key = JSON.stringify(schema)
  let validate = compiled.get(key)
  if (!validate) {
    validate = ajv.compile(schema)
    if (compiled.size >= 256) compiled.delete(compiled.keys().next().value!)
    compiled.set(key, validate)
  }
  return validate
}

/** A run request's `output`, checked: the schema compiles (else 400 `output_schema_invalid`). */
export function outputSpec(input: {
  schema: { [key: string]: unknown }
  name?: string
  strict?: boolean
  maxRepairs?: number
}): OutputSpec {
  // A request body's schema is JSON.
  const schema = input.schema as { [key: string]: JsonValue }
  if (JSON.stringify(schema).length > maxSchemaBytes)
    throw new RunRequestError('output_schema_invalid', `body.output.schema: larger than ${maxSchemaBytes} bytes`)
  let validate: ValidateFunction
  try {
    validate = validatorOf(schema)
  } catch (error) {
    throw new RunRequestError(
      'output_schema_invalid',
      error instanceof RangeError
        ? 'body.output.schema: it refers to itself without end (a $ref cycle that never reaches a value)'
        : `body.output.schema: not a usable JSON Schema (${error instanceof Error ? error.message : String(error)})`,
    )
  }
  // A schema that refers to itself without consuming anything (`{"$ref": "#"}`) compiles, then
  // recurses for ever on every value: tried on one of each kind here, before any run.
  for (const sample of [null, true, 0, '', [], {}]) {
    if (!validates(validate, sample).checked)
      throw new RunRequestError(
        'output_schema_invalid',
        'body.output.schema: it refers to itself without end (a $ref cycle that never reaches a value)',
      )
  }
  return {
    schema,
    name: input.name ?? 'output',
    strict: input.strict ?? false,
    maxRepairs: input.maxRepairs ?? 2,
  }
}

export type AnswerCheck = { ok: true; value: JsonValue } | { ok: false; errors: string[] }

/** The answer's JSON (a fenced ```json block is accepted) validated against the schema. */
export function checkAnswer(spec: OutputSpec, text: string): AnswerCheck {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n?```\s*$/.exec(text)
  let value: JsonValue
  try {
    value = JSON.parse(fenced ? fenced[1]! : text) as JsonValue
  } catch (error) {
    return { ok: false, errors: [`the answer is not JSON (${error instanceof Error ? error.message : 'unparsable'})`] }
  }
  const validate = validatorOf(spec.schema)
  const outcome = validates(validate, value)
  if (!outcome.checked) return { ok: false, errors: ['/ nested too deeply to be checked against the schema'] }
  if (outcome.valid) return { ok: true, value }
  return {
    ok: false,
    errors: (validate.errors ?? []).slice(0, 20).map((error) => `${error.instancePath || '/'} ${error.message ?? ''}`),
  }
}

/** Runs a validator; a stack overflow (a self-referring schema, a value nested thousands deep) is `checked: false`. */
function validates(validate: ValidateFunction, value: JsonValue): { checked: boolean; valid: boolean } {
  try {
    return { checked: true, valid: validate(value) }
  } catch (error) {
    if (error instanceof RangeError) return { checked: false, valid: false }
    throw error
  }
}

/** What the model is told before it answers again. */
export function repairPrompt(spec: OutputSpec, errors: string[]): ModelMessage {
  return {
    role: 'user',
    content:
      `Your answer must be only a JSON value that follows the JSON Schema "${spec.name}" below, with no other text. ` +
      `The last answer did not:\n${errors.map((error) => `- ${error}`).join('\n')}\n\n` +
      `Schema:\n${JSON.stringify(spec.schema)}\n\nAnswer again with the JSON only.`,
  }
}
