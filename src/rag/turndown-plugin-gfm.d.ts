// The package ships no types; only the table rule is used.
declare module '@joplin/turndown-plugin-gfm' {
  import type TurndownService from 'turndown'
  export function tables(service: TurndownService): void
}
