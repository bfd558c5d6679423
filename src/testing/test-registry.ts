import type {
  CliToolSpec,
  CommandHandler,
  CommandSpec,
  JsonValue,
  McpServerSpec,
  ProjectAuthzAdapter,
  Registry,
  ResourceAuthorizer,
  Skill,
} from '../extension/index.js'

type Params = { [key: string]: JsonValue }

/** A command as the test registry holds it. */
export interface CollectedCommand {
  spec: CommandSpec<Params>
  handler: CommandHandler<Params>
}

/** A Registry that only collects; a duplicate command id or a second ProjectAuthz adapter throws, as in Plinth. */
export class TestRegistry implements Registry {
  readonly commands = new Map<string, CollectedCommand>()
  readonly skills: Skill[] = []
  readonly notes: string[] = []
  readonly authorizers = new Map<string, ResourceAuthorizer>()
  readonly cliTools: CliToolSpec[] = []
  readonly mcpServers: McpServerSpec[] = []
  projectAuthz: ProjectAuthzAdapter | null = null

  addCommand<P = Params>(spec: CommandSpec<P>, handler: CommandHandler<P>): void {
    if (this.commands.has(spec.id)) throw new Error(`command ${spec.id} is already registered`)
    this.commands.set(spec.id, {
      spec: spec as unknown as CommandSpec<Params>,
      handler: handler as unknown as CommandHandler<Params>,
    })
  }

  addSkill(skill: Skill): void {
    this.skills.push(skill)
  }

  note(text: string): void {
    this.notes.push(text)
  }

  registerResourceAuthorizer(kind: string, authorizer: ResourceAuthorizer): void {
    if (this.authorizers.has(kind)) throw new Error(`resource kind ${kind} already has an authorizer`)
    this.authorizers.set(kind, authorizer)
  }

  registerProjectAuthz(adapter: ProjectAuthzAdapter): void {
    if (this.projectAuthz) throw new Error('a ProjectAuthz adapter is already registered')
    this.projectAuthz = adapter
  }

  addCliTool(spec: CliToolSpec): void {
    if (this.cliTools.some((tool) => tool.name === spec.name))
      throw new Error(`CLI tool ${spec.name} is already registered`)
    this.cliTools.push(spec)
  }

  addMcpServer(spec: McpServerSpec): void {
    if (this.mcpServers.some((server) => server.name === spec.name))
      throw new Error(`MCP server ${spec.name} is already registered`)
    this.mcpServers.push(spec)
  }

  /** The registered command, or an error naming the ones that exist. */
  command(id: string): CollectedCommand {
    const command = this.commands.get(id)
    if (!command) throw new Error(`no command ${id}; registered: ${[...this.commands.keys()].join(', ')}`)
    return command
  }
}
