import { appendFileSync } from 'node:fs'

let file

export function initialize(data) {
  file = data.file
}

export async function load(url, context, next) {
  if (file) appendFileSync(file, `${url}\n`)
  return next(url, context)
}
