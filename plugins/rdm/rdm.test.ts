import { Ajv } from 'ajv'
import { describe, expect, it } from 'vitest'
import { CommandError, SurfaceVersion } from '../../src/extension/index.js'
import plugin from './index.js'
import { defaultProject, setupPlugin } from '../../src/testing/index.js'

const commandIdPattern = /^[a-z][a-z0-9]*(_[a-z0-9]+)*(\.[a-z][a-z0-9]*(_[a-z0-9]+)*)+$/
const owner = defaultProject.ownerId

/** Runs `fn` and returns the CommandError it threw (fails the test if it threw anything else or nothing). */
async function commandError(fn: () => Promise<unknown>): Promise<CommandError> {
  const error = await fn().then(
    () => undefined,
    (thrown: unknown) => thrown,
  )
  expect(error).toBeInstanceOf(CommandError)
  return error as CommandError
}

describe('rdm plugin: registration', () => {
  it('declares itself for the current surface', () => {
    expect(plugin).toMatchObject({ name: 'rdm', version: '1.0.0', surface: '^1.1.0' })
    expect(SurfaceVersion).toMatch(/^1\.\d+\.\d+$/)
  })

  it('registers the rdm commands, a note, a skill and a ProjectAuthz adapter', async () => {
    const { registry } = await setupPlugin(plugin)
    expect([...registry.commands.keys()].sort()).toEqual([
      'rdm.baseline',
      'rdm.draft.compose',
      'rdm.member.add',
      'rdm.member.list',
      'rdm.member.remove',
      'rdm.ping',
      'rdm.trace',
    ])
    expect(registry.notes).toHaveLength(1)
    expect(registry.notes[0]).toMatch(/rdm/)
    expect(registry.skills.map((skill) => skill.name)).toEqual(['rdm-triage'])
    expect(registry.projectAuthz).not.toBeNull()
  })

  it('uses well-formed ids and object param schemas that compile', async () => {
    const { registry } = await setupPlugin(plugin)
    const ajv = new Ajv({ strict: false })
    for (const { spec } of registry.commands.values()) {
      expect(spec.id).toMatch(commandIdPattern)
      expect(spec.paramsSchema.type, spec.id).toBe('object')
      expect(() => ajv.compile(spec.paramsSchema), spec.id).not.toThrow()
      expect(spec.title && spec.description, spec.id).toBeTruthy()
    }
  })

  it('exposes the read-only and draft commands to the model, never the member table', async () => {
    const { registry } = await setupPlugin(plugin)
    const exposed = [...registry.commands.values()].filter(({ spec }) => spec.exposeAsTool).map(({ spec }) => spec.id)
    expect(exposed.sort()).toEqual(['rdm.baseline', 'rdm.draft.compose', 'rdm.ping', 'rdm.trace'])
    expect(registry.command('rdm.draft.compose').spec).toMatchObject({ risk: 'high', confirm: true })
    expect(registry.command('rdm.member.add').spec.risk).toBe('medium')
    expect(registry.command('rdm.member.list').spec).toMatchObject({ risk: 'low', idempotent: true })
  })
})

describe('rdm plugin: read-only commands', () => {
  it('rdm.ping answers pong', async () => {
    const harness = await setupPlugin(plugin)
    const result = await harness.dispatch('rdm.ping', { target: 'db-1' })
    expect(result).toMatchObject({ pong: true, target: 'db-1' })
    expect(new Date((result as { at: string }).at).toISOString()).toBe((result as { at: string }).at)
    expect(await harness.dispatch('rdm.ping')).toMatchObject({ pong: true, target: null })
  })

  it('rdm.trace is deterministic per id', async () => {
    const harness = await setupPlugin(plugin)
    const first = await harness.dispatch('rdm.trace', { traceId: 'abc-123' })
    expect(await harness.dispatch('rdm.trace', { traceId: 'abc-123' })).toEqual(first)
    expect(first).toMatchObject({ traceId: 'abc-123' })
    const spans = (first as { spans: unknown[] }).spans
    expect(spans.length).toBeGreaterThan(0)
    expect(await harness.dispatch('rdm.trace', { traceId: 'other' })).not.toEqual(first)
  })

  it('rdm.baseline gives a fixed value and unit per metric', async () => {
    const harness = await setupPlugin(plugin)
    const latency = await harness.dispatch('rdm.baseline', { metric: 'latency' })
    expect(latency).toMatchObject({ metric: 'latency', baseline: expect.any(Number), unit: expect.any(String) })
    expect(await harness.dispatch('rdm.baseline', { metric: 'latency' })).toEqual(latency)
  })
})

describe('rdm plugin: rdm.draft.compose', () => {
  it('writes the draft into the project knowledge as the user the call is for', async () => {
    const harness = await setupPlugin(plugin)
    const result = (await harness.dispatch('rdm.draft.compose', { title: 'Incident 42', body: 'héllo' })) as {
      itemId: string
      projectId: string
      title: string
      bytes: number
    }
    expect(result).toMatchObject({ projectId: defaultProject.id, title: 'Incident 42', bytes: 6, status: 'draft' })
    expect(harness.host.knowledge).toEqual([
      {
        itemId: result.itemId,
        actor: expect.objectContaining({ onBehalfOf: owner }),
        projectId: defaultProject.id,
        title: 'Incident 42',
        text: 'héllo',
      },
    ])
  })

  it('previews the write without performing it', async () => {
    const harness = await setupPlugin(plugin)
    const text = await harness.preview('rdm.draft.compose', { title: 'Incident 42', body: 'hello' })
    expect(text).toBe(`Write draft "Incident 42" (5 chars) into project ${defaultProject.name}`)
    expect(harness.host.knowledge).toEqual([])
  })

  it('needs a project', async () => {
    const harness = await setupPlugin(plugin)
    const error = await commandError(() =>
      harness.dispatch('rdm.draft.compose', { title: 't', body: 'b' }, { project: null }),
    )
    expect(error.code).toBe('project_required')
  })
})

