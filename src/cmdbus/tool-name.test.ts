import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { commandIdPattern, projectToolName, toolNamePattern } from './tool-name.js'

const providerSafe = /^[a-zA-Z][a-zA-Z0-9_]{0,63}$/
const hash8 = (id: string) => createHash('sha256').update(id).digest('hex').slice(0, 8)

const long30 = 'a'.repeat(30)
const longIds = [
  `${long30}.${'b'.repeat(32)}.c`,
  `plugin.${'x'.repeat(70)}`,
  `${'a'.repeat(80)}.b`,
  `abc.def_ghi.${'seg.'.repeat(20)}end`,
  `rdm.${'very_long_segment_name.'.repeat(4)}compose`,
]

describe('projectToolName: short ids, within what every provider accepts as a tool name', () => {
  it.each<[id: string, name: string]>([
    ['rdm.ping', 'rdm__ping'],
    ['rdm.draft.compose', 'rdm__draft__compose'],
    ['rdm.member.add', 'rdm__member__add'],
    ['a1.b_c.d', 'a1__b_c__d'],
    ['core.list_projects', 'core__list_projects'],
    // exactly 64 characters stays as it is
    [`${long30}.${'b'.repeat(32)}`, `${long30}__${'b'.repeat(32)}`],
  ])('%s → %s', (id, name) => {
    expect(projectToolName(id)).toBe(name)
    expect(projectToolName(id)).toMatch(providerSafe)
  })
})

describe('projectToolName: ids too long for 64 characters', () => {
  it.each(longIds)('%s', (id) => {
    const name = projectToolName(id)
    expect(id.split('.').join('__').length).toBeGreaterThan(64)
    expect(name).toMatch(providerSafe)
    expect(name.length).toBeLessThanOrEqual(64)
    expect(name.endsWith(`_h${hash8(id)}`)).toBe(true)
    expect(projectToolName(id)).toBe(name)
  })

  it('cuts at a segment boundary when the first segment fits', () => {
    const id = `rdm.${'very_long_segment_name.'.repeat(4)}compose`
    const name = projectToolName(id)
    const kept = name.slice(0, -`_h${hash8(id)}`.length)
    // What is kept is whole segments joined by `__`.
    expect(id.split('.').join('__').startsWith(`${kept}__`)).toBe(true)
    expect(kept).toBe('rdm__very_long_segment_name__very_long_segment_name')
  })

  it('is one past the limit: 65 characters are cut', () => {
    const id = `${long30}.${'b'.repeat(33)}`
    expect(id.split('.').join('__')).toHaveLength(65)
    expect(projectToolName(id)).toBe(`${long30}_h${hash8(id)}`)
  })

  it('cuts inside a first segment that is too long for any boundary', () => {
    const id = `${'a'.repeat(80)}.b`
    expect(projectToolName(id)).toBe(`${'a'.repeat(54)}_h${hash8(id)}`)
  })

  it('gives different names to long ids that share a long prefix', () => {
    const prefix = `rdm.${'shared_segment.'.repeat(5)}`
    const names = ['alpha', 'beta', 'gamma'].map((end) => projectToolName(`${prefix}${end}`))
    expect(new Set(names).size).toBe(3)
    for (const name of names) expect(name).toMatch(providerSafe)
  })

  it('is deterministic', () => {
    for (const id of longIds) expect(projectToolName(id)).toBe(projectToolName(`${id}`))
  })
})

describe('commandIdPattern: lowercase snake segments joined by dots', () => {
  it.each(['rdm.ping', 'rdm.draft.compose', 'a1.b_c.d', 'core.list_projects', 'x.y', 'a.b2_c3_d4.e'])(
    'accepts %s',
    (id) => {
      expect(commandIdPattern.test(id)).toBe(true)
      expect(projectToolName(id)).toMatch(providerSafe)
    },
  )

  it.each([
    ['rdm', 'one segment'],
    ['Rdm.ping', 'upper case'],
    ['rdm.Ping', 'upper case'],
    ['rdm..ping', 'empty segment'],
    ['rdm.ping_', 'trailing underscore'],
    ['rdm__x.y', 'double underscore (would clash with the projected dot)'],
    ['rdm.a__b', 'double underscore'],
    ['rdm.ping-x', 'hyphen'],
    ['.rdm', 'leading dot'],
    ['rdm.', 'trailing dot'],
    ['1rdm.ping', 'starts with a digit'],
    ['rdm.1ping', 'segment starts with a digit'],
    ['_rdm.ping', 'starts with an underscore'],
    ['rdm._ping', 'segment starts with an underscore'],
    ['rdm ping', 'space'],
    ['rdm.pïng', 'non-ASCII'],
    ['', 'empty'],
  ])('rejects %j (%s)', (id) => {
    expect(commandIdPattern.test(id)).toBe(false)
  })
})

describe('toolNamePattern', () => {
  it.each([
    ['knowledge_search', true],
    ['rdm__ping', true],
    ['A', true],
    ['a'.repeat(64), true],
    ['a'.repeat(65), false],
    ['_tool', false],
    ['1tool', false],
    ['tool-name', false],
    ['tool.name', false],
    ['', false],
  ])('%j → %s', (name, ok) => {
    expect(toolNamePattern.test(name)).toBe(ok)
  })
})
