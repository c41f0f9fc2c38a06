#!/usr/bin/env bash
# Count the crash images the test suite checks, per crate, test binary and persistence domain.
#
# Every crash test prints `crash images checked: N ... (Domain)` (the simulator's harnesses do,
# and so do the tests' own loops). This runs each crate's tests in debug, as CI does, one test at
# a time so the lines can be attributed to the binary cargo announced last, and prints markdown
# tables: per binary, and per crate with a total. A line that names no domain (the recorded
# medium's campaigns, for one) counts as "untagged".
#
# Usage: bench/crash-counts.sh [PACKAGE...]     (default: every crate under crates/)
#        KEEP_LOGS=DIR bench/crash-counts.sh ...  (keep each crate's test output in DIR)
#
# The crates' tests run one after the other; the whole workspace takes about as long as
# `cargo test --workspace` with one test thread. Exit status: 1 if any crate's tests failed (the
# tables are printed anyway, with the status column saying which).

set -u
cd "$(dirname "$0")/.." || exit 2

packages=("$@")
if [ ${#packages[@]} -eq 0 ]; then
    for toml in crates/*/Cargo.toml; do
        name=$(sed -n 's/^name *= *"\([^"]*\)".*/\1/p' "$toml" | head -n 1)
        [ -n "$name" ] && packages+=("$name")
    done
fi

logs=${KEEP_LOGS:-$(mktemp -d)}
mkdir -p "$logs"
rows=$(mktemp)
failed=0

for p in "${packages[@]}"; do
    log="$logs/$p.log"
    start=$(date +%s)
    if cargo test -p "$p" -- --nocapture --test-threads=1 >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed=1
    fi
    secs=$(($(date +%s) - start))
    # One row per (binary, domain): package, binary, domain, images; binaries with no crash
    # test print nothing.
    awk -v pkg="$p" '
        /^ *Running / {
            bin = $2
            if (bin == "unittests") bin = "unittests " $3
        }
        /crash images checked: [0-9]+/ {
            n = $0
            sub(/.*crash images checked: /, "", n)
            n = n + 0
            d = "-"
            if (match($0, /\((Adr|Eadr|Msync)\)/)) d = substr($0, RSTART + 1, RLENGTH - 2)
            key = bin "\t" d
            sum[key] += n
        }
        END { for (k in sum) printf "%s\t%s\t%d\n", pkg, k, sum[k] }
    ' "$log" >>"$rows"
    printf '%s\t%s\t%s\t%s\t%s\n' "$p" "#status" "$status" "$secs" 0 >>"$rows"
done

echo "### Crash images checked, per test binary"
echo
echo "| crate | test binary | adr | eadr | msync | untagged | total |"
echo "|---|---|---:|---:|---:|---:|---:|"
grep -v $'\t#status\t' "$rows" | sort | awk -F'\t' '
    {
        k = $1 "\t" $2
        if (!(k in seen)) { seen[k] = 1; order[++n] = k }
        col = ($3 == "Adr") ? 1 : ($3 == "Eadr") ? 2 : ($3 == "Msync") ? 3 : 4
        v[k, col] += $4
    }
    END {
        for (i = 1; i <= n; i++) {
            k = order[i]
            split(k, f, "\t")
            t = v[k, 1] + v[k, 2] + v[k, 3] + v[k, 4]
            printf "| %s | %s | %d | %d | %d | %d | %d |\n", f[1], f[2], v[k, 1], v[k, 2], v[k, 3], v[k, 4], t
        }
    }'
echo
echo "### Crash images checked, per crate"
echo
echo "| crate | adr | eadr | msync | untagged | total | tests | seconds |"
echo "|---|---:|---:|---:|---:|---:|---|---:|"
awk -F'\t' '
    $2 == "#status" { status[$1] = $3; secs[$1] = $4; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }; next }
    {
        if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
        col = ($3 == "Adr") ? 1 : ($3 == "Eadr") ? 2 : ($3 == "Msync") ? 3 : 4
        v[$1, col] += $4
    }
    END {
        for (i = 1; i <= n; i++) {
            p = order[i]
            t = v[p, 1] + v[p, 2] + v[p, 3] + v[p, 4]
            for (c = 1; c <= 4; c++) all[c] += v[p, c]
            all[5] += t
            all[6] += secs[p]
            printf "| %s | %d | %d | %d | %d | %d | %s | %d |\n", p, v[p, 1], v[p, 2], v[p, 3], v[p, 4], t, status[p], secs[p]
        }
        printf "| **total** | %d | %d | %d | %d | **%d** | | %d |\n", all[1], all[2], all[3], all[4], all[5], all[6]
    }' "$rows"
rm -f "$rows"
[ -n "${KEEP_LOGS:-}" ] || rm -rf "$logs"
exit $failed
