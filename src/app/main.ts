// Process entry of the `plinth` CLI (bin/plinth.js loads this).
import { runCli } from './cli.js'

const code = await runCli(process.argv.slice(2))
process.exit(code)
