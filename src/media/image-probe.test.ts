import { describe, expect, it } from 'vitest'
import { probeImage } from './image-probe.js'

// Tiny real images (1×1 or 2×3), as their encoders wrote them.
const png2x3 = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEklEQVR4nGP4z8DAwMDAwMAAAAQAAf/pMS8AAAAASUVORK5CYII=',
  'base64',
)
const gif1x1 = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64')
const jpeg1x1 = Buffer.from(
  '/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP//////////////////////////////////////////////////////////////////////////////////////wgALCAABAAEBAREA/8QAFBABAAAAAAAAAAAAAAAAAAAAAP/aAAgBAQABPxA=',
  'base64',
)
const webp1x1 = Buffer.from('UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==', 'base64')

describe('probeImage', () => {
  it('reads the type and dimensions of PNG, GIF, JPEG and WebP from their bytes', () => {
    expect(probeImage(png2x3)).toEqual({ mediaType: 'image/png', width: 2, height: 3 })
    expect(probeImage(gif1x1)).toEqual({ mediaType: 'image/gif', width: 1, height: 1 })
    expect(probeImage(jpeg1x1)).toEqual({ mediaType: 'image/jpeg', width: 1, height: 1 })
    expect(probeImage(webp1x1)).toEqual({ mediaType: 'image/webp', width: 1, height: 1 })
  })

  it('knows nothing else: text, a PDF, a truncated header', () => {
    expect(probeImage(Buffer.from('not an image at all, just text'))).toBeUndefined()
    expect(probeImage(Buffer.from('%PDF-1.7\n'))).toBeUndefined()
    expect(probeImage(png2x3.subarray(0, 10))).toBeUndefined()
  })
})
