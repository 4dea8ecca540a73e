#!/bin/sh
# Print the path of a working CPython for VERSION ("3.12") or for a command ("python3.12",
# "python3", "/usr/bin/python3.12"); exit 1 with one line on stderr when there is none.
#
# Usage: tools/find_python.sh VERSION|COMMAND
#
# `make test` uses it to find the interpreters of every Python we support. A `pythonX.Y` on PATH
# is not enough on its own: a pyenv shim answers for every installed version but runs only the
# ones `pyenv global` names, so each candidate is run and asked its version. The candidates, in
# order: the command as given (when it is one), then for a version X.Y `pythonX.Y` on PATH, the
# newest X.Y.* under pyenv's root ($PYENV_ROOT, `pyenv root`, ~/.pyenv), /usr/local/bin and
# /usr/bin. A candidate must also be able to make a venv (Debian's python3.X without its -venv
# package cannot).
set -u

want_arg=${1:?usage: tools/find_python.sh VERSION|COMMAND}

# the X.Y a candidate must report; empty when the argument names no version (python3, a path)
case $want_arg in
    [0-9].[0-9]*) want=$want_arg ;;
    *python[0-9].[0-9]*) want=${want_arg##*python} ;;
    *) want= ;;
esac

works() {
    # $1 runs, is the version asked for (if any) and has venv with ensurepip
    got=$("$1" -c 'import sys, venv, ensurepip; print("%d.%d" % sys.version_info[:2])' \
        2>/dev/null) || return 1
    [ -z "$want" ] || [ "$got" = "$want" ]
}

found() {
    # the absolute path, so the caller can tell which interpreter it got
    "$1" -c 'import sys; print(sys.executable)'
    exit 0
}

case $want_arg in
    [0-9].[0-9]*) ;;
    *) if command -v "$want_arg" >/dev/null 2>&1 && works "$want_arg"; then
           found "$want_arg"
       fi ;;
esac

if [ -n "$want" ]; then
    if command -v "python$want" >/dev/null 2>&1 && works "python$want"; then
        found "python$want"
    fi
    roots=${PYENV_ROOT:-}
    if command -v pyenv >/dev/null 2>&1; then
        roots="$roots $(pyenv root 2>/dev/null)"
    fi
    roots="$roots ${HOME:-/nonexistent}/.pyenv"
    pattern="^$(printf '%s' "$want" | sed 's/\./\\./g')(\.[0-9]+)?\$"
    for root in $roots; do
        # the newest patch release first ("3.12.1" before "3.12.0"); no "3.13.0t" or "-dev"
        for name in $(ls "$root/versions" 2>/dev/null | grep -E "$pattern" | sort -t. -k3,3nr); do
            candidate="$root/versions/$name/bin/python$want"
            if [ -x "$candidate" ] && works "$candidate"; then
                found "$candidate"
            fi
        done
    done
    for candidate in "/usr/local/bin/python$want" "/usr/bin/python$want"; do
        if [ -x "$candidate" ] && works "$candidate"; then
            found "$candidate"
        fi
    done
fi

echo "find_python: no working Python ${want:-$want_arg} (with venv) on PATH, under pyenv or in /usr/bin" >&2
exit 1
