import type { Risk } from '../extension/index.js'

/** One built-in rule for shell command text. Built-in rules cannot be edited or switched off. */
interface RiskRule {
  id: string
  description: string
  pattern: RegExp
  /**
   * Reads what the shell expands: text in single quotes is left out (an awk or jq script's `$1` is not a
   * command), and the line is not read again without its quotes.
   */
  expandedOnly?: true
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
      /(^\s*|[;&|]\s*|\bsudo\s+(-\S+\s+)*)([^\s;&|]*\/)?(shutdown|reboot|halt|poweroff|init\s+[06])(?![\w.-])|\bsystemctl\s+(poweroff|reboot|halt)\b/,
  },
  {
    id: 'pipe_to_shell',
    description: 'piping a download into a shell',
    pattern:
      /\b(curl|wget|fetch)\b[^\n]*(?<!\|)\|(?!\|)\s*(sudo\s+(-\S+\s+)*)?([^\s;&|]*\/)?(ba|z|da|k)?sh\b|\b(ba|z)?sh\s+<\(\s*(curl|wget)\b/,
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
    pattern: /(?<!\|)\|(?!\|)\s*(sudo\s+(-\S+\s+)*)?([^\s;&|]*\/)?(ba|z|da|k)?sh\b(?![.\w-])|\b(ba|z|da|k)?sh\s+<<</,
  },
  {
    id: 'command_built_at_run_time',
    description: 'a command built at run time (eval, $(…), `…` or a variable in command position, sh -c "$(…)")',
    // Command position: the line's start, after ; & | or inside $( or backticks, after sudo/env/exec/….
    pattern:
      /(^|[;&|`]|\$\()\s*((sudo|env|exec|command|nohup|nice|time|xargs)\s+(-\S+\s+)*)*("?\$[({\w]|`|eval(?![\w.-]))|\b(ba|z|da|k)?sh\s+(-\w+\s+)*-c\s+"?(\$\(|`)/,
    expandedOnly: true,
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
    description: "a script's recursive delete (shutil.rmtree, fs.rm with recursive, rm_rf, remove_tree)",
    pattern:
      /\b(shutil\.rmtree|rmtree|rm_rf|remove_tree|rimraf)\b|\b(rm|rmSync|rmdir|rmdirSync)\([^\n)]{0,200}recursive/,
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
    const expanded = line.replace(/'[^']*'/g, "''")
    for (const rule of builtInRules) {
      const matches = rule.expandedOnly
        ? rule.pattern.test(expanded)
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
