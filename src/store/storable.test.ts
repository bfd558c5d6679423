import { describe, expect, it } from 'vitest'
import { storableJson, storableJsonText, storableParameters, storableText } from './storable.js'

describe('storable values', () => {
  it('text loses NUL, nothing else', () => {
    expect(storableText('a\0b\0')).toBe('a\uFFFDb\uFFFD')
    expect(storableText('plain 中文 😀')).toBe('plain 中文 😀')
  })

  it('JSON loses \\u0000 and lone surrogates, keeps pairs, escaped backslashes and ordinary escapes', () => {
    expect(storableJson({ out: 'a\0b' })).toBe('{"out":"a\\ufffdb"}')
    expect(storableJson({ lone: 'x\uD800y', low: '\uDC00' })).toBe('{"lone":"x\\ufffdy","low":"\\ufffd"}')
    expect(storableJsonText('"\\ud83d\\ude00"')).toBe('"\\ud83d\\ude00"')
    // The six characters \u0000 typed into a string are not a NUL.
    expect(JSON.parse(storableJson({ code: 'printf "\\u0000"' }))).toEqual({ code: 'printf "\\u0000"' })
    expect(storableJsonText('"\\\\\\u0000"')).toBe('"\\\\\\ufffd"')
    expect(storableJsonText('"tab\\there\\n\\u00e9"')).toBe('"tab\\there\\n\\u00e9"')
    expect(JSON.parse(storableJson({ [`k\0`]: ['\0', { deep: '\uDFFF' }] }))).toEqual({
      'k\uFFFD': ['\uFFFD', { deep: '\uFFFD' }],
    })
  })

  it('parameters: strings and objects made safe, arrays, buffers and dates untouched, the same array when clean', () => {
    const clean = ['a', 1, null, ['x'], new Date(0), Buffer.from('\0')]
    expect(storableParameters(clean)).toBe(clean)
    expect(storableParameters(['a\0', { b: '\0' }, ['\0']])).toEqual(['a\uFFFD', '{"b":"\\ufffd"}', ['\0']])
  })
})
