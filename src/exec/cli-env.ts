import type { CliToolSpec } from '../extension/index.js'

/**
 * Git's configuration that runs programs, overridden as if given with `-c` (which wins over a
 * repository's own `.git/config`): the fsmonitor hook, hooks, external diff and the pager.
 */
const gitOverrides: Array<[string, string]> = [
  ['core.fsmonitor', 'false'],
  ['core.hooksPath', '/dev/null'],
  ['core.pager', 'cat'],
  ['core.sshCommand', 'false'],
  ['diff.external', ''],
  ['protocol.allow', 'never'],
]

/**
 * The environment an allowlisted CLI runs with, on top of the filtered base environment (docs/security.md,
 * "allowlisted CLIs"). The work directory is anyone's to fill — `PUT …/files/*` — so a CLI must not
 * take configuration from it or from a home directory: `HOME` and `XDG_CONFIG_HOME` name a directory
 * that does not exist, and git reads no system or global configuration, fetches nothing lazily (a
 * partial clone's `remote.*.uploadpack` is a command), may use no transport at all, and its
 * command-running settings are overridden above the repository's. Then the tool's own `env`.
 */
export function cliEnvironment(spec: Pick<CliToolSpec, 'env'>): Record<string, string> {
  const env: Record<string, string> = {
    HOME: '/nonexistent',
    XDG_CONFIG_HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_NO_LAZY_FETCH: '1',
    GIT_ALLOW_PROTOCOL: 'none',
    GIT_PROTOCOL_FROM_USER: '0',
    GIT_TERMINAL_PROMPT: '0',
    GIT_NO_REPLACE_OBJECTS: '1',
    GIT_CONFIG_COUNT: String(gitOverrides.length),
  }
  gitOverrides.forEach(([key, value], index) => {
    env[`GIT_CONFIG_KEY_${index}`] = key
    env[`GIT_CONFIG_VALUE_${index}`] = value
  })
  return { ...env, ...spec.env }
}
