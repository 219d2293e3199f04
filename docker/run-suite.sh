#!/bin/sh
# Run every scenario YAML in a folder with `heterosim run`, one results folder each.
# Usage: heterosim-suite DIR OUT [extra heterosim run options...]
# A failing scenario does not stop the others; the exit code is 1 if any failed, 2 if DIR has none.
set -u
dir=${1:?usage: heterosim-suite DIR OUT [options]}
out=${2:?usage: heterosim-suite DIR OUT [options]}
shift 2
found=0
failed=""
for f in "$dir"/*.yaml "$dir"/*.yml; do
    [ -e "$f" ] || continue
    found=$((found + 1))
    name=$(basename "$f")
    name=${name%.*}
    echo "== $name: heterosim run $f --out $out/$name"
    if ! heterosim run "$f" --out "$out/$name" "$@"; then
        failed="$failed $name"
    fi
done
if [ "$found" -eq 0 ]; then
    echo "no scenario files (*.yaml) in $dir" >&2
    exit 2
fi
if [ -n "$failed" ]; then
    echo "failed:$failed ($found scenarios)" >&2
    exit 1
fi
echo "all $found scenarios done: $out"
