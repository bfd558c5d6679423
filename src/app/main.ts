// Process entry of the `plinth` CLI (bin/plinth.js loads this).
import { holdYoungGeneration } from './young-generation.js'

// Before anything else loads: `plinth [serve]` starts with a small young generation (young-generation.ts).
const command = process.argv.slice(2).find((arg) => !arg.startsWith('-'))
if (command === undefined || command === 'serve') holdYoungGeneration()
else {
  // `plinth users list | head -1`: a reader that stops early ends the command quietly, not with a stack trace.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error
    process.exit(0)
  })
}
const { runCli } = await import('./cli.js')

const code = await runCli(process.argv.slice(2))
// A pipe takes 64 KiB at a time: exit once what was written is out, not with the rest still queued.
await new Promise<void>((resolve) => process.stdout.write('', () => resolve()))
process.exit(code)
