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
  'testing',
  'webhooks',
  'client',
  'chat',
]

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
  // A module's index.ts is its public face: other modules (and tests, bench, plugins) never
  // import another module's internals.
  // The web console: plain browser modules, served as they are.
  { files: ['console/**/*.js'], languageOptions: { globals: globals.browser, sourceType: 'module' } },
  ...modules.map((module) => ({
    files: [`src/${module}/**/*.ts`],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: `^\\.\\./(?!${module}/)(\\.\\./)*(${modules.join('|')})/(?!index\\.js$).+`,
              message: 'Import another module only through its index.ts.',
            },
          ],
        },
      ],
    },
  })),
  // Routes call module services (ProjectService, KnowledgeService, Accounts, the bus, …), not
  // repositories: from the store they take types and pure views only, and never its db or transactions.
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
              allowImportNames: ['runJson', 'terminalRunStatuses'],
              message: 'Routes call module services, not repositories.',
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "MemberExpression[object.name='store'][property.name=/^(db|transaction)$/]",
          message: 'Routes call module services, not the database.',
        },
        {
          selector: "MemberExpression[object.property.name='store'][property.name=/^(db|transaction)$/]",
          message: 'Routes call module services, not the database.',
        },
      ],
    },
  },
  {
    files: ['src/server/routes/**/*.ts', 'src/store/pglite/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: `^\\.\\./\\.\\./(${modules.join('|')})/(?!index\\.js$).+`,
              message: 'Import another module only through its index.ts.',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['src/extension/**/*.ts', 'plugins/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        // Plugins see what the package exports: plinth/extension and (in their tests) plinth/testing.
        {
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
