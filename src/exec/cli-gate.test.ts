import { describe, expect, it } from 'vitest'
import type { CliToolSpec } from '../extension/index.js'
import { gateCliCall, validateCliSpec } from './cli-gate.js'

const spec: CliToolSpec = {
  name: 'cc_exec',
  description: 'A code-change CLI',
  binary: '/usr/local/bin/cc',
  maxArgs: 6,
  commands: {
    status: { flags: { verbose: { type: 'bool' } } },
    log: {
      subcommands: {
        list: {
          flags: {
            limit: { type: 'int', min: 1, max: 100 },
            author: { type: 'string', maxLength: 20 },
            all: { type: 'bool' },
          },
          defaults: { limit: 20 },
        },
        show: { flags: { id: { type: 'string' } } },
      },
    },
  },
}

const denied = (command: string, subargs: string[]): string => {
  const gate = gateCliCall(spec, command, subargs)
  if (gate.ok) throw new Error(`expected a denial, got ${gate.argv.join(' ')}`)
  return gate.reason
}

describe('gateCliCall', () => {
  it('allows declared commands and flags in both forms, and adds defaults after the gate', () => {
    expect(gateCliCall(spec, 'log', ['list', '--limit', '5', '--author=ann'])).toEqual({
      ok: true,
      argv: ['/usr/local/bin/cc', 'log', 'list', '--limit=5', '--author=ann'],
    })
    expect(gateCliCall(spec, 'log', ['list'])).toEqual({
      ok: true,
      argv: ['/usr/local/bin/cc', 'log', 'list', '--limit=20'],
    })
    expect(gateCliCall(spec, 'status', ['--verbose'])).toEqual({
      ok: true,
      argv: ['/usr/local/bin/cc', 'status', '--verbose'],
    })
    expect(gateCliCall(spec, 'status', ['--verbose', 'false'])).toEqual({
      ok: true,
      argv: ['/usr/local/bin/cc', 'status'],
    })
    expect(gateCliCall(spec, 'log', ['list', '--all=true'])).toMatchObject({
      ok: true,
      argv: expect.arrayContaining(['--all']),
    })
  })

  it.each([';', '&', '|', '$', '`', '<', '>', '\n', '\r'])(
    'denies the shell metacharacter %j in any argument',
    (char) => {
      expect(denied('log', ['list', `--author=a${char}b`])).toMatch(/shell metacharacter/)
      expect(denied(`status${char}`, [])).toMatch(/shell metacharacter|lowercase/)
    },
  )

  it('denies empty and over-long arguments, too many arguments, and unknown commands', () => {
    expect(denied('log', ['list', ''])).toMatch(/empty argument/)
    expect(denied('', [])).toMatch(/empty argument/)
    expect(denied('log', ['list', `--author=${'a'.repeat(300)}`])).toMatch(/longer than 256/)
    expect(denied('log', ['list', '--all', '--all', '--all', '--all', '--all', '--all', '--all'])).toMatch(
      /at most 6 arguments/,
    )
    expect(denied('push', [])).toMatch(/not allowed/)
    expect(denied('log', [])).toMatch(/needs a subcommand/)
    expect(denied('log', ['delete'])).toMatch(/not allowed/)
  })

  it('denies look-alike Unicode in a command or subcommand', () => {
    // Cyrillic "о" and "е" look like Latin o and e.
    expect(denied('l\u043eg', ['list'])).toMatch(/lowercase letters/)
    expect(denied('log', ['li\u0455t'])).toMatch(/lowercase letters/)
    expect(denied('LOG', ['list'])).toMatch(/lowercase letters/)
  })

  it('denies unknown flags, positional arguments, bad values and repeated flags', () => {
    expect(denied('log', ['list', '--force'])).toMatch(/unknown flag --force/)
    expect(denied('log', ['list', 'extra'])).toMatch(/only declared --flags/)
    expect(denied('log', ['list', '--limit=0'])).toMatch(/between 1 and 100/)
    expect(denied('log', ['list', '--limit', '101'])).toMatch(/between 1 and 100/)
    expect(denied('log', ['list', '--limit=ten'])).toMatch(/integer/)
    expect(denied('log', ['list', '--limit'])).toMatch(/needs a value/)
    expect(denied('status', ['--verbose=yes'])).toMatch(/true or false/)
    expect(denied('log', ['list', `--author=${'a'.repeat(21)}`])).toMatch(/at most 20 characters/)
    expect(denied('log', ['show', `--id=${'x'.repeat(65)}`])).toMatch(/at most 64 characters/)
    expect(denied('log', ['list', '--limit=1', '--limit=2'])).toMatch(/twice/)
  })
})

describe('validateCliSpec', () => {
  it('names what is wrong with a spec', () => {
    expect(validateCliSpec(spec)).toBeNull()
    expect(validateCliSpec({ ...spec, name: 'Bad Name' })).toMatch(/must match/)
    expect(validateCliSpec({ ...spec, commands: {} })).toMatch(/commands are required/)
    expect(validateCliSpec({ ...spec, commands: { 'rm;': {} } })).toMatch(/lowercase/)
    expect(validateCliSpec({ ...spec, minVersion: 'soon' })).toMatch(/not a version/)
  })
})
