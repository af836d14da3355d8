/**
 * The POSIX `sh` scripts this blueprint runs on a host, each passed as one quoted word
 * of `sh -c` (see `remoteShellCommand`); their inputs are positional arguments, never
 * spliced into the script text.
 *
 * Why a wrapper, and process groups. Killing the local `ssh` does not stop the remote
 * command: without a terminal, sshd sends it no SIGHUP, and it runs on until it writes
 * to the closed channel, or forever. `ssh -tt` would send SIGHUP, but a pty merges
 * stderr into stdout, rewrites newlines and echoes stdin. So every command runs under
 * `WRAPPER`, which records its process group in the lease's registry on the host,
 * `<root>/.processes/<lease id>/<command id>.pid`, and a timeout, an abort or the end
 * of the lease kills that group with another ssh session (`STOP`), and `destroyLease`
 * kills every group recorded (`DESTROY_LEASE`) before it removes the lease's directory.
 *
 * sshd starts each session's command in a new session (setsid), so the group holds the
 * command and everything it started, and nothing else. A group id is the pid of its
 * leader; the entry also holds the leader's start time, so that a pid reused by a
 * stranger's process is never signalled (a group id is not reused while the group has
 * members, even after its leader exited). Zombies do not count as running: in a
 * container whose init does not reap them they would last forever.
 *
 * The registry handshake, as in `localHosts`: a command writes its entry, then looks for
 * the `closing` marker and the lease directory; a destroy writes the marker, then reads
 * the entries. Whichever comes second sees the other, so no command starts unseen.
 */

/** Shell functions the scripts share. Linux: `/proc`; elsewhere `ps`. */
const FUNCTIONS = `
nap() { sleep 0.1 2>/dev/null || sleep 1; }
# "<pgid> <start time>" of a running (not zombie) process, or failure.
ident() {
  if [ -r /proc/$1/stat ]; then
    read -r s 2>/dev/null </proc/$1/stat || return 1
    set -- \${s##*) }
    [ "$1" != Z ] && echo "$3 \${20}"
  else
    s=$(ps -o pgid= -o lstart= -p $1 2>/dev/null) && [ -n "$s" ] && echo $s
  fi
}
# Does a process of group $1, other than pids $2 and $3, run (zombies aside)?
members() {
  if [ -d /proc/self ]; then
    for s in /proc/[0-9]*/stat; do
      read -r x 2>/dev/null <"$s" || continue
      p=\${s#/proc/}; p=\${p%/stat}
      [ "$p" = "$2" ] || [ "$p" = "$3" ] && continue
      set -- "$1" "$2" "$3" \${x##*) }
      [ "$6" = "$1" ] && [ "$4" != Z ] && return 0
      set -- "$1" "$2" "$3"
    done
    return 1
  fi
  kill -0 -$1 2>/dev/null
}
# Is group $1 still the one recorded with leader start time $2?
ours() {
  members $1 - - || return 1
  cur=$(ident $1) || return 0
  [ "\${cur#* }" = "$2" ]
}
# SIGTERM (and SIGCONT) to group $1, SIGKILL after $2 tenths of a second; fails if it outlives both.
stop() {
  kill -s TERM -- -$1 2>/dev/null; kill -s CONT -- -$1 2>/dev/null
  i=0; while members $1 - - && [ $i -lt $2 ]; do nap; i=$((i+1)); done
  members $1 - - || return 0
  kill -s KILL -- -$1 2>/dev/null
  i=0; while members $1 - - && [ $i -lt 100 ]; do nap; i=$((i+1)); done
  ! members $1 - -
}
`;

/**
 * Runs one command. Arguments: registry directory, command id, lease directory, working
 * directory, the runner (the broker process that supervises the command, as
 * `<machine> <pid> <start time>`: see `ORPHANS`), then `NAME=value` (export) or `NAME` (unset) words, `--`, and the argv.
 *
 * The first thing on stdout is a marker, `\x01` and a letter, which the local side strips:
 * `+` the command starts (what follows is its output), `C` the lease is being destroyed,
 * `G` the lease directory is gone, `D` the working directory is missing, `N` the program
 * is not found or not executable, `E` the registry could not be written. Without a marker
 * the session never reached the wrapper: an ssh failure (exit 255) is told from a command
 * that exits 255. The command runs in a subshell that `exec`s it, so `echo` is the
 * program, never the shell's builtin, and its exit status is the wrapper's.
 */
