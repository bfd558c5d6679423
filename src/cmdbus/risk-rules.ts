import type { Risk } from '../extension/index.js'

/** One built-in rule for shell command text. Built-in rules cannot be edited or switched off. */
interface RiskRule {
  id: string
  description: string
  pattern: RegExp
  /**
   * `shell words`: the rule reads the line as the shell splits it into words — a quoted word that is
   * one plain word loses its quotes (`"eval"`, `| "sh"`), other quoted text is left out (an awk
   * script's `$1`, `grep -E "bash|zsh"`), except a double-quoted expansion (`"$CMD"`), and backslashes
   * escape (`\\eval`). Otherwise it reads the line as written, and again without quotes and backslashes.
   */
  reads?: 'shell words'
}

/** What matched: the rule id and why it matters. */
export interface MatchedRule {
  id: string
  description: string
  line: number
}

export interface CommandLineRisk {
  risk: Risk
  matchedRules: MatchedRule[]
}

/** Device files that are harmless to write to (`> /dev/null`, `2> /dev/tty`, `of=/dev/null`). */
const harmlessDevices = '(null|zero|stdout|stderr|stdin|tty|fd/\\d+)(?![\\w/])'
/** A system path as a whole path segment (`/etc`, `/etc/hosts`; not `/etcetera` or `./etc`). */
const systemPaths = `(/(etc|boot|bin|sbin|usr|lib|lib64|var/lib|sys|proc)(?![^/\\s;&|)'"])|/dev/(?!${harmlessDevices})\\w)`
/**
 * The words of the same simple command (stops at `;`, `&`, `|`, redirections and parentheses),
 * at most 256 of them so that a long line of repeated words stays linear.
 */
const words = String.raw`(\s+[^\s;&|<>()]+){0,256}\s+`
/**
 * A command's leading option words (`sudo -E`, `env -i`), at most 16 and none spanning `;&|`, so that
 * a long line of repeated flags stays linear.
 */
const flags = String.raw`(-[^\s;&|]+\s+){0,16}`
/** Commands that run the command that follows them (`sudo rm`, `env X=1 sh`, `timeout 5 sh`). */
const wrappers = String.raw`((sudo|env|exec|command|builtin|nohup|nice|time|xargs|timeout(\s+[\d.]+[smhd]?)?)\s+${flags}|\w+=[^\s;&|]*\s+){0,8}`
/** A program name in command position (not `--rm`, `norm`, `rm.sh`). */
const program = (names: string): string => String.raw`(?<![\w.-])(${names})`

