/**
 * A small Plinth client typed by the generated OpenAPI types (`plinth/openapi`, here ../openapi/…)
 * through openapi-fetch: paths, params, bodies and answers are checked by the compiler.
 */
import createClient, { type Client } from 'openapi-fetch'
import type { components, paths } from '../openapi/plinth-api.js'

export type Project = components['schemas']['Project']
export type Run = components['schemas']['Run']
export type Message = components['schemas']['Message']
export type PlinthClient = Client<paths>
export type ProjectCreate = NonNullable<paths['/api/projects']['post']['requestBody']>['content']['application/json']

export function plinthClient(baseUrl: string, token: string): PlinthClient {
  return createClient<paths>({ baseUrl, headers: { authorization: `Bearer ${token}` } })
}

function fail(error: components['schemas']['Problem'] | undefined, what: string): never {
  throw new Error(`${what}: ${error?.code ?? 'no answer'} ${error?.detail ?? ''}`)
}

/** Creates a project with a profile and a conversation, runs one message (create and wait), and returns the answer. */
export async function ask(
  client: PlinthClient,
  question: string,
): Promise<{ project: Project; run: Run; answer: string | null; messages: Message[] }> {
  const project = await client.POST('/api/projects', {
    body: { name: 'typed client', systemPrompt: 'Answer briefly.', modelParams: { temperature: 0.1 } },
  })
  if (!project.data) fail(project.error, 'create project')
  const conversation = await client.POST('/api/projects/{id}/conversations', {
    params: { path: { id: project.data.id } },
    body: { title: 'first' },
  })
  if (!conversation.data) fail(conversation.error, 'create conversation')
  const run = await client.POST('/api/conversations/{id}/runs', {
    params: { path: { id: conversation.data.id }, query: { wait: true } },
    body: { input: question },
  })
  if (!run.data) fail(run.error, 'run')
  // The route answers JSON, or its SSE stream when asked for one (not here; a client made with
  // createClient<paths, 'application/json'> leaves the stream out of `data`).
  if ('event' in run.data) throw new Error('expected the run as JSON')
  const messages = run.data.messages
  const answer = messages.findLast((message) => message.role === 'assistant')?.content ?? null
  return { project: project.data, run: run.data, answer, messages }
}

/** Never called: each line is a mistake the generated types catch at compile time (tsc checks the expectations). */
export function mistakesTheTypesCatch(client: PlinthClient): void {
  // @ts-expect-error a field of the wrong type
  void client.POST('/api/projects', { body: { name: 42 } })
  // @ts-expect-error a value the schema does not allow
  void client.PATCH('/api/conversations/{id}', { params: { path: { id: 'x' } }, body: { permissionMode: 'yolo' } })
  // @ts-expect-error a required field left out
  void client.POST('/api/conversations/{id}/runs', { params: { path: { id: 'x' } }, body: {} })
  // openapi-fetch infers its options generically, so TypeScript's excess-property check needs the body's own type:
  // @ts-expect-error a field the schema does not have (request bodies are closed: the server answers 400 too)
  void client.POST('/api/projects', { body: { name: 'x', colour: 'red' } satisfies ProjectCreate })
  // @ts-expect-error a route that does not exist
  void client.GET('/api/project')
  // @ts-expect-error a path parameter left out
  void client.GET('/api/runs/{id}', {})
  void client.GET('/api/runs', { params: { query: { status: 'requires_action' } } }).then(({ data }) => {
    // @ts-expect-error a field runs do not have
    void data?.items[0]?.temperature
  })
}
