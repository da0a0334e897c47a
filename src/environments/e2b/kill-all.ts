/**
 * The kill of every process the trial's commands started, in an E2B sandbox. Docker's `kill -9 -1` would take envd
 * (E2B's daemon, through which every command runs) and the VM's own services with it. A real E2B sandbox boots
 * systemd, and envd runs as its unit envd.service, started before most services (e2b-dev/infra
 * orchestrator/.../rootfs/files/envd.service.tpl: `DefaultDependencies=no`); after a live upgrade envd's binary is
 * /usr/bin/envd.next (envd/internal/services/process/upgrade.go:75), so neither start times nor envd's name tell
 * what is whose. Its cgroup does: every command envd starts, and whatever that forks or daemonizes, stays in envd's
 * cgroup (this shell's), while systemd runs each service in a cgroup of its own. So this kills every process in this
 * shell's cgroup but the shell's ancestors (envd among them), PID 1 and a process named envd or envd.*; where no
 * cgroup can be read, every process but those. In rounds until a round finds nothing (a fork bomb refills the table between two kills). Only shell
 * builtins: nothing can be started while the process table is full. Run as root.
 */
export const E2B_KILL_ALL = [
  // The ancestry of this shell.
  'k=" 1 "; p=$$',
  'while [ "$p" -gt 1 ]; do k="$k$p "; q=$p; p=1',
  '  while read -r a b _; do [ "$a" = PPid: ] && p=$b && break; done 2>/dev/null < /proc/$q/status',
  'done',
  // This shell's cgroup (its first line: the whole of it on cgroup v2).
  'g=; read -r g 2>/dev/null < /proc/$$/cgroup',
  'r=0; while [ $r -lt 50 ]; do r=$((r + 1)); n=0',
  '  for d in /proc/[0-9]*; do q=${d#/proc/}',
  '    case "$k" in *" $q "*) continue ;; esac',
  '    h=; read -r h 2>/dev/null < $d/cgroup',
  '    [ "$h" = "$g" ] || continue',
  // envd itself where it is no ancestor of commands (E2B's stand-in runs them beside it), under either name.
  '    c=; read -r c 2>/dev/null < $d/comm; case "$c" in envd | envd.*) continue ;; esac',
  // A zombie is dead already (its parent reaps it).
  '    read -r s 2>/dev/null < $d/stat || continue; s=${s##*) }; set -- $s; [ "$1" = Z ] && continue',
  '    kill -9 $q 2>/dev/null && n=$((n + 1))',
  '  done',
  '  [ $n -eq 0 ] && break',
  'done; true',
].join('\n');
