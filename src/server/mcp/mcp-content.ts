import type {
  GetPromptResult,
  ListPromptsResult,
  ListResourcesResult,
  ReadResourceResult,
} from '@modelcontextprotocol/sdk/types.js'
import type { KnowledgeService } from '../../rag/index.js'
import type { Project, User } from '../../store/index.js'
import { decodeCursor, encodeCursor } from '../cursor.js'

/** `plinth://knowledge/<itemId>`: a knowledge item as an MCP resource. */
const knowledgeUri = /^plinth:\/\/knowledge\/([0-9A-Z]{26})$/

/** The name of the prompt that carries a project's agent profile. */
export const profilePrompt = 'agent_profile'

/** Characters of an item's text a `resources/read` returns; longer items are cut, and say so. */
const maxResourceChars = 512 * 1024

/** A resource or prompt the caller may not see, or that does not exist (the protocol's "not found"). */
export class McpContentNotFound extends Error {}

/**
 * What `/mcp/projects/:id` offers besides tools (docs/mcp.md): the project's knowledge items the
 * caller may see as resources, and its agent profile (system prompt) as a prompt. `/mcp` without a
 * project offers neither.
 */
export class McpContent {
  readonly #knowledge: KnowledgeService
  readonly #user: User
  readonly #project: Project | null

  constructor(knowledge: KnowledgeService, user: User, project: Project | null) {
    this.#knowledge = knowledge
    this.#user = user
    this.#project = project
  }

  async listResources(cursor: string | undefined): Promise<ListResourcesResult> {
    if (!this.#project) return { resources: [] }
    const page = await this.#knowledge.list(this.#user, this.#project.id, { limit: 100, after: readCursor(cursor) })
    const nextCursor = encodeCursor(page.nextCursor)
    return {
      resources: page.items.map((item) => ({
        uri: `plinth://knowledge/${item.id}`,
        name: item.filename ?? item.title,
        title: item.title,
        mimeType: 'text/plain',
        size: item.byteSize,
        description: `Knowledge item (${item.status}, ${item.ingestStatus === 'ready' ? `${item.chunkCount} ${item.chunkCount === 1 ? 'chunk' : 'chunks'}` : item.ingestStatus}) of project ${this.#project?.name ?? ''}`,
      })),
      ...(nextCursor && { nextCursor }),
    }
  }

  /** The item's extracted text. */
  async readResource(uri: string): Promise<ReadResourceResult> {
    const id = knowledgeUri.exec(uri)?.[1]
    if (!this.#project || !id) throw new McpContentNotFound(`Resource ${uri} not found`)
    const item = await this.#knowledge.item(this.#user, id).catch(() => undefined)
    if (!item || item.projectId !== this.#project.id) throw new McpContentNotFound(`Resource ${uri} not found`)
    const body = await this.#knowledge.text(item, maxResourceChars)
    if (!body)
      throw new McpContentNotFound(`Resource ${uri} is not readable yet: its ingestion is ${item.ingestStatus}`)
    const text =
      body.length > body.text.length
        ? `${body.text}\n\n[TRUNCATED: ${body.length} characters in all; search the rest with the knowledge_search tool]`
        : body.text
    return { contents: [{ uri, mimeType: 'text/plain', text }] }
  }

  listPrompts(): ListPromptsResult {
    if (!this.#project?.systemPrompt) return { prompts: [] }
    return {
      prompts: [
        {
          name: profilePrompt,
          title: `${this.#project.name}: agent profile`,
          description: "The project's system prompt: what its agents are told in every run",
        },
      ],
    }
  }

  async getPrompt(name: string): Promise<GetPromptResult> {
    if (name !== profilePrompt || !this.#project?.systemPrompt) throw new McpContentNotFound(`Prompt ${name} not found`)
    return {
      description: `The agent profile of project ${this.#project.name}`,
      messages: [{ role: 'user', content: { type: 'text', text: this.#project.systemPrompt } }],
    }
  }
}

function readCursor(cursor: string | undefined): string | undefined {
  try {
    return decodeCursor(cursor)
  } catch {
    throw new McpContentNotFound('Invalid cursor')
  }
}
