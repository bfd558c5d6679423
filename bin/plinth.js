#!/usr/bin/env node
// Entry point of the `plinth` CLI. Runs the compiled build when present (npm start builds it);
// otherwise runs the TypeScript sources through tsx so a fresh checkout works without a build step.
import { existsSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'

const built = fileURLToPath(new URL('../dist/src/app/main.js', import.meta.url))
if (existsSync(built) && process.env.PLINTH_FROM_SOURCE !== '1') {
  await import(pathToFileURL(built).href)
} else {
  const { register } = await import('tsx/esm/api')
  register()
  await import('../src/app/main.ts')
}
