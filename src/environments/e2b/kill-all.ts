/**
 * The kill of every process the trial's commands started, in an E2B sandbox. Docker's `kill -9 -1` would take envd
 * (E2B's daemon, through which every command runs) and the VM's own services with it, so this spares what was
 * running before envd's first command: processes that started no later than envd itself (PID 1, envd under either
 * of its names, the VM's services that started before it), and the shell running this and its ancestors (envd among them). Everything else goes, daemons that left
 * their parent included, in rounds until a round finds nothing (a fork bomb refills the table between two kills).
 * Only shell builtins: nothing can be started while the process table is full. Run as root.
 */
export const E2B_KILL_ALL = [
  // The ancestry of this shell.
  'k=" 1 "; p=$$',
  'while [ "$p" -gt 1 ]; do k="$k$p "; q=$p; p=1',
  '  while read -r a b _; do [ "$a" = PPid: ] && p=$b && break; done 2>/dev/null < /proc/$q/status',
  'done',
  // envd's start time (field 22 of /proc/<pid>/stat; 20th after the ") " that ends the command name): the earliest
  // process named envd, or envd.next, its name after a live upgrade execs /usr/bin/envd.next in place (e2b-dev/infra
  // envd/internal/services/process/upgrade.go: DefaultUpgradeBinPath, syscall.Exec; pid and start time are kept).
  // The earliest, so that a process the agent names envd cannot move the line later.
  'b=0',
  'for d in /proc/[0-9]*; do read -r c 2>/dev/null < $d/comm || continue',
  '  case "$c" in envd | envd.next) read -r s < $d/stat; s=${s##*) }; set -- $s',
  '    { [ "$b" -eq 0 ] || [ "${20}" -lt "$b" ]; } && b=${20} ;; esac',
  'done',
  'r=0; while [ $r -lt 50 ]; do r=$((r + 1)); n=0',
  '  for d in /proc/[0-9]*; do q=${d#/proc/}',
  '    case "$k" in *" $q "*) continue ;; esac',
  '    read -r s 2>/dev/null < $d/stat || continue; s=${s##*) }; set -- $s',
  // A zombie is dead already (its parent reaps it).
  '    [ "${20}" -le "$b" ] && continue; [ "$1" = Z ] && continue',
  '    kill -9 $q 2>/dev/null && n=$((n + 1))',
  '  done',
  '  [ $n -eq 0 ] && break',
  'done; true',
].join('\n');