const builtInRules: RiskRule[] = [
  {
    id: 'recursive_forced_delete',
    description: 'recursive forced delete (rm -rf)',
    // rm with a recursive flag (-r, -R, --recursive or in a bundle such as -Rf) and a force flag anywhere among its words.
    pattern: new RegExp(
      String.raw`${program('rm')}(?=${words}(-[a-zA-Z]*[rR]|--recursive\b))(?=${words}(-[a-zA-Z]*f|--force\b))`,
    ),
  },
  {
    id: 'disk_write',
    description: 'raw disk write (dd / mkfs / writes to a block device)',
    pattern: new RegExp(
      String.raw`\bdd\s+[^\n]*\bof=/dev/(?!${harmlessDevices})|\b(mkfs(\.\w+)?|mke2fs|wipefs|fdisk|parted)\b|>\s*/dev/(sd|hd|nvme|vd|xvd|mmcblk)\w*`,
    ),
  },
  {
    id: 'shutdown',
    description: 'shutdown, reboot or halt',
    pattern:
      /(^\s*|[;&|]\s*|\bsudo\s+(-[^\s;&|]+\s+){0,16})([^\s;&|]*\/)?(shutdown|reboot|halt|poweroff|init\s+[06])(?![\w.-])|\bsystemctl\s+(poweroff|reboot|halt)\b/,
  },
  {
    id: 'pipe_to_shell',
    description: 'piping a download into a shell',
    pattern:
      /\b(curl|wget|fetch)\b[^\n]*(?<!\|)\|(?!\|)\s*(sudo\s+(-[^\s;&|]+\s+){0,16})?([^\s;&|]*\/)?(ba|z|da|k)?sh\b|\b(ba|z)?sh\s+<\(\s*(curl|wget)\b/,
  },
  {
    id: 'fork_bomb',
    description: 'fork bomb',
    pattern: /(?<![\w:])([a-zA-Z_:][\w:]*)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}\s*;\s*\1/,
  },
  {
    id: 'chmod_world_writable_root',
    description: 'recursive chmod 777 on / or a system path',
    pattern: new RegExp(`\\bchmod\\s+(-[a-zA-Z]*R[a-zA-Z]*\\s+|--recursive\\s+)[0-7]?777\\s+(/(\\s|$)|${systemPaths})`),
  },
  {
    id: 'system_path_write',
    description: 'writing to a system path',
    pattern: new RegExp(
      [
        // a redirection into a system path
        `>{1,2}\\s*${systemPaths}`,
        // tee, mv, rm, chown, chmod, chgrp: any operand in a system path is modified
        `${program('tee|mv|rm|chown|chmod|chgrp')}${words}${systemPaths}`,
        // cp, ln, install: only the last operand (the destination) is written; reading from /etc is fine
        `${program('cp|ln|install')}${words}${systemPaths}[^\\s;&|]*\\s*($|[;&|])`,
      ].join('|'),
    ),
  },
  {
    id: 'delete_root',
    description: 'deleting / or the home directory',
    pattern: new RegExp(String.raw`${program('rm')}${words}"?(/|~|\$HOME|\$\{HOME\})"?/?\*?(?=$|[\s;&|])`),
  },
  {
    id: 'pipe_into_shell',
    description: 'piping text into a shell (what runs is not in the command)',
    // Read with quoted arguments out (`grep -E "bash|zsh"` pipes nothing), quoted words kept (`| "sh"`).
    pattern: new RegExp(
      [
        String.raw`(?<!\|)\|(?!\|)\s*${wrappers}([^\s;&|]*/)?(ba|z|da|k)?sh(?![\w.-])`,
        // a here-string, a file or a process substitution as the shell's input
        String.raw`${program('(ba|z|da|k)?sh')}\s+${flags}(<<<|<\s*\(|<\s*[^\s<&])`,
      ].join('|'),
    ),
    reads: 'shell words',
  },
  {
    id: 'command_built_at_run_time',
    description:
      'a command built at run time (eval, $(…), `…`, $\'…\', {a,b} or a variable in command position, sh -c "$(…)")',
    // Command position: the line's start, after ; & | ( { or inside $( or backticks, after then/do/else,
    // after sudo/env/timeout/… and assignments; the word there holds an expansion, or is eval.
    pattern: new RegExp(
      [
        String.raw`(^|[;&|({\`]|\$\(|\b(then|do|else)\s)\s*${wrappers}(?!\w+=)([^\s;&|()\`]*\$|\`|\{[^\s}]*,|eval(?![\w.-]))`,
        String.raw`${program('(ba|z|da|k)?sh')}\s+${flags}-c\s+"?(\$|\`)`,
      ].join('|'),
    ),
    reads: 'shell words',
  },
  {
    id: 'find_delete',
    description: 'deleting files with find (-delete, -exec rm)',
    // Bounded like `words`, so that a line of many `find`s stays linear.
    pattern: new RegExp(
      String.raw`${program('find')}(\s+[^\s;&|<>]+){0,256}?\s+-(delete\b|exec(dir)?\s+([^\s;&|]*/)?(rm|shred|unlink)(?![\w.-]))`,
    ),
  },
  {
    id: 'recursive_delete_in_script',
    description: "a script's recursive delete (shutil.rmtree, fs.rm with recursive, FileUtils.rm_rf, rimraf)",
    // Calls, not words: `grep -rn rmtree src` or `npm ls rimraf` delete nothing.
    pattern: new RegExp(
      [
        String.raw`\b(rmtree|remove_tree)\s*\(`,
        String.raw`\brm_rf\b\s*[('"]`,
        String.raw`\.(rm|rmSync|rmdir|rmdirSync)\s*\([^\n)]{0,200}recursive`,
        String.raw`(^|[;&|]\s*|\bnpx\s+(-\S+\s+){0,4})rimraf\s`,
      ].join('|'),
    ),
  },
  {
    id: 'privilege_escalation',
    description: 'running as root (sudo / su)',
    pattern: /(^\s*|[;&|]\s*)(sudo\s|su(\s|$))/,
  },
]

/**
 * Classifies a shell command string. Any line matching a built-in rule or an operator keyword
 * (plain, case-sensitive substring) makes it high risk; every match names its rule.
 */
export function classifyCommandLine(text: string, operatorKeywords: readonly string[] = []): CommandLineRisk {
  const matchedRules: MatchedRule[] = []
  const lines = text.split(/\r?\n/)
  lines.forEach((line, index) => {
    // Quotes and backslashes change no command the shell runs (`r\m -rf`, `"rm" -rf`, `> "/etc/x"`), so
    // the rules read the line without them too.
    const unquoted = line.replace(/\\(.)/g, '$1').replace(/['"]/g, '')
    const words = shellWords(line)
    for (const rule of builtInRules) {
      const matches =
        rule.reads === 'shell words'
          ? rule.pattern.test(words)
          : rule.pattern.test(line) || (unquoted !== line && rule.pattern.test(unquoted))
      if (matches) matchedRules.push({ id: rule.id, description: rule.description, line: index + 1 })
    }
    for (const keyword of operatorKeywords) {
      if (keyword && line.includes(keyword))
        matchedRules.push({ id: `keyword:${keyword}`, description: `operator keyword "${keyword}"`, line: index + 1 })
    }
  })
  return { risk: matchedRules.length > 0 ? 'high' : 'medium', matchedRules }
}

/**
 * A line as the shell reads its words, for the rules that look at command position: quoted text that is
 * one plain word is that word (`"eval"`, `e''val`), a double-quoted expansion stays one (`"$CMD"`), any
 * other quoted text is left out (`'{print $1}'`, `"bash|zsh"`), and a backslash escapes what follows.
 */
function shellWords(line: string): string {
  return line.replace(
    /\\(.)|'([^']*)'|"((?:[^"\\]|\\.)*)"/g,
    (_match, escaped?: string, single?: string, double?: string) => {
      if (escaped !== undefined) return escaped
      const text = single ?? double ?? ''
      if (/^[^\s|;&<>()`$'"\\]*$/.test(text)) return text
      if (double !== undefined && /^\$(\w+|\{\w+\}|\([^)]*\))$/.test(text)) return text
      return "''"
    },
  )
}
