import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { configValidatorSource, validatorFile } from '../scripts/config-validator.js'
import { configurationFile, configurationPage, errorsFile, errorsPage } from '../scripts/generate-docs.js'

/** Where two texts first differ, as a readable message instead of a page-long diff. */
function firstDifference(generated: string, committed: string): string {
  const a = generated.split('\n')
  const b = committed.split('\n')
  const line = a.findIndex((text, index) => text !== b[index])
  return line < 0
    ? `the committed page has ${b.length - a.length} extra lines`
    : `first difference at line ${line + 1}: ${JSON.stringify(a[line])} vs ${JSON.stringify(b[line])}`
}

// The reference pages written from the code: a change to the problem catalogue or the config
// definition (or their notes) without `npm run docs` fails here.
describe('generated reference pages', () => {
  for (const [name, file, page] of [
    ['docs/reference/errors.md', errorsFile, errorsPage],
    ['docs/reference/configuration.md', configurationFile, configurationPage],
    ['src/app/config-validator.generated.ts', validatorFile, configValidatorSource],
  ] as const) {
    it(`${name} is up to date`, async () => {
      const generated = page()
      const committed = await readFile(file, 'utf8')
      if (generated !== committed)
        throw new Error(`${name} is stale (${firstDifference(generated, committed)}); run npm run docs`)
      expect(generated).toMatch(/\| |validateFile/)
    })
  }

  it('every problem code and every setting has its row', async () => {
    const { problemCatalogue } = await import('../src/server/index.js')
    const { configSettings } = await import('../src/app/index.js')
    const errors = errorsPage()
    for (const code of Object.keys(problemCatalogue)) expect(errors).toContain(`| \`${code}\` |`)
    const configuration = configurationPage()
    for (const setting of configSettings()) expect(configuration).toContain(`| \`${setting.key}\` |`)
    for (const env of configSettings().flatMap((setting) => setting.env))
      expect(configuration).toContain(`\`${env.name}\``)
  })
})