describe('rdm plugin: member table and ProjectAuthz', () => {
  it('adds (once), lists and removes members', async () => {
    const harness = await setupPlugin(plugin)
    expect(await harness.dispatch('rdm.member.list')).toEqual({ projectId: defaultProject.id, members: [] })
    await harness.dispatch('rdm.member.add', { userId: 'usr_bob' })
    expect(await harness.dispatch('rdm.member.add', { userId: 'usr_bob' })).toEqual({
      projectId: defaultProject.id,
      members: ['usr_bob'],
    })
    await harness.dispatch('rdm.member.add', { userId: 'usr_ann' })
    expect(await harness.dispatch('rdm.member.list', {}, { user: 'usr_bob' })).toEqual({
      projectId: defaultProject.id,
      members: ['usr_ann', 'usr_bob'],
    })
    expect(await harness.dispatch('rdm.member.remove', { userId: 'usr_bob' })).toEqual({
      projectId: defaultProject.id,
      members: ['usr_ann'],
    })
    expect(await harness.kv.get(`members:${defaultProject.id}`)).toEqual(['usr_ann'])
    // Removing a member announces the change, so their open streams end at once.
    expect(harness.host.accessChanges).toEqual([defaultProject.id])
  })

  it('lets only the project owner add or remove members', async () => {
    const harness = await setupPlugin(plugin)
    await harness.dispatch('rdm.member.add', { userId: 'usr_bob' })
    for (const id of ['rdm.member.add', 'rdm.member.remove']) {
      const error = await commandError(() => harness.dispatch(id, { userId: 'usr_eve' }, { user: 'usr_bob' }))
      expect(error.code).toBe('forbidden')
    }
    // The agent acts for whoever it runs for: on behalf of the owner it may, on behalf of a member not.
    await harness.dispatch(
      'rdm.member.add',
      { userId: 'usr_ann' },
      { actor: { type: 'agent', id: 'agent', onBehalfOf: owner }, entrance: 'agent' },
    )
    const error = await commandError(() =>
      harness.dispatch(
        'rdm.member.remove',
        { userId: 'usr_ann' },
        { actor: { type: 'agent', id: 'agent', onBehalfOf: 'usr_bob' }, entrance: 'agent' },
      ),
    )
    expect(error.code).toBe('forbidden')
    expect(await harness.kv.get(`members:${defaultProject.id}`)).toEqual(['usr_ann', 'usr_bob'])
  })

  it('needs a project', async () => {
    const harness = await setupPlugin(plugin)
    for (const [id, params] of [
      ['rdm.member.add', { userId: 'usr_bob' }],
      ['rdm.member.remove', { userId: 'usr_bob' }],
      ['rdm.member.list', {}],
    ] as const) {
      const error = await commandError(() => harness.dispatch(id, params, { project: null }))
      expect(error.code, id).toBe('project_required')
    }
  })

  it('grants members every action after add and revokes after remove', async () => {
    const harness = await setupPlugin(plugin)
    const authz = harness.registry.projectAuthz!
    const actions = ['read', 'search', 'create_conversation', 'write'] as const
    for (const action of actions) expect(await authz.canAccessProject('usr_bob', defaultProject.id, action)).toBe(false)

    await harness.dispatch('rdm.member.add', { userId: 'usr_bob' })
    for (const action of actions) expect(await authz.canAccessProject('usr_bob', defaultProject.id, action)).toBe(true)
    expect(await authz.canAccessProject('usr_bob', 'prj_other', 'read')).toBe(false)
    expect(await authz.canAccessProject('usr_eve', defaultProject.id, 'read')).toBe(false)

    await harness.dispatch('rdm.member.remove', { userId: 'usr_bob' })
    for (const action of actions) expect(await authz.canAccessProject('usr_bob', defaultProject.id, action)).toBe(false)
  })

  it('lists the projects shared with a member', async () => {
    const harness = await setupPlugin(plugin)
    const authz = harness.registry.projectAuthz!
    await harness.dispatch('rdm.member.add', { userId: 'usr_bob' })
    const other = { id: 'prj_2', ownerId: 'usr_carol', name: 'Other' }
    await harness.dispatch('rdm.member.add', { userId: 'usr_bob' }, { user: 'usr_carol', project: other })
    await harness.dispatch('rdm.member.add', { userId: 'usr_ann' }, { user: 'usr_carol', project: other })
    // Drafts live in the same kv; they are not member tables.
    await harness.dispatch('rdm.draft.compose', { title: 't', body: 'b' })

    expect((await authz.listSharedProjects('usr_bob')).sort()).toEqual([defaultProject.id, 'prj_2'])
    expect(await authz.listSharedProjects('usr_ann')).toEqual(['prj_2'])
    expect(await authz.listSharedProjects('usr_eve')).toEqual([])

    await harness.dispatch('rdm.member.remove', { userId: 'usr_bob' }, { user: 'usr_carol', project: other })
    expect(await authz.listSharedProjects('usr_bob')).toEqual([defaultProject.id])
  })
})
