// The compiled plinth/client's declarations refer to the API's generated types by their path
// (dist/src/client → ../../openapi/plinth-api.js): a copy beside them keeps them typed when installed.
import { copyFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('..', import.meta.url))
mkdirSync(join(root, 'dist', 'openapi'), { recursive: true })
copyFileSync(join(root, 'openapi', 'plinth-api.d.ts'), join(root, 'dist', 'openapi', 'plinth-api.d.ts'))
