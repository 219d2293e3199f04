#!/bin/sh
# The image's entry point: run the command (heterosim, or heterosim-suite) so that what it writes
# under /results belongs to the right user, or say in one line why it cannot.
#  - started as root (compose's default): run as the owner of /results, so results in ./results on
#    the host belong to whoever owns that folder (HETEROSIM_AS_ROOT=1 keeps root).
#  - started as another uid (docker run -u, HETEROSIM_UID): if the command writes under /results
#    and this uid cannot, stop with a one-line hint (exit 2) instead of a Python traceback.
set -eu
case "${1:-}" in
heterosim|heterosim-suite|python|python3|sh|bash) ;;
*) set -- heterosim "$@" ;;   # `docker run heterosim:latest run scenarios/x.yaml ...`
esac
out=${HETEROSIM_RESULTS_DIR:-/results}   # a variable only so that tests can point it elsewhere
case " $* " in *" $out"*) writes=1 ;; *) writes=0 ;; esac
if [ "$(id -u)" = 0 ]; then
    if [ "${HETEROSIM_AS_ROOT:-0}" != 1 ] && [ -d "$out" ]; then
        uid=$(stat -c %u "$out")
        gid=$(stat -c %g "$out")
        if [ "$uid" != 0 ]; then
            exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$@"
        fi
    fi
elif [ "$writes" = 1 ] && [ -d "$out" ] && ! [ -w "$out" ]; then
    echo "heterosim: cannot write $out (owned by uid $(stat -c %u "$out"), container runs as uid $(id -u)):" \
        "run as its owner (docker run -u \"\$(id -u):\$(id -g)\"; compose: unset HETEROSIM_UID or set it to your uid)" >&2
    exit 2
fi
exec "$@"
