import { describe, expect, it } from 'vitest'
import type { JsonSchema, JsonValue } from '../extension/index.js'
import { looksSecret, redact, redactEmbedded, redactedMarker, truncateForAudit } from './redact.js'

const jwt = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U'
const pem = '-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\n-----END RSA PRIVATE KEY-----'

describe('redact: values that look like credentials', () => {
  it.each<[label: string, value: string]>([
    ['OpenAI key', 'sk-proj-abcdefghijklmnop1234'],
    ['Anthropic key', 'sk-ant-api03-abcdefghijklmnopqrst'],
    ['Plinth token', `plt_${'a1B2'.repeat(8)}`],
    ['GitHub token', `ghp_${'A'.repeat(36)}`],
    ['GitHub fine-grained token', `github_pat_${'a'.repeat(30)}`],
    ['Slack token', 'xoxb-1234567890-abcdef'],
    ['AWS access key id', 'AKIAIOSFODNN7EXAMPLE'],
    ['JWT', jwt],
    ['Bearer header', 'Bearer abcdefghijklmnopqrstuvwxyz'],
    ['lower-case bearer', 'bearer abcdefghijklmnopqrstuvwxyz'],
    ['PEM private key', pem],
    ['PKCS#8 private key', '-----BEGIN PRIVATE KEY-----\nMIIE'],
    ['OpenSSH private key', '-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl'],
    ['key with surrounding spaces', '  sk-abcdefghijklmnop1234  '],
  ])('hides a %s', (_label, value) => {
    expect(looksSecret(value)).toBe(true)
    expect(redact(value)).toBe(redactedMarker)
    expect(redact({ note: value, list: [value] })).toEqual({ note: redactedMarker, list: [redactedMarker] })
  })

  it.each<[label: string, value: string]>([
    ['a word', 'hello'],
    ['a sentence', 'please reset the staging database'],
    ['a short sk- string', 'sk-short'],
    ['a hyphenated id', 'task-1234567890abcdefgh'],
    ['a short plt_ string', 'plt_short'],
    ['a short bearer', 'Bearer x'],
    ['a public key', '-----BEGIN PUBLIC KEY-----\nMIIB'],
    ['a URL', 'https://example.com/a.b.c?x=1'],
    ['a lone JWT header', 'eyJhbGciOiJIUzI1NiJ9'],
    ['a ULID', '01HZX3K4M5N6P7Q8R9S0T1V2W3'],
    ['a sha256', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
    ['an empty string', ''],
  ])('leaves %s alone', (_label, value) => {
    expect(looksSecret(value)).toBe(false)
    expect(redact(value)).toBe(value)
  })

  it.each<JsonValue>([null, true, false, 0, 42, -1.5, [], {}])('leaves %j alone', (value) => {
    expect(redact(value)).toEqual(value)
  })
})

describe('redact: keys that name a secret', () => {
  it.each([
    'password',
    'passwd',
    'pass',
    'dbPassword',
    'password_confirmation',
    'passphrase',
    'secret',
    'clientSecret',
    'client_secret',
    'token',
    'accessToken',
    'refresh_token',
    'apiKey',
    'api_key',
    'api-key',
    'APIKey',
    'X-Api-Key',
    'OPENAI_API_KEY',
    'privateKey',
    'private_key',
    'secretKey',
    'accessKey',
    'Authorization',
    'credentials',
  ])('hides %s', (key) => {
    expect(redact({ [key]: 'hunter2', name: 'alice' })).toEqual({ [key]: redactedMarker, name: 'alice' })
    expect(redact({ [key]: 1234 })).toEqual({ [key]: redactedMarker })
  })

  it.each([
    'name',
    'description',
    'author',
    'passage',
    'compass',
    'bypass',
    'passport',
    'keyboard',
    'key',
    'monkey',
    'primaryKey',
    'sortKey',
    'tokens',
    'maxTokens',
    'tokenCount',
    'promptTokens',
    'completion_tokens',
    'passwordHint',
  ])('leaves %s alone', (key) => {
    expect(redact({ [key]: 'value' })).toEqual({ [key]: 'value' })
    expect(redact({ [key]: 1000 })).toEqual({ [key]: 1000 })
  })

  it('keeps null and booleans under a secret-looking key, and looks inside objects', () => {
    expect(redact({ password: null, passwordSet: true, secrets: { db: 'plain', apiKey: 'k' } })).toEqual({
      password: null,
      passwordSet: true,
      secrets: { db: 'plain', apiKey: redactedMarker },
    })
  })

  it('does not hide ordinary text that mentions a token', () => {
    expect(redact({ description: 'a token-based approach', query: 'password reset flow' })).toEqual({
      description: 'a token-based approach',
      query: 'password reset flow',
    })
  })
})

describe('redact: fields marked x-sensitive in the schema', () => {
  const schema: JsonSchema = {
    type: 'object',
    properties: {
      note: { type: 'string', 'x-sensitive': true },
      title: { type: 'string' },
      nested: {
        type: 'object',
        properties: { pin: { type: 'string', 'x-sensitive': true }, label: { type: 'string' } },
      },
      list: {
        type: 'array',
        items: {
          type: 'object',
          properties: { code: { type: 'integer', 'x-sensitive': true }, label: { type: 'string' } },
        },
      },
      codes: { type: 'array', items: { type: 'string', 'x-sensitive': true } },
      whole: { type: 'object', 'x-sensitive': true },
      wholeList: { type: 'array', 'x-sensitive': true },
    },
  }

  it.each<[label: string, input: { [key: string]: JsonValue }, output: { [key: string]: JsonValue }]>([
    ['a top-level field', { note: 'call me', title: 'hi' }, { note: redactedMarker, title: 'hi' }],
    [
      'a field of a nested object',
      { nested: { pin: '1234', label: 'door' } },
      { nested: { pin: redactedMarker, label: 'door' } },
    ],
    [
      'a field of each array item',
      {
        list: [
          { code: 1, label: 'a' },
          { code: 2, label: 'b' },
        ],
      },
      {
        list: [
          { code: redactedMarker, label: 'a' },
          { code: redactedMarker, label: 'b' },
        ],
      },
    ],
    ['each item of a sensitive array', { codes: ['111', '222'] }, { codes: [redactedMarker, redactedMarker] }],
    ['a whole object', { whole: { a: 1, b: 'x' } }, { whole: redactedMarker }],
    ['a whole array', { wholeList: [1, 2, 3] }, { wholeList: redactedMarker }],
    ['a number or boolean', { note: 42, title: 'x' }, { note: redactedMarker, title: 'x' }],
    [
      'fields not in the schema, by their values',
      { other: jwt, title: 'plain' },
      { other: redactedMarker, title: 'plain' },
    ],
  ])('hides %s', (_label, input, output) => {
    expect(redact(input, schema)).toEqual(output)
  })

  it('does not change its input', () => {
    const input = { note: 'call me', nested: { pin: '1234', label: 'door' }, codes: ['1'] }
    const copy = structuredClone(input)
    redact(input, schema)
    expect(input).toEqual(copy)
  })
})

describe('truncateForAudit', () => {
  it.each<JsonValue>(['small', 42, null, { a: 1, b: ['x', 'y'] }, 'x'.repeat(16 * 1024 - 2)])(
    'keeps a small value as it is: %#',
    (value) => {
      expect(truncateForAudit(value)).toBe(value)
    },
  )

  it('shortens a big value and says how big it was', () => {
    const value = { text: 'x'.repeat(20_000) }
    const result = truncateForAudit(value) as { truncated: boolean; bytes: number; preview: string }
    expect(result.truncated).toBe(true)
    expect(result.bytes).toBe(Buffer.byteLength(JSON.stringify(value)))
    expect(result.preview.startsWith('{"text":"xxx')).toBe(true)
    expect(Buffer.byteLength(result.preview)).toBeLessThanOrEqual(16 * 1024)
    expect(JSON.stringify(result).length).toBeLessThan(17 * 1024)
  })

  it.each<[label: string, char: string, max: number]>([
    ['two-byte characters', 'é', 101],
    ['three-byte characters', '日', 101],
    ['emoji (surrogate pairs)', '🎉', 101],
    ['emoji at the default limit', '🎉', 16 * 1024],
  ])('cuts %s on a character boundary, within the byte limit', (_label, char, max) => {
    const value = { text: char.repeat(10_000) }
    const result = truncateForAudit(value, max) as { truncated: boolean; bytes: number; preview: string }
    expect(result.truncated).toBe(true)
    expect(result.bytes).toBe(Buffer.byteLength(JSON.stringify(value)))
    expect(Buffer.byteLength(result.preview)).toBeLessThanOrEqual(max)
    expect(Buffer.byteLength(result.preview)).toBeGreaterThan(max - 4)
    // No replacement character and no half surrogate pair: the preview stores cleanly as JSON text.
    expect(result.preview).not.toMatch(/\uFFFD/)
    expect(result.preview).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/)
    expect(result.preview.startsWith(`{"text":"${char}`)).toBe(true)
  })
})

