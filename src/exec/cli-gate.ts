import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import semver from 'semver'
import type { CliFlag, CliToolSpec } from '../extension/index.js'

export type CliGate = { ok: true; argv: string[] } | { ok: false; reason: string }

const metacharacters = /[;&|$`<>\n\r]/
const word = /^[a-z-]+$/
const flagName = /^[a-z][a-z0-9-]*$/

/**
 * The `cc_exec` gate (docs/security.md#allowlisted-clis): a call `{command, subargs[]}` is allowed only
 * when every argument is non-empty, at most 256 characters and free of shell metacharacters; the command
 * (and subcommand, where the CLI has them) is plain `[a-z-]+` and allowlisted; there are at most
 * `maxArgs` subargs; every other argument is a declared flag (`--flag=value` or `--flag value`) with a
 * value of its type (bool: `true`/`false` or bare; int: within its range; string: at most its length,
 * default 64). Declared defaults are added after the gate when absent. The answer is the argv to run
 * (no shell).
 */
export function gateCliCall(spec: CliToolSpec, command: string, subargs: readonly string[]): CliGate {
  const deny = (reason: string): CliGate => ({ ok: false, reason })
  for (const arg of [command, ...subargs]) {
    if (typeof arg !== 'string' || arg === '') return deny('empty argument')
    if (arg.length > 256) return deny('an argument is longer than 256 characters')
    if (metacharacters.test(arg)) return deny(`argument ${JSON.stringify(arg)} contains a shell metacharacter`)
  }
  const maxArgs = spec.maxArgs ?? 8
  if (subargs.length > maxArgs) return deny(`at most ${maxArgs} arguments after the command`)
  if (!word.test(command)) return deny(`command ${JSON.stringify(command)} must be lowercase letters and dashes`)
  const entry = Object.hasOwn(spec.commands, command) ? spec.commands[command] : undefined
  if (!entry) return deny(`command ${command} is not allowed (allowed: ${Object.keys(spec.commands).join(', ')})`)
  const argv = [spec.binary, command]
  const rest = [...subargs]
  let flags = entry.flags ?? {}
  let defaults = entry.defaults ?? {}
  if (entry.subcommands) {
    const sub = rest.shift()
    if (sub === undefined)
      return deny(`command ${command} needs a subcommand (${Object.keys(entry.subcommands).join(', ')})`)
    if (!word.test(sub)) return deny(`subcommand ${JSON.stringify(sub)} must be lowercase letters and dashes`)
    const subEntry = Object.hasOwn(entry.subcommands, sub) ? entry.subcommands[sub] : undefined
    if (!subEntry)
      return deny(`subcommand ${command} ${sub} is not allowed (allowed: ${Object.keys(entry.subcommands).join(', ')})`)
    argv.push(sub)
    flags = subEntry.flags ?? {}
    defaults = subEntry.defaults ?? {}
  }
  const given = new Set<string>()
  while (rest.length > 0) {
    const token = rest.shift()!
    if (!token.startsWith('--'))
      return deny(`unexpected argument ${JSON.stringify(token)}: only declared --flags are allowed`)
    const equals = token.indexOf('=')
    const name = token.slice(2, equals < 0 ? undefined : equals)
    if (!flagName.test(name)) return deny(`malformed flag ${JSON.stringify(token)}`)
    const flag: CliFlag | undefined = Object.hasOwn(flags, name) ? flags[name] : undefined
    if (!flag) return deny(`unknown flag --${name}`)
    if (given.has(name)) return deny(`flag --${name} given twice`)
    given.add(name)
    let value: string | undefined = equals < 0 ? undefined : token.slice(equals + 1)
    if (flag.type === 'bool') {
      if (value === undefined && (rest[0] === 'true' || rest[0] === 'false')) value = rest.shift()
      if (value !== undefined && value !== 'true' && value !== 'false')
        return deny(`flag --${name} takes true or false, not ${JSON.stringify(value)}`)
      if (value !== 'false') argv.push(`--${name}`)
      continue
    }
    if (value === undefined) value = rest.shift()
    if (value === undefined || value === '') return deny(`flag --${name} needs a value`)
    if (flag.type === 'int') {
      if (!/^-?\d{1,15}$/.test(value)) return deny(`flag --${name} takes an integer, not ${JSON.stringify(value)}`)
      const number = Number(value)
      if (number < flag.min || number > flag.max)
        return deny(`flag --${name} must be between ${flag.min} and ${flag.max}`)
    } else if (value.length > (flag.maxLength ?? 64)) {
      return deny(`flag --${name} takes at most ${flag.maxLength ?? 64} characters`)
    }
    argv.push(`--${name}=${value}`)
  }
  for (const [name, value] of Object.entries(defaults)) {
    if (given.has(name)) continue
    if (typeof value === 'boolean') {
      if (value) argv.push(`--${name}`)
    } else argv.push(`--${name}=${value}`)
  }
  return { ok: true, argv }
}

/** Checks a CLI spec's shape; the error names what is wrong. */
export function validateCliSpec(spec: CliToolSpec): string | null {
  if (!spec || typeof spec !== 'object') return 'a CLI tool spec is an object'
  if (!/^[a-z][a-z0-9_]{0,40}$/.test(spec.name ?? ''))
    return `CLI tool name ${JSON.stringify(spec.name)} must match ^[a-z][a-z0-9_]{0,40}$`
  if (typeof spec.binary !== 'string' || spec.binary === '') return `CLI tool ${spec.name}: binary is required`
  if (!spec.commands || Object.keys(spec.commands).length === 0) return `CLI tool ${spec.name}: commands are required`
  for (const [command, entry] of Object.entries(spec.commands)) {
    if (!word.test(command))
      return `CLI tool ${spec.name}: command ${JSON.stringify(command)} must be lowercase letters and dashes`
    for (const sub of Object.keys(entry.subcommands ?? {}))
      if (!word.test(sub))
        return `CLI tool ${spec.name}: subcommand ${JSON.stringify(sub)} must be lowercase letters and dashes`
  }
  if (spec.minVersion !== undefined && !semver.valid(semver.coerce(spec.minVersion)))
    return `CLI tool ${spec.name}: minVersion ${JSON.stringify(spec.minVersion)} is not a version`
  return null
}

const run = promisify(execFile)

/**
 * Whether the CLI is installed and recent enough: runs `binary versionArgs` (default `--version`)
 * without a shell and reads the first version number it prints.
 */
export async function probeCliVersion(
  spec: CliToolSpec,
): Promise<{ ok: true; version: string | null } | { ok: false; reason: string }> {
  let output: string
  try {
    const { stdout, stderr } = await run(spec.binary, spec.versionArgs ?? ['--version'], {
      timeout: 5000,
      env: { PATH: '/usr/local/bin:/usr/bin:/bin' },
    })
    output = `${stdout}\n${stderr}`
  } catch (error) {
    const failure = error as NodeJS.ErrnoException & { stdout?: string; stderr?: string }
    if (failure.code === 'ENOENT') return { ok: false, reason: `${spec.binary} is not installed` }
    output = `${failure.stdout ?? ''}\n${failure.stderr ?? ''}`
  }
  const found = semver.coerce(output)?.version ?? null
  if (!spec.minVersion) return { ok: true, version: found }
  if (!found) return { ok: false, reason: `${spec.binary} did not print a version` }
  const wanted = semver.coerce(spec.minVersion)!.version
  return semver.gte(found, wanted)
    ? { ok: true, version: found }
    : { ok: false, reason: `${spec.binary} ${found} is older than the required ${wanted}` }
}
