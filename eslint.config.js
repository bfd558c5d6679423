import js from '@eslint/js'
import tseslint from 'typescript-eslint'
import globals from 'globals'

const modules = [
  'app',
  'server',
  'runmgr',
  'llm',
  'cmdbus',
  'mcp',
  'rag',
  'exec',
  'extension',
  'store',
  'resources',
  'testing',
  'webhooks',
  'client',
  'chat',
]

// Kysely (and its `sql`) stays inside src/store: other code calls the store's named functions, and tests
// and bench reach raw SQL only through src/store/test-access.ts. Every `no-restricted-imports` below
// repeats the ban, since a later config's options replace an earlier one's for the same rule.
const kyselyInStoreOnly = {
  name: 'kysely',
  message: 'Kysely and sql stay inside src/store: call a named store function (tests: src/store/test-access.ts).',
}
// …nor through a dynamic `import('kysely')` (an `import()` type is refused by consistent-type-imports).
const kyselyExpressions = [{ selector: "ImportExpression[source.value='kysely']", message: kyselyInStoreOnly.message }]
const testAccessInTestsOnly = {
  regex: '(^|/)store/test-access(\\.js)?$',
  message: "The store's test accessor is for test/, bench/ and *.test.ts only.",
}
/** Another module only through its index.ts (a `*.test.ts` may also take the store's test accessor). */
const moduleBoundary = (module, tests) => ({
  regex: `^\\.\\./(?!${module}/)(\\.\\./)*(${modules.join('|')})/(?!index\\.js$${tests ? '|test-access\\.js$' : ''}).+`,
  message: 'Import another module only through its index.ts.',
})

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', 'data/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        fetch: 'readonly',
        TextDecoder: 'readonly',
        TextEncoder: 'readonly',
        Blob: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      'no-console': 'off',
    },
  },
  {
    files: ['**/*.ts'],
    ignores: ['src/store/**'],
    rules: {
      'no-restricted-imports': ['error', { paths: [kyselyInStoreOnly], patterns: [testAccessInTestsOnly] }],
      'no-restricted-syntax': ['error', ...kyselyExpressions],
    },
  },
  // The schema's type generator (npm run db:types) hands kysely-codegen a Kysely over a freshly migrated database.
  {
    files: ['scripts/db-types.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [testAccessInTestsOnly] }] },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', '**/*.test.ts'],
    ignores: ['src/store/**'],
    rules: { 'no-restricted-imports': ['error', { paths: [kyselyInStoreOnly] }] },
  },
  // The store's index.ts names what it exports (no `export *`): its surface is what it means to offer.
  {
    files: ['src/store/index.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        { selector: 'ExportAllDeclaration', message: "Export the store's repositories and types by name." },
      ],
    },
  },
  // A module's index.ts is its public face: other modules (and tests, bench, plugins) never
  // import another module's internals.
  // The web console: plain browser modules, served as they are.
  { files: ['console/**/*.js'], languageOptions: { globals: globals.browser, sourceType: 'module' } },
  ...modules.flatMap((module) =>
    [false, true].map((tests) => ({
      files: [tests ? `src/${module}/**/*.test.ts` : `src/${module}/**/*.ts`],
      rules: {
        'no-restricted-imports': [
          'error',
          { ...(module !== 'store' && { paths: [kyselyInStoreOnly] }), patterns: [moduleBoundary(module, tests)] },
        ],
      },
    })),
  ),
  // Routes call module services (ProjectService, KnowledgeService, Accounts, the bus, …), not
  // repositories: from the store they take types and its status lists only, and never its transactions.
  {
    files: ['src/server/routes/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: '../../store/index.js',
              allowTypeImports: true,
              allowImportNames: ['terminalRunStatuses'],
              message: 'Routes call module services, not repositories.',
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        ...kyselyExpressions,
        {
          selector: "MemberExpression[object.name='store'][property.name='transaction']",
          message: 'Routes call module services, not the database.',
        },
        {
          selector: "MemberExpression[object.property.name='store'][property.name='transaction']",
          message: 'Routes call module services, not the database.',
        },
      ],
    },
  },
  // Two levels down (src/store/pglite is the store's own: Kysely is allowed there).
  ...[
    { files: ['src/server/routes/**/*.ts'], paths: [kyselyInStoreOnly] },
    { files: ['src/store/pglite/**/*.ts'], paths: [] },
  ].map(({ files, paths }) => ({
    files,
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths,
          patterns: [
            {
              regex: `^\\.\\./\\.\\./(${modules.join('|')})/(?!index\\.js$).+`,
              message: 'Import another module only through its index.ts.',
            },
          ],
        },
      ],
    },
  })),
  {
    files: ['src/extension/**/*.ts', 'plugins/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        // Plugins see what the package exports: plinth/extension and (in their tests) plinth/testing.
        {
          paths: [kyselyInStoreOnly],
          patterns: [
            {
              regex: '(^|/)src/(?!(extension|testing)/index\\.js$)',
              message: 'The extension surface and plugins depend on nothing internal.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['src/client/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        // It runs in browsers too: the API's generated types (plinth/openapi) and its own files only.
        {
          paths: [kyselyInStoreOnly],
          patterns: [
            {
              regex: '^\\.\\./',
              message: 'plinth/client depends on nothing internal (it is served to browsers as it is).',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['src/testing/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [kyselyInStoreOnly],
          patterns: [
            {
              regex: '^\\.\\./(?!extension/index\\.js$)',
              message: 'plinth/testing is written against the extension surface alone.',
            },
          ],
        },
      ],
    },
  },
)