describe('credentials inside a longer value', () => {
  it('are redacted one by one, the rest of the text kept', () => {
    const token = `plt_${'A'.repeat(40)}`
    const text = `password=hunter2 key AKIAABCDEFGHIJKLMNOP then ${token} and ghp_${'x'.repeat(30)}; curl -H "Authorization: Bearer abcdefghijklmnop1234"`
    const result = redact({ content: text }) as { content: string }
    for (const secret of ['hunter2', 'AKIAABCDEFGHIJKLMNOP', token, 'ghp_', 'abcdefghijklmnop1234'])
      expect(result.content).not.toContain(secret)
    expect(result.content).toContain('password=[redacted]')
    expect(result.content).toContain('Bearer [redacted]')
    expect(result.content).toContain('curl -H "Authorization:')
  })

  it('a URL’s password, a variable named for a secret and the password options of clients', () => {
    const lines = [
      'psql postgres://admin:S3cretPassw0rd@db.internal:5432/app',
      'curl https://deploy:TopSecretPw99@git.example.com/repo.git',
      'mysql -u root -pHunter2Hunter2 app',
      'export PGPASSWORD=S3cretPassw0rd MYSQL_PWD=Hunter2Hunter2 SLACK_BOT_TOKEN=abcdefgh1234',
      'sshpass -p Hunter2Hunter2 ssh host',
      'curl -u deploy:TopSecretPw99 https://example.com',
      "mysql -u root -p'S3cretPassw0rd with spaces' app",
      'sshpass -p "Hunter2Hunter2" ssh host',
      'psql postgres://admin:p@S3cretPassw0rd@db.internal/app',
    ]
    const result = redact({ lines }) as { lines: string[] }
    for (const secret of ['S3cretPassw0rd', 'TopSecretPw99', 'Hunter2Hunter2', 'abcdefgh1234', 'with spaces'])
      expect(result.lines.join('\n')).not.toContain(secret)
    expect(result.lines).toEqual([
      'psql postgres://admin:[redacted]@db.internal:5432/app',
      'curl https://deploy:[redacted]@git.example.com/repo.git',
      'mysql -u root -p[redacted] app',
      'export PGPASSWORD=[redacted] MYSQL_PWD=[redacted] SLACK_BOT_TOKEN=[redacted]',
      'sshpass -p [redacted] ssh host',
      'curl -u deploy:[redacted] https://example.com',
      'mysql -u root -p[redacted] app',
      'sshpass -p [redacted] ssh host',
      'psql postgres://admin:[redacted]@db.internal/app',
    ])
  })

  it('takes linear time on crafted megabyte inputs (no pattern backtracks over the whole text)', () => {
    // Without bounded repetitions these took minutes each (quadratic): the test's timeout catches that.
    for (const unit of ['a-', 'a.', 'mysql ', 'curl ', 'curl -u a', 'x://u:', 'sshpass -p ', 'A_', 'password'])
      expect(typeof redactEmbedded(unit.repeat(Math.ceil(1_000_000 / unit.length)))).toBe('string')
  }, 20_000)

  it('leaves ordinary text alone', () => {
    const text =
      'the token count is 12; ask for a password reset; skip the sk-ipped step; see https://example.com:8080/a@b; ssh -p 2222 host; mysql -u root -p app; mysql -P3306 -u root; http://localhost:3000?email=bob@example.com; input_token: 1234'
    expect(redact({ text })).toEqual({ text })
  })
})
