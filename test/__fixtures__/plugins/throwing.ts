import { definePlugin } from '../../../src/extension/index.js'

export default definePlugin({
  name: 'throwing',
  version: '1.0.0',
  surface: '^1.0.0',
  setup() {
    throw new Error('cannot reach its backend')
  },
})
