/** Variables a program may see, whatever the server's environment holds. */
const allowed = ['LANG', 'LC_ALL', 'LC_CTYPE', 'TZ']

/** Names that hold secrets; never passed, even when asked for. */
const secret =
  /(_API_KEY|_TOKEN|_SECRET|_PASSWORD|_CREDENTIALS?)$|^(OPENAI|ANTHROPIC|AZURE|AWS|GOOGLE|GCP|GITHUB|HF|HUGGINGFACE|DEEPSEEK|DOUBAO|PLINTH|DATABASE|PG)_/i

/**
 * The environment of an executed program, built from an allowlist (never inherited): a fixed PATH,
 * HOME at the work directory, a few locale variables from the server's environment, and `extra`
 * (its secret-looking names dropped too).
 */
export function buildExecEnv(
  home: string,
  extra: Record<string, string> = {},
  source: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const env: Record<string, string> = {
    PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: home,
    TMPDIR: '/tmp',
    TERM: 'dumb',
    LANG: 'C.UTF-8',
    PYTHONDONTWRITEBYTECODE: '1',
    PYTHONUNBUFFERED: '1',
  }
  for (const name of allowed) {
    const value = source[name]
    if (value !== undefined && !secret.test(name)) env[name] = value
  }
  for (const [name, value] of Object.entries(extra))
    if (!secret.test(name) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) env[name] = value
  return env
}

/** Whether a variable name looks like it holds a secret. */
export function isSecretName(name: string): boolean {
  return secret.test(name)
}
