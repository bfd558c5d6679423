/** `npm run surface`: writes surface.txt from the extension surface (see scripts/surface.ts). */
import { writeFileSync } from 'node:fs'
import { generateSurface, surfaceFile } from './surface.js'

writeFileSync(surfaceFile, generateSurface())
console.log(`wrote ${surfaceFile}`)
