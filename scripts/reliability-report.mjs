// Prints the figures the reliability checks recorded (test-artifacts/reliability/*.json) as one table,
// each with its goal. `--clear` removes earlier figures first (npm run reliability does, before the run).
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

const dir = process.env.RELIABILITY_FIGURES ?? fileURLToPath(new URL('../test-artifacts/reliability/', import.meta.url))
if (process.argv.includes('--clear')) {
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  process.exit(0)
}
const files = existsSync(dir)
  ? readdirSync(dir)
      .filter((name) => name.endsWith('.json'))
      .sort()
  : []
const rows = []
for (const file of files) {
  const { mode, at, rows: entries } = JSON.parse(readFileSync(join(dir, file), 'utf8'))
  for (const row of entries)
    rows.push([
      row.check,
      row.figure,
      row.goal,
      row.ok ? 'ok' : 'MISSED',
      `${mode} ${at.slice(0, 16).replace('T', ' ')}`,
    ])
}
if (rows.length === 0) {
  console.log(`no reliability figures in ${dir}`)
  process.exit(0)
}
const header = ['check', 'figure', 'goal', 'met', 'run']
const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column].length)))
const line = (cells) => cells.map((cell, column) => cell.padEnd(widths[column])).join('  ')
console.log(`\nreliability figures (${dir})\n`)
console.log(line(header))
console.log(widths.map((width) => '-'.repeat(width)).join('  '))
for (const row of rows) console.log(line(row))
