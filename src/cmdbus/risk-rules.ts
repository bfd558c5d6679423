import type { Risk } from '../extension/index.js'

/** One built-in rule for shell command text. Built-in rules cannot be edited or switched off. */
interface RiskRule {
  id: string
  description: string
  pattern: RegExp
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

const systemPaths = '(/etc|/boot|/bin|/sbin|/usr|/lib|/lib64|/var/lib|/sys|/proc|/dev/(?!null\\b|stdout\\b|stderr\\b))'

const builtInRules: RiskRule[] = [
  { id: 'recursive_forced_delete', description: 'recursive forced delete (rm -rf)', pattern: /\brm\s+(-[a-zA-Z]*r[a-zA-Z]*f[a-zA-Z]*|-[a-zA-Z]*f[a-zA-Z]*r[a-zA-Z]*|(-[a-zA-Z]+\s+)*(-r|-R|--recursive)\s+(-[a-zA-Z]+\s+)*(-f|--force)|(-[a-zA-Z]+\s+)*(-f|--force)\s+(-[a-zA-Z]+\s+)*(-r|-R|--recursive))\b/ },
  { id: 'disk_write', description: 'raw disk write (dd / mkfs / writes to a block device)', pattern: /\b(dd\s+[^\n]*\bof=\/dev\/|mkfs(\.\w+)?\b|mke2fs\b|wipefs\b|fdisk\b|parted\b|>\s*\/dev\/(sd|hd|nvme|vd|xvd|mmcblk)\w*)/ },
  { id: 'shutdown', description: 'shutdown, reboot or halt', pattern: /(^|[;&|]\s*|\bsudo\s+)(shutdown|reboot|halt|poweroff|init\s+[06])\b|\bsystemctl\s+(poweroff|reboot|halt)\b/ },
  { id: 'pipe_to_shell', description: 'piping a download into a shell', pattern: /\b(curl|wget|fetch)\b[^\n|]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b|\b(ba|z)?sh\s+<\(\s*(curl|wget)\b/ },
  { id: 'fork_bomb', description: 'fork bomb', pattern: /:\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:/ },
  { id: 'chmod_world_writable_root', description: 'recursive chmod 777 on / or a system path', pattern: new RegExp(`\\bchmod\\s+(-[a-zA-Z]*R[a-zA-Z]*\\s+|--recursive\\s+)[0-7]?777\\s+(/(\\s|$)|${systemPaths})`) },
  { id: 'system_path_write', description: 'writing to a system path', pattern: new RegExp(`(>{1,2}\\s*${systemPaths}|\\btee\\s+(-a\\s+)?${systemPaths}|\\b(mv|cp|rm|chown|chmod|ln)\\s+[^\\n]*\\s${systemPaths}/)`) },
  { id: 'delete_root', description: 'deleting / or the home directory', pattern: /\brm\s+[^\n]*\s(\/|~|\$HOME|\/\*)(\s|$)/ },
  { id: 'privilege_escalation', description: 'running as root (sudo / su)', pattern: /(^|[;&|]\s*)(sudo|su)\s/ },
]

/**
 * Classifies a shell command string. Any line matching a built-in rule or an operator keyword
 * (plain, case-sensitive substring) makes it high risk; every match names its rule.
 */
export function classifyCommandLine(text: string, operatorKeywords: readonly string[] = []): CommandLineRisk {
  const matchedRules: MatchedRule[] = []
  const lines = text.split(/\r?\n/)
  lines.forEach((line, index) => {
    for (const rule of builtInRules) {
      if (rule.pattern.test(line)) matchedRules.push({ id: rule.id, description: rule.description, line: index + 1 })
    }
    for (const keyword of operatorKeywords) {
      if (keyword && line.includes(keyword)) matchedRules.push({ id: `keyword:${keyword}`, description: `operator keyword "${keyword}"`, line: index + 1 })
    }
  })
  return { risk: matchedRules.length > 0 ? 'high' : 'medium', matchedRules }
}
