/** The settled mark's process name (a copy of `sleep`; at most 15 characters, the kernel's `comm`). */
const SETTLED_NAME = 'rollout-settled';

/**
 * The kill of every process the trial's commands started, in an E2B sandbox. Docker's `kill -9 -1` would take envd
 * (E2B's daemon, through which every command runs) and the VM's own services with it. A real sandbox boots systemd,
 * and envd starts before most services (e2b-dev/infra envd.service.tpl: `DefaultDependencies=no`, "as early as
 * possible"), so sshd, chrony, dbus… start after it. This spares the sandbox's own processes: those that started no
 * later than the settled mark (E2B_SETTLED_MARK, which Rollout starts through envd once the boot has settled, before
 * any command of the trial), or, without the mark, no later than envd itself (PID 1, envd under either of its names,
 * what started before it); and the shell running this and its ancestors (envd among them). Everything else goes,
 * daemons that left their parent included, in rounds until a round finds nothing (a fork bomb refills the table
 * between two kills). Only shell builtins: nothing can be started while the process table is full. Run as root.
 *
 * The mark counts only as envd's own child, or as a child of a process of PPid 0 other than PID 1 (what the stand-in's
 * `docker exec` starts; in a VM only PID 1 and kthreadd have PPid 0), and the earliest one: a process the agent names so later (its parent is not envd) cannot move the line past its daemons;
 * an agent that kills the mark only brings the line back to envd's start (its services die with the agent's).
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
  'b=0; e=0',
  'for d in /proc/[0-9]*; do read -r c 2>/dev/null < $d/comm || continue',
  '  case "$c" in envd | envd.next) read -r s < $d/stat; s=${s##*) }; set -- $s',
  '    { [ "$b" -eq 0 ] || [ "${20}" -lt "$b" ]; } && b=${20} && e=${d#/proc/} ;; esac',
  'done',
  // The settled mark's start time (PPid is field 4: the 2nd after ") "), when it is envd's child.
  'm=0',
  'for d in /proc/[0-9]*; do read -r c 2>/dev/null < $d/comm || continue',
  `  [ "$c" = ${SETTLED_NAME} ] || continue; read -r s < $d/stat; s=\${s##*) }; set -- $s; p=$2`,
  '  t=${20}; g=; [ "$2" -gt 1 ] && { read -r g < /proc/$2/stat; g=${g##*) }; set -- $g; g=$2; } 2>/dev/null',
  '  { [ "$p" = "$e" ] || [ "$p" = 0 ] || [ "$g" = 0 ]; } && { [ "$m" -eq 0 ] || [ "$t" -lt "$m" ]; } && m=$t',
  'done',
  '[ "$m" -gt "$b" ] && b=$m',
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

/**
 * What Rollout runs through envd before a trial's first command: prints the working directory commands start in (the
 * template's, asked here rather than by an exec of its own), waits for systemd's boot to end when systemd is PID 1 (at
 * most 60 s), and lays out the settled mark's program (a copy of `sleep`). Then E2B_SETTLED_MARK starts it.
 */
export const E2B_SETTLE = [
  'pwd',
  '{ read -r c < /proc/1/comm; [ "$c" != systemd ] || timeout 60 systemctl is-system-running --wait; } >/dev/null 2>&1',
  `mkdir -p /run/rollout && cp "$(command -v sleep)" /run/rollout/${SETTLED_NAME}`,
].join('\n');

/**
 * The settled mark, started in the background as envd's own child once the boot has settled: it sleeps for the
 * sandbox's life, and what runs before it is the sandbox's own (see E2B_KILL_ALL). Its start time is its fork's, so
 * this command itself must not wait. Without it (no `sleep` in the image) the kill of all falls back to envd's start.
 */
export const E2B_SETTLED_MARK = `exec /run/rollout/${SETTLED_NAME} infinity`;
