/**
 * The Python a PyPI agent's venv is made with, as install-script lines that set `$py`: the image's own when it is
 * new enough, else Debian's (apt), else on a Debian release whose Python is too old (bookworm has 3.11) the
 * `python3.X` package of the next release (trixie: 3.13), installed beside the image's python3 without replacing it.
 * Python builds from anywhere else (uv python install, pyenv) come from GitHub, which a container may not reach.
 */
export type PythonVersion = readonly [major: number, minor: number];

export const DEFAULT_MIN_PYTHON: PythonVersion = [3, 10];

/** Debian's next release and the Python it ships, for images whose own Debian has an older one. */
const NEXT_DEBIAN = { codename: 'trixie', python: 'python3.13' } as const;

export function pythonInstallLines([major, minor]: PythonVersion): string[] {
  const check = `-c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (${major}, ${minor}))'`;
  const next = NEXT_DEBIAN;
  return [
    'py=',
    `for candidate in python3 ${next.python}; do`,
    `  if command -v "$candidate" >/dev/null && "$candidate" ${check} 2>/dev/null; then py=$(command -v "$candidate"); break; fi`,
    'done',
    'if [ -z "$py" ]; then',
    `  command -v apt-get >/dev/null || { echo "rollout: needs Python >= ${major}.${minor} with venv, and the image has no apt-get" >&2; exit 1; }`,
    '  apt-get update -qq',
    "  candidate=$(apt-cache policy python3 | awk '/Candidate:/ {print $2}')",
    `  if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] && dpkg --compare-versions "$candidate" ge ${major}.${minor}; then`,
    '    echo "rollout: apt-get install python3 python3-venv"',
    '    apt-get install -y -qq --no-install-recommends python3 python3-venv',
    '    py=$(command -v python3)',
    '  elif grep -qx "ID=debian" /etc/os-release 2>/dev/null; then',
    // The next release's source at a low pin: only what is asked for (and its dependencies) comes from it.
    `    echo "rollout: Debian's python3 is $candidate; apt-get install -t ${next.codename} ${next.python} ${next.python}-venv"`,
    "    mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)",
    "    mirror=${mirror:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}",
    `    echo "deb \${mirror:-http://deb.debian.org/debian} ${next.codename} main" > /etc/apt/sources.list.d/rollout-${next.codename}.list`,
    `    printf 'Package: *\\nPin: release n=${next.codename}\\nPin-Priority: 100\\n' > /etc/apt/preferences.d/rollout-${next.codename}`,
    '    apt-get update -qq',
    `    apt-get install -y -qq --no-install-recommends -t ${next.codename} ${next.python} ${next.python}-venv`,
    `    rm -f /etc/apt/sources.list.d/rollout-${next.codename}.list /etc/apt/preferences.d/rollout-${next.codename}`,
    `    py=$(command -v ${next.python})`,
    '  fi',
    '  rm -rf /var/lib/apt/lists/*',
    `  if [ -z "$py" ] || ! "$py" ${check}; then echo "rollout: needs Python >= ${major}.${minor} with venv; apt offers python3 $candidate" >&2; exit 1; fi`,
    'fi',
    'echo "rollout: using $py ($("$py" --version))"',
  ];
}