export const WRAPPER = `
r=$1; f=$1/$2.pid; l=$3; d=$4; runner=$5; shift 5
while [ "$1" != -- ]; do case $1 in *=*) export "$1" ;; *) unset "$1" ;; esac; shift; done; shift
${FUNCTIONS}
me=$(ident $$) || { printf '\\001E'; echo 'slipway: cannot read this process (neither /proc nor ps)' >&2; exit 1; }
pg=\${me%% *}
lead=$(ident $pg) || lead="$pg -"
mkdir -p "$r" 2>/dev/null && printf '%s\\n%s\\n' "$lead" "$runner" >"$f" || { printf '\\001E'; echo "slipway: cannot write $f" >&2; exit 1; }
refuse() { rm -f "$f"; rmdir "$r" 2>/dev/null; printf "\\001$1"; exit 1; }
[ -e "$r/closing" ] && refuse C
[ -d "$l" ] || refuse G
cd -- "$d" 2>/dev/null || refuse D
case $1 in */*) [ -f "$1" ] && [ -x "$1" ] ;; *) command -v "$1" >/dev/null 2>&1 ;; esac || refuse N
printf '\\001+'
(exec "$@"); rc=$?
# Something it started in the background still runs: the entry stays, for the destroy to stop it.
members $pg $$ $pg || rm -f "$f"
exit $rc
`;

/** Stops one command's process group. Arguments: its entry file, the grace period in tenths of a second. */
export const STOP = `
${FUNCTIONS}
read -r pg st 2>/dev/null <"$1" || exit 0
[ -n "$pg" ] || exit 0
if ours $pg "$st"; then stop $pg $2 || { echo "slipway: process group $pg still runs after SIGTERM and SIGKILL" >&2; exit 3; }; fi
rm -f "$1"
`;

/** Creates a lease's directory. Argument: the directory. */
export const CREATE_LEASE = `mkdir -p -- "$1"`;

/**
 * Stops every process group of a lease's commands, then removes its directory and its
 * registry. Arguments: registry directory, lease directory, grace in tenths of a second.
 * Prints how many groups it stopped; exits 3 (and the destroy is retried) when one
 * outlives SIGKILL.
 */
export const DESTROY_LEASE = `
r=$1; l=$2; g=$3
${FUNCTIONS}
mkdir -p "$r" && : >"$r/closing" || exit 1
n=0; fail=0
for e in "$r"/*.pid; do
  [ -e "$e" ] || continue
  pg=; k=0
  # An entry is one write; an empty one is being written.
  while { ! read -r pg st 2>/dev/null <"$e" || [ -z "$pg" ]; } && [ -e "$e" ] && [ $k -lt 50 ]; do nap; k=$((k+1)); done
  if [ -n "$pg" ] && ours $pg "$st"; then
    n=$((n+1))
    stop $pg $g || { fail=1; echo "slipway: process group $pg still runs after SIGTERM and SIGKILL" >&2; continue; }
  fi
  rm -f "$e"
done
[ $fail = 0 ] || exit 3
rm -rf -- "$l" "$r"
echo $n
`;

/**
 * Lists a lease's commands and their runners, one `<entry file name> <runner>` a line
 * (the runner as the wrapper got it). Argument: the registry directory. A broker that
 * dies in the middle of a command leaves it running on the host, unsupervised: the next
 * broker process that uses the lease reads this list and stops the commands of runners
 * that are dead (see `command.ts`), as `localHosts` does for its own.
 */
export const ORPHANS = `
for e in "$1"/*.pid; do
  [ -e "$e" ] || continue
  { read -r a && read -r runner; } 2>/dev/null <"$e" && printf '%s %s\\n' "\${e##*/}" "$runner"
done
exit 0
`;
