import 'vitest'

declare module 'vitest' {
  export interface ProvidedContext {
    /** A migrated PGlite dump each test file loads. */
    pgliteTemplatePath: string
    /** Admin URL of the Postgres server and the migrated template database, or null. */
    postgres: { adminUrl: string; templateDb: string } | null
  }
}
