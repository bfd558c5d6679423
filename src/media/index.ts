export { imageMediaTypes, probeImage, type ImageInfo, type ImageMediaType } from './image-probe.js'
